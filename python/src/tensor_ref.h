// SPDX-License-Identifier: Apache-2.0
// Conversions from nanobind's DLPack arrays and stream integers to the core's TensorRef and Stream.
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>

#include "fieldfuse/core.h"

namespace fieldfuse::python {

/// A TensorRef over `array` (no copy). `op` and `arg` name the caller in the TypeError raised for a
/// dtype or device type the core cannot describe.
TensorRef to_tensor_ref(const nanobind::ndarray<>& array, const char* op, const char* arg);

/// A CUDA stream handle from the integer PyTorch reports
/// (`torch.cuda.current_stream().cuda_stream`).
inline Stream to_stream(std::uintptr_t handle) { return Stream{reinterpret_cast<void*>(handle)}; }

}  // namespace fieldfuse::python
