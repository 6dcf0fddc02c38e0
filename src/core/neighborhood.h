// SPDX-License-Identifier: Apache-2.0
// ClampedNeighborhood: reads a voxel's 3×3×3 neighbours from strided memory with coordinates
// clamped to the volume, on host and device alike (see Note [clamped neighbours] in tv_math.h).
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace fieldfuse::detail {

/// Loads one element and converts it to the compute type T. Device code goes through the read-only
/// data cache (the inputs of every fieldfuse kernel are never written by the same launch).
template <class T, class S>
FF_HOST_DEVICE FF_FORCE_INLINE T load_as(const S* p) {
#if defined(__CUDA_ARCH__)
  return static_cast<T>(__ldg(p));
#else
  return static_cast<T>(*p);
#endif
}

/// Offsets (in elements) to the previous, current and next position along one axis, with the
/// missing neighbour at a face replaced by the current position.
FF_HOST_DEVICE FF_FORCE_INLINE void clamped_offsets(int64_t index, int64_t size, int64_t stride,
                                                    int64_t (&offsets)[3]) {
  offsets[0] = index > 0 ? -stride : 0;
  offsets[1] = 0;
  offsets[2] = index + 1 < size ? stride : 0;
}

template <class T, class S>
struct ClampedNeighborhood {
  const S* center;
  int64_t off_d[3], off_h[3], off_w[3];

  /// The value at offset (dd, dh, dw) ∈ {-1, 0, 1}³ from the centre, clamped to the volume. Callers
  /// pass literal offsets, so after inlining each call is one load at a fixed register offset.
  FF_HOST_DEVICE FF_FORCE_INLINE T operator()(int dd, int dh, int dw) const {
    return load_as<T>(center + off_d[dd + 1] + off_h[dh + 1] + off_w[dw + 1]);
  }
};

}  // namespace fieldfuse::detail
