// SPDX-License-Identifier: Apache-2.0
// cuFFT side of the optics FFT layer: one cufftPlanMany per layout on the caller's stream. With
// inner = 1 the plan covers the whole batch; with inner > 1 the plan's batch is the inner offsets
// (distance 1, stride inner) and execute() runs it once per outer batch entry.
#include <cufft.h>

#include <climits>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/cufft_check.cuh"
#include "optics/fft.h"

namespace fieldfuse::detail::fft {
namespace {

using cuda::check_cufft;

int to_int(const char* op, int64_t value, const char* what) {
  if (value > INT_MAX) {
    fail(ErrorKind::NotImplemented, op,
         std::string("not implemented for an FFT ") + what + " of " + std::to_string(value) +
             " (cuFFT takes int sizes)");
  }
  return static_cast<int>(value);
}

}  // namespace

CudaFftPlan::CudaFftPlan(const char* op, const FftLayout& layout, DType complex_dtype,
                         Stream stream)
    : op_(op), dtype_(complex_dtype) {
  if (complex_dtype != DType::Complex64 && complex_dtype != DType::Complex128) {
    fail(ErrorKind::NotImplemented, op,
         std::string("not implemented: an FFT of dtype ") + dtype_name(complex_dtype));
  }
  if (layout.elements() == 0) {
    empty_ = true;
    return;
  }
  int n[3] = {1, 1, 1};
  for (int d = 0; d < layout.rank; ++d) n[d] = to_int(op, layout.n[d], "length");
  const int64_t points = layout.points();
  int stride = 1, distance = 1, count = 1;
  if (layout.inner == 1) {
    distance = to_int(op, points, "size");
    count = to_int(op, layout.batch, "batch");
  } else {
    stride = to_int(op, layout.inner, "stride");
    count = stride;
    to_int(op, points * layout.inner, "span");
    repeats_ = layout.batch;
    repeat_stride_ = points * layout.inner;
  }
  cufftHandle handle = 0;
  const cufftType type = complex_dtype == DType::Complex64 ? CUFFT_C2C : CUFFT_Z2Z;
  check_cufft(
      cufftPlanMany(&handle, layout.rank, n, n, stride, distance, n, stride, distance, type, count),
      op, "cufftPlanMany");
  handle_ = handle;
  const cufftResult bound = cufftSetStream(handle, static_cast<cudaStream_t>(stream.handle));
  if (bound != CUFFT_SUCCESS) {
    cufftDestroy(handle);
    check_cufft(bound, op, "cufftSetStream");
  }
}

CudaFftPlan::~CudaFftPlan() {
  if (!empty_) cufftDestroy(handle_);
}

void CudaFftPlan::execute(void* data, bool inverse) const {
  if (empty_) return;
  const int direction = inverse ? CUFFT_INVERSE : CUFFT_FORWARD;
  for (int64_t r = 0; r < repeats_; ++r) {
    if (dtype_ == DType::Complex64) {
      auto* p = static_cast<cufftComplex*>(data) + r * repeat_stride_;
      check_cufft(cufftExecC2C(handle_, p, p, direction), op_, "cufftExecC2C");
    } else {
      auto* p = static_cast<cufftDoubleComplex*>(data) + r * repeat_stride_;
      check_cufft(cufftExecZ2Z(handle_, p, p, direction), op_, "cufftExecZ2Z");
    }
  }
}

}  // namespace fieldfuse::detail::fft
