// SPDX-License-Identifier: Apache-2.0
// The library calls of `fieldfuse phase` for a batch of tiles, on the run's device: per-tile
// optimisation, transfer functions with the Tikhonov inverse, and the thin forward model.
#include "phase_engine.h"

namespace fieldfuse::cli {

TileParameters::TileParameters(std::int64_t count, double z, double zen, double az)
    : z_offset(static_cast<std::size_t>(count), static_cast<float>(z)),
      zenith(static_cast<std::size_t>(count), static_cast<float>(zen)),
      azimuth(static_cast<std::size_t>(count), static_cast<float>(az)),
      loss(static_cast<std::size_t>(count), 0.0f),
      iterations(static_cast<std::size_t>(count), 0) {}

TileParameters TileParameters::slice(std::int64_t first, std::int64_t count) const {
  TileParameters part;
  const auto copy = [first, count](const auto& from, auto& to) {
    to.assign(from.begin() + first, from.begin() + first + count);
  };
  copy(z_offset, part.z_offset);
  copy(zenith, part.zenith);
  copy(azimuth, part.azimuth);
  copy(loss, part.loss);
  copy(iterations, part.iterations);
  return part;
}

void TileParameters::assign(std::int64_t first, const TileParameters& part) {
  const auto copy = [first](const auto& from, auto& to) {
    std::copy(from.begin(), from.end(), to.begin() + first);
  };
  copy(part.z_offset, z_offset);
  copy(part.zenith, zenith);
  copy(part.azimuth, azimuth);
  copy(part.loss, loss);
  copy(part.iterations, iterations);
}

PhaseEngine::PhaseEngine(Backend& backend, const fieldfuse::MicroscopeSettings& microscope,
                         double z_spacing, std::int64_t slices, std::int64_t tile)
    : backend_(backend),
      microscope_(microscope),
      z_spacing_(z_spacing),
      slices_(slices),
      tile_(tile) {}

Buffer PhaseEngine::upload_floats(const float* host, std::int64_t count) {
  Buffer buffer = backend_.allocate_floats(count);
  backend_.upload(buffer.data(), host, static_cast<std::size_t>(count) * sizeof(float));
  return buffer;
}

fieldfuse::TensorRef PhaseEngine::ref(const Buffer& buffer, DType dtype,
                                      std::initializer_list<std::int64_t> sizes) const {
  return fieldfuse::TensorRef::contiguous(buffer.data(), dtype, backend_.device(), sizes);
}

PhaseEngine::TransferFunctions PhaseEngine::transfer_functions(const TileParameters& parameters) {
  const std::int64_t count = parameters.count();
  // z_k = (-k + floor(Z/2) + offset)*dz, the library's convention (specs/optics.md); the library
  // negates it for invert_phase_contrast.
  std::vector<float> z(static_cast<std::size_t>(count * slices_));
  for (std::int64_t b = 0; b < count; ++b) {
    for (std::int64_t k = 0; k < slices_; ++k) {
      z[static_cast<std::size_t>(b * slices_ + k)] =
          static_cast<float>((static_cast<double>(slices_ / 2 - k) +
                              parameters.z_offset[static_cast<std::size_t>(b)]) *
                             z_spacing_);
    }
  }
  const Buffer z_positions = upload_floats(z.data(), count * slices_);
  const Buffer zenith = upload_floats(parameters.zenith.data(), count);
  const Buffer azimuth = upload_floats(parameters.azimuth.data(), count);
  const fieldfuse::ThinTransferInputs inputs{ref(z_positions, DType::Float32, {count, slices_}),
                                             ref(zenith, DType::Float32, {count}),
                                             ref(azimuth, DType::Float32, {count})};
  const std::size_t bytes = static_cast<std::size_t>(count * slices_ * tile_ * tile_) *
                            fieldfuse::dtype_size(DType::Complex64);
  TransferFunctions tf;
  tf.absorption = backend_.allocate(bytes);
  tf.phase = backend_.allocate(bytes);
  tf.absorption_ref = ref(tf.absorption, DType::Complex64, {count, slices_, tile_, tile_});
  tf.phase_ref = ref(tf.phase, DType::Complex64, {count, slices_, tile_, tile_});
  const std::size_t workspace_bytes = fieldfuse::thin_transfer_functions_workspace_size(
      microscope_, count, slices_, tile_, tile_, DType::Complex64);
  Buffer workspace = backend_.allocate(workspace_bytes);
  fieldfuse::thin_transfer_functions(microscope_, inputs, tf.absorption_ref, tf.phase_ref,
                                     workspace.data(), workspace_bytes, backend_.stream());
  // The inputs and the workspace are freed on return: wait until the library has used them.
  backend_.synchronize();
  return tf;
}

TileParameters PhaseEngine::optimize(const float* tiles, const TileParameters& start,
                                     const TileOptimization& request) {
  const std::int64_t count = start.count();
  const Buffer data = upload_floats(tiles, count * slices_ * tile_ * tile_);
  const Buffer z0 = upload_floats(start.z_offset.data(), count);
  const Buffer zenith0 = upload_floats(start.zenith.data(), count);
  const Buffer azimuth0 = upload_floats(start.azimuth.data(), count);
  const fieldfuse::TileParameter z{ref(z0, DType::Float32, {count}), 0.0, request.lr_z};
  const fieldfuse::TileParameter zenith{ref(zenith0, DType::Float32, {count}), 0.0,
                                        request.lr_zenith};
  const fieldfuse::TileParameter azimuth{ref(azimuth0, DType::Float32, {count}), 0.0,
                                         request.lr_azimuth};
  Buffer out_z = backend_.allocate_floats(count), out_zenith = backend_.allocate_floats(count),
         out_azimuth = backend_.allocate_floats(count), out_loss = backend_.allocate_floats(count),
         out_iterations = backend_.allocate(static_cast<std::size_t>(count) * sizeof(std::int32_t));
  const fieldfuse::TileOptimizerResult result{
      ref(out_z, DType::Float32, {count}), ref(out_zenith, DType::Float32, {count}),
      ref(out_azimuth, DType::Float32, {count}), ref(out_loss, DType::Float32, {count}),
      ref(out_iterations, DType::Int32, {count})};
  fieldfuse::TileParameterSet parameters;
  parameters.z_offset = z;
  parameters.zenith = zenith;
  parameters.azimuth = azimuth;
  fieldfuse::optimize_tiles(ref(data, DType::Float32, {count, slices_, tile_, tile_}), microscope_,
                            z_spacing_, parameters, request.options, result, backend_.stream());
  TileParameters found(count, 0.0, 0.0, 0.0);
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
  backend_.download(found.z_offset.data(), out_z.data(), bytes);
  backend_.download(found.zenith.data(), out_zenith.data(), bytes);
  backend_.download(found.azimuth.data(), out_azimuth.data(), bytes);
  backend_.download(found.loss.data(), out_loss.data(), bytes);
  backend_.download(found.iterations.data(), out_iterations.data(), bytes);
  return found;
}

void PhaseEngine::reconstruct(const float* tiles, const TileParameters& parameters,
                              double regularization, float* absorption, float* phase) {
  const std::int64_t count = parameters.count();
  const TransferFunctions tf = transfer_functions(parameters);
  const Buffer data = upload_floats(tiles, count * slices_ * tile_ * tile_);
  const fieldfuse::TensorRef data_ref = ref(data, DType::Float32, {count, slices_, tile_, tile_});
  Buffer out_absorption = backend_.allocate_floats(count * tile_ * tile_);
  Buffer out_phase = backend_.allocate_floats(count * tile_ * tile_);
  const std::size_t workspace_bytes =
      fieldfuse::tikhonov_inverse_workspace_size(data_ref, tf.absorption_ref);
  Buffer workspace = backend_.allocate(workspace_bytes);
  fieldfuse::tikhonov_inverse(data_ref, tf.absorption_ref, tf.phase_ref, regularization,
                              /*normalize=*/true,
                              ref(out_absorption, DType::Float32, {count, tile_, tile_}),
                              ref(out_phase, DType::Float32, {count, tile_, tile_}),
                              workspace.data(), workspace_bytes, backend_.stream());
  const std::size_t bytes = static_cast<std::size_t>(count * tile_ * tile_) * sizeof(float);
  backend_.download(absorption, out_absorption.data(), bytes);
  backend_.download(phase, out_phase.data(), bytes);
}

void PhaseEngine::simulate(const float* absorption, const float* phase,
                           const TileParameters& parameters, double background, float* stacks) {
  const std::int64_t count = parameters.count();
  const TransferFunctions tf = transfer_functions(parameters);
  const Buffer a = upload_floats(absorption, count * tile_ * tile_);
  const Buffer p = upload_floats(phase, count * tile_ * tile_);
  const fieldfuse::TensorRef a_ref = ref(a, DType::Float32, {count, tile_, tile_});
  Buffer out = backend_.allocate_floats(count * slices_ * tile_ * tile_);
  const std::size_t workspace_bytes =
      fieldfuse::thin_forward_model_workspace_size(a_ref, tf.absorption_ref);
  Buffer workspace = backend_.allocate(workspace_bytes);
  fieldfuse::thin_forward_model(a_ref, ref(p, DType::Float32, {count, tile_, tile_}),
                                tf.absorption_ref, tf.phase_ref, background,
                                ref(out, DType::Float32, {count, slices_, tile_, tile_}),
                                workspace.data(), workspace_bytes, backend_.stream());
  backend_.download(stacks, out.data(),
                    static_cast<std::size_t>(count * slices_ * tile_ * tile_) * sizeof(float));
}

}  // namespace fieldfuse::cli
