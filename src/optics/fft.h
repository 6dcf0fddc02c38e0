// SPDX-License-Identifier: Apache-2.0
// Batched in-place complex FFTs for the optics family: Eigen's FFT on the CPU (float and double),
// cuFFT on CUDA. One layout describes every transform the family needs:
//
//   data [batch, n_0, ..., n_{rank-1}, inner] contiguous, complex; the transform runs over the n
//   axes for every (batch, inner) pair. inner = 1 is the usual "last rank axes"; inner = Y·X with
//   rank = 1 is the FFT along z of a [Z, Y, X] stack.
//
// Both directions are unnormalised (the inverse does not divide by the number of points); callers
// fold 1/N into a neighbouring pointwise kernel.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <mutex>

#include "fieldfuse/core.h"

namespace fieldfuse::detail::fft {

struct FftLayout {
  int64_t batch = 1;
  int rank = 2;  ///< 1, 2 or 3
  int64_t n[3] = {1, 1, 1};
  int64_t inner = 1;

  int64_t points() const;    ///< n_0·…·n_{rank-1}
  int64_t elements() const;  ///< batch·points()·inner
};

/// CPU: transforms `data` in place; parallel over batch and inner (OpenMP), deterministic.
template <class T>
void fft_cpu(std::complex<T>* data, const FftLayout& layout, bool inverse);

/// A cuFFT plan for one layout and precision (Complex64 or Complex128), bound to a stream. Ops get
/// theirs from cached_cuda_fft_plan. Throws fieldfuse::Error (Runtime) naming `op` when cuFFT
/// fails.
class CudaFftPlan {
 public:
  CudaFftPlan(const char* op, const FftLayout& layout, DType complex_dtype, Stream stream);
  ~CudaFftPlan();
  CudaFftPlan(const CudaFftPlan&) = delete;
  CudaFftPlan& operator=(const CudaFftPlan&) = delete;

  /// Transforms `data` (device memory, layout.elements() complex values) in place. Serialised per
  /// plan: a cuFFT handle is not safe to execute from two threads at once.
  void execute(void* data, bool inverse) const;

 private:
  mutable std::mutex executing_;
  const char* op_;
  int handle_ = 0;  ///< cufftHandle
  DType dtype_;
  bool empty_ = false;         ///< no elements: no plan, execute() does nothing
  int64_t repeats_ = 1;        ///< executions per transform (batch, when inner > 1)
  int64_t repeat_stride_ = 0;  ///< elements between two executions' data
};

/// The plan for (layout, dtype, current device, stream) from a process-wide cache, made on first
/// use (Note [cuFFT plan cache]).
std::shared_ptr<const CudaFftPlan> cached_cuda_fft_plan(const char* op, const FftLayout& layout,
                                                        DType complex_dtype, Stream stream);

}  // namespace fieldfuse::detail::fft
