// SPDX-License-Identifier: Apache-2.0
// The plane_tv formulas: per-axis squared differences and their gradient, written once for the
// TV drivers' volume policy (SqAxesTV) and the CUDA row kernels of plane_tv_cuda.cu.
#pragma once

#include "core/macros.h"
#include "tv/tv_math.h"

namespace fieldfuse::detail::tv {

/// Δ² between a value and its next neighbour along one axis. A missing neighbour is passed as the
/// value itself (Note [clamped neighbours]), so the border term is exactly 0.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sq_axis_term(T v, T next) {
  const T d = next - v;
  return d * d;
}

/// coef·[(v − prev) − (next − v)], the share of one axis in ∂(coef·ΣΔ²)/∂v divided by 2 (missing
/// neighbours passed as v). Callers leave out an axis whose coef is 0 instead of multiplying by 0,
/// so an unused axis (the channel axis of a plane view, Note [plane_tv layout]) cannot turn inf
/// into NaN, and its neighbours are never loaded.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sq_axis_gradient(T v, T prev, T next, T coef) {
  return coef * ((v - prev) - (next - v));
}

/// One element's plane_tv gradient from its four in-plane neighbours (missing ones passed as v),
/// with per-axis coefficients coef_h, coef_w (upstream gradient times the axis weight).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T plane_tv_gradient(T v, T up, T down, T left, T right, T coef_h,
                                                   T coef_w) {
  const T h = coef_h != T(0) ? sq_axis_gradient(v, up, down, coef_h) : T(0);
  const T w = coef_w != T(0) ? sq_axis_gradient(v, left, right, coef_w) : T(0);
  return T(2) * (h + w);
}

/// Per-axis Δ² sums; plane_tv weighs the H and W sums of each level (ReducePlan).
struct SqAxesTV {
  static constexpr int kSums = 3;

  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE void accumulate(const Nb& nb, const VoxelBounds&,
                                                 T (&terms)[kSums]) const {
    const T v = nb(0, 0, 0);
    terms[0] = sq_axis_term(v, nb(1, 0, 0));
    terms[1] = sq_axis_term(v, nb(0, 1, 0));
    terms[2] = sq_axis_term(v, nb(0, 0, 1));
  }

  /// Σ_a coef[a]·2·[(v − prev_a) − (next_a − v)].
  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE T gradient(const Nb& nb, const VoxelBounds&,
                                            const T (&coef)[3]) const {
    const T v = nb(0, 0, 0);
    const T d = coef[0] != T(0) ? sq_axis_gradient(v, nb(-1, 0, 0), nb(1, 0, 0), coef[0]) : T(0);
    const T h = coef[1] != T(0) ? sq_axis_gradient(v, nb(0, -1, 0), nb(0, 1, 0), coef[1]) : T(0);
    const T w = coef[2] != T(0) ? sq_axis_gradient(v, nb(0, 0, -1), nb(0, 0, 1), coef[2]) : T(0);
    return T(2) * (d + h + w);
  }
};

}  // namespace fieldfuse::detail::tv
