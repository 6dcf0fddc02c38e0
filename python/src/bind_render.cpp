// SPDX-License-Identifier: Apache-2.0
// Python bindings of the render family: DLPack arrays in (None for absent tensors), the GIL
// released while a kernel runs.
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "fieldfuse/render.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = nb::ndarray<>;
using OptionalArray = std::optional<Array>;

TensorRef ref(const OptionalArray& a, const char* op, const char* arg) {
  return a ? to_tensor_ref(*a, op, arg) : TensorRef{};
}

VolumeRenderInputs render_inputs(const Array& sigmas, bool alpha_input, const Array& rgbs,
                                 const OptionalArray& delta_ts, const OptionalArray& ts,
                                 const Array& offsets, double threshold,
                                 const OptionalArray& background, const OptionalArray& prefix,
                                 const char* op) {
  VolumeRenderInputs in;
  in.sigmas = to_tensor_ref(sigmas, op, alpha_input ? "alphas" : "sigmas");
  in.alpha_input = alpha_input;
  in.rgbs = to_tensor_ref(rgbs, op, "rgbs");
  in.delta_ts = ref(delta_ts, op, "delta_ts");
  in.ts = ref(ts, op, "ts");
  in.offsets = to_tensor_ref(offsets, op, "offsets");
  in.transmittance_thresh = threshold;
  in.background = ref(background, op, "background");
  in.prefix_transmittance = ref(prefix, op, "prefix_transmittance");
  return in;
}

}  // namespace

void bind_render(nb::module_& m) {
  m.def(
      "volume_render_forward",
      [](const Array& sigmas, bool alpha_input, const Array& rgbs, const OptionalArray& delta_ts,
         const OptionalArray& ts, const Array& offsets, double threshold,
         const OptionalArray& background, const OptionalArray& prefix, const Array& rgb,
         const OptionalArray& opacity, const OptionalArray& depth, const OptionalArray& weights,
         const OptionalArray& total_samples, const OptionalArray& transmittance,
         const OptionalArray& ray_state, std::uintptr_t stream) {
        constexpr const char* op = "volume_render";
        const VolumeRenderInputs in = render_inputs(sigmas, alpha_input, rgbs, delta_ts, ts,
                                                    offsets, threshold, background, prefix, op);
        VolumeRenderOutputs out;
        out.rgb = to_tensor_ref(rgb, op, "rgb");
        out.opacity = ref(opacity, op, "opacity");
        out.depth = ref(depth, op, "depth");
        out.weights = ref(weights, op, "weights");
        out.total_samples = ref(total_samples, op, "total_samples");
        out.transmittance = ref(transmittance, op, "transmittance");
        out.ray_state = ref(ray_state, op, "ray_state");
        nb::gil_scoped_release release;
        volume_render_forward(in, out, to_stream(stream));
      },
      "sigmas"_a.noconvert(), "alpha_input"_a, "rgbs"_a.noconvert(),
      "delta_ts"_a.noconvert().none(), "ts"_a.noconvert().none(), "offsets"_a.noconvert(),
      "threshold"_a, "background"_a.noconvert().none(), "prefix"_a.noconvert().none(),
      "rgb"_a.noconvert(), "opacity"_a.noconvert().none(), "depth"_a.noconvert().none(),
      "weights"_a.noconvert().none(), "total_samples"_a.noconvert().none(),
      "transmittance"_a.noconvert().none(), "ray_state"_a.noconvert().none(), "stream"_a);

  m.def(
      "volume_render_backward",
      [](const Array& sigmas, bool alpha_input, const Array& rgbs, const OptionalArray& delta_ts,
         const OptionalArray& ts, const Array& offsets, double threshold,
         const OptionalArray& background, const OptionalArray& prefix, const Array& grad_rgb,
         const OptionalArray& grad_opacity, const OptionalArray& grad_depth,
         const OptionalArray& grad_weights, const OptionalArray& grad_transmittance,
         const OptionalArray& ray_state, const OptionalArray& grad_sigmas,
         const OptionalArray& grad_rgbs, const OptionalArray& grad_delta_ts,
         const OptionalArray& grad_ts, const OptionalArray& grad_background,
         const OptionalArray& grad_prefix, std::uintptr_t stream) {
        constexpr const char* op = "volume_render_backward";
        const VolumeRenderInputs in = render_inputs(sigmas, alpha_input, rgbs, delta_ts, ts,
                                                    offsets, threshold, background, prefix, op);
        VolumeRenderGradients g;
        g.grad_rgb = to_tensor_ref(grad_rgb, op, "grad_rgb");
        g.grad_opacity = ref(grad_opacity, op, "grad_opacity");
        g.grad_depth = ref(grad_depth, op, "grad_depth");
        g.grad_weights = ref(grad_weights, op, "grad_weights");
        g.grad_transmittance = ref(grad_transmittance, op, "grad_transmittance");
        g.ray_state = ref(ray_state, op, "ray_state");
        g.grad_sigmas = ref(grad_sigmas, op, alpha_input ? "grad_alphas" : "grad_sigmas");
        g.grad_rgbs = ref(grad_rgbs, op, "grad_rgbs");
        g.grad_delta_ts = ref(grad_delta_ts, op, "grad_delta_ts");
        g.grad_ts = ref(grad_ts, op, "grad_ts");
        g.grad_background = ref(grad_background, op, "grad_background");
        g.grad_prefix_transmittance = ref(grad_prefix, op, "grad_prefix_transmittance");
        nb::gil_scoped_release release;
        volume_render_backward(in, g, to_stream(stream));
      },
      "sigmas"_a.noconvert(), "alpha_input"_a, "rgbs"_a.noconvert(),
      "delta_ts"_a.noconvert().none(), "ts"_a.noconvert().none(), "offsets"_a.noconvert(),
      "threshold"_a, "background"_a.noconvert().none(), "prefix"_a.noconvert().none(),
      "grad_rgb"_a.noconvert(), "grad_opacity"_a.noconvert().none(),
      "grad_depth"_a.noconvert().none(), "grad_weights"_a.noconvert().none(),
      "grad_transmittance"_a.noconvert().none(), "ray_state"_a.noconvert().none(),
      "grad_sigmas"_a.noconvert().none(), "grad_rgbs"_a.noconvert().none(),
      "grad_delta_ts"_a.noconvert().none(), "grad_ts"_a.noconvert().none(),
      "grad_background"_a.noconvert().none(), "grad_prefix"_a.noconvert().none(), "stream"_a);

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
                        gv = ref(grad_values, op, "grad_values"),
                        gd = ref(grad_delta_ts, op, "grad_delta_ts");
        nb::gil_scoped_release release;
        line_integral_backward(v, d, o, g, gv, gd, to_stream(stream));
      },
      "values"_a.noconvert(), "delta_ts"_a.noconvert(), "offsets"_a.noconvert(),
      "grad_out"_a.noconvert(), "grad_values"_a.noconvert().none(),
      "grad_delta_ts"_a.noconvert().none(), "stream"_a);

  m.def("ray_box_capacity", &ray_box_capacity, "ds"_a);
  m.def(
      "ray_box_counts",
      [](const Array& origins, const Array& directions, double ds, const Array& counts,
         std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        c = to_tensor_ref(counts, op, "counts");
        nb::gil_scoped_release release;
        ray_box_counts(o, d, ds, c, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "counts"_a.noconvert(),
      "stream"_a);
  m.def(
      "ray_box_samples_forward",
      [](const Array& origins, const Array& directions, double ds, const OptionalArray& offsets,
         const Array& points, const Array& delta_ts, const OptionalArray& valid,
         std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        off = ref(offsets, op, "offsets"), p = to_tensor_ref(points, op, "points"),
                        dt = to_tensor_ref(delta_ts, op, "delta_ts"), v = ref(valid, op, "valid");
        nb::gil_scoped_release release;
        ray_box_samples_forward(o, d, ds, off, p, dt, v, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "offsets"_a.noconvert().none(),
      "points"_a.noconvert(), "delta_ts"_a.noconvert(), "valid"_a.noconvert().none(), "stream"_a);
  m.def(
      "ray_box_samples_backward",
      [](const Array& origins, const Array& directions, double ds, const OptionalArray& offsets,
         const Array& grad_points, const OptionalArray& grad_delta_ts,
         const OptionalArray& grad_origins, const OptionalArray& grad_directions,
         std::uintptr_t stream) {
        constexpr const char* op = "ray_box_samples_backward";
        const TensorRef o = to_tensor_ref(origins, op, "origins"),
                        d = to_tensor_ref(directions, op, "directions"),
                        off = ref(offsets, op, "offsets"),
                        gp = to_tensor_ref(grad_points, op, "grad_points"),
                        gd = ref(grad_delta_ts, op, "grad_delta_ts"),
                        go = ref(grad_origins, op, "grad_origins"),
                        gdir = ref(grad_directions, op, "grad_directions");
        nb::gil_scoped_release release;
        ray_box_samples_backward(o, d, ds, off, gp, gd, go, gdir, to_stream(stream));
      },
      "origins"_a.noconvert(), "directions"_a.noconvert(), "ds"_a, "offsets"_a.noconvert().none(),
      "grad_points"_a.noconvert(), "grad_delta_ts"_a.noconvert().none(),
      "grad_origins"_a.noconvert().none(), "grad_directions"_a.noconvert().none(), "stream"_a);
}

}  // namespace fieldfuse::python
