// SPDX-License-Identifier: Apache-2.0
// Conversions from the bindings' tensor arguments and stream integers to the core's TensorRef and
// Stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "fieldfuse/core.h"
#include "tensor_arg.h"

namespace fieldfuse::python {

/// A TensorRef over `array` (no copy). `op` and `arg` name the caller in the TypeError raised for a
/// dtype or device type the core cannot describe.
TensorRef to_tensor_ref(const TensorArg& array, const char* op, const char* arg);

/// The same for element `index` of list argument `list_arg`, named `list_arg[index]`: the name is
/// spelled out only for an error (each call converts every level of a list).
TensorRef to_tensor_ref(const TensorArg& array, const char* op, const char* list_arg,
                        std::size_t index);

/// A CUDA stream handle from the integer PyTorch reports
/// (`torch.cuda.current_stream().cuda_stream`).
/// An optional tensor argument: None (absent) becomes a default-constructed TensorRef, which the
/// fronts read as "not given".
inline TensorRef to_tensor_ref(const std::optional<TensorArg>& array, const char* op,
                               const char* arg) {
  return array ? to_tensor_ref(*array, op, arg) : TensorRef{};
}

inline Stream to_stream(std::uintptr_t handle) { return Stream{reinterpret_cast<void*>(handle)}; }

}  // namespace fieldfuse::python
