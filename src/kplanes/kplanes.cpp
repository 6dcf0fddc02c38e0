// SPDX-License-Identifier: Apache-2.0
// The K-Planes front: validates every argument, lays the problem out for the drivers and picks the
// CPU or CUDA one. All checks live here, so C++ and Python callers see the same messages. The
// public entries (kplanes.h) are thin wrappers over one implementation (kplanes_call.h) that each
// pass their own name, so every message starts with the function the caller called.
#include "fieldfuse/kplanes.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "kplanes/kplanes_call.h"
#include "kplanes/kplanes_drivers.h"
#include "kplanes/kplanes_staging.h"

namespace fieldfuse::detail::kplanes {
namespace {

bool is_16bit(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

std::string level_arg(const char* name, int level) {
  return std::string(name) + "[" + std::to_string(level) + "]";
}

/// A float32/float64 tensor on a supported device (16-bit is for planes only).
void check_geometry_tensor(const char* op, const char* arg, const TensorRef& t, bool needs_data) {
  detail::check_storage(op, arg, t, needs_data);
  detail::check_device_supported(op, arg, t);
  if (t.dtype != DType::Float32 && t.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         "expected " + std::string(arg) + " to be float32 or float64, but got " +
             dtype_name(t.dtype));
  }
}

PointsView points_view(const TensorRef& t) {
  if (is_absent(t)) return {};
  return {t.data, t.sizes[0], t.strides[0], t.strides[1]};
}

PlaneView plane_view(const TensorRef& t) {
  return {t.sizes[0],   t.sizes[1],   t.sizes[2],   t.sizes[3],
          t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

/// The points tensor that sets the compute dtype and the device: pts, or the tap points of a call
/// without plain points (kplanes_tilted_taps, whose tap points are named pts).
struct Reference {
  const TensorRef& tensor;
  const char* arg;
};
Reference reference_of(const Call& in) {
  if (is_absent(in.pts) && !is_absent(in.tap_pts)) return {in.tap_pts, in.tap_pts_arg};
  return {in.pts, "pts"};
}

/// The message layout of the tap points: "[B, 3]" where the public function calls them pts.
const char* tap_pts_layout(const Call& in) {
  return std::string(in.tap_pts_arg) == "pts" ? "[B, 3]" : "[N, 3]";
}

/// Validates the inputs and lays them out; `needs_data = false` for workspace queries.
Problem make_problem(const char* op, const Call& in, bool needs_data = true) {
  Problem pb;
  pb.op = op;
  pb.variant = in.variant;
  const Reference reference = reference_of(in);
  const TensorRef& ref = reference.tensor;
  const char* ref_arg = reference.arg;

  if (!is_absent(in.pts) || is_absent(in.tap_pts)) {
    check_geometry_tensor(op, "pts", in.pts, needs_data);
    detail::check_shape(op, "pts", in.pts, {-1, 3}, "[B, 3]");
    pb.pts = points_view(in.pts);
  }
  pb.dtype = ref.dtype;
  pb.device = ref.device;

  if (!is_absent(in.tap_pts)) {
    const char* arg = in.tap_pts_arg;
    check_geometry_tensor(op, arg, in.tap_pts, needs_data);
    detail::check_shape(op, arg, in.tap_pts, {-1, 3}, tap_pts_layout(in));
    if (&ref != &in.tap_pts) {
      detail::check_same_device(op, arg, in.tap_pts, ref_arg, ref);
      detail::check_dtype(op, arg, in.tap_pts, pb.dtype, "the dtype of pts");
    }
    pb.tap_pts = points_view(in.tap_pts);
    if (pb.tap_pts.rows > 0 && !std::isfinite(in.h)) {
      fail(ErrorKind::Value, op, "expected h to be finite, but got " + detail::number_text(in.h));
    }
    pb.h = in.h;
  }

  if (!is_absent(in.valid)) {
    detail::check_storage(op, "valid", in.valid, needs_data);
    detail::check_dtype(op, "valid", in.valid, DType::Bool, "a mask of the points");
    detail::check_shape(op, "valid", in.valid, {pb.pts.rows}, "[B] with B the rows of pts");
    detail::check_same_device(op, "valid", in.valid, ref_arg, ref);
    pb.valid = static_cast<const bool*>(in.valid.data);
    pb.valid_stride = in.valid.strides[0];
  }

  const std::string dtype_why = "the dtype of " + std::string(ref_arg);
  if (pb.variant == Variant::kTilted) {
    check_geometry_tensor(op, "rotations", in.rotations, needs_data);
    detail::check_shape(op, "rotations", in.rotations, {-1, 3, 3}, "[T, 3, 3]");
    detail::check_same_device(op, "rotations", in.rotations, ref_arg, ref);
    detail::check_dtype(op, "rotations", in.rotations, pb.dtype, dtype_why.c_str());
    if (in.rotations.sizes[0] < 1) {
      fail(ErrorKind::Value, op,
           "expected rotations to hold at least one tilt, but got shape " +
               in.rotations.shape_str());
    }
    pb.num_tilts = static_cast<int>(in.rotations.sizes[0]);
    pb.rotations = in.rotations.data;
    for (int i = 0; i < 3; ++i) pb.rotation_strides[i] = in.rotations.strides[i];
  } else if (pb.variant != Variant::kAxisAligned) {
    fail(ErrorKind::Value, op, "expected variant to be Tilted or AxisAligned");
  } else if (!is_absent(in.rotations)) {
    fail(ErrorKind::Value, op,
         "the axis-aligned variant takes no rotations, but got a tensor of shape " +
             in.rotations.shape_str());
  }

  if (in.num_levels < 1 || in.planes == nullptr) {
    fail(ErrorKind::Value, op,
         "expected at least one level of planes, but got " + std::to_string(in.num_levels));
  }
  const int64_t planes_per_level = pb.planes_per_level();
  const std::string planes_layout =
      pb.variant == Variant::kTilted
          ? "[3T, C, H, W] with T = " + std::to_string(pb.num_tilts) + " (the number of rotations)"
          : std::string("[3, C, H, W]");
  int64_t column = 0;
  for (int l = 0; l < in.num_levels; ++l) {
    const TensorRef& t = in.planes[l];
    const std::string arg = level_arg("planes", l);
    detail::check_storage(op, arg.c_str(), t, needs_data);
    detail::check_device_supported(op, arg.c_str(), t);
    detail::check_float_dtype(op, arg.c_str(), t);
    detail::check_same_device(op, arg.c_str(), t, ref_arg, ref);
    if (t.ndim != 4 || t.sizes[0] != planes_per_level) {
      fail(ErrorKind::Value, op,
           "expected " + arg + " to have shape " + planes_layout + ", but got shape " +
               t.shape_str());
    }
    if (t.sizes[1] < 1 || t.sizes[2] < 1 || t.sizes[3] < 1) {
      fail(ErrorKind::Value, op,
           "expected " + arg + " to have C, H, W >= 1, but got shape " + t.shape_str());
    }
    if (t.sizes[2] >= (int64_t{1} << 31) || t.sizes[3] >= (int64_t{1} << 31)) {
      fail(ErrorKind::NotImplemented, op,
           "not implemented for plane sides of 2^31 or more cells, but " + arg + " has shape " +
               t.shape_str());
    }
    if (l == 0) {
      pb.plane_dtype = t.dtype;
      const bool same = t.dtype == pb.dtype;
      const bool half = is_16bit(t.dtype) && pb.dtype == DType::Float32;
      if (!same && !half) {
        fail(ErrorKind::Type, op,
             "expected planes to have the dtype of " + std::string(ref_arg) + " (" +
                 dtype_name(pb.dtype) + "), or float16/bfloat16 with float32 " + ref_arg +
                 ", but got " + dtype_name(t.dtype));
      }
    } else {
      detail::check_dtype(op, arg.c_str(), t, pb.plane_dtype, "the dtype of planes[0]");
    }
    Level level;
    level.data = t.data;
    level.view = plane_view(t);
    level.column = column;
    if (in.gates != nullptr) {
      level.gate = in.gates[l];
      if (!std::isfinite(level.gate)) {
        fail(ErrorKind::Value, op,
             "expected " + level_arg("gates", l) + " to be finite, but got " +
                 detail::number_text(level.gate));
      }
    }
    pb.levels.push_back(level);
    column += pb.num_tilts * t.sizes[1];
  }
  pb.num_features = column;
  return pb;
}

/// An output must not share memory with any input (it is written while they are read).
void check_disjoint_from_inputs(const char* op, const char* arg, const TensorRef& t,
                                const Call& in) {
  if (!is_absent(in.pts)) detail::check_disjoint(op, arg, t, "pts", in.pts);
  if (!is_absent(in.tap_pts)) detail::check_disjoint(op, arg, t, in.tap_pts_arg, in.tap_pts);
  if (!is_absent(in.rotations)) detail::check_disjoint(op, arg, t, "rotations", in.rotations);
  for (int l = 0; l < in.num_levels; ++l) {
    detail::check_disjoint(op, arg, t, level_arg("planes", l).c_str(), in.planes[l]);
  }
}

/// A feature matrix (an output or an upstream gradient): the given shape, on the points' device.
void check_feature_matrix(const char* op, const char* arg, const TensorRef& t, const Call& in,
                          std::initializer_list<int64_t> shape, const char* layout) {
  const Reference ref = reference_of(in);
  detail::check_storage(op, arg, t);
  detail::check_shape(op, arg, t, shape, layout);
  detail::check_same_device(op, arg, t, ref.arg, ref.tensor);
}

/// A feature output: a feature matrix that is contiguous and does not alias the inputs.
void check_output(const char* op, const char* arg, const TensorRef& t, const Call& in,
                  std::initializer_list<int64_t> shape, const char* layout) {
  check_feature_matrix(op, arg, t, in, shape, layout);
  detail::check_contiguous(op, arg, t);
  check_disjoint_from_inputs(op, arg, t, in);
}

/// Features are the compute type or the plane dtype.
void check_feature_dtype(const char* op, const char* arg, const TensorRef& t, const Problem& pb,
                         const char* ref_arg) {
  if (t.dtype != pb.dtype && t.dtype != pb.plane_dtype) {
    fail(ErrorKind::Type, op,
         "expected " + std::string(arg) + " to be " + dtype_name(pb.dtype) + " (the dtype of " +
             ref_arg + ")" +
             (pb.plane_dtype != pb.dtype
                  ? std::string(" or ") + dtype_name(pb.plane_dtype) + " (the dtype of planes)"
                  : std::string()) +
             ", but got " + dtype_name(t.dtype));
  }
}

std::string shape_text(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

std::string shape_text(int64_t a, int64_t b, int64_t c) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "]";
}

/// Which gradients the caller wants must be possible for the problem.
void check_gradient_requests(const char* op, const Problem& pb, const Gradients& g) {
  if (g.rotations != nullptr && pb.variant != Variant::kTilted) {
    fail(ErrorKind::Value, op, "the axis-aligned variant has no rotations to differentiate");
  }
  if (g.tap_pts != nullptr && pb.tap_pts.rows == 0 && g.tap_pts->numel() > 0) {
    fail(ErrorKind::Value, op, "grad_tap_pts was requested without tap points");
  }
}

/// The driver's share of a backward's workspace (after the staging region).
std::size_t driver_backward_workspace(const Problem& pb, bool wants_grad_planes,
                                      bool deterministic) {
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) return backward_workspace_cuda(pb, wants_grad_planes, deterministic);
#endif
  (void)wants_grad_planes;
  (void)deterministic;
  return backward_workspace_cpu(pb);
}

/// Staging region plus the driver's share; the layouts the driver sees after staging are dense
/// channels-last, whose sizes are the same, so the driver's share reads `pb` as given.
std::size_t backward_workspace(const Problem& pb, const Staging& staging, bool wants_grad_planes,
                               bool deterministic) {
  return staging.bytes + driver_backward_workspace(pb, wants_grad_planes, deterministic);
}

/// A gradient output: the shape and dtype of its input, distinct elements, not aliasing inputs or
/// the upstream gradients.
void check_gradient(const char* op, const char* arg, const TensorRef& grad, const char* input_arg,
                    const TensorRef& input, const Call& in, const TensorRef& grad_features,
                    const TensorRef& grad_tap_features) {
  detail::check_storage(op, arg, grad);
  detail::check_same_shape(op, arg, grad, input_arg, input);
  detail::check_same_device(op, arg, grad, input_arg, input);
  const std::string why = "the dtype of " + std::string(input_arg);
  detail::check_dtype(op, arg, grad, input.dtype, why.c_str());
  detail::check_no_repeated_elements(op, arg, grad);
  check_disjoint_from_inputs(op, arg, grad, in);
  if (!is_absent(grad_features)) {
    detail::check_disjoint(op, arg, grad, "grad_features", grad_features);
  }
  if (!is_absent(grad_tap_features)) {
    detail::check_disjoint(op, arg, grad, "grad_tap_features", grad_tap_features);
  }
}

}  // namespace

int64_t num_features(const char* op, const Call& call) {
  return make_problem(op, call, /*needs_data=*/false).num_features;
}

std::size_t forward_workspace_size(const char* op, const Call& call) {
  const Problem pb = make_problem(op, call, /*needs_data=*/false);
  return std::max<std::size_t>(1, plan_staging(pb, false, false).bytes);
}

void forward(const char* op, const Call& call, const TensorRef& features,
             const TensorRef& tap_features, void* workspace, std::size_t workspace_bytes,
             Stream stream) {
  Problem pb = make_problem(op, call);
  const char* ref_arg = reference_of(call).arg;
  const int64_t f = pb.num_features;
  ForwardOutputs out;
  const bool has_features = pb.pts.rows > 0 || !is_absent(features);
  if (has_features) {
    check_feature_dtype(op, "features", features, pb, ref_arg);
    const std::string rows = shape_text(pb.pts.rows, f);
    check_output(op, "features", features, call, {pb.pts.rows, f}, rows.c_str());
    out = {features.data, nullptr, features.dtype};
  }
  if (pb.tap_pts.rows > 0 || !is_absent(tap_features)) {
    const std::string taps = shape_text(kTapsPerTapPoint, pb.tap_pts.rows, f);
    check_output(op, "tap_features", tap_features, call, {kTapsPerTapPoint, pb.tap_pts.rows, f},
                 taps.c_str());
    if (has_features) {
      detail::check_dtype(op, "tap_features", tap_features, features.dtype,
                          "the dtype of features");
      detail::check_disjoint(op, "tap_features", tap_features, "features", features);
    } else {
      check_feature_dtype(op, "tap_features", tap_features, pb, ref_arg);
      out.dtype = tap_features.dtype;
    }
    out.tap_features = tap_features.data;
  }
  const Staging staging = plan_staging(pb, false, false);
  detail::check_workspace(op, workspace, workspace_bytes, std::max<std::size_t>(1, staging.bytes));
  if (pb.num_slots() == 0) return;  // nothing reads the planes: skip the copies
  stage(pb, staging, workspace, stream);
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) return forward_cuda(pb, out, stream);
#endif
  forward_cpu(pb, out);
}

std::size_t backward_workspace_size(const char* op, const Call& call, const Gradients& grads,
                                    bool deterministic) {
  const Problem pb = make_problem(op, call, /*needs_data=*/false);
  check_gradient_requests(op, pb, grads);
  const bool wants_grad_planes = grads.planes != nullptr;
  return backward_workspace(pb, plan_staging(pb, wants_grad_planes, deterministic),
                            wants_grad_planes, deterministic);
}

void backward(const char* op, const Call& call, const TensorRef& grad_features,
              const TensorRef& grad_tap_features, const Gradients& grads, bool deterministic,
              void* workspace, std::size_t workspace_bytes, Stream stream) {
  BackwardArgs args;
  args.problem = make_problem(op, call);
  Problem& pb = args.problem;
  const char* ref_arg = reference_of(call).arg;
  check_gradient_requests(op, pb, grads);
  const int64_t f = pb.num_features;
  // With no rows at all (an empty taps-only batch) no upstream gradient names the dtype; the
  // compute type keeps the (empty) launches on an instantiated kernel.
  args.grad_dtype = pb.dtype;

  const bool has_features = pb.pts.rows > 0 || !is_absent(grad_features);
  if (has_features) {
    const std::string rows = shape_text(pb.pts.rows, f);
    check_feature_matrix(op, "grad_features", grad_features, call, {pb.pts.rows, f}, rows.c_str());
    check_feature_dtype(op, "grad_features", grad_features, pb, ref_arg);
    args.grad_dtype = grad_features.dtype;
    args.grad_features = {grad_features.data, 0, grad_features.strides[0],
                          grad_features.strides[1]};
  }
  if (pb.tap_pts.rows > 0) {
    const std::string taps = shape_text(kTapsPerTapPoint, pb.tap_pts.rows, f);
    check_feature_matrix(op, "grad_tap_features", grad_tap_features, call,
                         {kTapsPerTapPoint, pb.tap_pts.rows, f}, taps.c_str());
    if (has_features) {
      detail::check_dtype(op, "grad_tap_features", grad_tap_features, args.grad_dtype,
                          "the dtype of grad_features");
    } else {
      check_feature_dtype(op, "grad_tap_features", grad_tap_features, pb, ref_arg);
      args.grad_dtype = grad_tap_features.dtype;
    }
    args.grad_tap_features = {grad_tap_features.data, grad_tap_features.strides[0],
                              grad_tap_features.strides[1], grad_tap_features.strides[2]};
  }

  if (grads.pts != nullptr && !is_absent(call.pts)) {
    check_gradient(op, "grad_pts", *grads.pts, "pts", call.pts, call, grad_features,
                   grad_tap_features);
    args.grad_pts = grads.pts->data;
    args.grad_pts_strides[0] = grads.pts->strides[0];
    args.grad_pts_strides[1] = grads.pts->strides[1];
  }
  if (grads.tap_pts != nullptr && pb.tap_pts.rows > 0) {
    const std::string arg = "grad_" + std::string(call.tap_pts_arg);
    check_gradient(op, arg.c_str(), *grads.tap_pts, call.tap_pts_arg, call.tap_pts, call,
                   grad_features, grad_tap_features);
    args.grad_tap_pts = grads.tap_pts->data;
    args.grad_tap_pts_strides[0] = grads.tap_pts->strides[0];
    args.grad_tap_pts_strides[1] = grads.tap_pts->strides[1];
  }
  if (grads.rotations != nullptr) {
    check_gradient(op, "grad_rotations", *grads.rotations, "rotations", call.rotations, call,
                   grad_features, grad_tap_features);
    args.grad_rotations = grads.rotations->data;
    for (int i = 0; i < 3; ++i) args.grad_rotation_strides[i] = grads.rotations->strides[i];
  }
  if (grads.planes != nullptr) {
    args.wants_planes = true;
    for (int l = 0; l < call.num_levels; ++l) {
      const TensorRef& g = grads.planes[l];
      const std::string arg = level_arg("grad_planes", l);
      const std::string input_arg = level_arg("planes", l);
      check_gradient(op, arg.c_str(), g, input_arg.c_str(), call.planes[l], call, grad_features,
                     grad_tap_features);
      detail::check_dense(op, arg.c_str(), g);
      for (int m = 0; m < l; ++m) {
        detail::check_disjoint(op, arg.c_str(), g, level_arg("grad_planes", m).c_str(),
                               grads.planes[m]);
      }
      pb.levels[l].grad = g.data;
      pb.levels[l].grad_view = plane_view(g);
    }
  }
  const Staging staging = plan_staging(pb, args.wants_planes, deterministic);
  detail::check_workspace(op, workspace, workspace_bytes,
                          backward_workspace(pb, staging, args.wants_planes, deterministic));
  const StagedGradients staged = stage(pb, staging, workspace, stream);
  args.deterministic = deterministic;
  args.workspace = driver_workspace(workspace, staging);
  args.workspace_bytes = workspace_bytes - staging.bytes;
  args.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) {
    backward_cuda(args);
    return unstage_gradients(pb, staged, stream);
  }
#endif
  backward_cpu(args);
  unstage_gradients(pb, staged, stream);
}

}  // namespace fieldfuse::detail::kplanes

// ---- the public entries: each names its call and itself --------------------------------------

namespace fieldfuse {
namespace {

using detail::kplanes::Call;
using detail::kplanes::Gradients;
using detail::kplanes::Variant;

Call tilted_call(const TensorRef& pts, const TensorRef& rotations, const TensorRef* planes,
                 int num_levels, const double* gates) {
  Call call;
  call.pts = pts;
  call.rotations = rotations;
  call.planes = planes;
  call.num_levels = num_levels;
  call.gates = gates;
  return call;
}

Call axis_aligned_call(const TensorRef& pts, const TensorRef* planes, int num_levels,
                       const double* gates) {
  Call call = tilted_call(pts, TensorRef{}, planes, num_levels, gates);
  call.variant = Variant::kAxisAligned;
  return call;
}

/// kplanes_tilted_taps evaluates only tap points, which its signature calls pts.
Call taps_call(const TensorRef& pts, const TensorRef& rotations, const TensorRef* planes,
               int num_levels, double h, const double* gates) {
  Call call = tilted_call(TensorRef{}, rotations, planes, num_levels, gates);
  call.tap_pts = pts;
  call.tap_pts_arg = "pts";
  call.h = h;
  return call;
}

Call with_taps_call(const TensorRef& pts, const TensorRef& tap_pts, const TensorRef& rotations,
                    const TensorRef* planes, int num_levels, double h, const double* gates,
                    const TensorRef* valid = nullptr) {
  Call call = tilted_call(pts, rotations, planes, num_levels, gates);
  call.tap_pts = tap_pts;
  call.h = h;
  if (valid != nullptr) call.valid = *valid;
  return call;
}

/// The workspace query's Gradients: only whether plane gradients come changes the size.
Gradients workspace_request(bool wants_grad_planes) {
  static const TensorRef placeholder{};
  Gradients grads;
  if (wants_grad_planes) grads.planes = &placeholder;
  return grads;
}

}  // namespace

int64_t kplanes_num_features(const TensorRef* planes, int num_levels, int num_tilts) {
  constexpr const char* op = "kplanes_num_features";
  if (num_levels < 1 || planes == nullptr) {
    detail::fail(ErrorKind::Value, op,
                 "expected at least one level of planes, but got " + std::to_string(num_levels));
  }
  if (num_tilts < 1) {
    detail::fail(ErrorKind::Value, op,
                 "expected num_tilts >= 1, but got " + std::to_string(num_tilts));
  }
  int64_t channels = 0;
  for (int l = 0; l < num_levels; ++l) {
    if (planes[l].ndim != 4) {
      detail::fail(ErrorKind::Value, op,
                   "expected planes[" + std::to_string(l) +
                       "] to have shape [P, C, H, W], but got " + "shape " + planes[l].shape_str());
    }
    channels += planes[l].sizes[1];
  }
  return num_tilts * channels;
}

std::size_t kplanes_tilted_forward_workspace_size(const TensorRef& pts, const TensorRef& rotations,
                                                  const TensorRef* planes, int num_levels) {
  return detail::kplanes::forward_workspace_size(
      "kplanes_tilted", tilted_call(pts, rotations, planes, num_levels, nullptr));
}

void kplanes_tilted_forward(const TensorRef& pts, const TensorRef& rotations,
                            const TensorRef* planes, int num_levels, const double* gates,
                            const TensorRef& features, void* workspace, std::size_t workspace_bytes,
                            Stream stream) {
  detail::kplanes::forward("kplanes_tilted", tilted_call(pts, rotations, planes, num_levels, gates),
                           features, TensorRef{}, workspace, workspace_bytes, stream);
}

std::size_t kplanes_tilted_backward_workspace_size(const TensorRef& pts, const TensorRef& rotations,
                                                   const TensorRef* planes, int num_levels,
                                                   bool wants_grad_planes, bool deterministic) {
  return detail::kplanes::backward_workspace_size(
      "kplanes_tilted_backward", tilted_call(pts, rotations, planes, num_levels, nullptr),
      workspace_request(wants_grad_planes), deterministic);
}

void kplanes_tilted_backward(const TensorRef& pts, const TensorRef& rotations,
                             const TensorRef* planes, int num_levels, const double* gates,
                             const TensorRef& grad_features, const TensorRef* grad_pts,
                             const TensorRef* grad_rotations, const TensorRef* grad_planes,
                             bool deterministic, void* workspace, std::size_t workspace_bytes,
                             Stream stream) {
  detail::kplanes::backward("kplanes_tilted_backward",
                            tilted_call(pts, rotations, planes, num_levels, gates), grad_features,
                            TensorRef{}, {grad_pts, nullptr, grad_rotations, grad_planes},
                            deterministic, workspace, workspace_bytes, stream);
}

std::size_t kplanes_forward_workspace_size(const TensorRef& pts, const TensorRef* planes,
                                           int num_levels) {
  return detail::kplanes::forward_workspace_size(
      "kplanes", axis_aligned_call(pts, planes, num_levels, nullptr));
}

void kplanes_forward(const TensorRef& pts, const TensorRef* planes, int num_levels,
                     const double* gates, const TensorRef& features, void* workspace,
                     std::size_t workspace_bytes, Stream stream) {
  detail::kplanes::forward("kplanes", axis_aligned_call(pts, planes, num_levels, gates), features,
                           TensorRef{}, workspace, workspace_bytes, stream);
}

std::size_t kplanes_backward_workspace_size(const TensorRef& pts, const TensorRef* planes,
                                            int num_levels, bool wants_grad_planes,
                                            bool deterministic) {
  return detail::kplanes::backward_workspace_size(
      "kplanes_backward", axis_aligned_call(pts, planes, num_levels, nullptr),
      workspace_request(wants_grad_planes), deterministic);
}

void kplanes_backward(const TensorRef& pts, const TensorRef* planes, int num_levels,
                      const double* gates, const TensorRef& grad_features,
                      const TensorRef* grad_pts, const TensorRef* grad_planes, bool deterministic,
                      void* workspace, std::size_t workspace_bytes, Stream stream) {
  detail::kplanes::backward("kplanes_backward", axis_aligned_call(pts, planes, num_levels, gates),
                            grad_features, TensorRef{}, {grad_pts, nullptr, nullptr, grad_planes},
                            deterministic, workspace, workspace_bytes, stream);
}

std::size_t kplanes_tilted_taps_forward_workspace_size(const TensorRef& pts,
                                                       const TensorRef& rotations,
                                                       const TensorRef* planes, int num_levels) {
  return detail::kplanes::forward_workspace_size(
      "kplanes_tilted_taps", taps_call(pts, rotations, planes, num_levels, 0.0, nullptr));
}

void kplanes_tilted_taps_forward(const TensorRef& pts, const TensorRef& rotations,
                                 const TensorRef* planes, int num_levels, double h,
                                 const double* gates, const TensorRef& tap_features,
                                 void* workspace, std::size_t workspace_bytes, Stream stream) {
  detail::kplanes::forward("kplanes_tilted_taps",
                           taps_call(pts, rotations, planes, num_levels, h, gates), TensorRef{},
                           tap_features, workspace, workspace_bytes, stream);
}

std::size_t kplanes_tilted_taps_backward_workspace_size(const TensorRef& pts,
                                                        const TensorRef& rotations,
                                                        const TensorRef* planes, int num_levels,
                                                        bool wants_grad_planes,
                                                        bool deterministic) {
  return detail::kplanes::backward_workspace_size(
      "kplanes_tilted_taps_backward", taps_call(pts, rotations, planes, num_levels, 0.0, nullptr),
      workspace_request(wants_grad_planes), deterministic);
}

void kplanes_tilted_taps_backward(const TensorRef& pts, const TensorRef& rotations,
                                  const TensorRef* planes, int num_levels, double h,
                                  const double* gates, const TensorRef& grad_tap_features,
                                  const TensorRef* grad_pts, const TensorRef* grad_rotations,
                                  const TensorRef* grad_planes, bool deterministic, void* workspace,
                                  std::size_t workspace_bytes, Stream stream) {
  detail::kplanes::backward("kplanes_tilted_taps_backward",
                            taps_call(pts, rotations, planes, num_levels, h, gates), TensorRef{},
                            grad_tap_features, {nullptr, grad_pts, grad_rotations, grad_planes},
                            deterministic, workspace, workspace_bytes, stream);
}

std::size_t kplanes_tilted_with_taps_forward_workspace_size(const TensorRef& pts,
                                                            const TensorRef& tap_pts,
                                                            const TensorRef& rotations,
                                                            const TensorRef* planes,
                                                            int num_levels) {
  return detail::kplanes::forward_workspace_size(
      "kplanes_tilted_with_taps",
      with_taps_call(pts, tap_pts, rotations, planes, num_levels, 0.0, nullptr));
}

void kplanes_tilted_with_taps_forward(const TensorRef& pts, const TensorRef& tap_pts,
                                      const TensorRef& rotations, const TensorRef* planes,
                                      int num_levels, double h, const double* gates,
                                      const TensorRef* valid, const TensorRef& features,
                                      const TensorRef& tap_features, void* workspace,
                                      std::size_t workspace_bytes, Stream stream) {
  detail::kplanes::forward(
      "kplanes_tilted_with_taps",
      with_taps_call(pts, tap_pts, rotations, planes, num_levels, h, gates, valid), features,
      tap_features, workspace, workspace_bytes, stream);
}

std::size_t kplanes_tilted_with_taps_backward_workspace_size(
    const TensorRef& pts, const TensorRef& tap_pts, const TensorRef& rotations,
    const TensorRef* planes, int num_levels, bool wants_grad_planes, bool deterministic) {
  return detail::kplanes::backward_workspace_size(
      "kplanes_tilted_with_taps_backward",
      with_taps_call(pts, tap_pts, rotations, planes, num_levels, 0.0, nullptr),
      workspace_request(wants_grad_planes), deterministic);
}

void kplanes_tilted_with_taps_backward(
    const TensorRef& pts, const TensorRef& tap_pts, const TensorRef& rotations,
    const TensorRef* planes, int num_levels, double h, const double* gates, const TensorRef* valid,
    const TensorRef& grad_features, const TensorRef& grad_tap_features, const TensorRef* grad_pts,
    const TensorRef* grad_tap_pts, const TensorRef* grad_rotations, const TensorRef* grad_planes,
    bool deterministic, void* workspace, std::size_t workspace_bytes, Stream stream) {
  detail::kplanes::backward(
      "kplanes_tilted_with_taps_backward",
      with_taps_call(pts, tap_pts, rotations, planes, num_levels, h, gates, valid), grad_features,
      grad_tap_features, {grad_pts, grad_tap_pts, grad_rotations, grad_planes}, deterministic,
      workspace, workspace_bytes, stream);
}

}  // namespace fieldfuse
