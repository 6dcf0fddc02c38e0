// SPDX-License-Identifier: Apache-2.0
// CUDA utilities every driver shares: error checks that name the op and kernel, a device guard,
// profiler ranges, 64-bit grid arithmetic and the 16-bit-aware dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/dispatch.h"

namespace fieldfuse::detail::cuda {

/// Throws Error(Runtime) naming the op, what failed and CUDA's own description.
[[noreturn]] void throw_error(const char* op, const char* what, cudaError_t status);

inline void check(cudaError_t status, const char* op, const char* what) {
  if (status != cudaSuccess) throw_error(op, what, status);
}

/// Checks the launch just made. With FIELDFUSE_CUDA_SYNC=1 in the environment it also synchronises
/// the stream, so an asynchronous fault is reported at the kernel that caused it.
void check_launch(const char* op, const char* kernel, cudaStream_t stream);

/// Makes `device` current for the scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* op);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// An NVTX range named after the public op, open for the scope (visible in Nsight timelines).
class ProfileRange {
 public:
  explicit ProfileRange(const char* name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Largest 1-D grid CUDA accepts.
constexpr int64_t kMaxGridX = 2147483647;

/// Compute (and reduced-output) type of a storage type: 16-bit floats compute in float32.
template <class S>
struct ComputeType {
  using type = S;
};
template <>
struct ComputeType<__half> {
  using type = float;
};
template <>
struct ComputeType<__nv_bfloat16> {
  using type = float;
};
template <class S>
using compute_t = typename ComputeType<S>::type;

/// dispatch_float_types plus the 16-bit types CUDA kernels support.
template <class F>
decltype(auto) dispatch_float_types(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float16:
      return f(TypeTag<__half>{});
    case DType::BFloat16:
      return f(TypeTag<__nv_bfloat16>{});
    default:
      return detail::dispatch_float_types(op, dtype, f);
  }
}

}  // namespace fieldfuse::detail::cuda
