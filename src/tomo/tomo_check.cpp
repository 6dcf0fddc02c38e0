// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by the sirt and fbp fronts (messages name the op and the argument).
#include "tomo/tomo_check.h"

#include <string>

#include "core/check.h"

namespace fieldfuse::detail::tomo {
namespace {

void check_three_dims(const char* op, const char* arg, const TensorRef& t,
                      const std::string& layout) {
  if (t.ndim != 3) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg + " to have shape " + layout + " (3 dims), but got shape " +
             t.shape_str());
  }
}

/// Same device and dtype as projections.
void check_like_projections(const char* op, const char* arg, const TensorRef& t,
                            const TensorRef& projections) {
  check_storage(op, arg, t);
  check_same_device(op, arg, t, "projections", projections);
  check_dtype(op, arg, t, projections.dtype, "the dtype of projections");
}

}  // namespace

void check_reconstruction(const char* op, const TensorRef& projections, const TensorRef& rotations,
                          const TensorRef& shifts, const TensorRef& volume, bool float32_only) {
  check_storage(op, "projections", projections);
  check_device_supported(op, "projections", projections);
  const DType dtype = projections.dtype;
  const bool floating = dtype == DType::Float32 || dtype == DType::Float64 ||
                        dtype == DType::Float16 || dtype == DType::BFloat16;
  if (!floating) {
    fail(ErrorKind::Type, op,
         std::string("expected projections to have dtype ") +
             (float32_only ? "float32" : "float32 or float64") + ", but got " + dtype_name(dtype));
  }
  if (dtype != DType::Float32 && (float32_only || dtype != DType::Float64)) {
    fail(ErrorKind::NotImplemented, op,
         std::string("not implemented for projections of dtype ") + dtype_name(dtype) +
             (float32_only ? "; it computes in float32 (its CPU FFT, KissFFT, is single precision)"
                           : "; it computes in float32 or float64"));
  }
  check_three_dims(op, "projections", projections, "[n, Hd, Wd]");
  const int64_t n = projections.sizes[0];
  const std::string count = std::to_string(n);
  check_storage(op, "rotations", rotations);
  if (rotations.ndim != 3 || rotations.sizes[0] != n || rotations.sizes[1] != 3 ||
      rotations.sizes[2] != 3) {
    fail(ErrorKind::Value, op,
         "expected rotations to have shape [" + count +
             ", 3, 3] (one per projection), but got shape " + rotations.shape_str());
  }
  check_like_projections(op, "rotations", rotations, projections);
  if (!is_absent(shifts)) {
    check_storage(op, "shifts", shifts);
    if (shifts.ndim != 2 || shifts.sizes[0] != n || shifts.sizes[1] != 2) {
      fail(ErrorKind::Value, op,
           "expected shifts to have shape [" + count +
               ", 2] (one (s_u, s_v) per projection), but got shape " + shifts.shape_str());
    }
    check_like_projections(op, "shifts", shifts, projections);
  }
  check_storage(op, "volume", volume);
  check_three_dims(op, "volume", volume, "[D, H, W]");
  check_like_projections(op, "volume", volume, projections);
  check_contiguous(op, "volume", volume);
  check_disjoint(op, "volume", volume, "projections", projections);
  check_disjoint(op, "volume", volume, "rotations", rotations);
  if (!is_absent(shifts)) check_disjoint(op, "volume", volume, "shifts", shifts);
}

View3 view_of(const TensorRef& t) {
  View3 v;
  v.data = t.data;
  for (int d = 0; d < 3; ++d) {
    v.sizes[d] = t.sizes[d];
    v.strides[d] = t.strides[d];
  }
  return v;
}

std::size_t aligned_bytes(int64_t count, std::size_t bytes_each) {
  const std::size_t bytes = static_cast<std::size_t>(count) * bytes_each;
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

}  // namespace fieldfuse::detail::tomo
