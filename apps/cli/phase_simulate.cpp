// SPDX-License-Identifier: Apache-2.0
// The embedded default of `fieldfuse phase`: a seeded phase object, the known focus offset and tilt
// of every tile, and the tiles' simulated defocus stacks.
#include "phase_simulate.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "phantom.h"
#include "volume.h"

namespace fieldfuse::cli {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kPixelsPerBlob = 400.0;  // one blob per 20 x 20 pixels: a crowded field
constexpr double kMinSigma = 2.5, kMaxSigma = 8.0;
constexpr double kMinHeight = 0.1, kMaxHeight = 0.5;
constexpr double kBlobReach = 4.0;  // sigmas: the blob is below 3.4e-4 of its height beyond
// The simulated data are 1 + the image terms, so the per-slice normalisation x/mean - 1 returns
// the phase in radians and the noise sigma is a fraction of the background.
constexpr double kBackground = 1.0;
// Seeds of the tiles' noise: far apart from each other and from the object's seed.
constexpr std::uint64_t kTileSeedStride = 0x9E3779B97F4A7C15ull;

}  // namespace

std::vector<float> simulated_phase_object(std::int64_t height, std::int64_t width,
                                          std::uint64_t seed) {
  std::mt19937_64 engine(seed);  // the standard fixes mt19937_64's output sequence exactly
  const auto uniform = [&engine](double low, double high) {
    return low + (high - low) * static_cast<double>(engine() >> 11) * (1.0 / 9007199254740992.0);
  };
  std::vector<double> image(static_cast<std::size_t>(height * width), 0.0);
  const auto blobs = static_cast<std::int64_t>(
      std::max(1.0, std::round(static_cast<double>(height * width) / kPixelsPerBlob)));
  for (std::int64_t k = 0; k < blobs; ++k) {
    const double cy = uniform(0.0, static_cast<double>(height));
    const double cx = uniform(0.0, static_cast<double>(width));
    const double sigma = uniform(kMinSigma, kMaxSigma);
    const double peak = uniform(kMinHeight, kMaxHeight);
    const double reach = kBlobReach * sigma;
    const auto y_lo = std::max<std::int64_t>(0, static_cast<std::int64_t>(cy - reach));
    const auto y_hi = std::min<std::int64_t>(height, static_cast<std::int64_t>(cy + reach) + 1);
    const auto x_lo = std::max<std::int64_t>(0, static_cast<std::int64_t>(cx - reach));
    const auto x_hi = std::min<std::int64_t>(width, static_cast<std::int64_t>(cx + reach) + 1);
    for (std::int64_t y = y_lo; y < y_hi; ++y) {
      for (std::int64_t x = x_lo; x < x_hi; ++x) {
        const double dy = static_cast<double>(y) + 0.5 - cy, dx = static_cast<double>(x) + 0.5 - cx;
        image[static_cast<std::size_t>(y * width + x)] +=
            peak * std::exp(-(dy * dy + dx * dx) / (2.0 * sigma * sigma));
      }
    }
  }
  return std::vector<float>(image.begin(), image.end());
}

TileParameters simulated_parameters(const TileGrid& grid) {
  TileParameters truth(grid.count(), 0.0, 0.0, 0.0);
  const double cy = 0.5 * static_cast<double>(grid.height);
  const double cx = 0.5 * static_cast<double>(grid.width);
  const double half_tile = 0.5 * static_cast<double>(grid.tile);
  // The farthest tile centre sets the scale of the tilt.
  double reach = 0.0;
  for (std::int64_t b = 0; b < grid.count(); ++b) {
    reach = std::max(reach, std::hypot(static_cast<double>(grid.y0(b)) + half_tile - cy,
                                       static_cast<double>(grid.x0(b)) + half_tile - cx));
  }
  const double max_zenith = kSimulatedMaxZenithDegrees * kPi / 180.0;
  for (std::int64_t b = 0; b < grid.count(); ++b) {
    const double dy = static_cast<double>(grid.y0(b)) + half_tile - cy;
    const double dx = static_cast<double>(grid.x0(b)) + half_tile - cx;
    const auto i = static_cast<std::size_t>(b);
    truth.z_offset[i] = static_cast<float>(kSimulatedZRamp * dx / cx);
    truth.zenith[i] =
        static_cast<float>(reach > 0.0 ? max_zenith * std::hypot(dy, dx) / reach : 0.0);
    truth.azimuth[i] = static_cast<float>(std::atan2(dy, dx));
  }
  return truth;
}

void simulate_tiles(PhaseEngine& engine, const TileGrid& grid, const std::vector<float>& phase,
                    const TileParameters& truth, std::int64_t first, std::int64_t count,
                    double noise, std::uint64_t seed, float* stacks) {
  const std::int64_t t = grid.tile;
  std::vector<float> phase_tiles(static_cast<std::size_t>(count * t * t));
  cut_tiles(phase.data(), 1, grid, first, count, phase_tiles.data());
  const std::vector<float> absorption(phase_tiles.size(), 0.0f);
  // Azimuth + pi: the conjugated transfer functions, which the unconjugated inverse undoes exactly
  // at the true parameters (see the header).
  TileParameters imaged = truth.slice(first, count);
  for (float& azimuth : imaged.azimuth) azimuth = static_cast<float>(azimuth + kPi);
  engine.simulate(absorption.data(), phase_tiles.data(), imaged, kBackground, stacks);
  if (noise <= 0.0) return;
  Volume stack(kSimulatedSlices, t, t);
  for (std::int64_t k = 0; k < count; ++k) {
    float* tile = stacks + k * stack.numel();
    std::copy_n(tile, stack.numel(), stack.voxels.begin());
    add_gaussian_noise(stack, noise * kBackground,
                       seed + kTileSeedStride * static_cast<std::uint64_t>(first + k + 1));
    std::copy_n(stack.voxels.begin(), stack.numel(), tile);
  }
}

}  // namespace fieldfuse::cli

namespace fieldfuse::cli {
namespace {

double wrapped(double angle) {
  const double turn = 2.0 * kPi;
  angle = std::fmod(angle, turn);
  if (angle > kPi) angle -= turn;
  if (angle <= -kPi) angle += turn;
  return angle;
}

double mean_of(const std::vector<float>& v) {
  double sum = 0.0;
  for (const float x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

}  // namespace

TileParameters with_positive_zenith(const TileParameters& parameters) {
  TileParameters out = parameters;
  for (std::size_t b = 0; b < out.zenith.size(); ++b) {
    double azimuth = out.azimuth[b];
    if (out.zenith[b] < 0.0f) {
      out.zenith[b] = -out.zenith[b];
      azimuth += kPi;
    }
    out.azimuth[b] = static_cast<float>(wrapped(azimuth));
  }
  return out;
}

double correlation(const std::vector<float>& a, const std::vector<float>& b) {
  const double mean_a = mean_of(a), mean_b = mean_of(b);
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double da = a[i] - mean_a, db = b[i] - mean_b;
    ab += da * db;
    aa += da * da;
    bb += db * db;
  }
  return aa > 0.0 && bb > 0.0 ? ab / std::sqrt(aa * bb) : 0.0;
}

PhaseRecovery score_recovery(const TileParameters& truth, const TileParameters& found,
                             const std::vector<float>& truth_phase, const PhaseImages& images) {
  const std::vector<float>& phase = images.found;
  const TileParameters t = with_positive_zenith(truth), f = with_positive_zenith(found);
  const double degrees = 180.0 / kPi;
  const double max_zenith = *std::max_element(t.zenith.begin(), t.zenith.end());
  double z = 0.0, zenith = 0.0, azimuth = 0.0;
  PhaseRecovery r;
  for (std::size_t b = 0; b < t.zenith.size(); ++b) {
    z += std::pow(f.z_offset[b] - t.z_offset[b], 2);
    zenith += std::pow((f.zenith[b] - t.zenith[b]) * degrees, 2);
    if (max_zenith > 0.0 && t.zenith[b] >= 0.5 * max_zenith) {
      azimuth += std::pow(wrapped(f.azimuth[b] - t.azimuth[b]) * degrees, 2);
      ++r.azimuth_tiles;
    }
  }
  const auto n = static_cast<double>(t.zenith.size());
  r.z_offset_rms_slices = std::sqrt(z / n);
  r.zenith_rms_degrees = std::sqrt(zenith / n);
  r.azimuth_rms_degrees =
      r.azimuth_tiles > 0 ? std::sqrt(azimuth / static_cast<double>(r.azimuth_tiles)) : 0.0;
  r.phase_correlation = correlation(phase, truth_phase);
  r.start_phase_correlation = correlation(images.start, truth_phase);
  r.truth_phase_correlation = correlation(images.at_truth, truth_phase);
  const double mean_p = mean_of(phase), mean_t = mean_of(truth_phase);
  double squared = 0.0;
  for (std::size_t i = 0; i < phase.size(); ++i) {
    squared += std::pow((phase[i] - mean_p) - (truth_phase[i] - mean_t), 2);
  }
  r.phase_rmse = std::sqrt(squared / static_cast<double>(phase.size()));
  return r;
}

}  // namespace fieldfuse::cli
