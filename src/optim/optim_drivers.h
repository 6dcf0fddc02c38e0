// SPDX-License-Identifier: Apache-2.0
// The interface between the optim front (optim.cpp), which validates, and the CPU and CUDA
// drivers, which run optim_math.h over fixed-size chunks of every tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"
#include "fieldfuse/optim.h"

namespace fieldfuse::detail::optim {

// Note [adam chunks]
// Every tensor is cut into chunks of kChunkElements elements (the last one shorter), numbered
// tensor by tensor in the order of the call. A chunk is the unit of parallel work on both
// devices (an OpenMP index on the CPU, a CUDA block's share on the GPU) and the unit of the
// gradient norm's first reduction stage: each chunk's sum of squares goes, in float64, to its own
// workspace slot, and a second stage adds the slots in chunk order. The partition depends only on
// the tensor sizes, so the norm is the same bits on every call, whatever the thread count or
// grid size. Empty tensors have no chunks.

/// Elements per chunk: 32 per thread of a 256-thread CUDA block (enough independent loads in
/// flight per thread), small enough that the planes of the reference K-Planes field (3 × 8.6 M
/// elements) make ~3000 blocks, several full waves on an H100 rather than one and a half, and
/// large enough that the per-chunk overhead (finding the tensor, one float64 slot, on the GPU a
/// block reduction) is negligible.
constexpr int64_t kChunkElements = 8192;

inline int64_t chunk_count(int64_t numel) { return (numel + kChunkElements - 1) / kChunkElements; }

/// Workspace doubles before the per-chunk partial sums: the StepScalars of the call (the CUDA
/// update kernels read them from device memory).
constexpr int64_t kScalarSlots = 4;

/// One validated call.
struct AdamCall {
  const char* op = "";
  DType dtype = DType::Float32;
  Device device{};
  const AdamParam* params = nullptr;
  int count = 0;
  AdamOptions options{};
  int64_t chunks = 0;       ///< total over all tensors
  bool needs_norm = false;  ///< clipping on or grad_norm_out given
  int64_t* step = nullptr;
  void* grad_norm_out = nullptr;  ///< null: not requested
  DType grad_norm_dtype = DType::Float32;
  double* workspace = nullptr;  ///< kScalarSlots + chunks doubles
  Stream stream{};
};

void adam_step_cpu(const AdamCall& call);

#if FIELDFUSE_WITH_CUDA
void adam_step_cuda(const AdamCall& call);
#endif

}  // namespace fieldfuse::detail::optim
