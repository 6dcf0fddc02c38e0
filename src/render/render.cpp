// SPDX-License-Identifier: Apache-2.0
// The render front: validates every argument, lays out strided views and picks the CPU or CUDA
// driver. All checks live here, so C++ and Python callers see the same messages.
#include "fieldfuse/render.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "render/render_drivers.h"
#include "render/render_math.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
using detail::render::kRayStateFields;
using detail::render::LineIntegralArgs;
using detail::render::Mat;
using detail::render::RayBoxArgs;
using detail::render::Rays;
using detail::render::Vec;
using detail::render::VolumeRenderArgs;

/// A present tensor without elements may have a null data pointer; the drivers tell absent from
/// present by the pointer, so such a tensor gets this (never dereferenced) address instead.
char empty_tensor_marker;

void* data_of(const TensorRef& t) { return t.data != nullptr ? t.data : &empty_tensor_marker; }

std::string dims(int64_t a) { return "[" + std::to_string(a) + "]"; }
std::string dims(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

Vec vec(const TensorRef& t) {
  return is_absent(t) ? Vec{} : Vec{data_of(t), t.ndim > 0 ? t.strides[0] : 0};
}
Mat mat(const TensorRef& t) {
  if (is_absent(t)) return {};
  return {data_of(t), t.strides[0], t.ndim > 1 ? t.strides[1] : 0};
}

/// A per-sample or per-ray float input of the given shape, on `ref`'s device with its dtype.
void check_input(const char* op, const char* arg, const TensorRef& t, const TensorRef& ref,
                 const char* ref_arg, std::initializer_list<int64_t> shape,
                 const std::string& layout) {
  detail::check_storage(op, arg, t);
  detail::check_shape(op, arg, t, shape, layout.c_str());
  detail::check_same_device(op, arg, t, ref_arg, ref);
  const std::string why = std::string("the dtype of ") + ref_arg;
  detail::check_dtype(op, arg, t, ref.dtype, why.c_str());
}

/// A written tensor: like an input, plus distinct elements and no overlap with `inputs`.
template <class... Inputs>
void check_output(const char* op, const char* arg, const TensorRef& t, const TensorRef& ref,
                  const char* ref_arg, std::initializer_list<int64_t> shape,
                  const std::string& layout, DType dtype, const Inputs&... inputs) {
  detail::check_storage(op, arg, t);
  detail::check_shape(op, arg, t, shape, layout.c_str());
  detail::check_same_device(op, arg, t, ref_arg, ref);
  const std::string why =
      dtype == ref.dtype ? std::string("the dtype of ") + ref_arg : std::string("int64");
  detail::check_dtype(op, arg, t, dtype, why.c_str());
  detail::check_no_repeated_elements(op, arg, t);
  (detail::check_disjoint(op, arg, t, inputs.first, *inputs.second), ...);
}

/// The offsets of R rays: a 1-D int64 tensor of R + 1 >= 1 entries.
Rays check_offsets(const char* op, const TensorRef& offsets, const TensorRef& ref,
                   const char* ref_arg, int64_t num_samples) {
  detail::check_storage(op, "offsets", offsets);
  if (offsets.ndim != 1 || offsets.sizes[0] < 1) {
    fail(ErrorKind::Value, op,
         "expected offsets to have shape [R + 1] (at least one entry), but got shape " +
             offsets.shape_str());
  }
  if (offsets.dtype != DType::Int64) {
    fail(ErrorKind::Type, op,
         std::string("expected offsets to be int64, but got ") + dtype_name(offsets.dtype));
  }
  detail::check_same_device(op, "offsets", offsets, ref_arg, ref);
  Rays rays;
  rays.offsets = static_cast<const int64_t*>(offsets.data);
  rays.stride = offsets.strides[0];
  rays.count = offsets.sizes[0] - 1;
  rays.samples = num_samples;
  // Host memory can be checked here at no cost; device offsets are checked by the Python layer
  // (reading them would synchronise), and the drivers clamp every ray into [0, N] regardless.
  if (!offsets.device.is_cuda()) {
    const int64_t* o = rays.offsets;
    if (o[0] != 0) {
      fail(ErrorKind::Value, op, "expected offsets[0] == 0, but got " + std::to_string(o[0]));
    }
    for (int64_t r = 0; r < rays.count; ++r) {
      if (o[(r + 1) * rays.stride] < o[r * rays.stride]) {
        fail(ErrorKind::Value, op,
             "expected offsets to be non-decreasing, but offsets[" + std::to_string(r + 1) +
                 "] = " + std::to_string(o[(r + 1) * rays.stride]) + " < offsets[" +
                 std::to_string(r) + "] = " + std::to_string(o[r * rays.stride]));
      }
    }
    if (o[rays.count * rays.stride] != num_samples) {
      fail(
          ErrorKind::Value, op,
          "expected offsets[-1] to equal the number of samples N = " + std::to_string(num_samples) +
              ", but got " + std::to_string(o[rays.count * rays.stride]));
    }
  }
  return rays;
}

void check_float(const char* op, const char* arg, const TensorRef& t) {
  detail::check_storage(op, arg, t);
  detail::check_device_supported(op, arg, t);
  detail::check_float_dtype(op, arg, t);
}

// ---- volume_render ---------------------------------------------------------------------------

constexpr const char* kRenderOp = "volume_render";
constexpr const char* kRenderBackwardOp = "volume_render_backward";

VolumeRenderArgs render_args(const char* op, const VolumeRenderInputs& in) {
  const char* first = in.alpha_input ? "alphas" : "sigmas";  // the name users pass
  check_float(op, first, in.sigmas);
  if (in.sigmas.ndim != 1) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + first + " to have shape [N], but got shape " +
             in.sigmas.shape_str());
  }
  const int64_t n = in.sigmas.sizes[0];
  detail::check_storage(op, "rgbs", in.rgbs);
  if (in.rgbs.ndim != 2 || in.rgbs.sizes[0] != n || in.rgbs.sizes[1] < 1) {
    fail(ErrorKind::Value, op,
         "expected rgbs to have shape [N, C] with N = " + std::to_string(n) + " (the samples of " +
             first + ") and C >= 1, but got shape " + in.rgbs.shape_str());
  }
  const int64_t c = in.rgbs.sizes[1];
  check_input(op, "rgbs", in.rgbs, in.sigmas, first, {n, c}, dims(n, c));
  VolumeRenderArgs a;
  a.op = op;
  a.dtype = in.sigmas.dtype;
  a.device = in.sigmas.device;
  a.channels = c;
  a.alpha_input = in.alpha_input;
  a.sigmas = vec(in.sigmas);
  a.rgbs = mat(in.rgbs);
  if (!in.alpha_input || !is_absent(in.delta_ts)) {
    check_input(op, "delta_ts", in.delta_ts, in.sigmas, first, {n}, dims(n));
    a.delta_ts = vec(in.delta_ts);
  }
  if (!is_absent(in.ts)) {
    check_input(op, "ts", in.ts, in.sigmas, first, {n}, dims(n));
    a.ts = vec(in.ts);
  }
  a.rays = check_offsets(op, in.offsets, in.sigmas, first, n);
  const int64_t r = a.rays.count;
  if (!std::isfinite(in.transmittance_thresh) || in.transmittance_thresh < 0.0 ||
      in.transmittance_thresh >= 1.0) {
    fail(ErrorKind::Value, op,
         "expected transmittance_thresh in [0, 1), but got " +
             detail::number_text(in.transmittance_thresh));
  }
  a.transmittance_thresh = in.transmittance_thresh;
  if (!is_absent(in.background)) {
    const TensorRef& bg = in.background;
    if (bg.ndim == 1) {
      check_input(op, "background", bg, in.sigmas, first, {c}, dims(c) + " or [R, C]");
      a.background = {bg.data, 0, bg.strides[0]};  // every ray reads the same row
    } else {
      check_input(op, "background", bg, in.sigmas, first, {r, c}, "[C] or " + dims(r, c));
      a.background = mat(bg);
    }
  }
  if (!is_absent(in.prefix_transmittance)) {
    check_input(op, "prefix_transmittance", in.prefix_transmittance, in.sigmas, first, {r},
                dims(r));
    a.prefix = vec(in.prefix_transmittance);
  }
  return a;
}

}  // namespace

void volume_render_forward(const VolumeRenderInputs& in, const VolumeRenderOutputs& out,
                           Stream stream) {
  const char* op = in.alpha_input ? "volume_render_alpha" : kRenderOp;
  VolumeRenderArgs a = render_args(op, in);
  const char* first = in.alpha_input ? "alphas" : "sigmas";
  const int64_t r = a.rays.count, c = a.channels, n = a.rays.samples;
  const std::pair<const char*, const TensorRef*> sigmas{first, &in.sigmas}, rgbs{"rgbs", &in.rgbs};
  check_output(op, "rgb", out.rgb, in.sigmas, first, {r, c}, dims(r, c), a.dtype, sigmas, rgbs);
  a.rgb = mat(out.rgb);
  const auto optional_vector = [&](const char* arg, const TensorRef& t, int64_t size, DType dtype,
                                   Vec& into) {
    if (is_absent(t)) return;
    check_output(op, arg, t, in.sigmas, first, {size}, dims(size), dtype, sigmas, rgbs);
    detail::check_disjoint(op, arg, t, "rgb", out.rgb);
    into = vec(t);
  };
  optional_vector("opacity", out.opacity, r, a.dtype, a.opacity);
  if (!is_absent(out.depth) && !a.ts.present()) {
    fail(ErrorKind::Value, op, "the depth output needs ts (the sample depths), but ts is absent");
  }
  optional_vector("depth", out.depth, r, a.dtype, a.depth);
  optional_vector("weights", out.weights, n, a.dtype, a.weights);
  optional_vector("total_samples", out.total_samples, r, DType::Int64, a.total_samples);
  optional_vector("transmittance", out.transmittance, r, a.dtype, a.transmittance);
  if (!is_absent(out.ray_state)) {
    check_output(op, "ray_state", out.ray_state, in.sigmas, first, {r, kRayStateFields},
                 dims(r, kRayStateFields), DType::Float64, sigmas, rgbs);
    detail::check_disjoint(op, "ray_state", out.ray_state, "rgb", out.rgb);
    a.ray_state = mat(out.ray_state);
  }
  a.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) return detail::render::volume_render_forward_cuda(a);
#endif
  detail::render::volume_render_forward_cpu(a);
}

void volume_render_backward(const VolumeRenderInputs& in, const VolumeRenderGradients& g,
                            Stream stream) {
  const char* op = in.alpha_input ? "volume_render_alpha_backward" : kRenderBackwardOp;
  VolumeRenderArgs a = render_args(op, in);
  const char* first = in.alpha_input ? "alphas" : "sigmas";
  const int64_t r = a.rays.count, c = a.channels, n = a.rays.samples;
  check_input(op, "grad_rgb", g.grad_rgb, in.sigmas, first, {r, c}, dims(r, c));
  a.grad_rgb = mat(g.grad_rgb);
  const auto upstream = [&](const char* arg, const TensorRef& t, int64_t size, Vec& into) {
    if (is_absent(t)) return;
    check_input(op, arg, t, in.sigmas, first, {size}, dims(size));
    into = vec(t);
  };
  upstream("grad_opacity", g.grad_opacity, r, a.grad_opacity);
  upstream("grad_depth", g.grad_depth, r, a.grad_depth);
  upstream("grad_weights", g.grad_weights, n, a.grad_weights);
  upstream("grad_transmittance", g.grad_transmittance, r, a.grad_transmittance);
  if (!is_absent(g.ray_state)) {
    detail::check_storage(op, "ray_state", g.ray_state);
    detail::check_shape(op, "ray_state", g.ray_state, {r, kRayStateFields},
                        dims(r, kRayStateFields).c_str());
    detail::check_same_device(op, "ray_state", g.ray_state, first, in.sigmas);
    detail::check_dtype(op, "ray_state", g.ray_state, DType::Float64, "float64");
    a.ray_state = mat(g.ray_state);
  }
  if (a.grad_depth.present() && !a.ts.present()) {
    fail(ErrorKind::Value, op, "grad_depth needs ts (the sample depths), but ts is absent");
  }
  const std::pair<const char*, const TensorRef*> sigmas{first, &in.sigmas}, rgbs{"rgbs", &in.rgbs},
      grad_rgb{"grad_rgb", &g.grad_rgb};
  const auto gradient = [&](const char* arg, const TensorRef& t,
                            std::initializer_list<int64_t> shape, const std::string& layout) {
    if (is_absent(t)) return false;
    check_output(op, arg, t, in.sigmas, first, shape, layout, a.dtype, sigmas, rgbs, grad_rgb);
    return true;
  };
  if (gradient("grad_sigmas", g.grad_sigmas, {n}, dims(n))) a.grad_sigmas = vec(g.grad_sigmas);
  if (gradient("grad_rgbs", g.grad_rgbs, {n, c}, dims(n, c))) a.grad_rgbs = mat(g.grad_rgbs);
  if (gradient("grad_delta_ts", g.grad_delta_ts, {n}, dims(n))) {
    if (in.alpha_input) {
      fail(ErrorKind::Value, op, "grad_delta_ts is undefined with alpha_input (δ is unused)");
    }
    a.grad_delta_ts = vec(g.grad_delta_ts);
  }
  if (gradient("grad_ts", g.grad_ts, {n}, dims(n))) a.grad_ts = vec(g.grad_ts);
  if (!is_absent(g.grad_background)) {
    // float32 is accepted too for 16-bit inputs (see VolumeRenderArgs::grad_background_float32).
    const bool wide = (a.dtype == DType::Float16 || a.dtype == DType::BFloat16) &&
                      g.grad_background.dtype == DType::Float32;
    check_output(op, "grad_background", g.grad_background, in.sigmas, first, {r, c}, dims(r, c),
                 wide ? DType::Float32 : a.dtype, sigmas, rgbs, grad_rgb);
    a.grad_background = mat(g.grad_background);
    a.grad_background_float32 = wide;
  }
  if (gradient("grad_prefix_transmittance", g.grad_prefix_transmittance, {r}, dims(r))) {
    a.grad_prefix = vec(g.grad_prefix_transmittance);
  }
  a.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) return detail::render::volume_render_backward_cuda(a);
#endif
  detail::render::volume_render_backward_cpu(a);
}

// ---- line_integral ---------------------------------------------------------------------------

namespace {

constexpr const char* kLineOp = "line_integral";
constexpr const char* kLineBackwardOp = "line_integral_backward";

LineIntegralArgs line_args(const char* op, const TensorRef& values, const TensorRef& delta_ts,
                           const TensorRef& offsets) {
  check_float(op, "values", values);
  if (values.ndim != 1 && values.ndim != 2) {
    fail(ErrorKind::Value, op,
         "expected values to have shape [N] or [N, C], but got shape " + values.shape_str());
  }
  const int64_t n = values.sizes[0];
  LineIntegralArgs a;
  a.op = op;
  a.dtype = values.dtype;
  a.device = values.device;
  a.channels = values.ndim == 2 ? values.sizes[1] : 1;
  if (a.channels < 1) {
    fail(ErrorKind::Value, op,
         "expected values to have C >= 1 channels, but got shape " + values.shape_str());
  }
  a.values = mat(values);
  check_input(op, "delta_ts", delta_ts, values, "values", {n}, dims(n));
  a.delta_ts = vec(delta_ts);
  a.rays = check_offsets(op, offsets, values, "values", n);
  return a;
}

}  // namespace

void line_integral_forward(const TensorRef& values, const TensorRef& delta_ts,
                           const TensorRef& offsets, const TensorRef& out, Stream stream) {
  LineIntegralArgs a = line_args(kLineOp, values, delta_ts, offsets);
  const int64_t r = a.rays.count;
  const std::pair<const char*, const TensorRef*> v{"values", &values}, d{"delta_ts", &delta_ts};
  if (values.ndim == 1) {
    check_output(kLineOp, "out", out, values, "values", {r}, dims(r), a.dtype, v, d);
  } else {
    check_output(kLineOp, "out", out, values, "values", {r, a.channels}, dims(r, a.channels),
                 a.dtype, v, d);
  }
  a.out = mat(out);
  a.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) return detail::render::line_integral_forward_cuda(a);
#endif
  detail::render::line_integral_forward_cpu(a);
}

void line_integral_backward(const TensorRef& values, const TensorRef& delta_ts,
                            const TensorRef& offsets, const TensorRef& grad_out,
                            const TensorRef& grad_values, const TensorRef& grad_delta_ts,
                            Stream stream) {
  const char* op = kLineBackwardOp;
  LineIntegralArgs a = line_args(op, values, delta_ts, offsets);
  const int64_t r = a.rays.count, n = a.rays.samples;
  if (values.ndim == 1) {
    check_input(op, "grad_out", grad_out, values, "values", {r}, dims(r));
  } else {
    check_input(op, "grad_out", grad_out, values, "values", {r, a.channels}, dims(r, a.channels));
  }
  a.out = mat(grad_out);
  const std::pair<const char*, const TensorRef*> v{"values", &values}, d{"delta_ts", &delta_ts},
      g{"grad_out", &grad_out};
  if (!is_absent(grad_values)) {
    if (values.ndim == 1) {
      check_output(op, "grad_values", grad_values, values, "values", {n}, dims(n), a.dtype, v, d,
                   g);
    } else {
      check_output(op, "grad_values", grad_values, values, "values", {n, a.channels},
                   dims(n, a.channels), a.dtype, v, d, g);
    }
    a.grad_values = mat(grad_values);
  }
  if (!is_absent(grad_delta_ts)) {
    check_output(op, "grad_delta_ts", grad_delta_ts, values, "values", {n}, dims(n), a.dtype, v, d,
                 g);
    a.grad_delta_ts = vec(grad_delta_ts);
  }
  a.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) return detail::render::line_integral_backward_cuda(a);
#endif
  detail::render::line_integral_backward_cpu(a);
}

// ---- ray_box_samples -------------------------------------------------------------------------

namespace {

constexpr const char* kBoxOp = "ray_box_samples";
constexpr const char* kBoxBackwardOp = "ray_box_samples_backward";
constexpr const char* kPaddedOp = "ray_box_samples_padded";
constexpr const char* kPaddedBackwardOp = "ray_box_samples_padded_backward";

/// ceil(2√3/ds), or an error naming ds when it is not a positive finite step or when the sample
/// counts of `num_rays` rays (each at most the result + 1, with 3 coordinates) could overflow
/// int64 (ds = 1e-300 asks for 3e300 samples; a cast would wrap around).
double checked_max_steps(const char* op, double ds, int64_t num_rays) {
  if (!std::isfinite(ds) || ds <= 0.0) {
    fail(ErrorKind::Value, op,
         "expected ds to be finite and > 0, but got " + detail::number_text(ds));
  }
  const double steps = detail::render::max_box_steps(ds);
  // 2^62: below int64's 2^63 with room for the + 1 and the rounding of the product.
  constexpr double kMaxElements = 4611686018427387904.0;
  const double rays = num_rays > 1 ? static_cast<double>(num_rays) : 1.0;
  if (!((steps + 1.0) * 3.0 * rays < kMaxElements)) {
    fail(ErrorKind::Value, op,
         "expected ds large enough that R·(ceil(2√3/ds) + 1)·3 samples fit in int64 (R = " +
             std::to_string(num_rays) + " rays), but got ds = " + detail::number_text(ds));
  }
  return steps;
}

RayBoxArgs box_args(const char* op, const TensorRef& origins, const TensorRef& directions,
                    double ds) {
  check_float(op, "origins", origins);
  if (origins.ndim != 2 || origins.sizes[1] != 3) {
    fail(ErrorKind::Value, op,
         "expected origins to have shape [R, 3], but got shape " + origins.shape_str());
  }
  const int64_t r = origins.sizes[0];
  check_input(op, "directions", directions, origins, "origins", {r, 3}, dims(r, 3));
  RayBoxArgs a;
  a.op = op;
  a.dtype = origins.dtype;
  a.device = origins.device;
  a.num_rays = r;
  a.ds = ds;
  a.origins = mat(origins);
  a.directions = mat(directions);
  a.capacity = static_cast<int64_t>(checked_max_steps(op, ds, r)) + 1;
  return a;
}

/// The packed layout: offsets [R+1] over N samples.
void packed_layout(const char* op, RayBoxArgs& a, const TensorRef& offsets, const TensorRef& ref,
                   int64_t num_samples) {
  const Rays rays = check_offsets(op, offsets, ref, "origins", num_samples);
  if (rays.count != a.num_rays) {
    fail(ErrorKind::Value, op,
         "expected offsets to have R + 1 = " + std::to_string(a.num_rays + 1) +
             " entries (one ray per origin), but got " + std::to_string(rays.count + 1));
  }
  a.offsets = rays.offsets;
  a.offsets_stride = rays.stride;
}

/// A packed [N, ...] or padded [R, S, ...] per-sample tensor as rows × (k) with row strides.
Mat sample_rows(const char* op, const char* arg, const TensorRef& t, const RayBoxArgs& a,
                int inner) {
  if (!a.padded) {
    if (t.ndim != 1 + inner || (inner == 1 && t.sizes[1] != 3)) {
      fail(ErrorKind::Value, op,
           std::string("expected ") + arg + " to have shape " + (inner ? "[N, 3]" : "[N]") +
               " (packed), but got shape " + t.shape_str());
    }
    return {data_of(t), t.strides[0], inner ? t.strides[1] : 0};
  }
  const int64_t s = a.capacity;
  const bool ok = t.ndim == 2 + inner && t.sizes[0] == a.num_rays && t.sizes[1] == s &&
                  (inner == 0 || t.sizes[2] == 3);
  if (!ok) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg + " to have shape [" + std::to_string(a.num_rays) + ", " +
             std::to_string(s) + (inner ? ", 3]" : "]") +
             " (padded: S = ceil(2√3/ds) + 1), but got shape " + t.shape_str());
  }
  // One ray (or none) has no ray stride to speak of: DLPack exporters may report any value for a
  // dimension of size 0 or 1 (torch 2.4 reports 1).
  if (a.num_rays > 1 && t.strides[0] != s * t.strides[1]) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg +
             "'s ray and sample dims to be contiguous with each other "
             "(stride[0] == S·stride[1])");
  }
  return {data_of(t), t.strides[1], inner ? t.strides[2] : 0};
}

/// The forward of either layout: checks the written tensors, then runs the driver.
void box_forward(RayBoxArgs& a, const TensorRef& origins, const TensorRef& directions,
                 const TensorRef& points, const TensorRef& delta_ts, const TensorRef& valid) {
  const char* op = a.op;
  const auto check_written = [&](const char* arg, const TensorRef& t, DType dtype,
                                 const char* why) {
    detail::check_storage(op, arg, t);
    detail::check_same_device(op, arg, t, "origins", origins);
    detail::check_dtype(op, arg, t, dtype, why);
    detail::check_no_repeated_elements(op, arg, t);
    detail::check_disjoint(op, arg, t, "origins", origins);
    detail::check_disjoint(op, arg, t, "directions", directions);
  };
  check_written("points", points, origins.dtype, "the dtype of origins");
  check_written("delta_ts", delta_ts, origins.dtype, "the dtype of origins");
  a.points = sample_rows(op, "points", points, a, 1);
  const Mat steps = sample_rows(op, "delta_ts", delta_ts, a, 0);
  a.delta_ts = {steps.data, steps.stride0};
  if (!a.padded && delta_ts.sizes[0] != points.sizes[0]) {
    fail(ErrorKind::Value, op, "expected delta_ts to have as many samples as points");
  }
  if (a.padded) {
    check_written("valid", valid, DType::Bool, "a mask");
    const Mat v = sample_rows(op, "valid", valid, a, 0);
    a.valid = {v.data, v.stride0};
  }
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) return detail::render::ray_box_forward_cuda(a);
#endif
  detail::render::ray_box_forward_cpu(a);
}

/// The backward of either layout (grad_points already checked for storage).
void box_backward(RayBoxArgs& a, const TensorRef& origins, const TensorRef& directions,
                  const TensorRef& grad_points, const TensorRef& grad_delta_ts,
                  const TensorRef& grad_origins, const TensorRef& grad_directions) {
  const char* op = a.op;
  detail::check_same_device(op, "grad_points", grad_points, "origins", origins);
  detail::check_dtype(op, "grad_points", grad_points, origins.dtype, "the dtype of origins");
  a.grad_points = sample_rows(op, "grad_points", grad_points, a, 1);
  if (!is_absent(grad_delta_ts)) {
    detail::check_storage(op, "grad_delta_ts", grad_delta_ts);
    detail::check_same_device(op, "grad_delta_ts", grad_delta_ts, "origins", origins);
    detail::check_dtype(op, "grad_delta_ts", grad_delta_ts, origins.dtype, "the dtype of origins");
    const Mat g = sample_rows(op, "grad_delta_ts", grad_delta_ts, a, 0);
    a.grad_delta_ts = {g.data, g.stride0};
  }
  const std::pair<const char*, const TensorRef*> o{"origins", &origins},
      d{"directions", &directions}, gp{"grad_points", &grad_points};
  if (!is_absent(grad_origins)) {
    check_output(op, "grad_origins", grad_origins, origins, "origins", {a.num_rays, 3},
                 dims(a.num_rays, 3), a.dtype, o, d, gp);
    a.grad_origins = mat(grad_origins);
  }
  if (!is_absent(grad_directions)) {
    check_output(op, "grad_directions", grad_directions, origins, "origins", {a.num_rays, 3},
                 dims(a.num_rays, 3), a.dtype, o, d, gp);
    a.grad_directions = mat(grad_directions);
  }
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) return detail::render::ray_box_backward_cuda(a);
#endif
  detail::render::ray_box_backward_cpu(a);
}

}  // namespace

int64_t ray_box_samples_padded_capacity(double ds) {
  return static_cast<int64_t>(checked_max_steps(kPaddedOp, ds, 1)) + 1;
}

void ray_box_samples_counts(const TensorRef& origins, const TensorRef& directions, double ds,
                            const TensorRef& counts, Stream stream) {
  RayBoxArgs a = box_args(kBoxOp, origins, directions, ds);
  const std::pair<const char*, const TensorRef*> o{"origins", &origins},
      d{"directions", &directions};
  check_output(kBoxOp, "counts", counts, origins, "origins", {a.num_rays}, dims(a.num_rays),
               DType::Int64, o, d);
  a.counts = vec(counts);
  a.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (a.device.is_cuda()) return detail::render::ray_box_counts_cuda(a);
#endif
  detail::render::ray_box_counts_cpu(a);
}

void ray_box_samples_forward(const TensorRef& origins, const TensorRef& directions, double ds,
                             const TensorRef& offsets, const TensorRef& points,
                             const TensorRef& delta_ts, Stream stream) {
  RayBoxArgs a = box_args(kBoxOp, origins, directions, ds);
  detail::check_storage(kBoxOp, "points", points);
  packed_layout(kBoxOp, a, offsets, origins, points.ndim > 0 ? points.sizes[0] : 0);
  a.stream = stream;
  box_forward(a, origins, directions, points, delta_ts, TensorRef{});
}

void ray_box_samples_padded_forward(const TensorRef& origins, const TensorRef& directions,
                                    double ds, const TensorRef& points, const TensorRef& delta_ts,
                                    const TensorRef& valid, Stream stream) {
  RayBoxArgs a = box_args(kPaddedOp, origins, directions, ds);
  a.padded = true;
  a.stream = stream;
  box_forward(a, origins, directions, points, delta_ts, valid);
}

void ray_box_samples_backward(const TensorRef& origins, const TensorRef& directions, double ds,
                              const TensorRef& offsets, const TensorRef& grad_points,
                              const TensorRef& grad_delta_ts, const TensorRef& grad_origins,
                              const TensorRef& grad_directions, Stream stream) {
  RayBoxArgs a = box_args(kBoxBackwardOp, origins, directions, ds);
  detail::check_storage(kBoxBackwardOp, "grad_points", grad_points);
  packed_layout(kBoxBackwardOp, a, offsets, origins,
                grad_points.ndim > 0 ? grad_points.sizes[0] : 0);
  a.stream = stream;
  box_backward(a, origins, directions, grad_points, grad_delta_ts, grad_origins, grad_directions);
}

void ray_box_samples_padded_backward(const TensorRef& origins, const TensorRef& directions,
                                     double ds, const TensorRef& grad_points,
                                     const TensorRef& grad_delta_ts, const TensorRef& grad_origins,
                                     const TensorRef& grad_directions, Stream stream) {
  RayBoxArgs a = box_args(kPaddedBackwardOp, origins, directions, ds);
  detail::check_storage(kPaddedBackwardOp, "grad_points", grad_points);
  a.padded = true;
  a.stream = stream;
  box_backward(a, origins, directions, grad_points, grad_delta_ts, grad_origins, grad_directions);
}

}  // namespace fieldfuse
