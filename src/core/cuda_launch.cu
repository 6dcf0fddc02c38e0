// SPDX-License-Identifier: Apache-2.0
// Definitions of the shared CUDA utilities declared in cuda_launch.cuh.
#include <nvtx3/nvToolsExt.h>

#include <cstdlib>
#include <cstring>

#include "core/cuda_launch.cuh"

namespace fieldfuse::detail::cuda {

void throw_error(const char* op, const char* what, cudaError_t status) {
  fail(ErrorKind::Runtime, op,
       std::string("CUDA error in ") + what + ": " + cudaGetErrorName(status) + " (" +
           cudaGetErrorString(status) + ")");
}

static bool sync_after_launch() {
  static const bool enabled = [] {
    const char* flag = std::getenv("FIELDFUSE_CUDA_SYNC");
    return flag != nullptr && std::strcmp(flag, "0") != 0 && flag[0] != '\0';
  }();
  return enabled;
}

void check_launch(const char* op, const char* kernel, cudaStream_t stream) {
  check(cudaGetLastError(), op, kernel);
  if (sync_after_launch()) check(cudaStreamSynchronize(stream), op, kernel);
}

DeviceGuard::DeviceGuard(int device, const char* op) {
  check(cudaGetDevice(&previous_), op, "cudaGetDevice");
  if (previous_ != device) check(cudaSetDevice(device), op, "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

ProfileRange::ProfileRange(const char* name) { nvtxRangePushA(name); }
ProfileRange::~ProfileRange() { nvtxRangePop(); }

}  // namespace fieldfuse::detail::cuda
