// SPDX-License-Identifier: Apache-2.0
// The project front: validates every argument of project_forward and backproject_forward, lays
// out the strided views and picks the CPU or CUDA driver. All checks live here, so C++ and Python
// callers see the same messages.
#include "fieldfuse/project.h"

#include <string>

#include "core/check.h"
#include "project/project_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
using detail::project::ProjectArgs;
using detail::project::Strided3;

constexpr const char* kProjectOp = "project";
constexpr const char* kBackprojectOp = "backproject";

/// The tensor every other one must match: float32 or float64 on a device this build runs on.
void check_leading(const char* op, const char* arg, const TensorRef& t) {
  detail::check_storage(op, arg, t);
  detail::check_device_supported(op, arg, t);
  if (t.dtype == DType::Float16 || t.dtype == DType::BFloat16) {
    fail(ErrorKind::NotImplemented, op,
         std::string("not implemented for ") + arg + " of dtype " + dtype_name(t.dtype) +
             "; the projectors compute in float32 or float64");
  }
  if (t.dtype != DType::Float32 && t.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         std::string("expected ") + arg + " to have dtype float32 or float64, but got " +
             dtype_name(t.dtype));
  }
}

/// A 3-D tensor; `layout` names its dims for the message.
void check_three_dims(const char* op, const char* arg, const TensorRef& t, const char* layout) {
  if (t.ndim != 3) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg + " to have shape " + layout + " (3 dims), but got shape " +
             t.shape_str());
  }
}

/// Same device and dtype as the leading tensor `ref`.
void check_like(const char* op, const char* arg, const TensorRef& t, const char* ref_arg,
                const TensorRef& ref) {
  detail::check_same_device(op, arg, t, ref_arg, ref);
  const std::string why = std::string("the dtype of ") + ref_arg;
  detail::check_dtype(op, arg, t, ref.dtype, why.c_str());
}

/// The pose tensors of n projections: rotations [n, 3, 3] and shifts [n, 2] or absent.
/// `count_of` says where n comes from, for the message ("" when rotations define it).
void check_poses(const char* op, const TensorRef& rotations, const TensorRef& shifts,
                 const char* ref_arg, const TensorRef& ref, int64_t n,
                 const std::string& count_of) {
  detail::check_storage(op, "rotations", rotations);
  const bool rotations_ok = rotations.ndim == 3 && rotations.sizes[1] == 3 &&
                            rotations.sizes[2] == 3 && (n < 0 || rotations.sizes[0] == n);
  if (!rotations_ok) {
    const std::string layout =
        n < 0 ? std::string("[n, 3, 3]") : "[" + std::to_string(n) + ", 3, 3]" + count_of;
    fail(ErrorKind::Value, op,
         "expected rotations to have shape " + layout + ", but got shape " + rotations.shape_str());
  }
  check_like(op, "rotations", rotations, ref_arg, ref);
  if (is_absent(shifts)) return;
  detail::check_storage(op, "shifts", shifts);
  const int64_t count = rotations.sizes[0];
  if (shifts.ndim != 2 || shifts.sizes[0] != count || shifts.sizes[1] != 2) {
    fail(ErrorKind::Value, op,
         "expected shifts to have shape [" + std::to_string(count) +
             ", 2] (one (s_u, s_v) per rotation), but got shape " + shifts.shape_str());
  }
  check_like(op, "shifts", shifts, ref_arg, ref);
}

/// The written tensor: on the leading tensor's device with its dtype, distinct elements, and no
/// overlap with any input.
void check_output(const char* op, const char* arg, const TensorRef& out, const char* ref_arg,
                  const TensorRef& ref, const TensorRef& rotations, const TensorRef& shifts) {
  check_like(op, arg, out, ref_arg, ref);
  detail::check_no_repeated_elements(op, arg, out);
  detail::check_disjoint(op, arg, out, ref_arg, ref);
  detail::check_disjoint(op, arg, out, "rotations", rotations);
  if (!is_absent(shifts)) detail::check_disjoint(op, arg, out, "shifts", shifts);
}

Strided3 strided(const TensorRef& t) {
  Strided3 s;
  s.data = t.data;
  for (int d = 0; d < 3; ++d) {
    s.sizes[d] = t.sizes[d];
    s.strides[d] = t.strides[d];
  }
  return s;
}

ProjectArgs make_args(const char* op, const TensorRef& volume, const TensorRef& rotations,
                      const TensorRef& shifts, const TensorRef& projections, Stream stream) {
  ProjectArgs a;
  a.op = op;
  a.dtype = rotations.dtype;
  a.device = rotations.device;
  a.count = rotations.sizes[0];
  a.volume = strided(volume);
  a.projections = strided(projections);
  a.rotations = rotations.data;
  for (int d = 0; d < 3; ++d) a.rotation_strides[d] = rotations.strides[d];
  if (!is_absent(shifts)) {
    a.shifts = shifts.data;
    a.shift_strides[0] = shifts.strides[0];
    a.shift_strides[1] = shifts.strides[1];
  }
  a.stream = stream;
  return a;
}

/// Runs the forward or the back projection on the call's device (a CUDA tensor reaches this only
/// in a build with CUDA: the fronts reject it otherwise).
void run(const ProjectArgs& a, bool forward) {
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) {
    return forward ? detail::project::project_forward_cuda(a)
                   : detail::project::backproject_forward_cuda(a);
  }
#endif
  forward ? detail::project::project_forward_cpu(a) : detail::project::backproject_forward_cpu(a);
}

}  // namespace

void project_forward(const TensorRef& volume, const TensorRef& rotations, const TensorRef& shifts,
                     const TensorRef& projections, Stream stream) {
  const char* op = kProjectOp;
  check_leading(op, "volume", volume);
  check_three_dims(op, "volume", volume, "[D, H, W]");
  check_poses(op, rotations, shifts, "volume", volume, -1, "");
  detail::check_storage(op, "projections", projections);
  const int64_t n = rotations.sizes[0];
  if (projections.ndim != 3 || projections.sizes[0] != n) {
    fail(ErrorKind::Value, op,
         "expected projections to have shape [" + std::to_string(n) +
             ", Hd, Wd] (one projection per rotation), but got shape " + projections.shape_str());
  }
  check_output(op, "projections", projections, "volume", volume, rotations, shifts);
  run(make_args(op, volume, rotations, shifts, projections, stream), true);
}

void backproject_forward(const TensorRef& projections, const TensorRef& rotations,
                         const TensorRef& shifts, const TensorRef& volume, Stream stream) {
  const char* op = kBackprojectOp;
  check_leading(op, "projections", projections);
  check_three_dims(op, "projections", projections, "[n, Hd, Wd]");
  const int64_t n = projections.sizes[0];
  check_poses(op, rotations, shifts, "projections", projections, n, " (one per projection)");
  detail::check_storage(op, "volume", volume);
  check_three_dims(op, "volume", volume, "[D, H, W]");
  check_output(op, "volume", volume, "projections", projections, rotations, shifts);
  run(make_args(op, volume, rotations, shifts, projections, stream), false);
}

}  // namespace fieldfuse
