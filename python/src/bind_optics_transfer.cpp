// SPDX-License-Identifier: Apache-2.0
// Python bindings of the optics family's transfer functions and tile optimiser. Microscope settings
// cross as one tuple (pixel_size, wavelength, index_medium, na_illumination, na_detection,
// pupil_steepness, invert_phase_contrast), which fieldfuse.optics builds from its Microscope.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "fieldfuse/optics.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;
using Settings = std::tuple<double, double, double, double, double, double, bool>;

MicroscopeSettings to_settings(const Settings& t) {
  MicroscopeSettings s;
  s.pixel_size = std::get<0>(t);
  s.wavelength = std::get<1>(t);
  s.index_medium = std::get<2>(t);
  s.na_illumination = std::get<3>(t);
  s.na_detection = std::get<4>(t);
  s.pupil_steepness = std::get<5>(t);
  s.invert_phase_contrast = std::get<6>(t);
  return s;
}

ThinTransferInputs thin_inputs(const Array& z, const Array& zenith, const Array& azimuth,
                               const char* op) {
  return {to_tensor_ref(z, op, "z_positions"), to_tensor_ref(zenith, op, "zenith"),
          to_tensor_ref(azimuth, op, "azimuth")};
}

}  // namespace

void bind_optics_transfer(nb::module_& m) {
  m.def(
      "thin_upsampling_factor",
      [](const Settings& s) { return thin_upsampling_factor(to_settings(s)); }, "settings"_a);
  m.def(
      "thin_transfer_functions_workspace_size",
      [](const Settings& s, int64_t B, int64_t Z, int64_t Y, int64_t X, const Array& like) {
        return thin_transfer_functions_workspace_size(
            to_settings(s), B, Z, Y, X,
            to_tensor_ref(like, "thin_transfer_functions", "z_positions").dtype);
      },
      "settings"_a, "B"_a, "Z"_a, "Y"_a, "X"_a, "like"_a.noconvert());
  m.def(
      "thin_transfer_functions_backward_workspace_size",
      [](const Settings& s, int64_t B, int64_t Z, int64_t Y, int64_t X, const Array& like) {
        return thin_transfer_functions_backward_workspace_size(
            to_settings(s), B, Z, Y, X,
            to_tensor_ref(like, "thin_transfer_functions_backward", "z_positions").dtype);
      },
      "settings"_a, "B"_a, "Z"_a, "Y"_a, "X"_a, "like"_a.noconvert());
  m.def(
      "thin_transfer_functions",
      [](const Settings& s, const Array& z, const Array& zenith, const Array& azimuth,
         const Array& absorption_tf, const Array& phase_tf, const Array& workspace,
         std::uintptr_t stream) {
        constexpr const char* op = "thin_transfer_functions";
        const ThinTransferInputs in = thin_inputs(z, zenith, azimuth, op);
        const TensorRef hu = to_tensor_ref(absorption_tf, op, "absorption_tf");
        const TensorRef hp = to_tensor_ref(phase_tf, op, "phase_tf");
        nb::gil_scoped_release release;
        thin_transfer_functions(to_settings(s), in, hu, hp, workspace.data(), workspace.nbytes(),
                                to_stream(stream));
      },
      "settings"_a, "z_positions"_a.noconvert(), "zenith"_a.noconvert(), "azimuth"_a.noconvert(),
      "absorption_tf"_a.noconvert(), "phase_tf"_a.noconvert(), "workspace"_a.noconvert(),
      "stream"_a);
  m.def(
      "thin_transfer_functions_backward",
      [](const Settings& s, const Array& z, const Array& zenith, const Array& azimuth,
         const Array& grad_absorption_tf, const Array& grad_phase_tf, const OptionalArray& grad_z,
         const OptionalArray& grad_zenith, const OptionalArray& grad_azimuth,
         const OptionalArray& grad_na_illumination, const OptionalArray& grad_na_detection,
         const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "thin_transfer_functions_backward";
        const ThinTransferInputs in = thin_inputs(z, zenith, azimuth, op);
        const TensorRef gu = to_tensor_ref(grad_absorption_tf, op, "grad_absorption_tf");
        const TensorRef gp = to_tensor_ref(grad_phase_tf, op, "grad_phase_tf");
        ThinTransferGrads grads;
        grads.z_positions = to_tensor_ref(grad_z, op, "grads.z_positions");
        grads.zenith = to_tensor_ref(grad_zenith, op, "grads.zenith");
        grads.azimuth = to_tensor_ref(grad_azimuth, op, "grads.azimuth");
        grads.na_illumination = to_tensor_ref(grad_na_illumination, op, "grads.na_illumination");
        grads.na_detection = to_tensor_ref(grad_na_detection, op, "grads.na_detection");
        nb::gil_scoped_release release;
        thin_transfer_functions_backward(to_settings(s), in, gu, gp, grads, workspace.data(),
                                         workspace.nbytes(), to_stream(stream));
      },
      "settings"_a, "z_positions"_a.noconvert(), "zenith"_a.noconvert(), "azimuth"_a.noconvert(),
      "grad_absorption_tf"_a.noconvert(), "grad_phase_tf"_a.noconvert(),
      "grad_z_positions"_a.noconvert().none(), "grad_zenith"_a.noconvert().none(),
      "grad_azimuth"_a.noconvert().none(), "grad_na_illumination"_a.noconvert().none(),
      "grad_na_detection"_a.noconvert().none(), "workspace"_a.noconvert(), "stream"_a);
  m.def(
      "shared_optics_3d",
      [](const Settings& s, int64_t Z, int64_t Y, int64_t X, double z_pixel_size, int64_t z_padding,
         const Array& pupil, const Array& propagation, const Array& greens, std::uintptr_t stream) {
        constexpr const char* op = "shared_optics_3d";
        ThickGeometry g;
        g.Z = Z;
        g.Y = Y;
        g.X = X;
        g.z_pixel_size = z_pixel_size;
        g.z_padding = z_padding;
        const TensorRef p = to_tensor_ref(pupil, op, "detection_pupil");
        const TensorRef k = to_tensor_ref(propagation, op, "propagation_kernel");
        const TensorRef gr = to_tensor_ref(greens, op, "greens_function");
        nb::gil_scoped_release release;
        shared_optics_3d(to_settings(s), g, p, k, gr, to_stream(stream));
      },
      "settings"_a, "Z"_a, "Y"_a, "X"_a, "z_pixel_size"_a, "z_padding"_a,
      "detection_pupil"_a.noconvert(), "propagation_kernel"_a.noconvert(),
      "greens_function"_a.noconvert(), "stream"_a);
  m.def(
      "optimize_tiles",
      [](const Settings& s, const Array& tiles, double z_spacing,
         const std::vector<OptionalArray>& initial, const std::vector<double>& initial_values,
         const std::vector<double>& learning_rates, int method, int iterations,
         double regularization, double band_low, double band_high, double tolerance, int patience,
         const std::vector<OptionalArray>& outputs, const Array& out_loss,
         const Array& out_iterations, std::uintptr_t stream) {
        constexpr const char* op = "optimize_tiles";
        constexpr const char* names[5] = {"z_offset", "zenith", "azimuth", "na_illumination",
                                          "na_detection"};
        if (initial.size() != 5 || initial_values.size() != 5 || learning_rates.size() != 5 ||
            outputs.size() != 5) {
          throw Error(ErrorKind::Value, std::string(op) +
                                            "(): expected 5 entries per parameter list (z_offset, "
                                            "zenith, azimuth, na_illumination, na_detection)");
        }
        const TensorRef t = to_tensor_ref(tiles, op, "tiles");
        TileParameterSet parameters;
        TileParameter* entries[5] = {&parameters.z_offset, &parameters.zenith, &parameters.azimuth,
                                     &parameters.na_illumination, &parameters.na_detection};
        TileOptimizerResult r;
        TensorRef* outs[5] = {&r.z_offset, &r.zenith, &r.azimuth, &r.na_illumination,
                              &r.na_detection};
        std::string initial_names[5], out_names[5];
        for (int p = 0; p < 5; ++p) {
          initial_names[p] = std::string(names[p]) + ".initial";
          out_names[p] = std::string("result.") + names[p];
          *entries[p] = {to_tensor_ref(initial[p], op, initial_names[p].c_str()), initial_values[p],
                         learning_rates[p]};
          *outs[p] = to_tensor_ref(outputs[p], op, out_names[p].c_str());
        }
        r.loss = to_tensor_ref(out_loss, op, "result.loss");
        r.iterations = to_tensor_ref(out_iterations, op, "result.iterations");
        TileOptimizerOptions o;
        o.method = static_cast<TileOptimizerMethod>(method);
        o.iterations = iterations;
        o.regularization = regularization;
        o.band = {band_low, band_high};
        o.tolerance = tolerance;
        o.patience = patience;
        nb::gil_scoped_release release;
        optimize_tiles(t, to_settings(s), z_spacing, parameters, o, r, to_stream(stream));
      },
      "settings"_a, "tiles"_a.noconvert(), "z_spacing"_a, "initial"_a, "initial_values"_a,
      "learning_rates"_a, "method"_a, "iterations"_a, "regularization"_a, "band_low"_a,
      "band_high"_a, "tolerance"_a, "patience"_a, "outputs"_a, "out_loss"_a.noconvert(),
      "out_iterations"_a.noconvert(), "stream"_a);

  // The thick (3-D) model: the geometry crosses as (Z, Y, X, z_pixel_size, z_padding, zenith,
  // azimuth); the workspace size also validates it, before the caller allocates outputs.
  using Geometry = std::tuple<int64_t, int64_t, int64_t, double, int64_t, double, double>;
  const auto to_geometry = [](const Geometry& t) {
    ThickGeometry g;
    g.Z = std::get<0>(t);
    g.Y = std::get<1>(t);
    g.X = std::get<2>(t);
    g.z_pixel_size = std::get<3>(t);
    g.z_padding = std::get<4>(t);
    g.zenith = std::get<5>(t);
    g.azimuth = std::get<6>(t);
    return g;
  };
  m.def(
      "thick_transfer_function_workspace_size",
      [to_geometry](const Settings& s, const Geometry& g, bool float64) {
        return thick_transfer_function_workspace_size(to_settings(s), to_geometry(g),
                                                      float64 ? DType::Float64 : DType::Float32);
      },
      "settings"_a, "geometry"_a, "float64"_a);
  m.def(
      "thick_transfer_function",
      [to_geometry](const Settings& s, const Geometry& g, const Array& real_potential_tf,
                    const Array& imag_potential_tf, const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "thick_transfer_function";
        const TensorRef re = to_tensor_ref(real_potential_tf, op, "real_potential_tf");
        const TensorRef im = to_tensor_ref(imag_potential_tf, op, "imag_potential_tf");
        nb::gil_scoped_release release;
        thick_transfer_function(to_settings(s), to_geometry(g), re, im, workspace.data(),
                                workspace.nbytes(), to_stream(stream));
      },
      "settings"_a, "geometry"_a, "real_potential_tf"_a.noconvert(),
      "imag_potential_tf"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);
}

}  // namespace fieldfuse::python
