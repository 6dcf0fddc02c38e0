// SPDX-License-Identifier: Apache-2.0
// The TV formulas, written once as host+device functions that the CPU driver and the CUDA kernels
// both call. No tensors, no allocation, no iteration order: drivers decide those.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace fieldfuse::detail::tv {

// Note [clamped neighbours]
// Every per-voxel function reads its neighbours through a Neighborhood `nb`, where
// `nb(dd, dh, dw)` is the value at offset (dd, dh, dw) ∈ {-1, 0, 1}³ from the current voxel with
// out-of-range coordinates clamped to the volume. A missing neighbour therefore equals the centre,
// so a forward difference across the border is exactly zero: the squared and L1 terms of the spec
// ("[prev exists]", "[next exists]", "a size-1 axis contributes 0") need no branches, and sign(0) =
// 0 gives the L1 subgradient the spec asks for. The isotropic functional is the exception: a corner
// whose differences are all zero still contributes sqrt(eps), so its corners carry explicit
// validity flags (VoxelBounds) instead.

/// Where a voxel sits relative to the volume's faces; only the isotropic terms need it.
struct VoxelBounds {
  bool has_prev_d, has_next_d;
  bool has_prev_h, has_next_h;
  bool has_prev_w, has_next_w;
};

// Float and double overloads that round identically on host and device (sqrtf and sqrt are
// correctly rounded in both, since nvcc keeps IEEE sqrt unless told otherwise).
FF_HOST_DEVICE FF_FORCE_INLINE float square_root(float x) { return sqrtf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double square_root(double x) { return sqrt(x); }
// 1/sqrt(x). On the device this is the hardware reciprocal square root (rsqrtf: at most 2 ulp),
// one instruction instead of an IEEE sqrt and divide; the host computes it exactly. The iso
// backward evaluates it four times per voxel, which would otherwise make it compute-bound.
FF_HOST_DEVICE FF_FORCE_INLINE float inverse_square_root(float x) {
#if defined(__CUDA_ARCH__)
  return rsqrtf(x);
#else
  return 1.0f / sqrtf(x);
#endif
}
FF_HOST_DEVICE FF_FORCE_INLINE double inverse_square_root(double x) { return 1.0 / sqrt(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float absolute(float x) { return fabsf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double absolute(double x) { return fabs(x); }

/// sign with sign(0) = 0 (and sign(NaN) = 0; NaN inputs still reach the sums through |Δ|).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sign0(T x) {
  return static_cast<T>((x > T(0)) - (x < T(0)));
}

// Each functional is a small policy: kSums partial sums reduced by the forward, `accumulate` for
// one voxel's terms, and `gradient` for one voxel's entry of the backward, given the per-sum
// upstream coefficients (ReducePlan::coefficient).

/// Squared anisotropic TV.
struct SqTV {
  static constexpr int kSums = 1;

  /// Σ_axes Δ², the voxel's share of tv_sq_3d.
  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE void accumulate(const Nb& nb, const VoxelBounds&,
                                                 T (&terms)[kSums]) const {
    const T v = nb(0, 0, 0);
    const T dd = nb(1, 0, 0) - v, dh = nb(0, 1, 0) - v, dw = nb(0, 0, 1) - v;
    terms[0] = dd * dd + dh * dh + dw * dw;
  }

  /// coef[0] · ∂S/∂v = coef[0] · 2·Σ_axes [(v − prev) − (next − v)].
  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE T gradient(const Nb& nb, const VoxelBounds&,
                                            const T (&coef)[3]) const {
    const T v = nb(0, 0, 0);
    const T sum = ((v - nb(-1, 0, 0)) - (nb(1, 0, 0) - v)) +
                  ((v - nb(0, -1, 0)) - (nb(0, 1, 0) - v)) +
                  ((v - nb(0, 0, -1)) - (nb(0, 0, 1) - v));
    return T(2) * coef[0] * sum;
  }
};

/// Per-axis |Δ| sums; shared by tv_l1_3d (three outputs) and tv_weighted_l1 (one weighted output).
struct L1TV {
  static constexpr int kSums = 3;

  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE void accumulate(const Nb& nb, const VoxelBounds&,
                                                 T (&terms)[kSums]) const {
    const T v = nb(0, 0, 0);
    terms[0] = absolute(nb(1, 0, 0) - v);
    terms[1] = absolute(nb(0, 1, 0) - v);
    terms[2] = absolute(nb(0, 0, 1) - v);
  }

  /// Σ_a coef[a]·[sign(v − prev_a) − sign(next_a − v)], coef[a] the upstream gradient of axis a.
  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE T gradient(const Nb& nb, const VoxelBounds&,
                                            const T (&coef)[3]) const {
    const T v = nb(0, 0, 0);
    return coef[0] * (sign0(v - nb(-1, 0, 0)) - sign0(nb(1, 0, 0) - v)) +
           coef[1] * (sign0(v - nb(0, -1, 0)) - sign0(nb(0, 1, 0) - v)) +
           coef[2] * (sign0(v - nb(0, 0, -1)) - sign0(nb(0, 0, 1) - v));
  }
};

/// Isotropic TV: one term per corner (i < D−1, j < H−1, k < W−1), all three differences anchored
/// at the corner voxel, eps inside the sqrt.
struct IsoTV {
  static constexpr int kSums = 1;
  double eps;

  template <class T>
  FF_HOST_DEVICE FF_FORCE_INLINE T squared_norm(T dd, T dh, T dw) const {
    return dd * dd + dh * dh + dw * dw + static_cast<T>(eps);
  }

  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE void accumulate(const Nb& nb, const VoxelBounds& at,
                                                 T (&terms)[kSums]) const {
    const bool is_corner = at.has_next_d && at.has_next_h && at.has_next_w;
    const T v = nb(0, 0, 0);
    terms[0] = is_corner
                   ? square_root(squared_norm<T>(nb(1, 0, 0) - v, nb(0, 1, 0) - v, nb(0, 0, 1) - v))
                   : T(0);
  }

  /// coef[0] · ∂L/∂v, gathered from the four corners that contain v (each only where it exists):
  /// −(Δd+Δh+Δw)/s at (a,b,c), +Δd/s at (a−1,b,c), +Δh/s at (a,b−1,c), +Δw/s at (a,b,c−1).
  /// Every corner term is computed from clamped (always readable) neighbours and then selected, so
  /// the function is branch-free and vectorises on the CPU; a select, unlike a multiplication by a
  /// 0/1 flag, keeps the inf or NaN of a missing corner (0/0 when eps = 0) out of the sum.
  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE T gradient(const Nb& nb, const VoxelBounds& at,
                                            const T (&coef)[3]) const {
    const T v = nb(0, 0, 0);
    const T dd0 = nb(1, 0, 0) - v, dh0 = nb(0, 1, 0) - v, dw0 = nb(0, 0, 1) - v;
    const T self = (dd0 + dh0 + dw0) * inverse_square_root(squared_norm<T>(dd0, dh0, dw0));

    const T base_d = nb(-1, 0, 0);
    const T dd1 = v - base_d;
    const T from_d = dd1 * inverse_square_root(
                               squared_norm<T>(dd1, nb(-1, 1, 0) - base_d, nb(-1, 0, 1) - base_d));

    const T base_h = nb(0, -1, 0);
    const T dh2 = v - base_h;
    const T from_h = dh2 * inverse_square_root(
                               squared_norm<T>(nb(1, -1, 0) - base_h, dh2, nb(0, -1, 1) - base_h));

    const T base_w = nb(0, 0, -1);
    const T dw3 = v - base_w;
    const T from_w = dw3 * inverse_square_root(
                               squared_norm<T>(nb(1, 0, -1) - base_w, nb(0, 1, -1) - base_w, dw3));

    T g = (at.has_next_d && at.has_next_h && at.has_next_w) ? -self : T(0);
    g += (at.has_prev_d && at.has_next_h && at.has_next_w) ? from_d : T(0);
    g += (at.has_next_d && at.has_prev_h && at.has_next_w) ? from_h : T(0);
    g += (at.has_next_d && at.has_next_h && at.has_prev_w) ? from_w : T(0);
    return coef[0] * g;
  }
};

/// Writes one gradient element: `value`, or the old content plus `value` when accumulating (added
/// in the compute type T, so a 16-bit gradient is rounded once). The old content is read only
/// when accumulating.
template <class T, class S>
FF_HOST_DEVICE FF_FORCE_INLINE void write_gradient(S* dst, T value, bool accumulate) {
  if (accumulate) value += static_cast<T>(*dst);
  *dst = static_cast<S>(value);
}

/// How a functional's partial sums become its outputs, and how its upstream gradient becomes the
/// per-axis coefficients its backward uses. Either output k = scale[k]·sum[k] (num_outputs ==
/// num_sums), or a single output Σ_k scale[k]·sum[k] (num_outputs == 1 < num_sums).
struct ReducePlan {
  int num_sums = 1;
  int num_outputs = 1;
  double scale[3] = {1.0, 1.0, 1.0};

  FF_HOST_DEVICE double output(const double* sums, int k) const {
    if (num_outputs == num_sums) return scale[k] * sums[k];
    // A sum weighted 0 is left out, not multiplied: an axis a functional does not use (plane_tv's
    // channel axis) must not turn an infinite input into NaN.
    double total = 0.0;
    for (int i = 0; i < num_sums; ++i) {
      if (scale[i] != 0.0) total += scale[i] * sums[i];
    }
    return total;
  }

  /// The backward's per-sum coefficients: upstream gradient grad_out[k·stride] (grad_out[0] when
  /// the sums were combined into one output) times that sum's scale. Loops run over the constant 3
  /// with guards, so `coef` stays in registers on the device (no runtime-indexed local array).
  template <class T>
  FF_HOST_DEVICE FF_FORCE_INLINE void coefficients(const T* grad_out, int64_t stride,
                                                   T (&coef)[3]) const {
    const bool combined = num_outputs != num_sums;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < 3; ++k) {
      const T upstream = k < num_sums ? grad_out[combined ? 0 : k * stride] : T(0);
      coef[k] = upstream * static_cast<T>(scale[k]);
    }
  }
};

}  // namespace fieldfuse::detail::tv
