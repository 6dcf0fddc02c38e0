// SPDX-License-Identifier: Apache-2.0
// DLPack dtype/device decoding for to_tensor_ref.
#include "tensor_ref.h"

#include <optional>
#include <string>

namespace nb = nanobind;

namespace fieldfuse::python {
namespace {

[[noreturn]] void unsupported(const char* op, const char* arg, const std::string& what) {
  throw Error(
      ErrorKind::Type,
      std::string(op) + "(): expected " + arg +
          " to be a tensor of a supported dtype (float16, bfloat16, float32, float64, "
          "int32, int64, uint8, bool, complex64 or complex128) on cpu or cuda, but it has " +
          what);
}

std::optional<DType> dtype_of(nb::dlpack::dtype d) {
  using Code = nb::dlpack::dtype_code;
  if (d.lanes != 1) return std::nullopt;
  switch (static_cast<Code>(d.code)) {
    case Code::Float:
      if (d.bits == 16) return DType::Float16;
      if (d.bits == 32) return DType::Float32;
      if (d.bits == 64) return DType::Float64;
      break;
    case Code::Bfloat:
      if (d.bits == 16) return DType::BFloat16;
      break;
    case Code::Int:
      if (d.bits == 32) return DType::Int32;
      if (d.bits == 64) return DType::Int64;
      break;
    case Code::UInt:
      if (d.bits == 8) return DType::UInt8;
      break;
    case Code::Bool:
      return DType::Bool;
    case Code::Complex:
      if (d.bits == 64) return DType::Complex64;
      if (d.bits == 128) return DType::Complex128;
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::optional<Device> device_of(int32_t type, int32_t id) {
  if (type == nb::device::cpu::value) return Device{DeviceType::CPU, 0};
  if (type == nb::device::cuda::value) return Device{DeviceType::CUDA, id};
  return std::nullopt;
}

/// The error for an `array` that no TensorRef describes (what to_tensor_ref found first).
[[noreturn]] void reject(const TensorArg& array, const char* op, const char* arg) {
  if (!array.refused().empty()) {
    throw Error(ErrorKind::Type, std::string(op) + "(): expected " + arg +
                                     " to be a strided tensor DLPack can describe, but its "
                                     "producer refused it: " +
                                     array.refused());
  }
  const nb::dlpack::dtype d = array.dtype();
  if (!dtype_of(d)) {
    unsupported(op, arg,
                "DLPack dtype (code " + std::to_string(d.code) + ", " + std::to_string(d.bits) +
                    " bits, " + std::to_string(d.lanes) + " lanes)");
  }
  if (!device_of(array.device_type(), array.device_id())) {
    unsupported(op, arg, "DLPack device type " + std::to_string(array.device_type()));
  }
  throw Error(ErrorKind::Value, std::string(op) + "(): expected " + arg + " to have at most " +
                                    std::to_string(kMaxDims) + " dims, but got " +
                                    std::to_string(array.ndim()));
}

/// `array` as a TensorRef, or false where it has no TensorRef (then `reject` says why).
bool describe(const TensorArg& array, TensorRef& t) {
  if (!array.refused().empty()) return false;
  const std::optional<DType> dtype = dtype_of(array.dtype());
  const std::optional<Device> device = device_of(array.device_type(), array.device_id());
  if (!dtype || !device || array.ndim() > kMaxDims) return false;
  t.data = array.data();
  t.dtype = *dtype;
  t.device = *device;
  t.ndim = array.ndim();
  for (int32_t i = 0; i < t.ndim; ++i) {
    t.sizes[i] = array.size(i);
    t.strides[i] = array.stride(i);
  }
  return true;
}

}  // namespace

TensorRef to_tensor_ref(const TensorArg& array, const char* op, const char* arg) {
  TensorRef t;
  if (!describe(array, t)) reject(array, op, arg);
  return t;
}

TensorRef to_tensor_ref(const TensorArg& array, const char* op, const char* list_arg,
                        std::size_t index) {
  TensorRef t;
  if (!describe(array, t)) {
    const std::string arg = std::string(list_arg) + "[" + std::to_string(index) + "]";
    reject(array, op, arg.c_str());
  }
  return t;
}

}  // namespace fieldfuse::python
