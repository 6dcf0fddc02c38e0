// SPDX-License-Identifier: Apache-2.0
// Copies between any strided [P, C, H, W] tensor and a dense channels-last buffer, for fronts that
// stage a layout their fast path cannot read (or write) in place.
//
// Contract shared by both copies:
// - The dense side is the same logical [P, C, H, W] tensor stored channels-last, i.e. the memory
//   order [P, H, W, C]: element (p, c, y, x) at ((p·H + y)·W + x)·C + c, strides
//   (H·W·C, 1, W·C, C) in [P, C, H, W] terms. It is a raw pointer into caller-owned memory (for
//   example a slice of an op's workspace) on the strided tensor's device, aligned at least to its
//   element size; size it with channels_last_bytes().
// - The strided side may have any non-negative strides: NCHW, channels-last, permuted, sliced
//   views; a source may also be expanded (stride 0).
// - dtypes: the same dtype on both sides copies the bits unchanged (any DType, NaN payloads and
//   -0 included). copy_from_channels_last also converts a float32 source into a float16 or
//   bfloat16 destination (round to nearest, ties to even), so a backward can accumulate 16-bit
//   planes' gradients in float32 and round once.
// - aliasing: the two sides must not share memory (checked on the byte ranges they span).
// - streams: for CUDA tensors the copy is enqueued on `stream` and nothing is synchronised, so it
//   can be captured in a CUDA graph; CPU copies run to completion (OpenMP).
// - every destination element is written exactly once, from one source element, so the copy is
//   deterministic; elements of a strided destination's storage outside the view are untouched.
// - empty tensors (any size 0) return before touching either pointer.
// - errors: `op` heads every message (validation and CUDA failures); a front staging a plane for a
//   public function passes that function's name, so users see the call they made.
#pragma once

#include <cstddef>

#include "fieldfuse/core.h"

namespace fieldfuse::detail {

/// Byte alignment channels_last_bytes() rounds to: buffers carved one after another from a
/// 256-byte-aligned workspace stay 256-byte aligned (enough for any vector load or CUB temp).
constexpr std::size_t kChannelsLastAlignment = 256;

/// Bytes of a dense channels-last buffer of `shape`'s logical [P, C, H, W] shape in `dtype`,
/// rounded up to a multiple of kChannelsLastAlignment (0 for an empty shape). Only the sizes of
/// `shape` are read.
std::size_t channels_last_bytes(const TensorRef& shape, DType dtype,
                                const char* op = "channels_last_bytes");

/// Writes `src` ([P, C, H, W], any strides) into the dense channels-last buffer `dst` of dtype
/// `dst_dtype`, which must equal src.dtype. `dst` must hold channels_last_bytes(src, dst_dtype).
void copy_to_channels_last(const TensorRef& src, void* dst, DType dst_dtype, Stream stream,
                           const char* op = "copy_to_channels_last");

/// Writes the dense channels-last buffer `src` of dtype `src_dtype`, holding `dst`'s logical shape,
/// into `dst` ([P, C, H, W], any strides whose elements do not overlap). `src_dtype` is dst.dtype,
/// or float32 for a float16 or bfloat16 `dst`.
void copy_from_channels_last(const void* src, DType src_dtype, const TensorRef& dst, Stream stream,
                             const char* op = "copy_from_channels_last");

}  // namespace fieldfuse::detail
