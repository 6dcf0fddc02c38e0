// SPDX-License-Identifier: Apache-2.0
// The built-in test volume: a 3-D modified Shepp-Logan head phantom and seeded Gaussian noise.
#include "phantom.h"

#include <cmath>
#include <iterator>
#include <random>

#include "core/parallel.h"
#include "tomo/phantom_math.h"

namespace fieldfuse::cli {
namespace {

using fieldfuse::detail::tomo::cell_centre;
using fieldfuse::detail::tomo::ellipsoid_contains;
using fieldfuse::detail::tomo::EllipsoidShape;

constexpr double kPi = 3.14159265358979323846;

struct Ellipsoid {
  // Every intensity of the modified phantom is a multiple of 0.1; summing whole tenths keeps
  // overlaps exact (1 − 0.8 − 0.2 is 0 here, not −5.6e-17).
  int intensity_tenths;
  EllipsoidShape shape;
};

// The ten ellipses of the modified Shepp-Logan head (Shepp & Logan 1974, with the higher-contrast
// intensities of Toft 1996), given z semi-axes and centres following the 3-D head of Kak & Slaney
// (1988), so the central axial slice is the familiar 2-D phantom.
constexpr Ellipsoid kHead[] = {
    // tenths   a (x)   b (y)  c (z)      x0     y0      z0     phi
    {10, {{0.6900, 0.920, 0.810}, {0.00, 0.0000, 0.00}, 0.0}},    // skull
    {-8, {{0.6624, 0.874, 0.780}, {0.00, -0.0184, 0.00}, 0.0}},   // brain
    {-2, {{0.1100, 0.310, 0.220}, {0.22, 0.0000, 0.00}, -18.0}},  // right ventricle
    {-2, {{0.1600, 0.410, 0.280}, {-0.22, 0.0000, 0.00}, 18.0}},  // left ventricle
    {1, {{0.2100, 0.250, 0.410}, {0.00, 0.3500, -0.15}, 0.0}},    // upper blob
    {1, {{0.0460, 0.046, 0.050}, {0.00, 0.1000, 0.25}, 0.0}},     // small spheres
    {1, {{0.0460, 0.046, 0.050}, {0.00, -0.1000, 0.25}, 0.0}},
    {1, {{0.0460, 0.023, 0.050}, {-0.08, -0.6050, 0.00}, 0.0}},  // three small lesions, low
    {1, {{0.0230, 0.023, 0.020}, {0.00, -0.6060, 0.00}, 0.0}},
    {1, {{0.0230, 0.046, 0.020}, {0.06, -0.6050, 0.00}, 0.0}},
};

double head_intensity(double x, double y, double z) {
  int tenths = 0;
  for (const Ellipsoid& e : kHead) {
    if (ellipsoid_contains(e.shape, x, y, z)) tenths += e.intensity_tenths;
  }
  return 0.1 * tenths;
}

}  // namespace

Volume shepp_logan_3d(std::int64_t size) {
  Volume volume(size, size, size);
  // Each voxel tests every ellipsoid: weigh a plane's work accordingly.
  const std::int64_t plane_work = size * size * static_cast<std::int64_t>(std::size(kHead));
  fieldfuse::detail::parallel_for(0, size, plane_work, [&](std::int64_t d) {
    const double z = cell_centre(d, size);
    for (std::int64_t h = 0; h < size; ++h) {
      const double y = -cell_centre(h, size);  // row 0 is the top of the image
      for (std::int64_t w = 0; w < size; ++w) {
        volume.voxels[static_cast<std::size_t>((d * size + h) * size + w)] =
            static_cast<float>(head_intensity(cell_centre(w, size), y, z));
      }
    }
  });
  return volume;
}

void add_gaussian_noise(Volume& volume, double sigma, std::uint64_t seed) {
  std::mt19937_64 engine(seed);  // the standard fixes mt19937_64's output sequence exactly
  const auto uniform_open = [&engine] {
    // 53 random bits into (0, 1]: never 0, so the logarithm below stays finite.
    return (static_cast<double>(engine() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  std::vector<float>& voxels = volume.voxels;
  for (std::size_t i = 0; i < voxels.size(); i += 2) {
    // Box-Muller: two uniforms give two independent standard normals.
    const double radius = std::sqrt(-2.0 * std::log(uniform_open()));
    const double angle = 2.0 * kPi * uniform_open();
    voxels[i] += static_cast<float>(sigma * radius * std::cos(angle));
    if (i + 1 < voxels.size())
      voxels[i + 1] += static_cast<float>(sigma * radius * std::sin(angle));
  }
}

}  // namespace fieldfuse::cli
