// SPDX-License-Identifier: Apache-2.0
// Sanity tests of the built-in Shepp-Logan phantom and its seeded noise.
#include <gtest/gtest.h>

#include <cmath>

#include "phantom.h"

namespace fieldfuse::cli {
namespace {

// Voxel index whose centre is nearest to coordinate `x` in [-1, 1] on an axis of `n` voxels.
std::int64_t index_of(double x, std::int64_t n) {
  return static_cast<std::int64_t>(std::floor((x + 1.0) * 0.5 * static_cast<double>(n)));
}

TEST(Phantom, IntensitiesMatchTheModifiedSheppLoganLevels) {
  const std::int64_t n = 64;
  const Volume head = shepp_logan_3d(n);
  ASSERT_EQ(head.numel(), n * n * n);
  const auto [low, high] = std::minmax_element(head.voxels.begin(), head.voxels.end());
  EXPECT_FLOAT_EQ(*low, 0.0f);
  EXPECT_FLOAT_EQ(*high, 1.0f);
  const std::int64_t mid = n / 2;
  // (d, h, w) = (z, −y, x): outside the head, skull at the top, brain matter, a ventricle.
  EXPECT_FLOAT_EQ(head.at(0, 0, 0), 0.0f);
  EXPECT_FLOAT_EQ(head.at(mid, index_of(-0.9, n), mid), 1.0f);    // y = +0.9: the skull shell
  EXPECT_NEAR(head.at(mid, index_of(0.5, n), mid), 0.2f, 1e-6);   // brain, below the centre
  EXPECT_NEAR(head.at(mid, mid, index_of(0.22, n)), 0.0f, 1e-6);  // inside the right ventricle
  EXPECT_NEAR(head.at(index_of(-0.15, n), index_of(-0.35, n), mid), 0.3f, 1e-6);  // upper blob
}

TEST(Phantom, NoiseIsSeededZeroMeanWithTheRequestedSpread) {
  Volume a(32, 32, 32), b(32, 32, 32), c(32, 32, 32);
  add_gaussian_noise(a, 0.1, 7);
  add_gaussian_noise(b, 0.1, 7);
  add_gaussian_noise(c, 0.1, 8);
  EXPECT_EQ(a.voxels, b.voxels);
  EXPECT_NE(a.voxels, c.voxels);
  double sum = 0.0, sum_sq = 0.0;
  for (const float v : a.voxels) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double count = static_cast<double>(a.numel());
  EXPECT_NEAR(sum / count, 0.0, 0.002);  // 4 standard errors at 32 768 samples
  EXPECT_NEAR(std::sqrt(sum_sq / count), 0.1, 0.002);
}

}  // namespace
}  // namespace fieldfuse::cli
