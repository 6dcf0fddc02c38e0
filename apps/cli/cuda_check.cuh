// SPDX-License-Identifier: Apache-2.0
// Turns CUDA runtime failures in the app's .cu files into CliErrors that name the failed call.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cli_error.h"

namespace fieldfuse::cli {

/// Throws a runtime CliError (exit 1) when `status` is not cudaSuccess, e.g.
/// "CUDA call cudaMalloc(64 MiB) failed: out of memory".
inline void check_cuda(cudaError_t status, const std::string& call) {
  if (status != cudaSuccess) {
    throw runtime_error("CUDA call " + call + " failed: " + cudaGetErrorString(status));
  }
}

}  // namespace fieldfuse::cli
