// SPDX-License-Identifier: Apache-2.0
// Device pieces the TV family's CUDA drivers share (tv_cuda.cu, plane_tv_cuda.cu): 4-element vector
// loads and the fixed-order final reduction of per-block partial sums.
#pragma once

#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "core/macros.h"
#include "tv/tv_math.h"

namespace fieldfuse::detail::tv {

// One block combines the per-block partials; 256 threads read them fully coalesced.
constexpr int kFinalThreads = 256;

/// Four consecutive elements as one aligned vector (16 bytes for float, 8 for 16-bit types).
template <class S>
struct alignas(4 * sizeof(S)) Quad {
  S v[4];
};

template <class S>
__device__ FF_FORCE_INLINE Quad<S> load_quad(const S* p) {
  return *reinterpret_cast<const Quad<S>*>(p);
}

/// Combines the per-block partials (sum k of block b at partials[k·blocks + b]) in a fixed order
/// and writes the op's outputs. Launch with one block of kFinalThreads threads.
template <class Out>
__global__ void __launch_bounds__(kFinalThreads)
    finalize_kernel(const double* __restrict__ partials, int64_t blocks, ReducePlan plan,
                    Out* __restrict__ out, int64_t out_stride) {
  using BlockReduce = cub::BlockReduce<double, kFinalThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  double sums[3] = {};
  for (int k = 0; k < plan.num_sums; ++k) {
    double local = 0.0;
    for (int64_t i = threadIdx.x; i < blocks; i += kFinalThreads) local += partials[k * blocks + i];
    sums[k] = BlockReduce(temp).Sum(local);  // valid in thread 0
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    for (int k = 0; k < plan.num_outputs; ++k)
      out[k * out_stride] = static_cast<Out>(plan.output(sums, k));
  }
}

}  // namespace fieldfuse::detail::tv
