// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the optics inverses, loss and forward model: inverse_pipeline.h over the
// grid-stride elementwise kernel of core/for_each.cuh, a one-block-per-slice ordered sum (CUB's
// block reduction, fixed order: no atomics) and cuFFT plans made for the call on its stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "core/cuda_launch.cuh"
#include "core/for_each.cuh"
#include "optics/fft.h"
#include "optics/inverse_drivers.h"
#include "optics/inverse_pipeline.h"

namespace fieldfuse::detail::optics {
namespace {

constexpr int kThreads = cuda::kForEachThreads;

/// out[s] = Σ_i term(s, i): one block per slice, each thread a fixed strided share, then CUB's
/// block sum (a fixed tree), so the bits do not change between runs.
template <class Term>
__global__ void __launch_bounds__(kThreads)
    slice_sums_kernel(int64_t slices, int64_t length, Term term, double* out) {
  using BlockSum = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockSum::TempStorage scratch;
  for (int64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < length; i += kThreads) sum += term(s, i);
    const double total = BlockSum(scratch).Sum(sum);
    if (threadIdx.x == 0) out[s] = total;
    __syncthreads();  // the scratch is reused by the next slice
  }
}

struct CudaExec {
  const char* op;
  DType complex_dtype;
  Stream stream;

  cudaStream_t native() const { return static_cast<cudaStream_t>(stream.handle); }

  template <class F>
  void for_each(int64_t count, int64_t /*work*/, const F& f) const {
    cuda::for_each(op, "optics for_each_kernel", count, native(), f);
  }

  template <class Term>
  void slice_sums(int64_t slices, int64_t length, const Term& term, double* out) const {
    if (slices <= 0) return;
    const unsigned blocks =
        static_cast<unsigned>(slices < cuda::kForEachMaxBlocks ? slices : cuda::kForEachMaxBlocks);
    slice_sums_kernel<<<blocks, kThreads, 0, native()>>>(slices, length, term, out);
    cuda::check_launch(op, "optics slice_sums_kernel", native());
  }

  template <class T>
  void fft(Cx<T>* data, const fft::FftLayout& layout, bool inverse) const {
    fft::cached_cuda_fft_plan(op, layout, complex_dtype, stream)->execute(data, inverse);
  }
};

template <class Args, class Run>
void dispatch(const Args& a, const Run& run) {
  const Exec& x = a.exec;
  cuda::DeviceGuard guard(x.device.index, x.op);
  cuda::ProfileRange range(x.op);
  CudaExec e{x.op, x.dtype == DType::Float64 ? DType::Complex128 : DType::Complex64, x.stream};
  detail::dispatch_float_types(x.op, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run(e, T{});
  });
}

}  // namespace

void run_cuda(const FilterArgs& a) {
  dispatch(a, [&](CudaExec& e, auto t) { run_filter<decltype(t)>(e, a); });
}

void run_cuda(const InverseArgs& a, bool backward) {
  dispatch(a, [&](CudaExec& e, auto t) {
    if (backward) {
      run_inverse_backward<decltype(t)>(e, a);
    } else {
      run_inverse<decltype(t)>(e, a);
    }
  });
}

void run_cuda(const Inverse3dArgs& a, bool backward) {
  dispatch(a, [&](CudaExec& e, auto t) { run_inverse_3d<decltype(t)>(e, a, backward); });
}

void run_cuda(const MidbandArgs& a, bool backward) {
  dispatch(a, [&](CudaExec& e, auto t) { run_midband<decltype(t)>(e, a, backward); });
}

void run_cuda(const ForwardModelArgs& a) {
  dispatch(a, [&](CudaExec& e, auto t) { run_forward_model<decltype(t)>(e, a); });
}

}  // namespace fieldfuse::detail::optics
