// SPDX-License-Identifier: Apache-2.0
// Warp-level reductions and scans with a fixed combination order, so every result is the same
// bits on every run (no atomics, no order that depends on timing). All lanes of the warp must call
// them together.
#pragma once

#include <cuda_runtime.h>

#include "core/macros.h"

namespace fieldfuse::detail::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;

__device__ FF_FORCE_INLINE int lane_id() { return static_cast<int>(threadIdx.x) & (kWarpSize - 1); }

/// Sum of v over the `1 << lanes_log2` lanes of an aligned group, in a fixed butterfly order (every
/// lane gets the total).
template <class T>
__device__ FF_FORCE_INLINE T group_sum(T v, int lanes_log2) {
  for (int offset = 1; offset < (1 << lanes_log2); offset <<= 1) {
    v += __shfl_xor_sync(kFullWarp, v, offset);
  }
  return v;
}

/// Sum over the whole warp (every lane gets the total).
template <class T>
__device__ FF_FORCE_INLINE T warp_sum(T v) {
  return group_sum(v, 5);
}

/// Inclusive prefix product: lane i gets x_0·x_1·…·x_i (Hillis-Steele, fixed order).
__device__ FF_FORCE_INLINE double warp_prefix_product(double x) {
  const int lane = lane_id();
#pragma unroll
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const double earlier = __shfl_up_sync(kFullWarp, x, offset);
    if (lane >= offset) x = earlier * x;
  }
  return x;
}

/// Inclusive suffix sum: lane i gets x_i + x_{i+1} + … + x_31.
__device__ FF_FORCE_INLINE double warp_suffix_sum(double x) {
  const int lane = lane_id();
#pragma unroll
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const double later = __shfl_down_sync(kFullWarp, x, offset);
    if (lane + offset < kWarpSize) x += later;
  }
  return x;
}

}  // namespace fieldfuse::detail::cuda
