// SPDX-License-Identifier: Apache-2.0
// Python bindings of the render family: DLPack arrays in (None for absent tensors), the GIL
// released while a kernel runs. Entry points and arguments carry the public names (python/
// fieldfuse/README.md); volume_render_alpha_* bind the same C++ entries with alpha_input set.
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "fieldfuse/render.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;

/// The volume-render inputs; `first` is sigmas, or alphas for the alpha variant.
VolumeRenderInputs render_inputs(const char* op, bool alpha_input, const Array& first,
                                 const Array& rgbs, const OptionalArray& delta_ts,
                                 const OptionalArray& ts, const Array& offsets,
                                 double transmittance_thresh, const OptionalArray& background,
                                 const OptionalArray& prefix_transmittance) {
  VolumeRenderInputs in;
  in.sigmas = to_tensor_ref(first, op, alpha_input ? "alphas" : "sigmas");
  in.alpha_input = alpha_input;
  in.rgbs = to_tensor_ref(rgbs, op, "rgbs");
  in.delta_ts = to_tensor_ref(delta_ts, op, "delta_ts");
  in.ts = to_tensor_ref(ts, op, "ts");
  in.offsets = to_tensor_ref(offsets, op, "offsets");
  in.transmittance_thresh = transmittance_thresh;
  in.background = to_tensor_ref(background, op, "background");
  in.prefix_transmittance = to_tensor_ref(prefix_transmittance, op, "prefix_transmittance");
  return in;
}

void render_forward(const char* op, const VolumeRenderInputs& in, const Array& rgb,
                    const OptionalArray& opacity, const OptionalArray& depth,
                    const OptionalArray& weights, const OptionalArray& total_samples,
                    const OptionalArray& transmittance, const OptionalArray& ray_state,
                    std::uintptr_t stream) {
  VolumeRenderOutputs out;
  out.rgb = to_tensor_ref(rgb, op, "rgb");
  out.opacity = to_tensor_ref(opacity, op, "opacity");
  out.depth = to_tensor_ref(depth, op, "depth");
  out.weights = to_tensor_ref(weights, op, "weights");
  out.total_samples = to_tensor_ref(total_samples, op, "total_samples");
  out.transmittance = to_tensor_ref(transmittance, op, "transmittance");
  out.ray_state = to_tensor_ref(ray_state, op, "ray_state");
  nb::gil_scoped_release release;
  volume_render_forward(in, out, to_stream(stream));
}

/// Upstream gradients, the ray state and the gradients to compute; `grad_first` is grad_sigmas
/// or grad_alphas, and the alpha variant has no grad_delta_ts.
void render_backward(const char* op, const VolumeRenderInputs& in, const Array& grad_rgb,
                     const OptionalArray& grad_opacity, const OptionalArray& grad_depth,
                     const OptionalArray& grad_weights, const OptionalArray& grad_transmittance,
                     const OptionalArray& ray_state, const OptionalArray& grad_first,
                     const OptionalArray& grad_rgbs, const OptionalArray& grad_delta_ts,
                     const OptionalArray& grad_ts, const OptionalArray& grad_background,
                     const OptionalArray& grad_prefix_transmittance, std::uintptr_t stream) {
  VolumeRenderGradients g;
  g.grad_rgb = to_tensor_ref(grad_rgb, op, "grad_rgb");
  g.grad_opacity = to_tensor_ref(grad_opacity, op, "grad_opacity");
  g.grad_depth = to_tensor_ref(grad_depth, op, "grad_depth");
  g.grad_weights = to_tensor_ref(grad_weights, op, "grad_weights");
  g.grad_transmittance = to_tensor_ref(grad_transmittance, op, "grad_transmittance");
  g.ray_state = to_tensor_ref(ray_state, op, "ray_state");
  g.grad_sigmas = to_tensor_ref(grad_first, op, in.alpha_input ? "grad_alphas" : "grad_sigmas");
  g.grad_rgbs = to_tensor_ref(grad_rgbs, op, "grad_rgbs");
  g.grad_delta_ts = to_tensor_ref(grad_delta_ts, op, "grad_delta_ts");
  g.grad_ts = to_tensor_ref(grad_ts, op, "grad_ts");
  g.grad_background = to_tensor_ref(grad_background, op, "grad_background");
  g.grad_prefix_transmittance =
      to_tensor_ref(grad_prefix_transmittance, op, "grad_prefix_transmittance");
  nb::gil_scoped_release release;
  volume_render_backward(in, g, to_stream(stream));
}

void bind_volume_render(nb::module_& m) {
  m.def(
      "volume_render_forward",
      [](const Array& sigmas, const Array& rgbs, const Array& delta_ts, const OptionalArray& ts,
         const Array& offsets, double transmittance_thresh, const OptionalArray& background,
         const OptionalArray& prefix_transmittance, const Array& rgb, const OptionalArray& opacity,
         const OptionalArray& depth, const OptionalArray& weights,
         const OptionalArray& total_samples, const OptionalArray& transmittance,
         const OptionalArray& ray_state, std::uintptr_t stream) {
        constexpr const char* op = "volume_render";
        render_forward(op,
                       render_inputs(op, false, sigmas, rgbs, delta_ts, ts, offsets,
                                     transmittance_thresh, background, prefix_transmittance),
                       rgb, opacity, depth, weights, total_samples, transmittance, ray_state,
                       stream);
      },
      "sigmas"_a.noconvert(), "rgbs"_a.noconvert(), "delta_ts"_a.noconvert(),
      "ts"_a.noconvert().none(), "offsets"_a.noconvert(), "transmittance_thresh"_a,
      "background"_a.noconvert().none(), "prefix_transmittance"_a.noconvert().none(),
      "rgb"_a.noconvert(), "opacity"_a.noconvert().none(), "depth"_a.noconvert().none(),
      "weights"_a.noconvert().none(), "total_samples"_a.noconvert().none(),
      "transmittance"_a.noconvert().none(), "ray_state"_a.noconvert().none(), "stream"_a);
  m.def(
      "volume_render_alpha_forward",
      [](const Array& alphas, const Array& rgbs, const OptionalArray& ts, const Array& offsets,
         double transmittance_thresh, const OptionalArray& background,
         const OptionalArray& prefix_transmittance, const Array& rgb, const OptionalArray& opacity,
         const OptionalArray& depth, const OptionalArray& weights,
         const OptionalArray& total_samples, const OptionalArray& transmittance,
         const OptionalArray& ray_state, std::uintptr_t stream) {
        constexpr const char* op = "volume_render_alpha";
        render_forward(op,
                       render_inputs(op, true, alphas, rgbs, std::nullopt, ts, offsets,
                                     transmittance_thresh, background, prefix_transmittance),
                       rgb, opacity, depth, weights, total_samples, transmittance, ray_state,
                       stream);
      },
      "alphas"_a.noconvert(), "rgbs"_a.noconvert(), "ts"_a.noconvert().none(),
      "offsets"_a.noconvert(), "transmittance_thresh"_a, "background"_a.noconvert().none(),
      "prefix_transmittance"_a.noconvert().none(), "rgb"_a.noconvert(),
      "opacity"_a.noconvert().none(), "depth"_a.noconvert().none(), "weights"_a.noconvert().none(),
      "total_samples"_a.noconvert().none(), "transmittance"_a.noconvert().none(),
      "ray_state"_a.noconvert().none(), "stream"_a);

  m.def(
      "volume_render_backward",
      [](const Array& sigmas, const Array& rgbs, const Array& delta_ts, const OptionalArray& ts,
         const Array& offsets, double transmittance_thresh, const OptionalArray& background,
         const OptionalArray& prefix_transmittance, const Array& grad_rgb,
         const OptionalArray& grad_opacity, const OptionalArray& grad_depth,
         const OptionalArray& grad_weights, const OptionalArray& grad_transmittance,
         const OptionalArray& ray_state, const OptionalArray& grad_sigmas,
         const OptionalArray& grad_rgbs, const OptionalArray& grad_delta_ts,
         const OptionalArray& grad_ts, const OptionalArray& grad_background,
         const OptionalArray& grad_prefix_transmittance, std::uintptr_t stream) {
        constexpr const char* op = "volume_render_backward";
        render_backward(op,
                        render_inputs(op, false, sigmas, rgbs, delta_ts, ts, offsets,
                                      transmittance_thresh, background, prefix_transmittance),
                        grad_rgb, grad_opacity, grad_depth, grad_weights, grad_transmittance,
                        ray_state, grad_sigmas, grad_rgbs, grad_delta_ts, grad_ts, grad_background,
                        grad_prefix_transmittance, stream);
      },
      "sigmas"_a.noconvert(), "rgbs"_a.noconvert(), "delta_ts"_a.noconvert(),
      "ts"_a.noconvert().none(), "offsets"_a.noconvert(), "transmittance_thresh"_a,
      "background"_a.noconvert().none(), "prefix_transmittance"_a.noconvert().none(),
      "grad_rgb"_a.noconvert(), "grad_opacity"_a.noconvert().none(),
      "grad_depth"_a.noconvert().none(), "grad_weights"_a.noconvert().none(),
      "grad_transmittance"_a.noconvert().none(), "ray_state"_a.noconvert().none(),
      "grad_sigmas"_a.noconvert().none(), "grad_rgbs"_a.noconvert().none(),
      "grad_delta_ts"_a.noconvert().none(), "grad_ts"_a.noconvert().none(),
      "grad_background"_a.noconvert().none(), "grad_prefix_transmittance"_a.noconvert().none(),
      "stream"_a);
  m.def(
      "volume_render_alpha_backward",
      [](const Array& alphas, const Array& rgbs, const OptionalArray& ts, const Array& offsets,
         double transmittance_thresh, const OptionalArray& background,
         const OptionalArray& prefix_transmittance, const Array& grad_rgb,
         const OptionalArray& grad_opacity, const OptionalArray& grad_depth,
         const OptionalArray& grad_weights, const OptionalArray& grad_transmittance,
         const OptionalArray& ray_state, const OptionalArray& grad_alphas,
         const OptionalArray& grad_rgbs, const OptionalArray& grad_ts,
         const OptionalArray& grad_background, const OptionalArray& grad_prefix_transmittance,
         std::uintptr_t stream) {
        constexpr const char* op = "volume_render_alpha_backward";
        render_backward(op,
                        render_inputs(op, true, alphas, rgbs, std::nullopt, ts, offsets,
                                      transmittance_thresh, background, prefix_transmittance),
                        grad_rgb, grad_opacity, grad_depth, grad_weights, grad_transmittance,
                        ray_state, grad_alphas, grad_rgbs, std::nullopt, grad_ts, grad_background,
                        grad_prefix_transmittance, stream);
      },
      "alphas"_a.noconvert(), "rgbs"_a.noconvert(), "ts"_a.noconvert().none(),
      "offsets"_a.noconvert(), "transmittance_thresh"_a, "background"_a.noconvert().none(),
      "prefix_transmittance"_a.noconvert().none(), "grad_rgb"_a.noconvert(),
      "grad_opacity"_a.noconvert().none(), "grad_depth"_a.noconvert().none(),
      "grad_weights"_a.noconvert().none(), "grad_transmittance"_a.noconvert().none(),
      "ray_state"_a.noconvert().none(), "grad_alphas"_a.noconvert().none(),
      "grad_rgbs"_a.noconvert().none(), "grad_ts"_a.noconvert().none(),
      "grad_background"_a.noconvert().none(), "grad_prefix_transmittance"_a.noconvert().none(),
      "stream"_a);
}

void bind_line_integral(nb::module_& m) {
  m.def(
      "line_integral_forward",
      [](const Array& values, const Array& delta_ts, const Array& offsets, const Array& out,
         std::uintptr_t stream) {
        constexpr const char* op = "line_integral";
        const TensorRef v = to_tensor_ref(values, op, "values"),
                        d = to_tensor_ref(delta_ts, op, "delta_ts"),
                        o = to_tensor_ref(offsets, op, "offsets"),
                        p = to_tensor_ref(out, op, "out");
        nb::gil_scoped_release release;
        line_integral_forward(v, d, o, p, to_stream(stream));
      },
      "values"_a.noconvert(), "delta_ts"_a.noconvert(), "offsets"_a.noconvert(),
      "out"_a.noconvert(), "stream"_a);
  m.def(
      "line_integral_backward",
      [](const Array& values, const Array& delta_ts, const Array& offsets, const Array& grad_out,
         const OptionalArray& grad_values, const OptionalArray& grad_delta_ts,
         std::uintptr_t stream) {
        constexpr const char* op = "line_integral_backward";
        const TensorRef v = to_tensor_ref(values, op, "values"),
                        d = to_tensor_ref(delta_ts, op, "delta_ts"),
                        o = to_tensor_ref(offsets, op, "offsets"),
                        g = to_tensor_ref(grad_out, op, "grad_out"),
                        gv = to_tensor_ref(grad_values, op, "grad_values"),
                        gd = to_tensor_ref(grad_delta_ts, op, "grad_delta_ts");
        nb::gil_scoped_release release;
        line_integral_backward(v, d, o, g, gv, gd, to_stream(stream));
      },
      "values"_a.noconvert(), "delta_ts"_a.noconvert(), "offsets"_a.noconvert(),
      "grad_out"_a.noconvert(), "grad_values"_a.noconvert().none(),
      "grad_delta_ts"_a.noconvert().none(), "stream"_a);
}

void bind_ray_box_samples(nb::module_& m) {
  m.def("ray_box_samples_padded_capacity", &ray_box_samples_padded_capacity, "ds"_a);
  m.def(
      "ray_box_samples_counts",
      [](const Array& origins, const Array& directions, double ds, const Array& counts,
         std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        c = to_tensor_ref(counts, op, "counts");
        nb::gil_scoped_release release;
        ray_box_samples_counts(o, d, ds, c, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "counts"_a.noconvert(),
      "stream"_a);
  m.def(
      "ray_box_samples_forward",
      [](const Array& origins, const Array& directions, double ds, const Array& offsets,
         const Array& points, const Array& delta_ts, std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        off = to_tensor_ref(offsets, op, "offsets"),
                        p = to_tensor_ref(points, op, "points"),
                        dt = to_tensor_ref(delta_ts, op, "delta_ts");
        nb::gil_scoped_release release;
        ray_box_samples_forward(o, d, ds, off, p, dt, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "offsets"_a.noconvert(),
      "points"_a.noconvert(), "delta_ts"_a.noconvert(), "stream"_a);
  m.def(
      "ray_box_samples_backward",
      [](const Array& origins, const Array& directions, double ds, const Array& offsets,
         const Array& grad_points, const OptionalArray& grad_delta_ts,
         const OptionalArray& grad_origins, const OptionalArray& grad_directions,
         std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples_backward";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        off = to_tensor_ref(offsets, op, "offsets"),
                        gp = to_tensor_ref(grad_points, op, "grad_points"),
                        gd = to_tensor_ref(grad_delta_ts, op, "grad_delta_ts"),
                        go = to_tensor_ref(grad_origins, op, "grad_origins"),
                        gdir = to_tensor_ref(grad_directions, op, "grad_directions");
        nb::gil_scoped_release release;
        ray_box_samples_backward(o, d, ds, off, gp, gd, go, gdir, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "offsets"_a.noconvert(),
      "grad_points"_a.noconvert(), "grad_delta_ts"_a.noconvert().none(),
      "grad_origins"_a.noconvert().none(), "grad_directions"_a.noconvert().none(), "stream"_a);
  m.def(
      "ray_box_samples_padded_forward",
      [](const Array& origins, const Array& directions, double ds, const Array& points,
         const Array& delta_ts, const Array& valid, std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples_padded";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        p = to_tensor_ref(points, op, "points"),
                        dt = to_tensor_ref(delta_ts, op, "delta_ts"),
                        v = to_tensor_ref(valid, op, "valid");
        nb::gil_scoped_release release;
        ray_box_samples_padded_forward(o, d, ds, p, dt, v, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "points"_a.noconvert(),
      "delta_ts"_a.noconvert(), "valid"_a.noconvert(), "stream"_a);
  m.def(
      "ray_box_samples_padded_backward",
      [](const Array& origins, const Array& directions, double ds, const Array& grad_points,
         const OptionalArray& grad_delta_ts, const OptionalArray& grad_origins,
         const OptionalArray& grad_directions, std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples_padded_backward";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        gp = to_tensor_ref(grad_points, op, "grad_points"),
                        gd = to_tensor_ref(grad_delta_ts, op, "grad_delta_ts"),
                        go = to_tensor_ref(grad_origins, op, "grad_origins"),
                        gdir = to_tensor_ref(grad_directions, op, "grad_directions");
        nb::gil_scoped_release release;
        ray_box_samples_padded_backward(o, d, ds, gp, gd, go, gdir, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "grad_points"_a.noconvert(),
      "grad_delta_ts"_a.noconvert().none(), "grad_origins"_a.noconvert().none(),
      "grad_directions"_a.noconvert().none(), "stream"_a);
}

}  // namespace

void bind_render(nb::module_& m) {
  bind_volume_render(m);
  bind_line_integral(m);
  bind_ray_box_samples(m);
}

}  // namespace fieldfuse::python
