// SPDX-License-Identifier: Apache-2.0
// Build facts and CUDA device discovery (build_info, cuda_device_count).
#include "fieldfuse/core.h"

#if FIELDFUSE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

#ifndef FIELDFUSE_VERSION
#define FIELDFUSE_VERSION "0.0.0"
#endif
#ifndef FIELDFUSE_CUDA_ARCHITECTURES
#define FIELDFUSE_CUDA_ARCHITECTURES ""
#endif

namespace fieldfuse {

BuildInfo build_info() {
  BuildInfo info;
  info.version = FIELDFUSE_VERSION;
#if FIELDFUSE_WITH_CUDA
  info.cuda = true;
  info.cuda_architectures = FIELDFUSE_CUDA_ARCHITECTURES;
#endif
#if defined(_OPENMP)
  info.openmp = true;
  info.openmp_max_threads = omp_get_max_threads();
#endif
  return info;
}

int cuda_device_count() {
#if FIELDFUSE_WITH_CUDA
  int count = 0;
  // A machine without a driver or GPU reports an error here; that simply means no devices, and the
  // sticky-free error is cleared so it cannot surface in a later, unrelated check.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

}  // namespace fieldfuse
