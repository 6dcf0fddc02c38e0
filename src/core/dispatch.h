// SPDX-License-Identifier: Apache-2.0
// Maps a runtime DType to a C++ element type over an explicit list, so drivers instantiate exactly
// the combinations they support and everything else fails with a named error.
#pragma once

#include <string>

#include "core/check.h"
#include "fieldfuse/core.h"

namespace fieldfuse::detail {

template <class T>
struct TypeTag {
  using type = T;
};

/// Calls `f(TypeTag<float>{})` or `f(TypeTag<double>{})`; any other dtype is reported as not
/// implemented by `op` (the fronts reject those earlier; this guards direct driver calls).
template <class F>
decltype(auto) dispatch_float_types(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      return f(TypeTag<float>{});
    case DType::Float64:
      return f(TypeTag<double>{});
    default:
      fail(ErrorKind::NotImplemented, op,
           std::string("not implemented for dtype ") + dtype_name(dtype) + " on this device");
  }
}

}  // namespace fieldfuse::detail
