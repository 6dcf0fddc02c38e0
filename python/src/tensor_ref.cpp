// SPDX-License-Identifier: Apache-2.0
// DLPack dtype/device decoding for to_tensor_ref.
#include "tensor_ref.h"

#include <string>

namespace nb = nanobind;

namespace fieldfuse::python {
namespace {

[[noreturn]] void unsupported(const char* op, const char* arg, const std::string& what) {
  throw Error(ErrorKind::Type, std::string(op) + "(): expected " + arg +
                                   " to be a real tensor (float16, bfloat16, float32, float64, "
                                   "int32, int64, uint8 or bool) on cpu or cuda, but it has " +
                                   what);
}

DType decode_dtype(nb::dlpack::dtype d, const char* op, const char* arg) {
  using Code = nb::dlpack::dtype_code;
  if (d.lanes == 1) {
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
      default:
        break;
    }
  }
  unsupported(op, arg,
              "DLPack dtype (code " + std::to_string(d.code) + ", " + std::to_string(d.bits) +
                  " bits, " + std::to_string(d.lanes) + " lanes)");
}

Device decode_device(int32_t type, int32_t id, const char* op, const char* arg) {
  if (type == nb::device::cpu::value) return Device{DeviceType::CPU, 0};
  if (type == nb::device::cuda::value) return Device{DeviceType::CUDA, id};
  unsupported(op, arg, "DLPack device type " + std::to_string(type));
}

}  // namespace

TensorRef to_tensor_ref(const nb::ndarray<>& array, const char* op, const char* arg) {
  TensorRef t;
  t.data = array.data();
  t.dtype = decode_dtype(array.dtype(), op, arg);
  t.device = decode_device(array.device_type(), array.device_id(), op, arg);
  if (array.ndim() > static_cast<std::size_t>(kMaxDims)) {
    throw Error(ErrorKind::Value, std::string(op) + "(): expected " + arg + " to have at most " +
                                      std::to_string(kMaxDims) + " dims, but got " +
                                      std::to_string(array.ndim()));
  }
  t.ndim = static_cast<int32_t>(array.ndim());
  for (int32_t i = 0; i < t.ndim; ++i) {
    t.sizes[i] = static_cast<int64_t>(array.shape(i));
    t.strides[i] = array.stride(i);
  }
  return t;
}

}  // namespace fieldfuse::python
