// SPDX-License-Identifier: Apache-2.0
// The CUDA drivers' one elementwise launch: a grid-stride loop calling a functor per index.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_launch.cuh"

namespace fieldfuse::detail::cuda {

constexpr int kForEachThreads = 256;
/// Enough blocks to fill an H100 several times over; the grid-stride loop covers the rest.
constexpr int64_t kForEachMaxBlocks = 65536;

template <class F>
__global__ void __launch_bounds__(kForEachThreads) for_each_kernel(int64_t count, F f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += step) {
    f(i);
  }
}

/// Runs f(i) for i in [0, count) on `stream` (nothing for count = 0), checking the launch.
template <class F>
void for_each(const char* op, const char* kernel, int64_t count, cudaStream_t stream, const F& f) {
  if (count <= 0) return;
  const int64_t blocks = ceil_div(count, kForEachThreads);
  for_each_kernel<<<static_cast<unsigned>(blocks < kForEachMaxBlocks ? blocks : kForEachMaxBlocks),
                    kForEachThreads, 0, stream>>>(count, f);
  check_launch(op, kernel, stream);
}

}  // namespace fieldfuse::detail::cuda
