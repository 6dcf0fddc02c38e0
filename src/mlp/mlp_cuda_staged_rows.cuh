// SPDX-License-Identifier: Apache-2.0
// The register kernels' input rows staged ahead: cp.async copies of the next warp tile's rows of
// x into a per-warp shared-memory buffer while the current tile computes, then A fragments read
// from there.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mlp/mlp_cuda_fragments.cuh"

namespace fieldfuse::detail::mlp::fused {

// Note [mlp staged input rows]
// With the layers' overheads gone (Note [mlp register forward layers]), Nsight Compute showed the
// register forward of 32 → 64×4 → 16 at B = 2^18 stalled on the global loads of x nearly half of
// its cycles ("long scoreboard"): each warp loaded its tile's rows, then waited for them with
// nothing else to do, and 3 warps a scheduler could not cover that. So each warp copies the rows
// of its NEXT tile with cp.async into one of two buffers while it runs the current one, and reads
// the current tile's fragments from shared memory. A lane copies one row (the warp tile is 16·M
// rows; at M = 1, lanes 16–31 copy nothing): 16-byte copies when the rows are contiguous and
// 16-byte aligned, else 4-byte ones (any strides); rows past the batch are zero-filled by the copy
// itself, columns past `in` are masked when the fragments are read. Buffers are [16·M, in_pad + 8]
// float32 (rows 16-byte aligned, and the 8-byte fragment reads of a half-warp's 4 rows on distinct
// banks); the plan turns staging off (a.x_stage = 0) when they do not fit next to the weights, and
// the kernel then loads x directly.

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

/// Row pitch (floats) of a staging buffer for inputs padded to in_pad.
FF_HOST_DEVICE constexpr int staged_pitch(int in_pad) { return in_pad + 8; }

__device__ FF_FORCE_INLINE void cp_async_4(float* dst, const float* src, bool valid) {
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(at), "l"(src),
               "r"(valid ? 4 : 0));
}

__device__ FF_FORCE_INLINE void cp_async_16(float* dst, const float* src, bool valid) {
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ FF_FORCE_INLINE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most one of this lane's committed copy groups is still in flight, then makes
/// the whole warp's completed copies visible to the warp.
__device__ FF_FORCE_INLINE void cp_async_wait_all_but_one() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  __syncwarp();
}

/// Starts copying rows row0 .. row0 + Rows of x (one per lane, Rows <= 32) into `buf`, then
/// commits the group (empty for lanes without a row, so every lane waits on the same count).
template <int Rows>
__device__ FF_FORCE_INLINE void stage_rows(const Args& a, int64_t row0, float* buf, int pitch) {
  const int in = lane_id() < Rows ? a.layers[0].in : 0;
  const int64_t row = row0 + lane_id();
  const bool valid = row < a.batch;
  const float* src = a.x + (valid ? row * a.x_sr : 0);
  float* dst = buf + lane_id() * pitch;
  const bool wide =
      a.x_sc == 1 && in % 4 == 0 && a.x_sr % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  if (wide) {
    for (int c = 0; c < in; c += 4) cp_async_16(dst + c, src + c, valid);
  } else {
    for (int c = 0; c < in; ++c) cp_async_4(dst + c, valid ? src + c * a.x_sc : a.x, valid);
  }
  cp_async_commit();
}

/// The A fragments (16-bit) of the 16·M staged rows in `buf`, zero past `in`.
template <class S, int M, int KT>
__device__ FF_FORCE_INLINE void staged_fragments(const Args& a, const float* buf, int pitch,
                                                 uint32_t (&A)[M][KT][4]) {
  const int in = a.layers[0].in;
  input_fragments<S, M, KT>(a, A, [&](int r, int c) {
    const float2 v = *reinterpret_cast<const float2*>(buf + r * pitch + c);
    return pack_pair<S>(c < in ? v.x : 0.0f, c + 1 < in ? v.y : 0.0f);
  });
}

#endif

}  // namespace fieldfuse::detail::mlp::fused
