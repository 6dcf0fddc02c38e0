// SPDX-License-Identifier: Apache-2.0
// Python bindings of the K-Planes family: DLPack arrays in, KPlanesInputs out, and the GIL released
// while a kernel runs. Gradients nobody asked for arrive as None; level lists as Python lists.
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

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;
using Release = nb::call_guard<nb::gil_scoped_release>;

std::vector<TensorRef> level_refs(const std::vector<Array>& arrays, const char* op,
                                  const char* name) {
  std::vector<TensorRef> refs;
  refs.reserve(arrays.size());
  for (std::size_t i = 0; i < arrays.size(); ++i)
    refs.push_back(to_tensor_ref(arrays[i], op, name, i));
  return refs;
}

/// A call's levels: plane refs and gates, and the storage the pointers passed on refer to.
struct Levels {
  std::vector<TensorRef> planes;
  std::vector<double> gates;
  const double* gates_data = nullptr;  ///< null: no gates (all 1)

  Levels(const std::vector<Array>& plane_arrays,
         const std::optional<std::vector<double>>& gate_values, const char* op)
      : planes(level_refs(plane_arrays, op, "planes")) {
    if (gate_values) {
      // The C++ API reads num_levels gates through a pointer, so the count is checked here.
      if (gate_values->size() != planes.size()) {
        throw Error(ErrorKind::Value, std::string(op) +
                                          "(): expected gates to have one entry per level (" +
                                          std::to_string(planes.size()) + "), but got " +
                                          std::to_string(gate_values->size()));
      }
      gates = *gate_values;
      gates_data = gates.data();
    }
  }
  int count() const { return static_cast<int>(planes.size()); }
  Levels(const Levels&) = delete;
  Levels& operator=(const Levels&) = delete;
};

/// An optional tensor (a gradient output, or the `valid` mask): a TensorRef and the pointer the
/// C++ API takes (null: absent).
struct OptionalOutput {
  TensorRef ref;
  const TensorRef* ptr = nullptr;

  OptionalOutput(const OptionalArray& a, const char* op, const char* arg) {
    if (a) {
      ref = to_tensor_ref(*a, op, arg);
      ptr = &ref;
    }
  }
  OptionalOutput(const OptionalOutput&) = delete;
  OptionalOutput& operator=(const OptionalOutput&) = delete;
};

/// Optional plane gradients, one per level.
struct OptionalLevels {
  std::vector<TensorRef> refs;
  const TensorRef* ptr = nullptr;

  OptionalLevels(const std::optional<std::vector<Array>>& arrays, std::size_t num_levels,
                 const char* op) {
    if (!arrays) return;
    if (arrays->size() != num_levels) {
      throw Error(ErrorKind::Value,
                  std::string(op) + "(): expected grad_planes to have one entry per level (" +
                      std::to_string(num_levels) + "), but got " + std::to_string(arrays->size()));
    }
    refs = level_refs(*arrays, op, "grad_planes");
    ptr = refs.data();
  }
  OptionalLevels(const OptionalLevels&) = delete;
  OptionalLevels& operator=(const OptionalLevels&) = delete;
};

using Gates = std::optional<std::vector<double>>;
using OptionalArrays = std::optional<std::vector<Array>>;

PlaneTVNorm norm_of(const std::string& norm, const char* op) {
  if (norm == "mean") return PlaneTVNorm::Mean;
  if (norm == "percell") return PlaneTVNorm::PerCell;
  throw Error(ErrorKind::Value, std::string(op) +
                                    "(): expected norm to be \"mean\" or \"percell\", but got \"" +
                                    norm + "\"");
}

}  // namespace

void bind_kplanes(nb::module_& m) {
  // One forward and backward, each with its workspace query, per public function; each passes its
  // own name to the messages of the conversions here, as the C++ entry it calls does.
  m.def(
      "kplanes_tilted_forward",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes,
         const Gates& gates, const Array& features, const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "kplanes_tilted";
        const Levels levels(planes, gates, op);
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef r = to_tensor_ref(rotations, op, "rotations");
        const TensorRef out = to_tensor_ref(features, op, "features");
        nb::gil_scoped_release release;
        kplanes_tilted_forward(p, r, levels.planes.data(), levels.count(), levels.gates_data, out,
                               workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "gates"_a.none(),
      "features"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);
  m.def(
      "kplanes_tilted_forward_workspace_size",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes) {
        constexpr const char* op = "kplanes_tilted";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_tilted_forward_workspace_size(to_tensor_ref(pts, op, "pts"),
                                                     to_tensor_ref(rotations, op, "rotations"),
                                                     levels.planes.data(), levels.count());
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a);
  m.def(
      "kplanes_tilted_backward_workspace_size",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes,
         bool wants_grad_planes, bool deterministic) {
        constexpr const char* op = "kplanes_tilted_backward";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_tilted_backward_workspace_size(
            to_tensor_ref(pts, op, "pts"), to_tensor_ref(rotations, op, "rotations"),
            levels.planes.data(), levels.count(), wants_grad_planes, deterministic);
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "wants_grad_planes"_a,
      "deterministic"_a);
  m.def(
      "kplanes_tilted_backward",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes,
         const Gates& gates, const Array& grad_features, const OptionalArray& grad_pts,
         const OptionalArray& grad_rotations, const OptionalArrays& grad_planes, bool deterministic,
         const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "kplanes_tilted_backward";
        const Levels levels(planes, gates, op);
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef r = to_tensor_ref(rotations, op, "rotations");
        const TensorRef g = to_tensor_ref(grad_features, op, "grad_features");
        const OptionalOutput gp(grad_pts, op, "grad_pts");
        const OptionalOutput gr(grad_rotations, op, "grad_rotations");
        const OptionalLevels gl(grad_planes, planes.size(), op);
        nb::gil_scoped_release release;
        kplanes_tilted_backward(p, r, levels.planes.data(), levels.count(), levels.gates_data, g,
                                gp.ptr, gr.ptr, gl.ptr, deterministic, workspace.data(),
                                workspace.nbytes(), to_stream(stream));
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "gates"_a.none(),
      "grad_features"_a.noconvert(), "grad_pts"_a.noconvert().none(),
      "grad_rotations"_a.noconvert().none(), "grad_planes"_a.none(), "deterministic"_a,
      "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "kplanes_forward",
      [](const Array& pts, const std::vector<Array>& planes, const Gates& gates,
         const Array& features, const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "kplanes";
        const Levels levels(planes, gates, op);
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef out = to_tensor_ref(features, op, "features");
        nb::gil_scoped_release release;
        kplanes_forward(p, levels.planes.data(), levels.count(), levels.gates_data, out,
                        workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "pts"_a.noconvert(), "planes"_a, "gates"_a.none(), "features"_a.noconvert(),
      "workspace"_a.noconvert(), "stream"_a);
  m.def(
      "kplanes_forward_workspace_size",
      [](const Array& pts, const std::vector<Array>& planes) {
        constexpr const char* op = "kplanes";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_forward_workspace_size(to_tensor_ref(pts, op, "pts"), levels.planes.data(),
                                              levels.count());
      },
      "pts"_a.noconvert(), "planes"_a);
  m.def(
      "kplanes_backward_workspace_size",
      [](const Array& pts, const std::vector<Array>& planes, bool wants_grad_planes,
         bool deterministic) {
        constexpr const char* op = "kplanes_backward";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_backward_workspace_size(to_tensor_ref(pts, op, "pts"), levels.planes.data(),
                                               levels.count(), wants_grad_planes, deterministic);
      },
      "pts"_a.noconvert(), "planes"_a, "wants_grad_planes"_a, "deterministic"_a);
  m.def(
      "kplanes_backward",
      [](const Array& pts, const std::vector<Array>& planes, const Gates& gates,
         const Array& grad_features, const OptionalArray& grad_pts,
         const OptionalArrays& grad_planes, bool deterministic, const Array& workspace,
         std::uintptr_t stream) {
        constexpr const char* op = "kplanes_backward";
        const Levels levels(planes, gates, op);
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef g = to_tensor_ref(grad_features, op, "grad_features");
        const OptionalOutput gp(grad_pts, op, "grad_pts");
        const OptionalLevels gl(grad_planes, planes.size(), op);
        nb::gil_scoped_release release;
        kplanes_backward(p, levels.planes.data(), levels.count(), levels.gates_data, g, gp.ptr,
                         gl.ptr, deterministic, workspace.data(), workspace.nbytes(),
                         to_stream(stream));
      },
      "pts"_a.noconvert(), "planes"_a, "gates"_a.none(), "grad_features"_a.noconvert(),
      "grad_pts"_a.noconvert().none(), "grad_planes"_a.none(), "deterministic"_a,
      "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "kplanes_tilted_taps_forward",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes, double h,
         const Gates& gates, const Array& tap_features, const Array& workspace,
         std::uintptr_t stream) {
        constexpr const char* op = "kplanes_tilted_taps";
        const Levels levels(planes, gates, op);
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef r = to_tensor_ref(rotations, op, "rotations");
        const TensorRef out = to_tensor_ref(tap_features, op, "tap_features");
        nb::gil_scoped_release release;
        kplanes_tilted_taps_forward(p, r, levels.planes.data(), levels.count(), h,
                                    levels.gates_data, out, workspace.data(), workspace.nbytes(),
                                    to_stream(stream));
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "h"_a, "gates"_a.none(),
      "tap_features"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);
  m.def(
      "kplanes_tilted_taps_forward_workspace_size",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes) {
        constexpr const char* op = "kplanes_tilted_taps";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_tilted_taps_forward_workspace_size(to_tensor_ref(pts, op, "pts"),
                                                          to_tensor_ref(rotations, op, "rotations"),
                                                          levels.planes.data(), levels.count());
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a);
  m.def(
      "kplanes_tilted_taps_backward_workspace_size",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes,
         bool wants_grad_planes, bool deterministic) {
        constexpr const char* op = "kplanes_tilted_taps_backward";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_tilted_taps_backward_workspace_size(
            to_tensor_ref(pts, op, "pts"), to_tensor_ref(rotations, op, "rotations"),
            levels.planes.data(), levels.count(), wants_grad_planes, deterministic);
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "wants_grad_planes"_a,
      "deterministic"_a);
  m.def(
      "kplanes_tilted_taps_backward",
      [](const Array& pts, const Array& rotations, const std::vector<Array>& planes, double h,
         const Gates& gates, const Array& grad_tap_features, const OptionalArray& grad_pts,
         const OptionalArray& grad_rotations, const OptionalArrays& grad_planes, bool deterministic,
         const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "kplanes_tilted_taps_backward";
        const Levels levels(planes, gates, op);
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef r = to_tensor_ref(rotations, op, "rotations");
        const TensorRef g = to_tensor_ref(grad_tap_features, op, "grad_tap_features");
        const OptionalOutput gp(grad_pts, op, "grad_pts");
        const OptionalOutput gr(grad_rotations, op, "grad_rotations");
        const OptionalLevels gl(grad_planes, planes.size(), op);
        nb::gil_scoped_release release;
        kplanes_tilted_taps_backward(p, r, levels.planes.data(), levels.count(), h,
                                     levels.gates_data, g, gp.ptr, gr.ptr, gl.ptr, deterministic,
                                     workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "h"_a, "gates"_a.none(),
      "grad_tap_features"_a.noconvert(), "grad_pts"_a.noconvert().none(),
      "grad_rotations"_a.noconvert().none(), "grad_planes"_a.none(), "deterministic"_a,
      "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "kplanes_tilted_with_taps_forward",
      [](const Array& pts, const Array& tap_pts, const Array& rotations,
         const std::vector<Array>& planes, double h, const Gates& gates, const Array& features,
         const Array& tap_features, const Array& workspace, std::uintptr_t stream,
         const OptionalArray& valid) {
        constexpr const char* op = "kplanes_tilted_with_taps";
        const Levels levels(planes, gates, op);
        const OptionalOutput mask(valid, op, "valid");
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef t = to_tensor_ref(tap_pts, op, "tap_pts");
        const TensorRef r = to_tensor_ref(rotations, op, "rotations");
        const TensorRef out = to_tensor_ref(features, op, "features");
        const TensorRef taps = to_tensor_ref(tap_features, op, "tap_features");
        nb::gil_scoped_release release;
        kplanes_tilted_with_taps_forward(p, t, r, levels.planes.data(), levels.count(), h,
                                         levels.gates_data, mask.ptr, out, taps, workspace.data(),
                                         workspace.nbytes(), to_stream(stream));
      },
      "pts"_a.noconvert(), "tap_pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "h"_a,
      "gates"_a.none(), "features"_a.noconvert(), "tap_features"_a.noconvert(),
      "workspace"_a.noconvert(), "stream"_a, "valid"_a.noconvert().none() = nb::none());
  m.def(
      "kplanes_tilted_with_taps_forward_workspace_size",
      [](const Array& pts, const Array& tap_pts, const Array& rotations,
         const std::vector<Array>& planes) {
        constexpr const char* op = "kplanes_tilted_with_taps";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_tilted_with_taps_forward_workspace_size(
            to_tensor_ref(pts, op, "pts"), to_tensor_ref(tap_pts, op, "tap_pts"),
            to_tensor_ref(rotations, op, "rotations"), levels.planes.data(), levels.count());
      },
      "pts"_a.noconvert(), "tap_pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a);
  m.def(
      "kplanes_tilted_with_taps_backward_workspace_size",
      [](const Array& pts, const Array& tap_pts, const Array& rotations,
         const std::vector<Array>& planes, bool wants_grad_planes, bool deterministic) {
        constexpr const char* op = "kplanes_tilted_with_taps_backward";
        const Levels levels(planes, std::nullopt, op);
        return kplanes_tilted_with_taps_backward_workspace_size(
            to_tensor_ref(pts, op, "pts"), to_tensor_ref(tap_pts, op, "tap_pts"),
            to_tensor_ref(rotations, op, "rotations"), levels.planes.data(), levels.count(),
            wants_grad_planes, deterministic);
      },
      "pts"_a.noconvert(), "tap_pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a,
      "wants_grad_planes"_a, "deterministic"_a);
  m.def(
      "kplanes_tilted_with_taps_backward",
      [](const Array& pts, const Array& tap_pts, const Array& rotations,
         const std::vector<Array>& planes, double h, const Gates& gates, const Array& grad_features,
         const Array& grad_tap_features, const OptionalArray& grad_pts,
         const OptionalArray& grad_tap_pts, const OptionalArray& grad_rotations,
         const OptionalArrays& grad_planes, bool deterministic, const Array& workspace,
         std::uintptr_t stream, const OptionalArray& valid) {
        constexpr const char* op = "kplanes_tilted_with_taps_backward";
        const Levels levels(planes, gates, op);
        const OptionalOutput mask(valid, op, "valid");
        const TensorRef p = to_tensor_ref(pts, op, "pts");
        const TensorRef t = to_tensor_ref(tap_pts, op, "tap_pts");
        const TensorRef r = to_tensor_ref(rotations, op, "rotations");
        const TensorRef gf = to_tensor_ref(grad_features, op, "grad_features");
        const TensorRef gt = to_tensor_ref(grad_tap_features, op, "grad_tap_features");
        const OptionalOutput gp(grad_pts, op, "grad_pts");
        const OptionalOutput gtp(grad_tap_pts, op, "grad_tap_pts");
        const OptionalOutput gr(grad_rotations, op, "grad_rotations");
        const OptionalLevels gl(grad_planes, planes.size(), op);
        nb::gil_scoped_release release;
        kplanes_tilted_with_taps_backward(p, t, r, levels.planes.data(), levels.count(), h,
                                          levels.gates_data, mask.ptr, gf, gt, gp.ptr, gtp.ptr,
                                          gr.ptr, gl.ptr, deterministic, workspace.data(),
                                          workspace.nbytes(), to_stream(stream));
      },
      "pts"_a.noconvert(), "tap_pts"_a.noconvert(), "rotations"_a.noconvert(), "planes"_a, "h"_a,
      "gates"_a.none(), "grad_features"_a.noconvert(), "grad_tap_features"_a.noconvert(),
      "grad_pts"_a.noconvert().none(), "grad_tap_pts"_a.noconvert().none(),
      "grad_rotations"_a.noconvert().none(), "grad_planes"_a.none(), "deterministic"_a,
      "workspace"_a.noconvert(), "stream"_a, "valid"_a.noconvert().none() = nb::none());

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
        const PlaneTVNorm n = norm_of(norm, "plane_tv");
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
        const PlaneTVNorm n = norm_of(norm, op);
        nb::gil_scoped_release release;
        plane_tv_backward(refs.data(), static_cast<int>(refs.size()), num_tilts, n, g, grads.data(),
                          to_stream(stream));
      },
      "planes"_a, "num_tilts"_a, "norm"_a, "grad_out"_a.noconvert(), "grad_planes"_a, "stream"_a);
}

}  // namespace fieldfuse::python
