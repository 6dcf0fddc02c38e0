// SPDX-License-Identifier: Apache-2.0
// The interface between the layout-copy front (layout_copy.cpp), which validates, and the CPU and
// CUDA drivers, which only iterate.
#pragma once

#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/dispatch.h"
#include "core/layout_copy_math.h"
#include "fieldfuse/core.h"

namespace fieldfuse::detail::layout {

/// A validated, non-empty copy between the strided tensor and the dense channels-last buffer.
struct LayoutCopy {
  const char* op = "";
  bool to_channels_last = true;  ///< true: strided -> dense; false: dense -> strided
  PlaneLayout strided;
  void* strided_data = nullptr;
  DType strided_dtype = DType::Float32;
  void* dense_data = nullptr;
  DType dense_dtype = DType::Float32;
  Device device{};
  Stream stream{};

  DType src_dtype() const { return to_channels_last ? strided_dtype : dense_dtype; }
  DType dst_dtype() const { return to_channels_last ? dense_dtype : strided_dtype; }
  int64_t numel() const { return strided.planes * strided.channels * strided.cells(); }
};

/// Calls `f(TypeTag<S>{}, TypeTag<D>{}, convert)` with the storage types of the source and
/// destination and the element conversion. Same-dtype copies move bits as unsigned integers of the
/// element's width, so one instantiation per width serves every dtype of that width.
template <class F>
void visit_copy_types(const LayoutCopy& copy, const F& f) {
  const DType src = copy.src_dtype(), dst = copy.dst_dtype();
  if (src == dst) {
    switch (dtype_size(src)) {
      case 1:
        return f(TypeTag<uint8_t>{}, TypeTag<uint8_t>{}, CopyBits{});
      case 2:
        return f(TypeTag<uint16_t>{}, TypeTag<uint16_t>{}, CopyBits{});
      case 4:
        return f(TypeTag<uint32_t>{}, TypeTag<uint32_t>{}, CopyBits{});
      case 8:
        return f(TypeTag<uint64_t>{}, TypeTag<uint64_t>{}, CopyBits{});
      default:
        break;
    }
  } else if (src == DType::Float32 && dst == DType::Float16) {
    return f(TypeTag<float>{}, TypeTag<uint16_t>{}, FloatToHalfBits{});
  } else if (src == DType::Float32 && dst == DType::BFloat16) {
    return f(TypeTag<float>{}, TypeTag<uint16_t>{}, FloatToBFloat16Bits{});
  }
  // The front rejects every other pair; this guards direct driver calls.
  fail(
      ErrorKind::NotImplemented, copy.op,
      std::string("not implemented for a copy from ") + dtype_name(src) + " to " + dtype_name(dst));
}

void copy_cpu(const LayoutCopy& copy);
void copy_cuda(const LayoutCopy& copy);
/// Device ordinal of the CUDA memory `ptr` points into, or -1 for host memory.
int cuda_pointer_device(const void* ptr, const char* op);

}  // namespace fieldfuse::detail::layout
