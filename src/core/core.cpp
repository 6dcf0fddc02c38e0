// SPDX-License-Identifier: Apache-2.0
// TensorRef, DType and Device helpers declared in fieldfuse/core.h.
//
// Note [no iostreams]: library code formats text with std::to_string and snprintf, never with
// <sstream>. Inside a PyTorch process the module can meet a second C++ runtime, and a stream's
// locale facets from one runtime crashed in the other (segfault formatting an error message on
// the GPU machine's image).
#include "fieldfuse/core.h"

namespace fieldfuse {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Float32:
    case DType::Int32:
      return 4;
    case DType::Float64:
    case DType::Int64:
    case DType::Complex64:
      return 8;
    case DType::Complex128:
      return 16;
    case DType::UInt8:
    case DType::Bool:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
    case DType::Complex64:
      return "complex64";
    case DType::Complex128:
      return "complex128";
  }
  return "unknown";
}

std::string Device::str() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

TensorRef TensorRef::contiguous(void* data, DType dtype, Device device,
                                std::initializer_list<int64_t> sizes) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  if (sizes.size() > static_cast<std::size_t>(kMaxDims)) {
    throw Error(ErrorKind::Value, "TensorRef::contiguous(): at most " + std::to_string(kMaxDims) +
                                      " dims are supported, but got " +
                                      std::to_string(sizes.size()));
  }
  t.ndim = static_cast<int32_t>(sizes.size());
  int d = 0;
  for (int64_t s : sizes) t.sizes[d++] = s;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.sizes[i];
  }
  return t;
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= sizes[i];
  return n;
}

bool TensorRef::is_contiguous() const {
  // As in PyTorch, a tensor without elements is contiguous whatever its strides.
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

std::string TensorRef::shape_str() const {
  // Error messages print shapes before every check has run: an ndim out of range reads no sizes.
  if (ndim < 0 || ndim > kMaxDims) return "(ndim " + std::to_string(ndim) + ")";
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

}  // namespace fieldfuse
