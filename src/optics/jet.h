// SPDX-License-Identifier: Apache-2.0
// Forward-mode derivatives for the optics formulas: a Jet carries a value, its first derivatives
// along P directions and (Order 2) the second derivatives along each of those directions, i.e. the
// diagonal of the Hessian. Every formula in optics/*_math.h is a template over its scalar type, so
// the same code evaluates plain numbers (Jet<T, 0, 1> is one component) and derivatives.
//
// Why forward mode: the optimiser's parameters are a few scalars per tile (focus, zenith, azimuth)
// and each tile's loss depends only on its own, so P directions give the whole gradient and the
// diagonal second derivatives exactly, through FFTs (linear: transform each component) and the
// closed-form inverse (rational: these rules), with no adjoint code to keep in step.
#pragma once

#include <cmath>

#include "core/macros.h"
#include "optics/complex.h"

namespace fieldfuse::detail::optics {

/// components c[0] = value, c[1 + p] = ∂/∂p, and for Order 2 c[1 + P + p] = ∂²/∂p².
template <class T, int P, int Order>
struct Jet {
  static_assert(Order == 1 || Order == 2, "Jet: first or second order");
  static constexpr int kDirections = P;
  static constexpr int kOrder = Order;
  static constexpr int kComponents = 1 + P * Order;
  T c[kComponents];

  FF_HOST_DEVICE static Jet constant(T value) {
    Jet j;
    j.c[0] = value;
    for (int i = 1; i < kComponents; ++i) j.c[i] = T(0);
    return j;
  }
  /// The independent variable of direction `direction` (-1: none) with value `value`.
  /// A runtime `direction` is compared with every slot rather than used as an index, so the
  /// components stay in registers (a dynamic index would put the array in local memory).
  FF_HOST_DEVICE static Jet variable(T value, int direction, T derivative = T(1)) {
    Jet j;
    j.c[0] = value;
    for (int p = 0; p < P; ++p) j.c[1 + p] = p == direction ? derivative : T(0);
    for (int i = 1 + P; i < kComponents; ++i) j.c[i] = T(0);
    return j;
  }
  FF_HOST_DEVICE const T& value() const { return c[0]; }
};

template <class T>
struct RealOf {
  using type = T;
};
template <class T>
struct RealOf<Complex<T>> {
  using type = T;
};

/// y = f(x) given f(x0), f'(x0), f''(x0): the chain rule up to the jet's order. Works for real
/// functions of real jets and for holomorphic ones (complex f', f'') of real or complex jets.
template <class U, class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<U, P, O> chain(const Jet<T, P, O>& x, U f0, U f1, U f2) {
  Jet<U, P, O> y;
  y.c[0] = f0;
  for (int p = 0; p < P; ++p) y.c[1 + p] = f1 * x.c[1 + p];
  if (O == 2) {
    for (int p = 0; p < P; ++p) {
      y.c[1 + P + p] = f2 * (x.c[1 + p] * x.c[1 + p]) + f1 * x.c[1 + P + p];
    }
  }
  return y;
}

template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> operator+(const Jet<T, P, O>& a,
                                                      const Jet<T, P, O>& b) {
  Jet<T, P, O> y;
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) y.c[i] = a.c[i] + b.c[i];
  return y;
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> operator-(const Jet<T, P, O>& a,
                                                      const Jet<T, P, O>& b) {
  Jet<T, P, O> y;
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) y.c[i] = a.c[i] - b.c[i];
  return y;
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> operator-(const Jet<T, P, O>& a) {
  Jet<T, P, O> y;
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) y.c[i] = -a.c[i];
  return y;
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O>& operator+=(Jet<T, P, O>& a, const Jet<T, P, O>& b) {
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) a.c[i] += b.c[i];
  return a;
}
/// A constant (real or complex) times a jet.
template <class S, class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE auto scale(S s, const Jet<T, P, O>& a) {
  Jet<decltype(s * a.c[0]), P, O> y;
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) y.c[i] = s * a.c[i];
  return y;
}
/// The product rule, for any mix of real and complex jets.
template <class A, class B, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE auto operator*(const Jet<A, P, O>& a, const Jet<B, P, O>& b) {
  using E = decltype(a.c[0] * b.c[0]);
  Jet<E, P, O> y;
  y.c[0] = a.c[0] * b.c[0];
  for (int p = 0; p < P; ++p) y.c[1 + p] = a.c[1 + p] * b.c[0] + a.c[0] * b.c[1 + p];
  if (O == 2) {
    for (int p = 0; p < P; ++p) {
      const int q = 1 + P + p;
      y.c[q] = a.c[q] * b.c[0] + a.c[0] * b.c[q] + E(2) * (a.c[1 + p] * b.c[1 + p]);
    }
  }
  return y;
}

template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<Complex<T>, P, O> conj(const Jet<Complex<T>, P, O>& a) {
  Jet<Complex<T>, P, O> y;
  for (int i = 0; i < Jet<Complex<T>, P, O>::kComponents; ++i) y.c[i] = conj(a.c[i]);
  return y;
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> real_part(const Jet<Complex<T>, P, O>& a) {
  Jet<T, P, O> y;
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) y.c[i] = a.c[i].re;
  return y;
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> imag_part(const Jet<Complex<T>, P, O>& a) {
  Jet<T, P, O> y;
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) y.c[i] = a.c[i].im;
  return y;
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<Complex<T>, P, O> to_complex(const Jet<T, P, O>& a) {
  Jet<Complex<T>, P, O> y;
  for (int i = 0; i < Jet<T, P, O>::kComponents; ++i) y.c[i] = Complex<T>(a.c[i]);
  return y;
}
/// i·a.
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<Complex<T>, P, O> times_i(const Jet<Complex<T>, P, O>& a) {
  Jet<Complex<T>, P, O> y;
  for (int i = 0; i < Jet<Complex<T>, P, O>::kComponents; ++i) y.c[i] = times_i(a.c[i]);
  return y;
}
/// |a|², a real jet.
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> norm(const Jet<Complex<T>, P, O>& a) {
  const Jet<T, P, O> re = real_part(a), im = imag_part(a);
  return re * re + im * im;
}

// Elementary functions of real jets.
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> sqrt(const Jet<T, P, O>& x) {
  const T s = std::sqrt(x.c[0]);
  return chain(x, s, T(0.5) / s, T(-0.25) / (s * x.c[0]));
}
/// sqrt(max(0, x)) with zero derivatives where x <= 0 (the clamp's flat side; at 0 the one-sided
/// derivative of the square root is infinite and the formulas treat the point as outside).
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> sqrt_clamped(const Jet<T, P, O>& x) {
  return x.c[0] > T(0) ? sqrt(x) : Jet<T, P, O>::constant(T(0));
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> sin(const Jet<T, P, O>& x) {
  const T s = std::sin(x.c[0]), c = std::cos(x.c[0]);
  return chain(x, s, c, -s);
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> cos(const Jet<T, P, O>& x) {
  const T s = std::sin(x.c[0]), c = std::cos(x.c[0]);
  return chain(x, c, -s, -c);
}
/// The logistic sigmoid σ(x) = 1/(1 + e^{−x}), σ' = σ(1 − σ), σ'' = σ'(1 − 2σ); evaluated from
/// e^{−|x|} so that neither tail overflows.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sigmoid(T x) {
  const T e = std::exp(-std::fabs(x));
  return x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> sigmoid(const Jet<T, P, O>& x) {
  const T s = sigmoid(x.c[0]);
  const T d = s * (T(1) - s);
  return chain(x, s, d, d * (T(1) - T(2) * s));
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<T, P, O> reciprocal(const Jet<T, P, O>& x) {
  const T r = T(1) / x.c[0];
  return chain(x, r, -r * r, T(2) * r * r * r);
}
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<Complex<T>, P, O> reciprocal(const Jet<Complex<T>, P, O>& x) {
  const Complex<T> r = reciprocal(x.c[0]);
  const Complex<T> r2 = r * r;
  return chain(x, r, -r2, T(2) * (r2 * r));
}
/// e^{iφ} of a real phase jet.
template <class T, int P, int O>
FF_HOST_DEVICE FF_FORCE_INLINE Jet<Complex<T>, P, O> unit_phasor(const Jet<T, P, O>& phase) {
  const Complex<T> e = unit_phasor(phase.c[0]);
  return chain(phase, e, times_i(e), -e);
}

}  // namespace fieldfuse::detail::optics
