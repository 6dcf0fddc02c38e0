// SPDX-License-Identifier: Apache-2.0
// The MLP's one definition of every activation σ and its derivatives σ′, σ″, shared by the CPU
// driver and the CUDA kernels (SIMT and tensor-core).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace fieldfuse::detail::mlp {

enum class Activation : int32_t { None, ReLU, LeakyReLU, Softplus, Sine, Tanh, Sigmoid, SiLU, Exp };

/// The runtime activation parameters (each activation reads only its own).
struct ActivationParams {
  double softplus_beta = 1.0;
  double sine_omega0 = 30.0;
  double leaky_slope = 0.01;
};

// Float and double overloads of the transcendental functions, spelled so both g++ and nvcc pick
// the single-precision versions for float (std:: overloads are not device functions everywhere).
FF_HOST_DEVICE FF_FORCE_INLINE float exp_of(float x) { return expf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double exp_of(double x) { return exp(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float log1p_of(float x) { return log1pf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double log1p_of(double x) { return log1p(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float sin_of(float x) { return sinf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double sin_of(double x) { return sin(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float cos_of(float x) { return cosf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double cos_of(double x) { return cos(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float tanh_of(float x) { return tanhf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double tanh_of(double x) { return tanh(x); }

/// The transcendental functions the exp-based activations are written in: the precise ones (every
/// path's default: libm and CUDA's libdevice, within an ulp or two), or another policy with the
/// same three members (the 16-bit CUDA kernels' FastMath, Note [mlp fast math]).
struct PreciseMath {
  template <class T>
  static FF_HOST_DEVICE FF_FORCE_INLINE T exp(T x) {
    return exp_of(x);
  }
  template <class T>
  static FF_HOST_DEVICE FF_FORCE_INLINE T log1p(T x) {
    return log1p_of(x);
  }
  template <class T>
  static FF_HOST_DEVICE FF_FORCE_INLINE T div(T a, T b) {
    return a / b;
  }
};

/// σ(p), σ′(p) and σ″(p) of one pre-activation.
template <class T>
struct Derivs {
  T value, d1, d2;
};

// Each activation is a small policy type: `value(p)` = σ(p), `d1(p)` = σ′(p) and `all(p)` = all
// three at once. Policies are compile-time types so a driver's inner loop has no switch in it
// (the drivers pick the policy once per layer with visit_activation). NaN propagates through every
// σ (comparisons are written so that a NaN takes the arithmetic branch, as PyTorch's ops do).

template <class T>
struct Identity {
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return p; }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T) const { return T(1); }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const { return {p, T(1), T(0)}; }
};

/// σ″ = 0 away from 0 (PyTorch's double backward also uses 0 at the kink).
template <class T>
struct ReLU {
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return p <= T(0) ? T(0) : p; }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const { return p > T(0) ? T(1) : T(0); }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const { return {value(p), d1(p), T(0)}; }
};

template <class T>
struct LeakyReLU {
  T slope;
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return p > T(0) ? p : slope * p; }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const { return p > T(0) ? T(1) : slope; }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const { return {value(p), d1(p), T(0)}; }
};

/// PyTorch's threshold: where βp > 20, σ(p) = p exactly (log1p(exp(βp)) would overflow far later,
/// but matching PyTorch keeps the two comparable bit for bit in that region), σ′ = 1, σ″ = 0.
constexpr double kSoftplusThreshold = 20.0;

template <class T, class M = PreciseMath>
struct Softplus {
  T beta;
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const {
    const T z = beta * p;
    return z > T(kSoftplusThreshold) ? p : M::div(M::log1p(M::exp(z)), beta);
  }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const {
    const T z = beta * p;
    return z > T(kSoftplusThreshold) ? T(1) : M::div(T(1), T(1) + M::exp(-z));
  }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const {
    const T z = beta * p;
    if (z > T(kSoftplusThreshold)) return {p, T(1), T(0)};
    const T s = M::div(T(1), T(1) + M::exp(-z));  // sigmoid(βp)
    return {M::div(M::log1p(M::exp(z)), beta), s, beta * s * (T(1) - s)};
  }
  /// σ′ from the value a = σ(p): e^{βa} = 1 + e^{βp}, so σ′ = sigmoid(βp) = 1 − e^{−βa}. Past the
  /// threshold (a = p) this is within e^{−20} of the 1 that d1 returns there. For kernels that
  /// keep a but not p (Note [mlp slope from the output]).
  FF_HOST_DEVICE FF_FORCE_INLINE T d1_of_value(T a) const { return T(1) - M::exp(-beta * a); }
  /// σ″u from σ′ = s and the tangent t = σ′u, with no division by a small σ′: σ″ = βσ′(1 − σ′), so
  /// σ″u = β(1 − σ′)t, which is 0 past the threshold as σ″ is there (Note [mlp slope from the
  /// output]).
  FF_HOST_DEVICE FF_FORCE_INLINE T d2u_of_tangent(T s, T t) const { return beta * (T(1) - s) * t; }
};

/// SIREN's sin(ω₀p): σ′ = ω₀cos(ω₀p), σ″ = −ω₀² sin(ω₀p).
template <class T>
struct Sine {
  T omega0;
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return sin_of(omega0 * p); }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const { return omega0 * cos_of(omega0 * p); }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const {
    const T s = sin_of(omega0 * p);
    return {s, omega0 * cos_of(omega0 * p), -omega0 * omega0 * s};
  }
};

template <class T>
struct Tanh {
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return tanh_of(p); }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const {
    const T t = tanh_of(p);
    return T(1) - t * t;
  }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const {
    const T t = tanh_of(p);
    const T d = T(1) - t * t;
    return {t, d, T(-2) * t * d};
  }
};

/// 1/(1 + e^{−p}): exp(−p) overflows to inf for very negative p, which gives the right limit 0.
template <class T, class M = PreciseMath>
FF_HOST_DEVICE FF_FORCE_INLINE T logistic(T p) {
  return M::div(T(1), T(1) + M::exp(-p));
}

template <class T, class M = PreciseMath>
struct Sigmoid {
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return logistic<T, M>(p); }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const {
    const T s = logistic<T, M>(p);
    return s * (T(1) - s);
  }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const {
    const T s = logistic<T, M>(p);
    const T d = s * (T(1) - s);
    return {s, d, d * (T(1) - T(2) * s)};
  }
};

/// p·s(p): σ′ = s(1 + p(1 − s)), σ″ = s(1 − s)(2 + p(1 − 2s)).
template <class T, class M = PreciseMath>
struct SiLU {
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return p * logistic<T, M>(p); }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const {
    const T s = logistic<T, M>(p);
    return s * (T(1) + p * (T(1) - s));
  }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const {
    const T s = logistic<T, M>(p);
    return {p * s, s * (T(1) + p * (T(1) - s)), s * (T(1) - s) * (T(2) + p * (T(1) - T(2) * s))};
  }
};

template <class T, class M = PreciseMath>
struct Exp {
  FF_HOST_DEVICE FF_FORCE_INLINE T value(T p) const { return M::exp(p); }
  FF_HOST_DEVICE FF_FORCE_INLINE T d1(T p) const { return M::exp(p); }
  FF_HOST_DEVICE FF_FORCE_INLINE Derivs<T> all(T p) const {
    const T e = M::exp(p);
    return {e, e, e};
  }
};

/// Calls `run(policy)` with the policy of `kind` in compute type T (exp-based ones written in M's
/// functions): on the host once per layer or launch, in a kernel once per layer or once per
/// kernel (the register forward), never once per element.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable  // host callers pass host lambdas, device callers device ones
#endif
template <class T, class M = PreciseMath, class Run>
FF_HOST_DEVICE FF_FORCE_INLINE decltype(auto) visit_activation(Activation kind,
                                                               const ActivationParams& params,
                                                               const Run& run) {
  switch (kind) {
    case Activation::ReLU:
      return run(ReLU<T>{});
    case Activation::LeakyReLU:
      return run(LeakyReLU<T>{T(params.leaky_slope)});
    case Activation::Softplus:
      return run(Softplus<T, M>{T(params.softplus_beta)});
    case Activation::Sine:
      return run(Sine<T>{T(params.sine_omega0)});
    case Activation::Tanh:
      return run(Tanh<T>{});
    case Activation::Sigmoid:
      return run(Sigmoid<T, M>{});
    case Activation::SiLU:
      return run(SiLU<T, M>{});
    case Activation::Exp:
      return run(Exp<T, M>{});
    case Activation::None:
      break;
  }
  return run(Identity<T>{});
}

/// Runtime evaluation of all three derivatives (tests, and kernels that keep the kind at run time).
template <class T>
FF_HOST_DEVICE inline Derivs<T> activation_derivs(Activation kind, const ActivationParams& params,
                                                  T p) {
  switch (kind) {
    case Activation::ReLU:
      return ReLU<T>{}.all(p);
    case Activation::LeakyReLU:
      return LeakyReLU<T>{T(params.leaky_slope)}.all(p);
    case Activation::Softplus:
      return Softplus<T>{T(params.softplus_beta)}.all(p);
    case Activation::Sine:
      return Sine<T>{T(params.sine_omega0)}.all(p);
    case Activation::Tanh:
      return Tanh<T>{}.all(p);
    case Activation::Sigmoid:
      return Sigmoid<T>{}.all(p);
    case Activation::SiLU:
      return SiLU<T>{}.all(p);
    case Activation::Exp:
      return Exp<T>{}.all(p);
    case Activation::None:
      break;
  }
  return Identity<T>{}.all(p);
}

}  // namespace fieldfuse::detail::mlp
