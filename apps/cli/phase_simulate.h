// SPDX-License-Identifier: Apache-2.0
// The embedded default of `fieldfuse phase`: a seeded phase object, the known focus offset and tilt
// of every tile, and the tiles' simulated defocus stacks.
#pragma once

#include <cstdint>
#include <vector>

#include "phase_engine.h"
#include "phase_tiles.h"

namespace fieldfuse::cli {

/// Largest simulated tilt, at the tile farthest from the field's centre: a misaligned condenser,
/// inside the 0.4 NA illumination cone (23.6 degrees), large enough that reconstructing without
/// the tilt visibly hurts the phase (correlation 0.90 instead of 0.95).
constexpr double kSimulatedMaxZenithDegrees = 15.0;
/// The simulated focus offset runs linearly across x from -this to +this (slices) at the field's
/// edges (the outer tile centres of the default layout sit at +-0.56): inside the +-0.5-0.75 slice
/// around a start at 0 from which the mid-band criterion leads to the true focus.
constexpr double kSimulatedZRamp = 0.75;
/// Slices of the simulated stacks (the production Z).
constexpr std::int64_t kSimulatedSlices = 7;

/// A [height, width] phase image (radians): Gaussian blobs of 2.5-8 pixels sigma and 0.1-0.5 rad
/// height, about one per 20 x 20 pixels, placed by a 64-bit Mersenne Twister seeded with `seed`
/// (the same image on every platform).
std::vector<float> simulated_phase_object(std::int64_t height, std::int64_t width,
                                          std::uint64_t seed);

/// Each tile's known parameters: the focus offset ramps linearly with the tile centre's x, and
/// the tilt points away from the field's centre (azimuth atan2(dy, dx)) with a zenith growing
/// linearly with the distance to it, up to kSimulatedMaxZenithDegrees.
TileParameters simulated_parameters(const TileGrid& grid);

/// The defocus stacks [count, kSimulatedSlices, tile, tile] of tiles [first, first + count): each
/// tile of `phase` (no absorption) imaged through the thin forward model at its own `truth`
/// parameters over a background of 1, plus Gaussian noise of sigma `noise` seeded per tile. The
/// transfer functions are those of azimuth + pi, the conjugates of the truth's (M(phi + pi) =
/// conj(M(phi)) exactly): the 2-D inverse applies its filter unconjugated (waveorder's
/// convention), so these stacks are inverted exactly at the true parameters, which is then
/// where the optimiser should land.
void simulate_tiles(PhaseEngine& engine, const TileGrid& grid, const std::vector<float>& phase,
                    const TileParameters& truth, std::int64_t first, std::int64_t count,
                    double noise, std::uint64_t seed, float* stacks);

}  // namespace fieldfuse::cli

namespace fieldfuse::cli {

/// How well the embedded default was recovered.
struct PhaseRecovery {
  double z_offset_rms_slices = 0.0;
  double zenith_rms_degrees = 0.0;
  /// Over the tiles whose true zenith is at least half the largest (the azimuth of a nearly
  /// untilted tile means little); `azimuth_tiles` says how many.
  double azimuth_rms_degrees = 0.0;
  std::int64_t azimuth_tiles = 0;
  double phase_correlation = 0.0;  ///< Pearson correlation with the truth
  /// RMS difference after removing each image's mean, which the phase transfer function cannot
  /// see (radians).
  double phase_rmse = 0.0;
  double start_phase_correlation = 0.0;  ///< the same, reconstructed at the starting parameters
  double truth_phase_correlation = 0.0;  ///< the same, reconstructed at the true parameters
};

/// Parameters with zenith >= 0: a negative zenith is the same tilt at the opposite azimuth. The
/// azimuth is wrapped to (-pi, pi].
TileParameters with_positive_zenith(const TileParameters& parameters);

/// The blended phase images of one run: at the found, the starting and the true parameters.
struct PhaseImages {
  const std::vector<float>& found;
  const std::vector<float>& start;
  const std::vector<float>& at_truth;
};

/// Scores `found` against `truth` and the blended phase images against `truth_phase`.
PhaseRecovery score_recovery(const TileParameters& truth, const TileParameters& found,
                             const std::vector<float>& truth_phase, const PhaseImages& images);

/// Pearson correlation of two images of the same size (0 when either is constant).
double correlation(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace fieldfuse::cli
