// SPDX-License-Identifier: Apache-2.0
// The formulas of the optim family, shared by the CPU driver and the CUDA kernels: the per-step
// scalars (clip scale, cosine factor, bias corrections) and the Adam element update.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace fieldfuse::detail::optim {

/// torch.nn.utils.clip_grad_norm_ adds this to the norm before dividing, so an all-zero gradient
/// gives a finite (clamped) scale.
constexpr double kClipNormEpsilon = 1e-6;

/// The factor every gradient is multiplied by: min(1, max_norm / (norm + 1e-6)), or 1 without
/// clipping (max_norm = 0). Written as `c > 1 ? 1 : c` so a NaN norm gives a NaN scale, as
/// torch.clamp(max=1) does (a NaN must not be silently clipped to 1).
FF_HOST_DEVICE inline double clip_scale(double norm, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0;
  const double c = max_norm / (norm + kClipNormEpsilon);
  return c > 1.0 ? 1.0 : c;
}

/// CosineAnnealingLR's factor (eta_min = 0) before update t (0-based): 0.5·(1 + cos(π·min(t,
/// T)/T)), or 1 for T = 0 (no schedule). Clamped at T, where the rate reaches 0 and stays there.
FF_HOST_DEVICE inline double cosine_factor(int64_t t, int64_t total_steps) {
  if (total_steps <= 0) return 1.0;
  const int64_t clamped = t < total_steps ? t : total_steps;
  constexpr double kPi = 3.14159265358979323846;
  return 0.5 * (1.0 + cos(kPi * static_cast<double>(clamped) / static_cast<double>(total_steps)));
}

/// The scalars of one step, computed once per call (on the device for CUDA) from the counter t
/// and the gradient norm; the element update reads them.
struct StepScalars {
  double grad_scale;             ///< clip_scale of the global norm
  double lr_factor;              ///< cosine_factor(t): multiplies each tensor's base lr
  double bias_correction1;       ///< 1 − beta1^(t+1)
  double bias_correction2_sqrt;  ///< sqrt(1 − beta2^(t+1))
};

FF_HOST_DEVICE inline StepScalars step_scalars(int64_t t, double norm, double beta1, double beta2,
                                               double max_norm, int64_t total_steps) {
  // Adam's bias corrections use the step number after the increment, t + 1 (torch's `step`).
  const double n = static_cast<double>(t + 1);
  StepScalars s;
  s.grad_scale = clip_scale(norm, max_norm);
  s.lr_factor = cosine_factor(t, total_steps);
  s.bias_correction1 = 1.0 - pow(beta1, n);
  s.bias_correction2_sqrt = sqrt(1.0 - pow(beta2, n));
  return s;
}

// sqrtf and sqrt are correctly rounded on the host and (without fast-math) on the device, so the
// element update rounds the same way on both; unqualified sqrt would pick the double overload
// for floats on some hosts.
FF_HOST_DEVICE FF_FORCE_INLINE float square_root(float x) { return sqrtf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double square_root(double x) { return sqrt(x); }

/// Coefficients of one tensor's update in its element type, so float32 tensors update in float32
/// as torch's kernels do. The scalars are rounded in the order torch.optim.Adam rounds them
/// (step_size = scheduled lr / bias_correction1, both in float64), so float64 runs agree with it
/// to the last bits.
template <class T>
struct AdamCoefficients {
  T grad_scale, weight_decay, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps,
      step_size;
};

template <class T>
FF_HOST_DEVICE inline AdamCoefficients<T> adam_coefficients(const StepScalars& s, double lr,
                                                            double beta1, double beta2, double eps,
                                                            double weight_decay) {
  AdamCoefficients<T> c;
  c.grad_scale = static_cast<T>(s.grad_scale);
  c.weight_decay = static_cast<T>(weight_decay);
  c.one_minus_beta1 = static_cast<T>(1.0 - beta1);
  c.beta2 = static_cast<T>(beta2);
  c.one_minus_beta2 = static_cast<T>(1.0 - beta2);
  c.bias_correction2_sqrt = static_cast<T>(s.bias_correction2_sqrt);
  c.eps = static_cast<T>(eps);
  c.step_size = static_cast<T>(lr * s.lr_factor / s.bias_correction1);
  return c;
}

/// One element of torch.optim.Adam after clipping: g ← scale·g (+ wd·p), m ← lerp(m, g, 1 − β1),
/// v ← β2·v + (1 − β2)·g², p ← p − step_size·m / (sqrt(v)/sqrt(bc2) + eps). Each operation is
/// evaluated as torch's CPU kernels evaluate it (lerp from the nearer end, addcmul and addcdiv
/// scaling the first factor), so trajectories agree to rounding rather than drifting apart.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void adam_update(const AdamCoefficients<T>& c, T grad, T& param,
                                                T& exp_avg, T& exp_avg_sq) {
  T g = grad * c.grad_scale;
  if (c.weight_decay != T(0)) g += c.weight_decay * param;
  const T w = c.one_minus_beta1;
  exp_avg = w < T(0.5) ? exp_avg + w * (g - exp_avg) : g - (g - exp_avg) * (T(1) - w);
  exp_avg_sq = exp_avg_sq * c.beta2 + c.one_minus_beta2 * g * g;
  const T denom = square_root(exp_avg_sq) / c.bias_correction2_sqrt + c.eps;
  param -= c.step_size * exp_avg / denom;
}

}  // namespace fieldfuse::detail::optim
