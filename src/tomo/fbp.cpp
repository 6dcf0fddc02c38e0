// SPDX-License-Identifier: Apache-2.0
// The fbp front: validates, carves the workspace, filters the columns (fbp_filter_cpu.cpp or
// fbp_filter_cuda.cu) and back projects the filtered stack with the `project` family's transpose.
#include <cstdint>
#include <string>

#include "core/check.h"
#include "fieldfuse/project.h"
#include "fieldfuse/tomo.h"
#include "tomo/tomo_check.h"
#include "tomo/tomo_drivers.h"
#include "tomo/tomo_math.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::tomo::aligned_bytes;
using detail::tomo::fbp_column_stride;

constexpr const char* kFbpOp = "fbp";

/// Fills the workspace pointers of `a` (angles, scales, kernel, response, columns, in this order)
/// from `base`; returns the bytes they span.
std::size_t carve(const TensorRef& projections, void* base, detail::tomo::FbpFilterArgs& a) {
  const int64_t n = projections.ndim == 3 ? projections.sizes[0] : 0;
  const int64_t width = projections.ndim == 3 ? projections.sizes[2] : 0;
  const int64_t padded =
      detail::tomo::fbp_padded_length(projections.ndim == 3 ? projections.sizes[1] : 0);
  const int64_t stride = fbp_column_stride(padded);
  char* p = static_cast<char*>(base);
  std::size_t at = 0;
  a.padded = padded;
  a.angles = reinterpret_cast<double*>(p + at);
  at += aligned_bytes(n, sizeof(double));
  a.scales = reinterpret_cast<double*>(p + at);
  at += aligned_bytes(n, sizeof(double));
  a.kernel = reinterpret_cast<float*>(p + at);
  at += aligned_bytes(stride, sizeof(float));
  a.response = reinterpret_cast<float*>(p + at);
  at += aligned_bytes(padded / 2 + 1, sizeof(float));
  a.columns = reinterpret_cast<float*>(p + at);
  at += aligned_bytes(n * width * stride, sizeof(float));
  return at;
}

}  // namespace

FbpFilter fbp_filter_from_name(const std::string& name) {
  if (name == "ramp") return FbpFilter::Ramp;
  if (name == "shepp-logan") return FbpFilter::SheppLogan;
  if (name == "hann") return FbpFilter::Hann;
  fail(ErrorKind::Value, kFbpOp,
       "expected filter to be \"ramp\", \"shepp-logan\" or \"hann\", but got \"" + name + "\"");
}

std::size_t fbp_workspace_size(const TensorRef& projections, const TensorRef& volume) {
  (void)volume;  // the filtering works on the stack only; the volume is written by backprojection
  detail::tomo::FbpFilterArgs a;
  return carve(projections, nullptr, a);
}

void fbp(const TensorRef& projections, const TensorRef& rotations, const TensorRef& shifts,
         FbpFilter filter, const TensorRef& volume, void* workspace, std::size_t workspace_bytes,
         Stream stream) {
  const char* op = kFbpOp;
  detail::tomo::check_reconstruction(op, projections, rotations, shifts, volume, true);
  const int32_t filter_value = static_cast<int32_t>(filter);
  if (filter_value < 0 || filter_value > static_cast<int32_t>(FbpFilter::Hann)) {
    fail(ErrorKind::Value, op,
         "expected filter to be FbpFilter::Ramp, SheppLogan or Hann, but got the value " +
             std::to_string(filter_value));
  }
  detail::tomo::FbpFilterArgs a;
  const std::size_t required = carve(projections, workspace, a);
  detail::check_workspace(op, workspace, workspace_bytes, required);
  a.exec = {op, projections.dtype, projections.device, stream};
  a.projections = detail::tomo::view_of(projections);
  a.rotations = rotations.data;
  for (int d = 0; d < 3; ++d) {
    a.rotation_strides[d] = rotations.strides[d];
    a.volume_sizes[d] = volume.sizes[d];
  }
  a.filter = filter;
  const int64_t n = projections.sizes[0], height = projections.sizes[1];
  const int64_t width = projections.sizes[2];
  if (n > 0 && height > 0 && width > 0) {
#if FIELDFUSE_WITH_CUDA
    if (projections.device.is_cuda()) {
      detail::tomo::fbp_filter_cuda(a);
    } else {
      detail::tomo::fbp_filter_cpu(a);
    }
#else
    detail::tomo::fbp_filter_cpu(a);
#endif
  }
  // The filtered columns, read in place as a strided [n, Hd, Wd] stack: column (m, j) is row
  // m·Wd + j of the padded buffer, its samples contiguous.
  const int64_t stride = fbp_column_stride(a.padded);
  TensorRef filtered =
      TensorRef::contiguous(a.columns, DType::Float32, projections.device, {n, height, width});
  filtered.strides[0] = width * stride;
  filtered.strides[1] = 1;
  filtered.strides[2] = stride;
  backproject_forward(filtered, rotations, shifts, volume, stream);
}

}  // namespace fieldfuse
