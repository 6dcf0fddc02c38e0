// SPDX-License-Identifier: Apache-2.0
// Python bindings of the tomo reconstructions: tilt_rotation, sirt and fbp with their workspace
// queries (DLPack arrays in, None for absent shifts, the GIL released while they run). Entry points
// and arguments carry the public names of include/fieldfuse/tomo.h.
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "fieldfuse/tomo.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;

TensorRef shifts_ref(const OptionalArray& shifts, const char* op) {
  return shifts ? to_tensor_ref(*shifts, op, "shifts") : TensorRef{};
}

}  // namespace

void bind_tomo(nb::module_& m) {
  m.def(
      "tilt_rotation",
      [](double tilt_degrees, double z1_degrees, double z3_degrees) {
        std::array<double, 9> out{};
        tilt_rotation(tilt_degrees, z1_degrees, z3_degrees, out.data());
        return out;
      },
      "tilt_degrees"_a, "z1_degrees"_a, "z3_degrees"_a);

  m.def(
      "sirt_workspace_size",
      [](const Array& projections, const Array& volume) {
        return sirt_workspace_size(to_tensor_ref(projections, "sirt", "projections"),
                                   to_tensor_ref(volume, "sirt", "volume"));
      },
      "projections"_a.noconvert(), "volume"_a.noconvert());
  m.def(
      "sirt",
      [](const Array& projections, const Array& rotations, const OptionalArray& shifts,
         int iterations, double relaxation, bool positivity, const Array& volume,
         const Array& workspace, std::uintptr_t stream) {
        const char* op = "sirt";
        const TensorRef p = to_tensor_ref(projections, op, "projections"),
                        r = to_tensor_ref(rotations, op, "rotations"), s = shifts_ref(shifts, op),
                        v = to_tensor_ref(volume, op, "volume");
        SirtOptions options;
        options.iterations = iterations;
        options.relaxation = relaxation;
        options.positivity = positivity;
        nb::gil_scoped_release release;
        sirt(p, r, s, options, v, workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "projections"_a.noconvert(), "rotations"_a.noconvert(), "shifts"_a.noconvert().none(),
      "iterations"_a, "relaxation"_a, "positivity"_a, "volume"_a.noconvert(),
      "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "fbp_workspace_size",
      [](const Array& projections, const Array& volume) {
        return fbp_workspace_size(to_tensor_ref(projections, "fbp", "projections"),
                                  to_tensor_ref(volume, "fbp", "volume"));
      },
      "projections"_a.noconvert(), "volume"_a.noconvert());
  m.def(
      "fbp",
      [](const Array& projections, const Array& rotations, const OptionalArray& shifts,
         const std::string& filter, const Array& volume, const Array& workspace,
         std::uintptr_t stream) {
        const char* op = "fbp";
        const TensorRef p = to_tensor_ref(projections, op, "projections"),
                        r = to_tensor_ref(rotations, op, "rotations"), s = shifts_ref(shifts, op),
                        v = to_tensor_ref(volume, op, "volume");
        const FbpFilter f = fbp_filter_from_name(filter);
        nb::gil_scoped_release release;
        fbp(p, r, s, f, v, workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "projections"_a.noconvert(), "rotations"_a.noconvert(), "shifts"_a.noconvert().none(),
      "filter"_a, "volume"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);
}

}  // namespace fieldfuse::python
