// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the solvers' element-wise steps: kernels over the formulas in vector_ops.h.
#include <vector>

#include "cuda_check.cuh"
#include "vector_ops.h"

namespace fieldfuse::cli::cuda {
namespace {

constexpr int kThreads = 256;

// The grid depends only on `count`, which with the fixed in-block tree and the host's in-order
// sum of the partials makes every reduction deterministic.
std::int64_t blocks_for(std::int64_t count) {
  const std::int64_t needed = (count + kThreads - 1) / kThreads;
  return needed < kMaxReductionBlocks ? needed : kMaxReductionBlocks;
}

template <class Args>
__global__ void apply_kernel(std::int64_t count, Args args) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    apply_at(args, i);
  }
}

template <class Args>
__global__ void reduce_kernel(std::int64_t count, Args args, PairSum* partials) {
  // Plain arrays: __shared__ variables cannot have PairSum's default member initialisers.
  __shared__ double first[kThreads];
  __shared__ double second[kThreads];
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  PairSum sum;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    sum = sum + apply_at(args, i);
  }
  first[threadIdx.x] = sum.first;
  second[threadIdx.x] = sum.second;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      first[threadIdx.x] += first[threadIdx.x + half];
      second[threadIdx.x] += second[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = PairSum{first[0], second[0]};
}

}  // namespace

template <class Args>
PairSum run(std::int64_t count, const Args& args, const CudaLaunch& launch) {
  if (count <= 0) return {};
  const auto stream = static_cast<cudaStream_t>(launch.stream);
  const std::int64_t blocks = blocks_for(count);
  if constexpr (!Args::kReturnsSums) {
    apply_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(count, args);
    check_cuda(cudaGetLastError(), "launch of an element-wise solver kernel");
    return {};
  } else {
    reduce_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(count, args,
                                                                          launch.partials);
    check_cuda(cudaGetLastError(), "launch of a reducing solver kernel");
    std::vector<PairSum> partials(static_cast<std::size_t>(blocks));
    check_cuda(cudaMemcpyAsync(partials.data(), launch.partials, partials.size() * sizeof(PairSum),
                               cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync(partial sums)");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize(after a reducing step)");
    PairSum total;
    for (const PairSum& partial : partials) total = total + partial;
    return total;
  }
}

template PairSum run(std::int64_t, const GradientStepArgs&, const CudaLaunch&);
template PairSum run(std::int64_t, const ExtrapolateArgs&, const CudaLaunch&);
template PairSum run(std::int64_t, const FrankWolfeSumsArgs&, const CudaLaunch&);
template PairSum run(std::int64_t, const FrankWolfeMoveArgs&, const CudaLaunch&);
template PairSum run(std::int64_t, const SquaredDistanceArgs&, const CudaLaunch&);

}  // namespace fieldfuse::cli::cuda
