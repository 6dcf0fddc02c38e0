// SPDX-License-Identifier: Apache-2.0
// Per-frequency formulas of the Tikhonov inverses (specs/optics.md, "The 2×Z inverse"), the data
// normalisation and the 3-D filter, with their adjoints; shared by the CPU and CUDA drivers.
#pragma once

#include <cmath>

#include "core/macros.h"
#include "optics/complex.h"

namespace fieldfuse::detail::optics {

/// The family's complex number (optics/complex.h), under the short name these formulas use.
template <class T>
using Cx = Complex<T>;

/// |a|².
template <class T>
FF_HOST_DEVICE inline T norm2(Cx<T> a) {
  return norm(a);
}
/// conj(a)·b, the Hermitian product's term.
template <class T>
FF_HOST_DEVICE inline Cx<T> conj_mul(Cx<T> a, Cx<T> b) {
  return {a.re * b.re + a.im * b.im, a.re * b.im - a.im * b.re};
}

/// Smallest determinant of the regularised 2×2 system (specs/optics.md): keeps a zero-regulariser
/// call or an underflow from dividing by 0.
constexpr double kMinDeterminant = 1e-30;

/// N = M·Mᴴ of M = [Hu; Hp] (2 × Z), accumulated over z: n00 = Σ|Hu|², n11 = Σ|Hp|²,
/// n01 = Σ Hu·conj(Hp).
template <class T>
struct Gram {
  T n00 = 0, n11 = 0;
  Cx<T> n01{0, 0};

  FF_HOST_DEVICE void add(Cx<T> hu, Cx<T> hp) {
    n00 += norm2(hu);
    n11 += norm2(hp);
    n01 = n01 + hu * conj(hp);
  }
};

/// (N + λI)⁻¹ = [[d, −c], [−c*, a]] / det with a = n00 + λ, d = n11 + λ, c = n01. The determinant
/// is written λ(λ + n00 + n11) + (n00·n11 − |c|²): the last bracket is >= 0 (Cauchy-Schwarz) and is
/// clamped there, so rounding cannot make a rank-deficient M's system look indefinite.
template <class T>
struct TikhonovInverse {
  T a, d, inv_det;
  Cx<T> c;

  FF_HOST_DEVICE TikhonovInverse(const Gram<T>& g, T lambda)
      : a(g.n00 + lambda), d(g.n11 + lambda), c(g.n01) {
    T gram_det = g.n00 * g.n11 - norm2(g.n01);
    gram_det = gram_det > T(0) ? gram_det : T(0);
    T det = lambda * (lambda + g.n00 + g.n11) + gram_det;
    det = det > T(kMinDeterminant) ? det : T(kMinDeterminant);
    inv_det = T(1) / det;
  }

  /// Row 0 of (N + λI)⁻¹·v.
  FF_HOST_DEVICE Cx<T> row0(Cx<T> v0, Cx<T> v1) const { return inv_det * (d * v0 - c * v1); }
  /// Row 1 of (N + λI)⁻¹·v.
  FF_HOST_DEVICE Cx<T> row1(Cx<T> v0, Cx<T> v1) const { return inv_det * (a * v1 - conj(c) * v0); }
};

// Note [tikhonov adjoint]
// Per frequency, with A = M·Mᴴ + λI (Hermitian) and Y = A⁻¹·M·X̂ (G = A⁻¹M applied unconjugated),
// the gradient of a real loss given gY (PyTorch's convention ∂L/∂Re + i·∂L/∂Im) is, with
// w = A⁻¹·gY and K = w·Yᴴ + Y·wᴴ (2 × 2 Hermitian):
//   gX̂_z = conj(Hu_z)·w0 + conj(Hp_z)·w1                               (Mᴴw)
//   gM[s, z] = w_s·conj(X̂_z) − K[s, 0]·Hu_z − K[s, 1]·Hp_z             (w·X̂ᴴ − K·M)
// from dY = A⁻¹(dM·X̂ + M·dX̂ − (dM·Mᴴ + M·dMᴴ)·Y) and Re⟨w, ·⟩ of each term.

/// K = w·Yᴴ + Y·wᴴ of Note [tikhonov adjoint]: k00, k11 real, k01 = K[0, 1], K[1, 0] = conj(k01).
template <class T>
struct AdjointTerms {
  Cx<T> w0, w1, k01;
  T k00, k11;

  FF_HOST_DEVICE AdjointTerms(const TikhonovInverse<T>& inv, Cx<T> y0, Cx<T> y1, Cx<T> g0, Cx<T> g1)
      : w0(inv.row0(g0, g1)), w1(inv.row1(g0, g1)) {
    k00 = T(2) * (w0.re * y0.re + w0.im * y0.im);
    k11 = T(2) * (w1.re * y1.re + w1.im * y1.im);
    k01 = w0 * conj(y1) + y0 * conj(w1);
  }

  /// gX̂_z.
  FF_HOST_DEVICE Cx<T> grad_spectrum(Cx<T> hu, Cx<T> hp) const {
    return conj_mul(hu, w0) + conj_mul(hp, w1);
  }
  /// gHu_z = gM[0, z].
  FF_HOST_DEVICE Cx<T> grad_absorption(Cx<T> x, Cx<T> hu, Cx<T> hp) const {
    return w0 * conj(x) - k00 * hu - k01 * hp;
  }
  /// gHp_z = gM[1, z].
  FF_HOST_DEVICE Cx<T> grad_phase(Cx<T> x, Cx<T> hu, Cx<T> hp) const {
    return w1 * conj(x) - conj(k01) * hu - k11 * hp;
  }
};

/// Floor of the per-slice mean in the normalisation x / max(mean, floor) − 1 (waveorder's).
constexpr double kMeanFloor = 1e-12;

/// The normalisation's divisor max(mean, kMeanFloor).
FF_HOST_DEVICE inline double normalization_divisor(double mean) {
  return mean > kMeanFloor ? mean : kMeanFloor;
}

/// d/dx_i of Σ_j g_j·(x_j / m − 1) with m = max(mean x, floor) over n points, given the slice's
/// Σ g_j·x_j: g_i/m − (Σ g·x)/(m²·n) while the mean is above the floor (else the divisor is a
/// constant).
FF_HOST_DEVICE inline double normalization_grad(double g, double mean, double sum_gx, double n) {
  const double m = normalization_divisor(mean);
  return mean > kMeanFloor ? g / m - sum_gx / (m * m * n) : g / m;
}

/// The 3-D Tikhonov filter's gain conj(H)/(|H|² + λ) (waveorder conjugates in 3-D).
template <class T>
FF_HOST_DEVICE inline Cx<T> filter_3d(Cx<T> h, T lambda) {
  return (T(1) / (norm2(h) + lambda)) * conj(h);
}

/// Gradient of V = X̂·conj(H)/(|H|² + λ) with respect to H given gV (PyTorch convention):
/// (λ·X̂·conj(gV) − H²·conj(X̂)·gV) / (|H|² + λ)².
template <class T>
FF_HOST_DEVICE inline Cx<T> filter_3d_grad_tf(Cx<T> h, Cx<T> x, Cx<T> gv, T lambda) {
  const T denominator = norm2(h) + lambda;
  return (T(1) / (denominator * denominator)) *
         (lambda * (x * conj(gv)) - (h * h) * (conj(x) * gv));
}

}  // namespace fieldfuse::detail::optics
