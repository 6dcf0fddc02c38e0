// SPDX-License-Identifier: Apache-2.0
// The one cuFFT status check of every family that plans FFTs (tomo's FBP, the optics FFT layer).
#pragma once

#include <cufft.h>

#include <string>

#include "core/check.h"

namespace fieldfuse::detail::cuda {

/// Throws Error(Runtime) naming the op, the cuFFT call and its status code.
inline void check_cufft(cufftResult status, const char* op, const char* what) {
  if (status != CUFFT_SUCCESS) {
    fail(ErrorKind::Runtime, op,
         std::string("cuFFT failed in ") + what + " (cufftResult " +
             std::to_string(static_cast<int>(status)) + ")");
  }
}

}  // namespace fieldfuse::detail::cuda
