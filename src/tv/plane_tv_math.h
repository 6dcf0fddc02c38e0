// SPDX-License-Identifier: Apache-2.0
// The plane_tv functional of the TV family: per-axis squared differences as a tv_math.h policy, so
// the TV drivers reduce a K-Planes level stack like a volume.
#pragma once

#include "core/macros.h"
#include "tv/tv_math.h"

namespace fieldfuse::detail::tv {

/// Per-axis Δ² sums; plane_tv weighs the H and W sums of each level (ReducePlan).
struct SqAxesTV {
  static constexpr int kSums = 3;

  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE void accumulate(const Nb& nb, const VoxelBounds&,
                                                 T (&terms)[kSums]) const {
    const T v = nb(0, 0, 0);
    const T dd = nb(1, 0, 0) - v, dh = nb(0, 1, 0) - v, dw = nb(0, 0, 1) - v;
    terms[0] = dd * dd;
    terms[1] = dh * dh;
    terms[2] = dw * dw;
  }

  /// Σ_a coef[a]·2·[(v − prev_a) − (next_a − v)]; an axis with coef 0 is left out (the channel
  /// axis of a channels-inner plane view, Note [plane_tv layout]), not multiplied by 0.
  template <class T, class Nb>
  FF_HOST_DEVICE FF_FORCE_INLINE T gradient(const Nb& nb, const VoxelBounds&,
                                            const T (&coef)[3]) const {
    const T v = nb(0, 0, 0);
    const T d = coef[0] != T(0) ? coef[0] * ((v - nb(-1, 0, 0)) - (nb(1, 0, 0) - v)) : T(0);
    const T h = coef[1] != T(0) ? coef[1] * ((v - nb(0, -1, 0)) - (nb(0, 1, 0) - v)) : T(0);
    const T w = coef[2] != T(0) ? coef[2] * ((v - nb(0, 0, -1)) - (nb(0, 0, 1) - v)) : T(0);
    return T(2) * (d + h + w);
  }
};

}  // namespace fieldfuse::detail::tv
