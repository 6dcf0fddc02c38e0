// SPDX-License-Identifier: Apache-2.0
// Formulas of the per-tile optimiser (specs/optics.md "Per-tile optimisation"), shared by the CPU
// and CUDA drivers: the closed-form Tikhonov phase spectrum per frequency, the mid-band annulus,
// and the Adam, NAdam and damped Newton steps.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "optics/complex.h"
#include "optics/jet.h"
#include "optics/transfer_math.h"

namespace fieldfuse::detail::optics {

/// Sums over z of one frequency's 2 × Z matrix M = [Hu; Hp] and data X̂: N = M·Mᴴ
/// (a = Σ|Hu|², d = Σ|Hp|², c = Σ Hu·conj(Hp)) and u = M·X̂.
template <class J, class CJ>
struct TikhonovSums {
  J a, d;
  CJ c, u0, u1;
};

template <class J, class CJ>
FF_HOST_DEVICE FF_FORCE_INLINE void tikhonov_accumulate(TikhonovSums<J, CJ>& s, const CJ& hu,
                                                        const CJ& hp, const CJ& data) {
  s.a += norm(hu);
  s.d += norm(hp);
  s.c += hu * conj(hp);
  s.u0 += hu * data;
  s.u1 += hp * data;
}

/// The phase row of (M·Mᴴ + λI)⁻¹·M·X̂ from the sums: with A⁻¹ = [[d + λ, −c], [−c*, a + λ]]/det,
/// det = (a + λ)(d + λ) − |c|² clamped at 1e−30, phase = (−c*·u0 + (a + λ)·u1)/det. G is applied
/// unconjugated (waveorder's 2-D convention).
template <class T, class J, class CJ>
FF_HOST_DEVICE FF_FORCE_INLINE CJ tikhonov_phase(const TikhonovSums<J, CJ>& s, T regularization) {
  const J a = s.a + J::constant(regularization), d = s.d + J::constant(regularization);
  J det = a * d - norm(s.c);
  if (det.c[0] < T(1e-30)) det = J::constant(T(1e-30));
  return (a * s.u1 - conj(s.c) * s.u0) * reciprocal(det);
}

/// The strict mid-band annulus low·2NAd/λ < |f| < high·2NAd/λ at unshifted index k of [Y, X].
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE bool in_midband(int64_t k, int64_t Y, int64_t X, T step_y, T step_x,
                                               T low, T high) {
  const int64_t ky = k / X, kx = k - ky * X;
  const T fy = fft_frequency(ky, Y, step_y), fx = fft_frequency(kx, X, step_x);
  const T f = std::sqrt(fy * fy + fx * fx);
  return f > low && f < high;
}

/// |F| with F = (Ŷ(k) + conj(Ŷ(−k)))/2, the spectrum of real(IFFT2[Ŷ]); derivatives are zero
/// where F = 0 (|·| has none there).
template <class T, class J, class CJ>
FF_HOST_DEVICE FF_FORCE_INLINE J real_image_amplitude(const CJ& at_k, const CJ& at_minus_k) {
  const CJ f = scale(T(0.5), at_k + conj(at_minus_k));
  const J n = norm(f);
  return n.c[0] == T(0) ? J::constant(T(0)) : sqrt(n);  // NaN stays NaN
}

/// One Adam step (PyTorch's, no weight decay) for the t-th update (t >= 1); returns the step.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T adam_step(T grad, T& m, T& v, int t, T lr, T beta1, T beta2,
                                           T eps) {
  m = beta1 * m + (T(1) - beta1) * grad;
  v = beta2 * v + (T(1) - beta2) * grad * grad;
  const T m_hat = m / (T(1) - std::pow(beta1, T(t)));
  const T v_hat = v / (T(1) - std::pow(beta2, T(t)));
  return -lr * m_hat / (std::sqrt(v_hat) + eps);
}

/// NAdam's momentum schedule μ_t = β1·(1 − 0.5·0.96^(t·ψ)) (PyTorch's).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T nadam_mu(int t, T beta1, T momentum_decay) {
  return beta1 * (T(1) - T(0.5) * std::pow(T(0.96), T(t) * momentum_decay));
}

/// One NAdam step (PyTorch's) for the t-th update; `mu_product` is Π μ_1..μ_t, already including
/// μ_t. Returns the step.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T nadam_step(T grad, T& m, T& v, int t, T mu_product, T lr, T beta1,
                                            T beta2, T eps, T momentum_decay) {
  const T mu = nadam_mu(t, beta1, momentum_decay), mu_next = nadam_mu(t + 1, beta1, momentum_decay);
  m = beta1 * m + (T(1) - beta1) * grad;
  v = beta2 * v + (T(1) - beta2) * grad * grad;
  const T denom = std::sqrt(v / (T(1) - std::pow(beta2, T(t)))) + eps;
  return -lr * (T(1) - mu) / (T(1) - mu_product) * grad / denom -
         lr * mu_next / (T(1) - mu_product * mu_next) * m / denom;
}

/// The damped diagonal Newton step −g / max(h, lr), capped at ±lr: `lr` is both the damping floor
/// (a curvature below it, negative included, is replaced by it, so the step is then gradient
/// descent with rate 1/lr) and the largest step.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T newton_step(T grad, T hessian, T lr) {
  const T step = -grad / (hessian > lr ? hessian : lr);
  return step > lr ? lr : (step < -lr ? -lr : step);
}

}  // namespace fieldfuse::detail::optics
