// SPDX-License-Identifier: Apache-2.0
// The library calls of `fieldfuse phase` for a batch of tiles, on the run's device: per-tile
// optimisation, transfer functions with the Tikhonov inverse, and the thin forward model.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"
#include "fieldfuse/optics.h"

namespace fieldfuse::cli {

/// Per-tile parameters on the host: focus offset in slices, zenith and azimuth in radians, and the
/// optimiser's final loss and iteration count (0 when not optimised).
struct TileParameters {
  std::vector<float> z_offset, zenith, azimuth, loss;
  std::vector<std::int32_t> iterations;

  TileParameters() = default;
  /// `count` tiles, every one at (z_offset, zenith, azimuth).
  TileParameters(std::int64_t count, double z_offset, double zenith, double azimuth);
  std::int64_t count() const { return static_cast<std::int64_t>(z_offset.size()); }
  /// Tiles [first, first + count).
  TileParameters slice(std::int64_t first, std::int64_t count) const;
  /// Writes `part` over tiles [first, first + part.count()).
  void assign(std::int64_t first, const TileParameters& part);
};

/// What fieldfuse::optimize_tiles is asked: a learning rate of 0 freezes a parameter (rates in
/// slices and radians).
struct TileOptimization {
  fieldfuse::TileOptimizerOptions options;
  double lr_z = 0.0, lr_zenith = 0.0, lr_azimuth = 0.0;
};

/// Tiles of `slices` x `tile` x `tile`, `z_spacing` apart, seen by `microscope`, on `backend`.
class PhaseEngine {
 public:
  PhaseEngine(Backend& backend, const fieldfuse::MicroscopeSettings& microscope, double z_spacing,
              std::int64_t slices, std::int64_t tile);

  /// Optimises the tiles [B, slices, tile, tile] (host) from `start` (B tiles) with
  /// fieldfuse::optimize_tiles; returns the parameters, final losses and iteration counts.
  TileParameters optimize(const float* tiles, const TileParameters& start,
                          const TileOptimization& request);

  /// Absorption and phase [B, tile, tile] (host) of the tiles [B, slices, tile, tile] (host) at
  /// their `parameters`: fieldfuse::thin_transfer_functions, then fieldfuse::tikhonov_inverse
  /// with intensity normalisation.
  void reconstruct(const float* tiles, const TileParameters& parameters, double regularization,
                   float* absorption, float* phase);

  /// The defocus stacks [B, slices, tile, tile] (host) of absorption and phase [B, tile, tile]
  /// (host) imaged at `parameters` (fieldfuse::thin_forward_model over `background`).
  void simulate(const float* absorption, const float* phase, const TileParameters& parameters,
                double background, float* stacks);

 private:
  // The transfer functions [B, slices, tile, tile] of `parameters`, on the device.
  struct TransferFunctions {
    Buffer absorption, phase;
    fieldfuse::TensorRef absorption_ref, phase_ref;
  };
  TransferFunctions transfer_functions(const TileParameters& parameters);
  Buffer upload_floats(const float* host, std::int64_t count);
  fieldfuse::TensorRef ref(const Buffer& buffer, DType dtype,
                           std::initializer_list<std::int64_t> sizes) const;

  Backend& backend_;
  fieldfuse::MicroscopeSettings microscope_;
  double z_spacing_;
  std::int64_t slices_, tile_;
};

}  // namespace fieldfuse::cli
