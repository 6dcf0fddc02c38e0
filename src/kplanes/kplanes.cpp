// SPDX-License-Identifier: Apache-2.0
// The K-Planes front: validates every argument, lays the problem out for the drivers and picks the
// CPU or CUDA one. All checks live here, so C++ and Python callers see the same messages.
#include "fieldfuse/kplanes.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
using detail::kplanes::BackwardArgs;
using detail::kplanes::ForwardOutputs;
using detail::kplanes::Level;
using detail::kplanes::MatrixView;
using detail::kplanes::PlaneView;
using detail::kplanes::PointsView;
using detail::kplanes::Problem;
using detail::kplanes::Variant;

/// The op names errors and profiler ranges use: the variant's public name.
const char* forward_op(const KPlanesInputs& in) {
  return in.variant == KPlanesVariant::Tilted ? "kplanes_tilted" : "kplanes";
}
const char* backward_op(const KPlanesInputs& in) {
  return in.variant == KPlanesVariant::Tilted ? "kplanes_tilted_backward" : "kplanes_backward";
}

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

/// Validates the inputs and lays them out; `needs_data = false` for workspace queries.
Problem make_problem(const char* op, const KPlanesInputs& in, bool needs_data = true) {
  Problem pb;
  pb.op = op;
  pb.variant = in.variant == KPlanesVariant::Tilted ? Variant::kTilted : Variant::kAxisAligned;
  if (in.variant != KPlanesVariant::Tilted && in.variant != KPlanesVariant::AxisAligned) {
    fail(ErrorKind::Value, op, "expected variant to be Tilted or AxisAligned");
  }

  check_geometry_tensor(op, "pts", in.pts, needs_data);
  detail::check_shape(op, "pts", in.pts, {-1, 3}, "[B, 3]");
  pb.dtype = in.pts.dtype;
  pb.device = in.pts.device;
  pb.pts = points_view(in.pts);

  if (!is_absent(in.tap_pts)) {
    check_geometry_tensor(op, "tap_pts", in.tap_pts, needs_data);
    detail::check_shape(op, "tap_pts", in.tap_pts, {-1, 3}, "[N, 3]");
    detail::check_same_device(op, "tap_pts", in.tap_pts, "pts", in.pts);
    detail::check_dtype(op, "tap_pts", in.tap_pts, pb.dtype, "the dtype of pts");
    pb.tap_pts = points_view(in.tap_pts);
    if (pb.tap_pts.rows > 0 && !std::isfinite(in.h)) {
      fail(ErrorKind::Value, op, "expected h to be finite, but got " + detail::number_text(in.h));
    }
    pb.h = in.h;
  }

  if (pb.variant == Variant::kTilted) {
    check_geometry_tensor(op, "rotations", in.rotations, needs_data);
    detail::check_shape(op, "rotations", in.rotations, {-1, 3, 3}, "[T, 3, 3]");
    detail::check_same_device(op, "rotations", in.rotations, "pts", in.pts);
    detail::check_dtype(op, "rotations", in.rotations, pb.dtype, "the dtype of pts");
    if (in.rotations.sizes[0] < 1) {
      fail(ErrorKind::Value, op,
           "expected rotations to hold at least one tilt, but got shape " +
               in.rotations.shape_str());
    }
    pb.num_tilts = static_cast<int>(in.rotations.sizes[0]);
    pb.rotations = in.rotations.data;
    for (int i = 0; i < 3; ++i) pb.rotation_strides[i] = in.rotations.strides[i];
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
    detail::check_same_device(op, arg.c_str(), t, "pts", in.pts);
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
             "expected planes to have the dtype of pts (" + std::string(dtype_name(pb.dtype)) +
                 "), or float16/bfloat16 with float32 pts, but got " + dtype_name(t.dtype));
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
                                const KPlanesInputs& in) {
  detail::check_disjoint(op, arg, t, "pts", in.pts);
  if (!is_absent(in.tap_pts)) detail::check_disjoint(op, arg, t, "tap_pts", in.tap_pts);
  if (!is_absent(in.rotations)) detail::check_disjoint(op, arg, t, "rotations", in.rotations);
  for (int l = 0; l < in.num_levels; ++l) {
    detail::check_disjoint(op, arg, t, level_arg("planes", l).c_str(), in.planes[l]);
  }
}

/// A feature output: the given shape, contiguous, on pts' device, not aliasing inputs.
void check_output(const char* op, const char* arg, const TensorRef& t, const KPlanesInputs& in,
                  std::initializer_list<int64_t> shape, const char* layout) {
  detail::check_storage(op, arg, t);
  detail::check_shape(op, arg, t, shape, layout);
  detail::check_same_device(op, arg, t, "pts", in.pts);
  detail::check_contiguous(op, arg, t);
  check_disjoint_from_inputs(op, arg, t, in);
}

/// Features are the compute type or the plane dtype.
void check_feature_dtype(const char* op, const char* arg, const TensorRef& t, const Problem& pb) {
  if (t.dtype != pb.dtype && t.dtype != pb.plane_dtype) {
    fail(ErrorKind::Type, op,
         "expected " + std::string(arg) + " to be " + dtype_name(pb.dtype) + " (the dtype of pts)" +
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

}  // namespace

int64_t kplanes_num_features(const KPlanesInputs& inputs) {
  return make_problem(forward_op(inputs), inputs, /*needs_data=*/false).num_features;
}

void kplanes_forward(const KPlanesInputs& inputs, const TensorRef& features,
                     const TensorRef& tap_features, Stream stream) {
  const char* op = forward_op(inputs);
  const Problem pb = make_problem(op, inputs);
  const int64_t f = pb.num_features;
  check_feature_dtype(op, "features", features, pb);
  const std::string rows = shape_text(pb.pts.rows, f);
  check_output(op, "features", features, inputs, {pb.pts.rows, f}, rows.c_str());
  ForwardOutputs out{features.data, nullptr, features.dtype};
  if (pb.tap_pts.rows > 0 || !is_absent(tap_features)) {
    const std::string taps = shape_text(detail::kplanes::kTapsPerTapPoint, pb.tap_pts.rows, f);
    check_output(op, "tap_features", tap_features, inputs,
                 {detail::kplanes::kTapsPerTapPoint, pb.tap_pts.rows, f}, taps.c_str());
    detail::check_dtype(op, "tap_features", tap_features, features.dtype, "the dtype of features");
    detail::check_disjoint(op, "tap_features", tap_features, "features", features);
    out.tap_features = tap_features.data;
  }
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) return detail::kplanes::forward_cuda(pb, out, stream);
#endif
  (void)stream;
  detail::kplanes::forward_cpu(pb, out);
}

namespace {

/// Which gradients the caller wants must be possible for the problem.
void check_gradient_requests(const char* op, const Problem& pb, const KPlanesGradients& g) {
  if (g.rotations != nullptr && pb.variant != Variant::kTilted) {
    fail(ErrorKind::Value, op, "the axis-aligned variant has no rotations to differentiate");
  }
  if (g.tap_pts != nullptr && pb.tap_pts.rows == 0 && g.tap_pts->numel() > 0) {
    fail(ErrorKind::Value, op, "grad_tap_pts was requested without tap points");
  }
}

std::size_t backward_workspace(const Problem& pb, const KPlanesGradients& g, bool deterministic) {
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) {
    return detail::kplanes::backward_workspace_cuda(pb, g.planes != nullptr, deterministic);
  }
#endif
  (void)g;
  (void)deterministic;
  return detail::kplanes::backward_workspace_cpu(pb);
}

/// A gradient output: the shape and dtype of its input, distinct elements, not aliasing inputs or
/// the upstream gradients.
void check_gradient(const char* op, const char* arg, const TensorRef& grad, const char* input_arg,
                    const TensorRef& input, const KPlanesInputs& in, const TensorRef& grad_features,
                    const TensorRef& grad_tap_features) {
  detail::check_storage(op, arg, grad);
  detail::check_same_shape(op, arg, grad, input_arg, input);
  detail::check_same_device(op, arg, grad, input_arg, input);
  const std::string why = "the dtype of " + std::string(input_arg);
  detail::check_dtype(op, arg, grad, input.dtype, why.c_str());
  detail::check_no_repeated_elements(op, arg, grad);
  check_disjoint_from_inputs(op, arg, grad, in);
  detail::check_disjoint(op, arg, grad, "grad_features", grad_features);
  if (!is_absent(grad_tap_features)) {
    detail::check_disjoint(op, arg, grad, "grad_tap_features", grad_tap_features);
  }
}

}  // namespace

std::size_t kplanes_backward_workspace_size(const KPlanesInputs& inputs,
                                            const KPlanesGradients& grads, bool deterministic) {
  const Problem pb = make_problem(backward_op(inputs), inputs, /*needs_data=*/false);
  check_gradient_requests(backward_op(inputs), pb, grads);
  return backward_workspace(pb, grads, deterministic);
}

void kplanes_backward(const KPlanesInputs& inputs, const TensorRef& grad_features,
                      const TensorRef& grad_tap_features, const KPlanesGradients& grads,
                      bool deterministic, void* workspace, std::size_t workspace_bytes,
                      Stream stream) {
  const char* op = backward_op(inputs);
  BackwardArgs args;
  args.problem = make_problem(op, inputs);
  Problem& pb = args.problem;
  check_gradient_requests(op, pb, grads);
  const int64_t f = pb.num_features;

  detail::check_storage(op, "grad_features", grad_features);
  const std::string rows = shape_text(pb.pts.rows, f);
  detail::check_shape(op, "grad_features", grad_features, {pb.pts.rows, f}, rows.c_str());
  detail::check_same_device(op, "grad_features", grad_features, "pts", inputs.pts);
  check_feature_dtype(op, "grad_features", grad_features, pb);
  args.grad_dtype = grad_features.dtype;
  args.grad_features = {grad_features.data, 0, grad_features.strides[0], grad_features.strides[1]};
  if (pb.tap_pts.rows > 0) {
    const std::string taps = shape_text(detail::kplanes::kTapsPerTapPoint, pb.tap_pts.rows, f);
    detail::check_storage(op, "grad_tap_features", grad_tap_features);
    detail::check_shape(op, "grad_tap_features", grad_tap_features,
                        {detail::kplanes::kTapsPerTapPoint, pb.tap_pts.rows, f}, taps.c_str());
    detail::check_same_device(op, "grad_tap_features", grad_tap_features, "pts", inputs.pts);
    detail::check_dtype(op, "grad_tap_features", grad_tap_features, args.grad_dtype,
                        "the dtype of grad_features");
    args.grad_tap_features = {grad_tap_features.data, grad_tap_features.strides[0],
                              grad_tap_features.strides[1], grad_tap_features.strides[2]};
  }

  if (grads.pts != nullptr) {
    check_gradient(op, "grad_pts", *grads.pts, "pts", inputs.pts, inputs, grad_features,
                   grad_tap_features);
    args.grad_pts = grads.pts->data;
    args.grad_pts_strides[0] = grads.pts->strides[0];
    args.grad_pts_strides[1] = grads.pts->strides[1];
  }
  if (grads.tap_pts != nullptr && pb.tap_pts.rows > 0) {
    check_gradient(op, "grad_tap_pts", *grads.tap_pts, "tap_pts", inputs.tap_pts, inputs,
                   grad_features, grad_tap_features);
    args.grad_tap_pts = grads.tap_pts->data;
    args.grad_tap_pts_strides[0] = grads.tap_pts->strides[0];
    args.grad_tap_pts_strides[1] = grads.tap_pts->strides[1];
  }
  if (grads.rotations != nullptr) {
    check_gradient(op, "grad_rotations", *grads.rotations, "rotations", inputs.rotations, inputs,
                   grad_features, grad_tap_features);
    args.grad_rotations = grads.rotations->data;
    for (int i = 0; i < 3; ++i) args.grad_rotation_strides[i] = grads.rotations->strides[i];
  }
  if (grads.planes != nullptr) {
    args.wants_planes = true;
    for (int l = 0; l < inputs.num_levels; ++l) {
      const TensorRef& g = grads.planes[l];
      const std::string arg = level_arg("grad_planes", l);
      const std::string input_arg = level_arg("planes", l);
      check_gradient(op, arg.c_str(), g, input_arg.c_str(), inputs.planes[l], inputs, grad_features,
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
  detail::check_workspace(op, workspace, workspace_bytes,
                          backward_workspace(pb, grads, deterministic));
  args.deterministic = deterministic;
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  args.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) return detail::kplanes::backward_cuda(args);
#endif
  detail::kplanes::backward_cpu(args);
}

}  // namespace fieldfuse
