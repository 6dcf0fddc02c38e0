// SPDX-License-Identifier: Apache-2.0
// The formulas of the tomo reconstructions (SIRT's elementwise steps, FBP's filter and angular
// weights), each written once as an FF_HOST_DEVICE inline function for the CPU and CUDA drivers.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace fieldfuse::detail::tomo {

constexpr double kPi = 3.14159265358979323846;

/// Element offset of flat row-major index `i` in a strided 3-D view (sizes[0] is never needed).
FF_HOST_DEVICE FF_FORCE_INLINE int64_t strided_offset3(int64_t i, const int64_t* sizes,
                                                       const int64_t* strides) {
  const int64_t k = i % sizes[2];
  const int64_t rest = i / sizes[2];
  return (rest / sizes[1]) * strides[0] + (rest % sizes[1]) * strides[1] + k * strides[2];
}

// ---------------------------------------------------------------------------------------------
// SIRT: x ← x + λ·C·Aᵀ·R·(b − A·x), R = diag(1 / A·1), C = diag(1 / Aᵀ·1)
// ---------------------------------------------------------------------------------------------

/// 1/s, or 0 where s = 0: a pixel whose ray misses the volume (row sum 0) or a voxel no ray
/// reaches (column sum 0) takes no part in the update, so it keeps its value.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T reciprocal_or_zero(T s) {
  return s == T(0) ? T(0) : T(1) / s;
}

/// The weighted residual R·(b − A·x) of one pixel. Where R = 0 the result is exactly 0 even for a
/// NaN or infinite b: such a pixel's ray meets no voxel, so its value cannot matter.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sirt_ratio(T measured, T projected, T inv_row) {
  return inv_row == T(0) ? T(0) : inv_row * (measured - projected);
}

/// One voxel's update x + λ·C·(Aᵀ·R·(b − A·x)), clamped at 0 when `positivity`. A voxel with
/// C = 0 (no ray reaches it) is left exactly as it was (and is still clamped).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sirt_update(T x, T inv_col, T back, T relaxation,
                                             bool positivity) {
  const T updated = inv_col == T(0) ? x : x + relaxation * (inv_col * back);
  // `updated < 0` is false for NaN, so a NaN voxel stays NaN (visible) rather than becoming 0.
  return positivity && updated < T(0) ? T(0) : updated;
}

/// One pixel's term of ‖b − A·x‖₂², in float64 whatever the storage type.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE double residual_term(T measured, T projected) {
  const double r = static_cast<double>(measured) - static_cast<double>(projected);
  return r * r;
}

// ---------------------------------------------------------------------------------------------
// FBP: ramp filter along detector columns, then back projection weighted per projection
// ---------------------------------------------------------------------------------------------
// Note [FBP scaling]
// With detector spacing τ (box units), the Ram-Lak filtered projection is q = τ·(h ∗ p) with the
// spatial kernel h[0] = 1/(4τ²), h[odd k] = −1/(π²k²τ²), 0 at even k ≠ 0, i.e. q = (1/τ)·(h₁ ∗ p)
// with h₁ the kernel at τ = 1 (ramp_tap). The density is f(x) = Σ_m Δθ_m·q_m(x's detector point),
// Δθ_m the angular interval of projection m (fbp_interval). The projector's transpose Aᵀ is not
// an interpolating back projection: per projection, a voxel gathers the rays that pass within
// one voxel of it, Δ·Σ bilinear weights ≈ V_vox / A_pix (voxel volume over pixel area, the same
// for every ray direction), so Aᵀ·q ≈ (V_vox / A_pix)·q(x). With box units V_vox = 8/(D·H·W),
// A_pix = 4/(Hd·Wd), τ = 2/Hd along v and FFT convolution on N padded samples (the inverse FFT
// is unnormalised, a factor N):
//   f ≈ Σ_m [Δθ_m · (A_pix/V_vox) / τ / N] · Aᵀ_m·(h₁ ∗ p_m) = Σ_m Δθ_m·D·H·W/(4·Wd·N) · ...
// (fbp_projection_scale). The ∗ is the linear convolution of the Hd samples with h₁ truncated to
// |k| < Hd, exactly, because the column is zero-padded to N >= 2·Hd (no wrap-around reaches a
// sample).

/// The Ram-Lak spatial kernel at unit spacing, h₁[k]: 1/4 at 0, −1/(π²k²) at odd k, 0 at even
/// k ≠ 0. Taken from the discrete kernel rather than sampling |ν| in frequency, so the filter has
/// no DC offset (its DC gain is the kernel's sum, which tends to 0 as it should).
FF_HOST_DEVICE FF_FORCE_INLINE double ramp_tap(int64_t k) {
  if (k == 0) return 0.25;
  if (k % 2 == 0) return 0.0;
  const double kk = static_cast<double>(k);
  return -1.0 / (kPi * kPi * kk * kk);
}

/// Entry `i` of the kernel laid out circularly on N (even) samples: offsets 0..N/2 at i = 0..N/2,
/// negative offsets −(N − i) above (h₁ is even, so the FFT of this row is real).
FF_HOST_DEVICE FF_FORCE_INLINE double ramp_tap_circular(int64_t i, int64_t padded) {
  return ramp_tap(i <= padded / 2 ? i : i - padded);
}

/// The frequency window of each filter at FFT bin k of N (normalised frequency f = k/N in
/// [0, 1/2]): Ram-Lak 1; Shepp–Logan sinc(f) = sin(πf)/(πf) (2/π at Nyquist); Hann
/// (1 + cos 2πf)/2 (0 at Nyquist). `filter` is the FbpFilter value.
FF_HOST_DEVICE FF_FORCE_INLINE double fbp_window(int32_t filter, int64_t k, int64_t padded) {
  const double f = static_cast<double>(k) / static_cast<double>(padded);
  if (filter == 1) return f == 0.0 ? 1.0 : std::sin(kPi * f) / (kPi * f);
  if (filter == 2) return 0.5 * (1.0 + std::cos(2.0 * kPi * f));
  return 1.0;
}

/// The filter response at bin k: the real part of the circular kernel's spectrum (real up to
/// rounding, h₁ being even) times the window.
FF_HOST_DEVICE FF_FORCE_INLINE float fbp_response(float kernel_real, int32_t filter, int64_t k,
                                                  int64_t padded) {
  return static_cast<float>(kernel_real * fbp_window(filter, k, padded));
}

/// The real factor bin k of projection m's column spectrum is multiplied by.
FF_HOST_DEVICE FF_FORCE_INLINE float fbp_gain(float response, double scale) {
  return response * static_cast<float>(scale);
}

/// Tilt angle (radians, in (−π, π]) of a projection whose ray direction is d = R·e_z = (dx, dy,
/// dz): its angle in the plane perpendicular to the tilt axis x, 0 for d = e_z, and θ for R =
/// Rx(θ), whose d is (0, −sin θ, cos θ).
FF_HOST_DEVICE FF_FORCE_INLINE double tilt_angle(double dy, double dz) {
  return std::atan2(-dy, dz);
}

/// Angular interval Δθ_m of projection m among `count` tilt angles (any order; equal angles are
/// ordered by index): half the distance between its two neighbours in angle; the first and the
/// last get half their one interval plus half the mean interval (span / (count − 1)), so evenly
/// spaced angles get equal weights summing to count·step. A single projection gets π, the whole
/// half-turn it stands for. O(count) per projection, no sorting, so every thread can compute its
/// own. A NaN angle makes the result NaN.
FF_HOST_DEVICE inline double fbp_interval(const double* angles, int64_t count, int64_t m) {
  if (count == 1) return kPi;
  const double a = angles[m];
  bool has_below = false, has_above = false;
  double below = 0.0, above = 0.0, lowest = a, highest = a;
  for (int64_t k = 0; k < count; ++k) {
    const double b = angles[k];
    if (b != b) return b;  // NaN
    lowest = b < lowest ? b : lowest;
    highest = b > highest ? b : highest;
    if (k == m) continue;
    const bool is_below = b < a || (b == a && k < m);
    if (is_below && (!has_below || b >= below)) {
      below = b;
      has_below = true;
    }
    if (!is_below && (!has_above || b <= above)) {
      above = b;
      has_above = true;
    }
  }
  const double mean = (highest - lowest) / static_cast<double>(count - 1);
  if (has_below && has_above) return 0.5 * (above - below);
  if (has_above) return 0.5 * (above - a) + 0.5 * mean;
  return 0.5 * (a - below) + 0.5 * mean;
}

/// The factor projection m's filtered column is multiplied by before the (unnormalised) inverse
/// FFT: Δθ_m·D·H·W / (4·Wd·N) (Note [FBP scaling]).
FF_HOST_DEVICE FF_FORCE_INLINE double fbp_projection_scale(double interval, const int64_t* volume,
                                                           int64_t det_width, int64_t padded) {
  const double voxels = static_cast<double>(volume[0]) * static_cast<double>(volume[1]) *
                        static_cast<double>(volume[2]);
  return interval * voxels / (4.0 * static_cast<double>(det_width) * static_cast<double>(padded));
}

/// The padded FFT length for Hd samples: the smallest power of two >= 2·Hd (and >= 2, as the
/// real FFTs need an even length).
inline int64_t fbp_padded_length(int64_t det_height) {
  int64_t n = 2;
  while (n < 2 * det_height) n *= 2;
  return n;
}

}  // namespace fieldfuse::detail::tomo
