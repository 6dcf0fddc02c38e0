// SPDX-License-Identifier: Apache-2.0
// cuFFT side of the optics FFT layer: one cufftPlanMany per layout on the caller's stream. With
// inner = 1 the plan covers the whole batch; with inner > 1 the plan's batch is the inner offsets
// (distance 1, stride inner) and execute() runs it once per outer batch entry.
#include <cufft.h>

#include <climits>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/cuda_launch.cuh"
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
  const std::lock_guard<std::mutex> lock(executing_);
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

// Note [cuFFT plan cache]
// Making a cuFFT plan costs host time (hundreds of µs for the optics layouts) and allocates its
// work area with cudaMalloc, which synchronises the device and cannot be captured in a CUDA graph.
// So plans are made once per (layout, dtype, device, stream) and kept, like PyTorch's plan cache:
// the ops' calls then only enqueue, and a call can be captured once its plans exist (run it once
// before capturing). The cache keeps the 32 most recently used plans; callers hold shared_ptrs, so
// an evicted plan lives until its last user is done. Keying by stream means a plan (and its work
// area) is only ever used in one stream's order. The cache is never destroyed: destroying plans
// from a static destructor could run after the CUDA runtime has shut down.
namespace {

struct PlanKey {
  FftLayout layout;
  DType dtype;
  int device;
  void* stream;

  bool operator==(const PlanKey& o) const {
    const FftLayout& a = layout;
    const FftLayout& b = o.layout;
    return a.batch == b.batch && a.rank == b.rank && a.n[0] == b.n[0] && a.n[1] == b.n[1] &&
           a.n[2] == b.n[2] && a.inner == b.inner && dtype == o.dtype && device == o.device &&
           stream == o.stream;
  }
};

struct PlanCache {
  static constexpr std::size_t kCapacity = 32;
  std::mutex mutex;
  std::list<std::pair<PlanKey, std::shared_ptr<const CudaFftPlan>>> plans;  // most recent first
};

}  // namespace

std::shared_ptr<const CudaFftPlan> cached_cuda_fft_plan(const char* op, const FftLayout& layout,
                                                        DType complex_dtype, Stream stream) {
  static PlanCache* cache = new PlanCache();  // never destroyed (see the Note)
  int device = 0;
  cuda::check(cudaGetDevice(&device), op, "cudaGetDevice");
  const PlanKey key{layout, complex_dtype, device, stream.handle};
  const std::lock_guard<std::mutex> lock(cache->mutex);
  for (auto it = cache->plans.begin(); it != cache->plans.end(); ++it) {
    if (it->first == key) {
      cache->plans.splice(cache->plans.begin(), cache->plans, it);
      return cache->plans.front().second;
    }
  }
  auto plan = std::make_shared<const CudaFftPlan>(op, layout, complex_dtype, stream);
  cache->plans.emplace_front(key, plan);
  if (cache->plans.size() > PlanCache::kCapacity) cache->plans.pop_back();
  return plan;
}

}  // namespace fieldfuse::detail::fft
