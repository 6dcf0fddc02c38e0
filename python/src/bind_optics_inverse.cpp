// SPDX-License-Identifier: Apache-2.0
// Python bindings of the optics inverses, loss and forward model (tikhonov_filter,
// tikhonov_inverse[_3d] and their backwards, midband_power, thin_forward_model) with their
// workspace queries: DLPack arrays in, None for absent gradients, the GIL released while they run.
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>

#include "fieldfuse/optics.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;

}  // namespace

void bind_optics_inverse(nb::module_& m) {
  m.def(
      "tikhonov_filter",
      [](const Array& absorption_tf, const Array& phase_tf, double regularization,
         const Array& filter, std::uintptr_t stream) {
        const char* op = "tikhonov_filter";
        const TensorRef a = to_tensor_ref(absorption_tf, op, "absorption_tf"),
                        p = to_tensor_ref(phase_tf, op, "phase_tf"),
                        f = to_tensor_ref(filter, op, "filter");
        nb::gil_scoped_release release;
        tikhonov_filter(a, p, regularization, f, to_stream(stream));
      },
      "absorption_tf"_a.noconvert(), "phase_tf"_a.noconvert(), "regularization"_a,
      "filter"_a.noconvert(), "stream"_a);

  for (const char* name :
       {"tikhonov_inverse_workspace_size", "tikhonov_inverse_backward_workspace_size"}) {
    m.def(
        name,
        [name](const Array& data, const Array& absorption_tf) {
          return tikhonov_inverse_workspace_size(
              to_tensor_ref(data, name, "data"),
              to_tensor_ref(absorption_tf, name, "absorption_tf"));
        },
        "data"_a.noconvert(), "absorption_tf"_a.noconvert());
  }
  m.def(
      "tikhonov_inverse",
      [](const Array& data, const Array& absorption_tf, const Array& phase_tf,
         double regularization, bool normalize, const Array& absorption, const Array& phase,
         const Array& workspace, std::uintptr_t stream) {
        const char* op = "tikhonov_inverse";
        const TensorRef d = to_tensor_ref(data, op, "data"),
                        at = to_tensor_ref(absorption_tf, op, "absorption_tf"),
                        pt = to_tensor_ref(phase_tf, op, "phase_tf"),
                        a = to_tensor_ref(absorption, op, "absorption"),
                        p = to_tensor_ref(phase, op, "phase");
        nb::gil_scoped_release release;
        tikhonov_inverse(d, at, pt, regularization, normalize, a, p, workspace.data(),
                         workspace.nbytes(), to_stream(stream));
      },
      "data"_a.noconvert(), "absorption_tf"_a.noconvert(), "phase_tf"_a.noconvert(),
      "regularization"_a, "normalize"_a, "absorption"_a.noconvert(), "phase"_a.noconvert(),
      "workspace"_a.noconvert(), "stream"_a);
  m.def(
      "tikhonov_inverse_backward",
      [](const Array& data, const Array& absorption_tf, const Array& phase_tf,
         double regularization, bool normalize, const OptionalArray& grad_absorption,
         const OptionalArray& grad_phase, const OptionalArray& grad_data,
         const OptionalArray& grad_absorption_tf, const OptionalArray& grad_phase_tf,
         const Array& workspace, std::uintptr_t stream) {
        const char* op = "tikhonov_inverse_backward";
        const TensorRef d = to_tensor_ref(data, op, "data"),
                        at = to_tensor_ref(absorption_tf, op, "absorption_tf"),
                        pt = to_tensor_ref(phase_tf, op, "phase_tf"),
                        ga = to_tensor_ref(grad_absorption, op, "grad_absorption"),
                        gp = to_tensor_ref(grad_phase, op, "grad_phase"),
                        gd = to_tensor_ref(grad_data, op, "grad_data"),
                        gat = to_tensor_ref(grad_absorption_tf, op, "grad_absorption_tf"),
                        gpt = to_tensor_ref(grad_phase_tf, op, "grad_phase_tf");
        nb::gil_scoped_release release;
        tikhonov_inverse_backward(d, at, pt, regularization, normalize, ga, gp, gd, gat, gpt,
                                  workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "data"_a.noconvert(), "absorption_tf"_a.noconvert(), "phase_tf"_a.noconvert(),
      "regularization"_a, "normalize"_a, "grad_absorption"_a.noconvert().none(),
      "grad_phase"_a.noconvert().none(), "grad_data"_a.noconvert().none(),
      "grad_absorption_tf"_a.noconvert().none(), "grad_phase_tf"_a.noconvert().none(),
      "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "tikhonov_inverse_3d_workspace_size",
      [](const Array& data, const Array& transfer_function) {
        const char* op = "tikhonov_inverse_3d";
        return tikhonov_inverse_3d_workspace_size(
            to_tensor_ref(data, op, "data"),
            to_tensor_ref(transfer_function, op, "transfer_function"));
      },
      "data"_a.noconvert(), "transfer_function"_a.noconvert());
  m.def(
      "tikhonov_inverse_3d",
      [](const Array& data, const Array& transfer_function, double regularization, const Array& out,
         const Array& workspace, std::uintptr_t stream) {
        const char* op = "tikhonov_inverse_3d";
        const TensorRef d = to_tensor_ref(data, op, "data"),
                        h = to_tensor_ref(transfer_function, op, "transfer_function"),
                        o = to_tensor_ref(out, op, "out");
        nb::gil_scoped_release release;
        tikhonov_inverse_3d(d, h, regularization, o, workspace.data(), workspace.nbytes(),
                            to_stream(stream));
      },
      "data"_a.noconvert(), "transfer_function"_a.noconvert(), "regularization"_a,
      "out"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);
  m.def(
      "tikhonov_inverse_3d_backward",
      [](const Array& data, const Array& transfer_function, double regularization,
         const Array& grad_out, const OptionalArray& grad_data,
         const OptionalArray& grad_transfer_function, const Array& workspace,
         std::uintptr_t stream) {
        const char* op = "tikhonov_inverse_3d_backward";
        const TensorRef d = to_tensor_ref(data, op, "data"),
                        h = to_tensor_ref(transfer_function, op, "transfer_function"),
                        g = to_tensor_ref(grad_out, op, "grad_out"),
                        gd = to_tensor_ref(grad_data, op, "grad_data"),
                        gh = to_tensor_ref(grad_transfer_function, op, "grad_transfer_function");
        nb::gil_scoped_release release;
        tikhonov_inverse_3d_backward(d, h, regularization, g, gd, gh, workspace.data(),
                                     workspace.nbytes(), to_stream(stream));
      },
      "data"_a.noconvert(), "transfer_function"_a.noconvert(), "regularization"_a,
      "grad_out"_a.noconvert(), "grad_data"_a.noconvert().none(),
      "grad_transfer_function"_a.noconvert().none(), "workspace"_a.noconvert(), "stream"_a);

  for (const char* name :
       {"midband_power_workspace_size", "midband_power_backward_workspace_size"}) {
    m.def(
        name,
        [name](const Array& images) {
          return midband_power_workspace_size(to_tensor_ref(images, name, "images"));
        },
        "images"_a.noconvert());
  }
  m.def(
      "midband_power",
      [](const Array& images, double pixel_size, double wavelength, double na_detection, double low,
         double high, const Array& out, const Array& workspace, std::uintptr_t stream) {
        const char* op = "midband_power";
        const TensorRef i = to_tensor_ref(images, op, "images"), o = to_tensor_ref(out, op, "out");
        nb::gil_scoped_release release;
        midband_power(i, pixel_size, wavelength, na_detection, MidbandBand{low, high}, o,
                      workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "images"_a.noconvert(), "pixel_size"_a, "wavelength"_a, "na_detection"_a, "low"_a, "high"_a,
      "out"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);
  m.def(
      "midband_power_backward",
      [](const Array& images, double pixel_size, double wavelength, double na_detection, double low,
         double high, const Array& grad_out, const Array& grad_images, const Array& workspace,
         std::uintptr_t stream) {
        const char* op = "midband_power_backward";
        const TensorRef i = to_tensor_ref(images, op, "images"),
                        g = to_tensor_ref(grad_out, op, "grad_out"),
                        gi = to_tensor_ref(grad_images, op, "grad_images");
        nb::gil_scoped_release release;
        midband_power_backward(i, pixel_size, wavelength, na_detection, MidbandBand{low, high}, g,
                               gi, workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "images"_a.noconvert(), "pixel_size"_a, "wavelength"_a, "na_detection"_a, "low"_a, "high"_a,
      "grad_out"_a.noconvert(), "grad_images"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "thin_forward_model_workspace_size",
      [](const Array& absorption, const Array& absorption_tf) {
        const char* op = "thin_forward_model";
        return thin_forward_model_workspace_size(to_tensor_ref(absorption, op, "absorption"),
                                                 to_tensor_ref(absorption_tf, op, "absorption_tf"));
      },
      "absorption"_a.noconvert(), "absorption_tf"_a.noconvert());
  m.def(
      "thin_forward_model",
      [](const Array& absorption, const Array& phase, const Array& absorption_tf,
         const Array& phase_tf, double background, const Array& data, const Array& workspace,
         std::uintptr_t stream) {
        const char* op = "thin_forward_model";
        const TensorRef a = to_tensor_ref(absorption, op, "absorption"),
                        p = to_tensor_ref(phase, op, "phase"),
                        at = to_tensor_ref(absorption_tf, op, "absorption_tf"),
                        pt = to_tensor_ref(phase_tf, op, "phase_tf"),
                        d = to_tensor_ref(data, op, "data");
        nb::gil_scoped_release release;
        thin_forward_model(a, p, at, pt, background, d, workspace.data(), workspace.nbytes(),
                           to_stream(stream));
      },
      "absorption"_a.noconvert(), "phase"_a.noconvert(), "absorption_tf"_a.noconvert(),
      "phase_tf"_a.noconvert(), "background"_a, "data"_a.noconvert(), "workspace"_a.noconvert(),
      "stream"_a);
}

}  // namespace fieldfuse::python
