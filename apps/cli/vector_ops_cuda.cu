// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the solvers' element-wise steps: kernels over the formulas in vector_ops.h.
#include <cub/block/block_reduce.cuh>
#include <vector>

#include "core/cuda_launch.cuh"
#include "vector_ops.h"

namespace fieldfuse::cli::cuda {
namespace {

constexpr int kThreads = 256;
constexpr const char* kOp = "fieldfuse::cli::cuda::run";

using fieldfuse::detail::cuda::check;
using fieldfuse::detail::cuda::check_launch;

// The grid depends only on `count`, which with CUB's fixed in-block reduction order and the host's
// in-order sum of the partials makes every reduction deterministic.
std::int64_t blocks_for(std::int64_t count) {
  const std::int64_t needed = fieldfuse::detail::cuda::ceil_div(count, kThreads);
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
  using BlockReduce = cub::BlockReduce<PairSum, kThreads>;
  __shared__ typename BlockReduce::TempStorage storage;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  PairSum sum;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    sum = sum + apply_at(args, i);
  }
  const PairSum block_sum = BlockReduce(storage).Sum(sum);  // valid in thread 0 only
  if (threadIdx.x == 0) partials[blockIdx.x] = block_sum;
}

}  // namespace

template <class Args>
PairSum run(std::int64_t count, const Args& args, const CudaLaunch& launch) {
  if (count <= 0) return {};
  const auto stream = static_cast<cudaStream_t>(launch.stream);
  const std::int64_t blocks = blocks_for(count);
  if constexpr (!Args::kReturnsSums) {
    apply_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(count, args);
    check_launch(kOp, "apply_kernel", stream);
    return {};
  } else {
    reduce_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(count, args,
                                                                          launch.partials);
    check_launch(kOp, "reduce_kernel", stream);
    std::vector<PairSum> partials(static_cast<std::size_t>(blocks));
    check(cudaMemcpyAsync(partials.data(), launch.partials, partials.size() * sizeof(PairSum),
                          cudaMemcpyDeviceToHost, stream),
          kOp, "cudaMemcpyAsync(partial sums)");
    check(cudaStreamSynchronize(stream), kOp, "cudaStreamSynchronize(after a reducing step)");
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
template PairSum run(std::int64_t, const ReplicateArgs&, const CudaLaunch&);
template PairSum run(std::int64_t, const FoldReplicasArgs&, const CudaLaunch&);

}  // namespace fieldfuse::cli::cuda
