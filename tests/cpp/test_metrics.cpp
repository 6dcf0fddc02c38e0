// SPDX-License-Identifier: Apache-2.0
// Tests of the image-quality metrics (metrics.h): PSNR, 3-D SSIM and the profile error on cases
// with known answers, in float32 and float64, and their argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fieldfuse/metrics.h"
#include "tv_test_util.h"  // expect_error

namespace fieldfuse {
namespace {

// A host [D, H, W] float32 volume with its view.
struct Vol {
  int64_t d, h, w;
  std::vector<float> v;
  Vol(int64_t d_, int64_t h_, int64_t w_, float value = 0.0f)
      : d(d_), h(h_), w(w_), v(static_cast<std::size_t>(d_ * h_ * w_), value) {}
  TensorRef ref() { return TensorRef::contiguous(v.data(), DType::Float32, {}, {d, h, w}); }
};

Vol random_volume(int64_t d, int64_t h, int64_t w, unsigned seed) {
  Vol volume(d, h, w);
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (float& v : volume.v) v = uniform(engine);
  return volume;
}

TEST(Psnr, ConstantOffsetGivesTheClosedForm) {
  Vol reference = random_volume(4, 5, 6, 1);
  Vol shifted = reference;
  for (float& v : shifted.v) v += 0.1f;
  // MSE = 0.01 with a data range of 1: 10·log10(1 / 0.01) = 20 dB.
  EXPECT_NEAR(psnr(shifted.ref(), reference.ref(), 1.0), 20.0, 1e-4);
  // Doubling the range adds 20·log10(2) dB.
  EXPECT_NEAR(psnr(shifted.ref(), reference.ref(), 2.0), 20.0 + 20.0 * std::log10(2.0), 1e-4);
  EXPECT_NEAR(psnr_from_mse(0.01, 1.0), 20.0, 1e-12);
}

TEST(Psnr, IdenticalVolumesAreInfiniteAndAnyShapeWorks) {
  Vol reference = random_volume(3, 3, 3, 2);
  EXPECT_TRUE(std::isinf(psnr(reference.ref(), reference.ref(), 1.0)));
  std::vector<double> a = {0.0, 1.0}, b = {0.5, 1.0};
  // 1-D float64: MSE = 0.125.
  EXPECT_NEAR(psnr(TensorRef::contiguous(a.data(), DType::Float64, {}, {2}),
                   TensorRef::contiguous(b.data(), DType::Float64, {}, {2}), 1.0),
              10.0 * std::log10(8.0), 1e-12);
}

TEST(Ssim, IdenticalVolumesScoreOne) {
  Vol reference = random_volume(12, 13, 14, 3);
  EXPECT_NEAR(ssim_3d(reference.ref(), reference.ref(), 1.0), 1.0, 1e-12);
}

TEST(Ssim, ConstantVolumesGiveTheLuminanceTerm) {
  // With no variance anywhere SSIM reduces to (2ab + C1) / (a² + b² + C1) at every voxel.
  const double a = 0.3, b = 0.5, c1 = 0.01 * 0.01;
  const double expected = (2 * a * b + c1) / (a * a + b * b + c1);
  Vol x(7, 6, 5, 0.3f), y(7, 6, 5, 0.5f);
  EXPECT_NEAR(ssim_3d(x.ref(), y.ref(), 1.0), expected, 1e-6);
}

TEST(Ssim, NoiseLowersTheScoreMonotonicallyAndSymmetrically) {
  Vol reference = random_volume(16, 16, 16, 4);
  std::mt19937 engine(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Vol mild = reference, strong = reference;
  for (std::size_t i = 0; i < reference.v.size(); ++i) {
    const float n = normal(engine);
    mild.v[i] += 0.05f * n;
    strong.v[i] += 0.3f * n;
  }
  const double ssim_mild = ssim_3d(mild.ref(), reference.ref(), 1.0);
  const double ssim_strong = ssim_3d(strong.ref(), reference.ref(), 1.0);
  EXPECT_LT(ssim_mild, 1.0);
  EXPECT_LT(ssim_strong, ssim_mild);
  EXPECT_GT(ssim_strong, -1.0);
  EXPECT_NEAR(ssim_3d(reference.ref(), mild.ref(), 1.0), ssim_mild, 1e-12);
}

TEST(Ssim, VolumesThinnerThanTheWindowWork) {
  Vol a = random_volume(1, 3, 40, 6);
  Vol b = a;
  for (float& v : b.v) v = 1.0f - v;
  const double score = ssim_3d(a.ref(), b.ref(), 1.0);
  EXPECT_TRUE(std::isfinite(score));
  EXPECT_LT(score, 0.5);
  EXPECT_NEAR(ssim_3d(a.ref(), a.ref(), 1.0), 1.0, 1e-12);
  Vol empty(0, 4, 4);
  EXPECT_EQ(ssim_3d(empty.ref(), empty.ref(), 1.0), 1.0);
}

TEST(Metrics, Float64GivesTheFloat32Numbers) {
  Vol a = random_volume(9, 10, 11, 7), b = random_volume(9, 10, 11, 8);
  std::vector<double> a64(a.v.begin(), a.v.end()), b64(b.v.begin(), b.v.end());
  const TensorRef ra = TensorRef::contiguous(a64.data(), DType::Float64, {}, {9, 10, 11});
  const TensorRef rb = TensorRef::contiguous(b64.data(), DType::Float64, {}, {9, 10, 11});
  // Every sum runs in float64 over the same values in the same order: the same bits.
  EXPECT_EQ(psnr(ra, rb, 1.0), psnr(a.ref(), b.ref(), 1.0));
  EXPECT_EQ(ssim_3d(ra, rb, 1.0), ssim_3d(a.ref(), b.ref(), 1.0));
  for (int axis = 0; axis < 3; ++axis) {
    EXPECT_EQ(profile_error(ra, rb, axis), profile_error(a.ref(), b.ref(), axis));
  }
}

TEST(ProfileError, SeesStructureAlongItsAxisOnly) {
  // The reference varies along D only; the estimate is its D-profile flattened (each plane's
  // mean replaced by the global mean) plus a checkerboard of zero mean along every row and column
  // of each plane.
  Vol reference(8, 6, 6), estimate(8, 6, 6);
  double total = 0.0;
  for (int64_t d = 0; d < 8; ++d)
    for (int64_t i = 0; i < 36; ++i) reference.v[d * 36 + i] = static_cast<float>(d + 1);
  for (const float v : reference.v) total += v;
  const float mean = static_cast<float>(total / reference.v.size());
  for (int64_t d = 0; d < 8; ++d)
    for (int64_t i = 0; i < 36; ++i)
      estimate.v[d * 36 + i] = mean + ((i / 6 + i % 6) % 2 == 0 ? 0.25f : -0.25f);
  // Along H and W every profile value is the global mean for both: no error.
  EXPECT_NEAR(profile_error(estimate.ref(), reference.ref(), 1), 0.0, 1e-6);
  EXPECT_NEAR(profile_error(estimate.ref(), reference.ref(), 2), 0.0, 1e-6);
  // Along D: ‖p − mean‖ / ‖p‖ for p = 1..8 (mean 4.5): sqrt(42 / 204).
  EXPECT_NEAR(profile_error(estimate.ref(), reference.ref(), 0), std::sqrt(42.0 / 204.0), 1e-6);
  Vol zero(8, 6, 6);
  EXPECT_EQ(profile_error(zero.ref(), zero.ref(), 0), 0.0);
  EXPECT_TRUE(std::isinf(profile_error(estimate.ref(), zero.ref(), 0)));
}

void expect_error(const std::function<void()>& call, ErrorKind kind, const std::string& text) {
  fftest::expect_error(call, kind, {text});
}

TEST(MetricsErrors, EveryArgumentIsChecked) {
  Vol a(4, 4, 4), b(4, 4, 5);
  std::vector<double> d(64);
  std::vector<int32_t> ints(64);
  const TensorRef r64 = TensorRef::contiguous(d.data(), DType::Float64, {}, {4, 4, 4});
  expect_error([&] { psnr(a.ref(), b.ref(), 1.0); }, ErrorKind::Value,
               "psnr(): expected reference");
  expect_error([&] { psnr(a.ref(), a.ref(), 0.0); }, ErrorKind::Value,
               "psnr(): expected data_range to be finite and > 0, but got 0");
  expect_error([&] { ssim_3d(a.ref(), a.ref(), NAN); }, ErrorKind::Value,
               "ssim_3d(): expected data_range to be finite and > 0, but got nan");
  expect_error([&] { ssim_3d(a.ref(), r64, 1.0); }, ErrorKind::Type,
               "ssim_3d(): expected reference to have dtype float32 (the dtype of estimate), but "
               "got float64");
  expect_error(
      [&] {
        const TensorRef i32 = TensorRef::contiguous(ints.data(), DType::Int32, {}, {4, 4, 4});
        psnr(i32, i32, 1.0);
      },
      ErrorKind::Type, "psnr(): expected estimate to have dtype float32 or float64, but got int32");
  const TensorRef flat = TensorRef::contiguous(a.v.data(), DType::Float32, {}, {64});
  expect_error([&] { ssim_3d(flat, flat, 1.0); }, ErrorKind::Value,
               "ssim_3d(): expected estimate to have shape [D, H, W] (3 dims), but got shape [64]");
  expect_error([&] { profile_error(a.ref(), a.ref(), 3); }, ErrorKind::Value,
               "profile_error(): expected axis to be 0 (D), 1 (H) or 2 (W), but got 3");
  TensorRef gpu = a.ref();
  gpu.device = {DeviceType::CUDA, 0};
  expect_error([&] { psnr(a.ref(), gpu, 1.0); }, ErrorKind::Value,
               "psnr(): expected reference on the CPU");
  TensorRef strided = a.ref();
  strided.strides[2] = 2;
  strided.sizes[2] = 2;
  expect_error([&] { psnr(strided, strided, 1.0); }, ErrorKind::Value, "estimate");
}

}  // namespace
}  // namespace fieldfuse
