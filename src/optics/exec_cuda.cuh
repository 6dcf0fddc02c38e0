// SPDX-License-Identifier: Apache-2.0
// The CUDA execution policy of the optics pipelines (transfer_pipeline.h, tiles_pipeline.h,
// inverse_pipeline.h): the core's grid-stride launch (core/for_each.cuh) for elementwise
// functors, one block per row for reductions (a fixed-order tree, so results do not depend on
// scheduling), and cuFFT plans from the process-wide cache.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_launch.cuh"
#include "core/for_each.cuh"
#include "fieldfuse/core.h"
#include "optics/complex.h"
#include "optics/fft.h"

namespace fieldfuse::detail::optics {

constexpr int kExecThreads = 256;

template <int W, class T, class F>
__global__ void __launch_bounds__(kExecThreads) reduce_rows_kernel(F f, int64_t n, T* out) {
  __shared__ T partial[W][kExecThreads];
  const int64_t row = blockIdx.x;
  T acc[W] = {};
  for (int64_t i = threadIdx.x; i < n; i += kExecThreads) f(row, i, acc);
  for (int w = 0; w < W; ++w) partial[w][threadIdx.x] = acc[w];
  __syncthreads();
  for (int half = kExecThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      for (int w = 0; w < W; ++w) partial[w][threadIdx.x] += partial[w][threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x < W) out[row * W + threadIdx.x] = partial[threadIdx.x][0];
}

class CudaExec {
 public:
  CudaExec(const char* op, Stream stream)
      : op_(op), stream_(stream), raw_(static_cast<cudaStream_t>(stream.handle)) {}

  /// f(i) for i in [0, n) (the CPU's cost hint is not needed here).
  template <class F>
  void for_each(int64_t n, const F& f, int64_t /*work*/ = 0) const {
    cuda::for_each(op_, "optics for_each_kernel", n, raw_, f);
  }

  template <int W, class F, class T>
  void reduce(int64_t rows, int64_t n, const F& f, T* out) const {
    if (rows <= 0) return;
    reduce_rows_kernel<W, T><<<static_cast<unsigned>(rows), kExecThreads, 0, raw_>>>(f, n, out);
    cuda::check_launch(op_, "reduce_rows_kernel", raw_);
  }

  const char* op() const { return op_; }
  cudaStream_t native() const { return raw_; }

  template <class T>
  void fft(Complex<T>* data, const fft::FftLayout& layout, bool inverse) const {
    const DType dtype = sizeof(T) == 4 ? DType::Complex64 : DType::Complex128;
    fft::cached_cuda_fft_plan(op_, layout, dtype, stream_)->execute(data, inverse);
  }

 private:
  const char* op_;
  Stream stream_;
  cudaStream_t raw_;
};

}  // namespace fieldfuse::detail::optics
