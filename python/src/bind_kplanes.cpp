// SPDX-License-Identifier: Apache-2.0
// Python bindings of the K-Planes family: DLPack arrays in, KPlanesInputs out, and the GIL released
// while a kernel runs. Optional tensors arrive as None; level lists as Python lists.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fieldfuse/kplanes.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = nb::ndarray<>;
using OptionalArray = std::optional<Array>;
using Release = nb::call_guard<nb::gil_scoped_release>;

TensorRef optional_ref(const OptionalArray& a, const char* op, const char* arg) {
  return a ? to_tensor_ref(*a, op, arg) : TensorRef{};
}

std::vector<TensorRef> level_refs(const std::vector<Array>& arrays, const char* op,
                                  const char* name) {
  std::vector<TensorRef> refs;
  refs.reserve(arrays.size());
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const std::string arg = std::string(name) + "[" + std::to_string(i) + "]";
    refs.push_back(to_tensor_ref(arrays[i], op, arg.c_str()));
  }
  return refs;
}

/// KPlanesInputs and the storage its pointers refer to.
struct Inputs {
  std::vector<TensorRef> planes;
  std::vector<double> gates;
  KPlanesInputs in;

  Inputs(bool tilted, const Array& pts, const OptionalArray& tap_pts, double h,
         const OptionalArray& rotations, const std::vector<Array>& plane_arrays,
         const std::optional<std::vector<double>>& gate_values, const char* op)
      : planes(level_refs(plane_arrays, op, "planes")) {
    in.variant = tilted ? KPlanesVariant::Tilted : KPlanesVariant::AxisAligned;
    in.pts = to_tensor_ref(pts, op, "pts");
    in.tap_pts = optional_ref(tap_pts, op, "tap_pts");
    in.h = h;
    in.rotations = optional_ref(rotations, op, "rotations");
    in.planes = planes.data();
    in.num_levels = static_cast<int>(planes.size());
    if (gate_values) {
      if (gate_values->size() != planes.size()) {
        throw Error(ErrorKind::Value, std::string(op) + "(): expected one gate per level (" +
                                          std::to_string(planes.size()) + "), but got " +
                                          std::to_string(gate_values->size()));
      }
      gates = *gate_values;
      in.gates = gates.data();
    }
  }
  Inputs(const Inputs&) = delete;
  Inputs& operator=(const Inputs&) = delete;
};

/// Gradient outputs and their storage.
struct Gradients {
  TensorRef pts, tap_pts, rotations;
  std::vector<TensorRef> planes;
  KPlanesGradients out;

  Gradients(const OptionalArray& grad_pts, const OptionalArray& grad_tap_pts,
            const OptionalArray& grad_rotations,
            const std::optional<std::vector<Array>>& grad_planes, const char* op) {
    if (grad_pts) {
      pts = to_tensor_ref(*grad_pts, op, "grad_pts");
      out.pts = &pts;
    }
    if (grad_tap_pts) {
      tap_pts = to_tensor_ref(*grad_tap_pts, op, "grad_tap_pts");
      out.tap_pts = &tap_pts;
    }
    if (grad_rotations) {
      rotations = to_tensor_ref(*grad_rotations, op, "grad_rotations");
      out.rotations = &rotations;
    }
    if (grad_planes) {
      planes = level_refs(*grad_planes, op, "grad_planes");
      out.planes = planes.data();
    }
  }
  Gradients(const Gradients&) = delete;
  Gradients& operator=(const Gradients&) = delete;
};

PlaneTVNorm norm_of(const std::string& norm) {
  if (norm == "mean") return PlaneTVNorm::Mean;
  if (norm == "percell") return PlaneTVNorm::PerCell;
  throw Error(ErrorKind::Value,
              "plane_tv(): expected norm to be \"mean\" or \"percell\", but got \"" + norm + "\"");
}

}  // namespace

void bind_kplanes(nb::module_& m) {
  constexpr const char* kForward = "kplanes";
  constexpr const char* kBackward = "kplanes_backward";

  m.def(
      "kplanes_forward",
      [](bool tilted, const Array& pts, const OptionalArray& tap_pts, double h,
         const OptionalArray& rotations, const std::vector<Array>& planes,
         const std::optional<std::vector<double>>& gates, const Array& features,
         const OptionalArray& tap_features, std::uintptr_t stream) {
        const Inputs inputs(tilted, pts, tap_pts, h, rotations, planes, gates, kForward);
        const TensorRef out = to_tensor_ref(features, kForward, "features");
        const TensorRef taps = optional_ref(tap_features, kForward, "tap_features");
        nb::gil_scoped_release release;
        kplanes_forward(inputs.in, out, taps, to_stream(stream));
      },
      "tilted"_a, "pts"_a.noconvert(), "tap_pts"_a.noconvert().none(), "h"_a,
      "rotations"_a.noconvert().none(), "planes"_a, "gates"_a.none(), "features"_a.noconvert(),
      "tap_features"_a.noconvert().none(), "stream"_a);

  m.def(
      "kplanes_backward_workspace_size",
      [](bool tilted, const Array& pts, const OptionalArray& tap_pts, double h,
         const OptionalArray& rotations, const std::vector<Array>& planes,
         const std::optional<std::vector<double>>& gates, bool wants_planes, bool deterministic) {
        const Inputs inputs(tilted, pts, tap_pts, h, rotations, planes, gates, kBackward);
        KPlanesGradients grads;
        const TensorRef placeholder{};
        if (wants_planes) grads.planes = &placeholder;  // only presence matters for the size
        return kplanes_backward_workspace_size(inputs.in, grads, deterministic);
      },
      "tilted"_a, "pts"_a.noconvert(), "tap_pts"_a.noconvert().none(), "h"_a,
      "rotations"_a.noconvert().none(), "planes"_a, "gates"_a.none(), "wants_planes"_a,
      "deterministic"_a);

  m.def(
      "kplanes_backward",
      [](bool tilted, const Array& pts, const OptionalArray& tap_pts, double h,
         const OptionalArray& rotations, const std::vector<Array>& planes,
         const std::optional<std::vector<double>>& gates, const Array& grad_features,
         const OptionalArray& grad_tap_features, const OptionalArray& grad_pts,
         const OptionalArray& grad_tap_pts, const OptionalArray& grad_rotations,
         const std::optional<std::vector<Array>>& grad_planes, bool deterministic,
         const Array& workspace, std::uintptr_t stream) {
        const Inputs inputs(tilted, pts, tap_pts, h, rotations, planes, gates, kBackward);
        const Gradients grads(grad_pts, grad_tap_pts, grad_rotations, grad_planes, kBackward);
        if (grad_planes && grad_planes->size() != planes.size()) {
          throw Error(ErrorKind::Value,
                      "kplanes_backward(): expected one grad_planes entry per "
                      "level (" +
                          std::to_string(planes.size()) + "), but got " +
                          std::to_string(grad_planes->size()));
        }
        const TensorRef gf = to_tensor_ref(grad_features, kBackward, "grad_features");
        const TensorRef gt = optional_ref(grad_tap_features, kBackward, "grad_tap_features");
        nb::gil_scoped_release release;
        kplanes_backward(inputs.in, gf, gt, grads.out, deterministic, workspace.data(),
                         workspace.nbytes(), to_stream(stream));
      },
      "tilted"_a, "pts"_a.noconvert(), "tap_pts"_a.noconvert().none(), "h"_a,
      "rotations"_a.noconvert().none(), "planes"_a, "gates"_a.none(), "grad_features"_a.noconvert(),
      "grad_tap_features"_a.noconvert().none(), "grad_pts"_a.noconvert().none(),
      "grad_tap_pts"_a.noconvert().none(), "grad_rotations"_a.noconvert().none(),
      "grad_planes"_a.none(), "deterministic"_a, "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "plane_tv_workspace_size",
      [](const std::vector<Array>& planes) {
        const std::vector<TensorRef> refs = level_refs(planes, "plane_tv", "planes");
        return plane_tv_workspace_size(refs.data(), static_cast<int>(refs.size()));
      },
      "planes"_a);
  m.def(
      "plane_tv_forward",
      [](const std::vector<Array>& planes, int num_tilts, const std::string& norm, const Array& out,
         const Array& workspace, std::uintptr_t stream) {
        const std::vector<TensorRef> refs = level_refs(planes, "plane_tv", "planes");
        const TensorRef out_ref = to_tensor_ref(out, "plane_tv", "out");
        const PlaneTVNorm n = norm_of(norm);
        nb::gil_scoped_release release;
        plane_tv_forward(refs.data(), static_cast<int>(refs.size()), num_tilts, n, out_ref,
                         workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "planes"_a, "num_tilts"_a, "norm"_a, "out"_a.noconvert(), "workspace"_a.noconvert(),
      "stream"_a);
  m.def(
      "plane_tv_backward",
      [](const std::vector<Array>& planes, int num_tilts, const std::string& norm,
         const Array& grad_out, const std::vector<Array>& grad_planes, std::uintptr_t stream) {
        constexpr const char* op = "plane_tv_backward";
        const std::vector<TensorRef> refs = level_refs(planes, op, "planes");
        const std::vector<TensorRef> grads = level_refs(grad_planes, op, "grad_planes");
        if (grads.size() != refs.size()) {
          throw Error(ErrorKind::Value,
                      "plane_tv_backward(): expected one grad_planes entry per "
                      "level");
        }
        const TensorRef g = to_tensor_ref(grad_out, op, "grad_out");
        const PlaneTVNorm n = norm_of(norm);
        nb::gil_scoped_release release;
        plane_tv_backward(refs.data(), static_cast<int>(refs.size()), num_tilts, n, g, grads.data(),
                          to_stream(stream));
      },
      "planes"_a, "num_tilts"_a, "norm"_a, "grad_out"_a.noconvert(), "grad_planes"_a, "stream"_a);
}

}  // namespace fieldfuse::python
