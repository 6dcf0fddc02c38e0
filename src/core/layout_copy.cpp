// SPDX-License-Identifier: Apache-2.0
// Front of the layout copies (layout_copy.h): validates the arguments and picks the CPU or CUDA
// driver from the strided tensor's device.
#include "core/layout_copy.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/layout_copy_drivers.h"

namespace fieldfuse::detail {
namespace {

/// Checks shared by both directions on the strided tensor `t` (named `arg`).
void check_strided(const char* op, const char* arg, const TensorRef& t) {
  check_storage(op, arg, t, /*needs_data=*/false);
  check_shape(op, arg, t, {-1, -1, -1, -1}, "[P, C, H, W]");
  for (int i = 0; i < 4; ++i) {
    if (t.strides[i] < 0) {
      fail(ErrorKind::Value, op,
           "expected " + std::string(arg) + " to have non-negative strides, but dim " +
               std::to_string(i) + " has stride " + std::to_string(t.strides[i]));
    }
  }
  check_device_supported(op, arg, t);
}

/// True when no two elements of `t` share memory. Sorted by stride, each dim of size > 1 must
/// step past everything the smaller dims reach: sufficient, and exact for every permuted or
/// sliced view of a tensor (the layouts a destination comes in).
bool elements_are_distinct(const TensorRef& t) {
  int64_t sizes[kMaxDims], strides[kMaxDims];
  int n = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.sizes[i] == 0) return true;
    if (t.sizes[i] == 1) continue;
    sizes[n] = t.sizes[i];
    strides[n++] = t.strides[i];
  }
  for (int i = 1; i < n; ++i) {  // insertion sort by stride: at most kMaxDims entries
    for (int j = i; j > 0 && strides[j - 1] > strides[j]; --j) {
      std::swap(strides[j - 1], strides[j]);
      std::swap(sizes[j - 1], sizes[j]);
    }
  }
  int64_t reach = 0;  // highest offset the dims so far address
  for (int i = 0; i < n; ++i) {
    if (strides[i] <= reach) return false;
    reach += (sizes[i] - 1) * strides[i];
  }
  return true;
}

/// The dense buffer as a view, for the overlap check: channels-last strides of `t`'s shape.
TensorRef channels_last_view(const void* data, DType dtype, const TensorRef& t) {
  TensorRef v = TensorRef::contiguous(const_cast<void*>(data), dtype, t.device,
                                      {t.sizes[0], t.sizes[2], t.sizes[3], t.sizes[1]});
  return v;
}

void check_dense_pointer(const char* op, const char* arg, const void* data, DType dtype,
                         const TensorRef& t, const char* strided_arg) {
  if (data == nullptr) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to point at a channels-last buffer of shape " +
             t.shape_str() + ", but got a null pointer");
  }
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  if (address % dtype_size(dtype) != 0) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to be aligned to its element size (" +
             std::to_string(dtype_size(dtype)) + " bytes for " + dtype_name(dtype) +
             "), but got an address " + std::to_string(address % dtype_size(dtype)) +
             " bytes past that alignment");
  }
#if FIELDFUSE_WITH_CUDA
  // A host pointer (or another GPU's memory) handed to a kernel would fault asynchronously, far
  // from the cause; the runtime can tell where the pointer lives, so say it here.
  if (t.device.is_cuda()) {
    const int device = layout::cuda_pointer_device(data, op);
    if (device != t.device.index) {
      fail(ErrorKind::Value, op,
           "expected " + std::string(arg) + " to be memory on " + t.device.str() +
               " (the device of " + strided_arg + "), but got " +
               (device < 0 ? std::string("host memory")
                           : "memory on cuda:" + std::to_string(device)));
    }
  }
#else
  (void)strided_arg;
#endif
  check_disjoint(op, arg, channels_last_view(data, dtype, t), strided_arg, t);
}

/// Builds the driver's description of a validated, non-empty copy and runs it on t's device.
void run(const char* op, bool to_channels_last, const TensorRef& strided, const void* dense,
         DType dense_dtype, Stream stream) {
  layout::LayoutCopy copy;
  copy.op = op;
  copy.to_channels_last = to_channels_last;
  copy.strided = {strided.sizes[0],   strided.sizes[1],   strided.sizes[2],   strided.sizes[3],
                  strided.strides[0], strided.strides[1], strided.strides[2], strided.strides[3]};
  copy.strided_data = strided.data;
  copy.strided_dtype = strided.dtype;
  copy.dense_data = const_cast<void*>(dense);
  copy.dense_dtype = dense_dtype;
  copy.device = strided.device;
  copy.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (copy.device.is_cuda()) return layout::copy_cuda(copy);
#endif
  layout::copy_cpu(copy);
}

}  // namespace

std::size_t channels_last_bytes(const TensorRef& shape, DType dtype, const char* op) {
  check_storage(op, "shape", shape, /*needs_data=*/false);
  check_shape(op, "shape", shape, {-1, -1, -1, -1}, "[P, C, H, W]");
  const auto bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  return (bytes + kChannelsLastAlignment - 1) / kChannelsLastAlignment * kChannelsLastAlignment;
}

void copy_to_channels_last(const TensorRef& src, void* dst, DType dst_dtype, Stream stream,
                           const char* op) {
  check_strided(op, "src", src);
  if (dst_dtype != src.dtype) {
    fail(ErrorKind::Type, op,
         std::string("expected dst_dtype to be the dtype of src (") + dtype_name(src.dtype) +
             "; this copy does not convert), but got " + dtype_name(dst_dtype));
  }
  if (src.numel() == 0) return;
  check_storage(op, "src", src);
  check_dense_pointer(op, "dst", dst, dst_dtype, src, "src");
  run(op, /*to_channels_last=*/true, src, dst, dst_dtype, stream);
}

void copy_from_channels_last(const void* src, DType src_dtype, const TensorRef& dst, Stream stream,
                             const char* op) {
  check_strided(op, "dst", dst);
  const bool rounds_to_16bit =
      src_dtype == DType::Float32 && (dst.dtype == DType::Float16 || dst.dtype == DType::BFloat16);
  if (src_dtype != dst.dtype && !rounds_to_16bit) {
    fail(ErrorKind::Type, op,
         std::string("expected src_dtype to be the dtype of dst (") + dtype_name(dst.dtype) +
             (dst.dtype == DType::Float16 || dst.dtype == DType::BFloat16 ? ") or float32" : ")") +
             ", but got " + dtype_name(src_dtype));
  }
  if (!elements_are_distinct(dst)) {
    fail(ErrorKind::Value, op,
         "expected dst to have distinct elements (it is written), but got shape " +
             dst.shape_str() + " with strides that overlap (an expanded or overlapping view)");
  }
  if (dst.numel() == 0) return;
  check_storage(op, "dst", dst);
  check_dense_pointer(op, "src", src, src_dtype, dst, "dst");
  run(op, /*to_channels_last=*/false, dst, src, src_dtype, stream);
}

}  // namespace fieldfuse::detail
