// SPDX-License-Identifier: Apache-2.0
// Python bindings of the project family: DLPack arrays in (None for absent shifts), the GIL
// released while a kernel runs. Entry points and arguments carry the public names (python/
// fieldfuse/README.md): `project` and `backproject`, each a forward entry.
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "fieldfuse/project.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;
using Projector = void (*)(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&,
                           Stream);

/// Binds `<op>_forward(<first>, rotations, shifts, <out>, stream)`: both projectors read one
/// 3-D tensor and the poses and write the other 3-D tensor.
void bind_projector(nb::module_& m, const char* name, const char* op, const char* first,
                    const char* out, Projector run) {
  m.def(
      name,
      [op, first, out, run](const Array& input, const Array& rotations, const OptionalArray& shifts,
                            const Array& output, std::uintptr_t stream) {
        const TensorRef in = to_tensor_ref(input, op, first),
                        r = to_tensor_ref(rotations, op, "rotations"),
                        s = shifts ? to_tensor_ref(*shifts, op, "shifts") : TensorRef{},
                        o = to_tensor_ref(output, op, out);
        nb::gil_scoped_release release;
        run(in, r, s, o, to_stream(stream));
      },
      nb::arg(first).noconvert(), "rotations"_a.noconvert(), "shifts"_a.noconvert().none(),
      nb::arg(out).noconvert(), "stream"_a);
}

}  // namespace

void bind_project(nb::module_& m) {
  bind_projector(m, "project_forward", "project", "volume", "projections", &project_forward);
  bind_projector(m, "backproject_forward", "backproject", "projections", "volume",
                 &backproject_forward);
}

}  // namespace fieldfuse::python
