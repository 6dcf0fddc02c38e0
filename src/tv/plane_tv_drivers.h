// SPDX-License-Identifier: Apache-2.0
// The interface between the plane_tv front (plane_tv.cpp) and its CUDA row kernels
// (plane_tv_cuda.cu), the fast path for levels whose planes are dense rows in memory
// (Note [plane_tv rows]). Arguments arrive here already checked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/macros.h"
#include "fieldfuse/core.h"
#include "tv/tv_math.h"

namespace fieldfuse::detail::tv {

/// A level as `slabs` blocks of `rows` contiguous rows of `row_length` elements each: element j of
/// slab s is at s·slab_stride + j. Its H neighbour is row_length elements on, its W neighbour
/// `step` elements on (row_length = W·step): channels-last, a slab is a plane and step = C; NCHW, a
/// slab is one channel of a plane and step = 1.
struct PlaneRows {
  int64_t slabs = 0, slab_stride = 0, rows = 0, row_length = 0, step = 1;

  FF_HOST_DEVICE int64_t slab_size() const { return rows * row_length; }
  FF_HOST_DEVICE int64_t numel() const { return slabs * slab_size(); }
};

struct RowsForwardArgs {
  const char* op;  ///< public name, for error messages and profiler ranges
  PlaneRows rows;
  const void* data;
  DType dtype;
  Device device;
  ReducePlan plan;  ///< two sums: ΣΔH², ΣΔW²; one output
  void* out;        ///< one element of the reduced dtype
  void* workspace;  ///< rows_forward_workspace_cuda bytes
  Stream stream;
};

struct RowsBackwardArgs {
  const char* op;
  PlaneRows rows;
  const void* data;
  DType dtype;
  Device device;
  ReducePlan plan;
  const void* grad_out;      ///< one element of the reduced dtype
  int64_t grad_slab_stride;  ///< grad has rows' layout with its own slab stride
  void* grad_data;
  bool accumulate;  ///< add the gradient to what grad holds instead of overwriting it
  Stream stream;
};

#if FIELDFUSE_WITH_CUDA
/// Whether the row kernels take a level of this layout (its grid fits CUDA's limits).
bool rows_supported_cuda(const PlaneRows& rows);
/// Workspace bytes of rows_forward_cuda (the per-block partial sums; at least 1). Depends only
/// on the layout's sizes.
std::size_t rows_forward_workspace_cuda(const PlaneRows& rows);
void rows_forward_cuda(const RowsForwardArgs& args);
void rows_backward_cuda(const RowsBackwardArgs& args);
#endif

}  // namespace fieldfuse::detail::tv
