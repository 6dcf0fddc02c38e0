// SPDX-License-Identifier: Apache-2.0
// Tests of PSNR and 3-D SSIM on cases with known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "metrics.h"

namespace fieldfuse::cli {
namespace {

Volume filled(std::int64_t d, std::int64_t h, std::int64_t w, float value) {
  Volume volume(d, h, w);
  std::fill(volume.voxels.begin(), volume.voxels.end(), value);
  return volume;
}

Volume random_volume(std::int64_t d, std::int64_t h, std::int64_t w, unsigned seed) {
  Volume volume(d, h, w);
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (float& v : volume.voxels) v = uniform(engine);
  return volume;
}

TEST(Psnr, ConstantOffsetGivesTheClosedForm) {
  const Volume reference = random_volume(4, 5, 6, 1);
  Volume shifted = reference;
  for (float& v : shifted.voxels) v += 0.1f;
  // MSE = 0.01 with a data range of 1: 10·log10(1 / 0.01) = 20 dB.
  EXPECT_NEAR(psnr(shifted, reference, 1.0), 20.0, 1e-4);
  // Doubling the range adds 20·log10(2) dB.
  EXPECT_NEAR(psnr(shifted, reference, 2.0), 20.0 + 20.0 * std::log10(2.0), 1e-4);
}

TEST(Psnr, IdenticalVolumesAreInfinite) {
  const Volume reference = random_volume(3, 3, 3, 2);
  EXPECT_TRUE(std::isinf(psnr(reference, reference, 1.0)));
  EXPECT_DOUBLE_EQ(mean_squared_error(reference.voxels.data(), reference.voxels.data(), 27), 0.0);
}

TEST(Ssim, IdenticalVolumesScoreOne) {
  const Volume reference = random_volume(12, 13, 14, 3);
  EXPECT_NEAR(ssim_3d(reference, reference, 1.0), 1.0, 1e-12);
}

TEST(Ssim, ConstantVolumesGiveTheLuminanceTerm) {
  // With no variance anywhere SSIM reduces to (2ab + C1) / (a² + b² + C1) at every voxel.
  const double a = 0.3, b = 0.5, c1 = 0.01 * 0.01;
  const double expected = (2 * a * b + c1) / (a * a + b * b + c1);
  EXPECT_NEAR(ssim_3d(filled(7, 6, 5, 0.3f), filled(7, 6, 5, 0.5f), 1.0), expected, 1e-6);
}

TEST(Ssim, NoiseLowersTheScoreMonotonicallyAndSymmetrically) {
  const Volume reference = random_volume(16, 16, 16, 4);
  std::mt19937 engine(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Volume mild = reference, strong = reference;
  for (std::size_t i = 0; i < reference.voxels.size(); ++i) {
    const float n = normal(engine);
    mild.voxels[i] += 0.05f * n;
    strong.voxels[i] += 0.3f * n;
  }
  const double ssim_mild = ssim_3d(mild, reference, 1.0);
  const double ssim_strong = ssim_3d(strong, reference, 1.0);
  EXPECT_LT(ssim_mild, 1.0);
  EXPECT_LT(ssim_strong, ssim_mild);
  EXPECT_GT(ssim_strong, -1.0);
  EXPECT_NEAR(ssim_3d(reference, mild, 1.0), ssim_mild, 1e-12);
}

TEST(Ssim, VolumesThinnerThanTheWindowWork) {
  const Volume a = random_volume(1, 3, 40, 6);
  Volume b = a;
  for (float& v : b.voxels) v = 1.0f - v;
  const double score = ssim_3d(a, b, 1.0);
  EXPECT_TRUE(std::isfinite(score));
  EXPECT_LT(score, 0.5);
  EXPECT_NEAR(ssim_3d(a, a, 1.0), 1.0, 1e-12);
}

}  // namespace
}  // namespace fieldfuse::cli
