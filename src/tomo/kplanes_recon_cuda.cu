// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the K-Planes reconstruction: one kernel template that runs any glue stage of
// kplanes_recon_math.h, the one-block loss reduction, device memory and CUDA graphs.
#include "core/cuda_launch.cuh"
#include "tomo/kplanes_recon_drivers.h"

namespace fieldfuse::detail::tomo {
namespace {

constexpr const char* kOp = "kplanes_reconstruct";
constexpr int kThreads = 256;
// The loss reduction is one block: its item count is rays + tap points (about 12 000), so one
// block of 512 threads finishes in a few microseconds and needs no second pass.
constexpr int kReduceThreads = 512;

template <class Stage>
__global__ void __launch_bounds__(kThreads) for_each_kernel(int64_t count, Stage stage) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    stage(i);
  }
}

/// Thread k sums items k, k + B, ... in order; the block then adds the B partial sums in a
/// fixed tree order: the same bits on every run.
template <class T>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_loss_kernel(const T* terms, int64_t items, const T* plane_tv, LossWeights weights,
                       double* scalars, T* loss) {
  __shared__ double partial[kNumSums][kReduceThreads];
  double acc[kNumSums] = {0, 0, 0, 0};
  for (int64_t i = threadIdx.x; i < items; i += kReduceThreads) {
    accumulate_terms(terms, i, weights.rays, acc);
  }
  for (int k = 0; k < kNumSums; ++k) partial[k][threadIdx.x] = acc[k];
  __syncthreads();
  for (int width = kReduceThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      for (int k = 0; k < kNumSums; ++k) partial[k][threadIdx.x] += partial[k][threadIdx.x + width];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double total[kNumSums];
    for (int k = 0; k < kNumSums; ++k) total[k] = partial[k][0];
    finish_loss(total, plane_tv, weights, scalars, loss);
  }
}

cudaStream_t native(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }

}  // namespace

template <class Stage>
void cuda_for_each(int64_t count, const Stage& stage, Stream stream) {
  if (count <= 0) return;
  const int64_t blocks = std::min<int64_t>(cuda::ceil_div(count, kThreads), int64_t(1) << 20);
  for_each_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, native(stream)>>>(count, stage);
  cuda::check_launch(kOp, "for_each_kernel", native(stream));
}

template <class T>
void cuda_reduce_loss(const T* terms, int64_t items, const T* plane_tv, const LossWeights& weights,
                      double* scalars, T* loss, Stream stream) {
  reduce_loss_kernel<T>
      <<<1, kReduceThreads, 0, native(stream)>>>(terms, items, plane_tv, weights, scalars, loss);
  cuda::check_launch(kOp, "reduce_loss_kernel", native(stream));
}

void* cuda_allocate(std::size_t bytes, int device) {
  cuda::check(cudaSetDevice(device), kOp, "cudaSetDevice");
  void* pointer = nullptr;
  cuda::check(cudaMalloc(&pointer, bytes), kOp, "cudaMalloc");
  return pointer;
}

void cuda_free(void* pointer) noexcept { cudaFree(pointer); }

void cuda_copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) {
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(stream)), kOp,
              "cudaMemcpyAsync");
}

void cuda_copy_to_host(void* dst, const void* src, std::size_t bytes, Stream stream) {
  cuda_copy_async(dst, src, bytes, stream);
  cuda_synchronize(stream);
}

void cuda_copy_from_host(void* dst, const void* src, std::size_t bytes, Stream stream) {
  cuda_copy_async(dst, src, bytes, stream);
  // The host source may be a temporary of the caller.
  cuda_synchronize(stream);
}

void cuda_zero_async(void* pointer, std::size_t bytes, Stream stream) {
  cuda::check(cudaMemsetAsync(pointer, 0, bytes, native(stream)), kOp, "cudaMemsetAsync");
}

void cuda_synchronize(Stream stream) {
  cuda::check(cudaStreamSynchronize(native(stream)), kOp, "cudaStreamSynchronize");
}

void cuda_graph_destroy(void* graph, void* exec) noexcept {
  if (exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (graph != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph));
}

void CudaGraph::begin_capture(Stream stream) {
  cuda::check(cudaStreamBeginCapture(native(stream), cudaStreamCaptureModeThreadLocal), kOp,
              "cudaStreamBeginCapture");
}

void CudaGraph::end_capture(Stream stream) {
  cudaGraph_t graph = nullptr;
  cuda::check(cudaStreamEndCapture(native(stream), &graph), kOp, "cudaStreamEndCapture");
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), kOp, "cudaGraphInstantiate");
  exec_ = exec;
}

void CudaGraph::launch(Stream stream) {
  cuda::check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), native(stream)), kOp,
              "cudaGraphLaunch");
}

// Every stage the reconstruction runs, in both compute types.
#define FF_TOMO_STAGES(T)                                                                      \
  template void cuda_for_each(int64_t, const PoseStage<T>&, Stream);                           \
  template void cuda_for_each(int64_t, const RayStage<T>&, Stream);                            \
  template void cuda_for_each(int64_t, const TapStage<T>&, Stream);                            \
  template void cuda_for_each(int64_t, const SpreadPaddingStage<T>&, Stream);                  \
  template void cuda_for_each(int64_t, const DensityStage<T>&, Stream);                        \
  template void cuda_for_each(int64_t, const TermStage<T>&, Stream);                           \
  template void cuda_for_each(int64_t, const SeedStage<T>&, Stream);                           \
  template void cuda_for_each(int64_t, const ResidualSeedStage<T>&, Stream);                   \
  template void cuda_for_each(int64_t, const RotationBackwardStage<T>&, Stream);               \
  template void cuda_for_each(int64_t, const RayPoseTermStage<T>&, Stream);                    \
  template void cuda_for_each(int64_t, const PoseBackwardStage<T>&, Stream);                   \
  template void cuda_for_each(int64_t, const VoxelStage<T>&, Stream);                          \
  template void cuda_for_each(int64_t, const ExportDensityStage<T, float>&, Stream);           \
  template void cuda_for_each(int64_t, const ExportDensityStage<T, double>&, Stream);          \
  template void cuda_reduce_loss(const T*, int64_t, const T*, const LossWeights&, double*, T*, \
                                 Stream);
FF_TOMO_STAGES(float)
FF_TOMO_STAGES(double)
#undef FF_TOMO_STAGES

}  // namespace fieldfuse::detail::tomo
