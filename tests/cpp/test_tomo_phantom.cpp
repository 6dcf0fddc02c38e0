// SPDX-License-Identifier: Apache-2.0
// Tests of the analytic tomography phantom (tomo_phantom.h): exact chords, the voxelised truth,
// the analytic projections against the projector applied to that truth, and argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "fieldfuse/project.h"
#include "fieldfuse/tomo.h"
#include "fieldfuse/tomo_phantom.h"
#include "tomo/phantom_parts.h"
#include "tv_test_util.h"  // expect_error

namespace fieldfuse {
namespace {

using detail::tomo::cell_centre;
using detail::tomo::EllipsoidShape;
using detail::tomo::PhantomPart;

std::vector<double> tilt_poses(const std::vector<double>& angles) {
  std::vector<double> poses(9 * angles.size());
  for (std::size_t m = 0; m < angles.size(); ++m) tilt_rotation(angles[m], 0, 0, &poses[9 * m]);
  return poses;
}

TensorRef host(std::vector<double>& v, std::initializer_list<int64_t> sizes) {
  return TensorRef::contiguous(v.data(), DType::Float64, {}, sizes);
}
TensorRef host(std::vector<float>& v, std::initializer_list<int64_t> sizes) {
  return TensorRef::contiguous(v.data(), DType::Float32, {}, sizes);
}

TEST(TomoPhantom, ChordOfABallIsTwiceSqrtOfRSquaredMinusRhoSquared) {
  const double radius = 0.4;
  const EllipsoidShape ball = {{radius, radius, radius}, {0.1, -0.2, 0.05}, 17.0};
  const double direction[3] = {0.0, -std::sin(0.3), std::cos(0.3)};
  for (const double rho : {0.0, 0.1, 0.25, 0.39, 0.41}) {
    // A point at distance rho from the centre, perpendicular to the direction, moved along it.
    const double perp[3] = {0.0, std::cos(0.3), std::sin(0.3)};
    const double origin[3] = {ball.centre[0] + rho * perp[0] + 0.7 * direction[0],
                              ball.centre[1] + rho * perp[1] + 0.7 * direction[1],
                              ball.centre[2] + rho * perp[2] + 0.7 * direction[2]};
    const double expected = rho < radius ? 2.0 * std::sqrt(radius * radius - rho * rho) : 0.0;
    EXPECT_NEAR(detail::tomo::ellipsoid_chord(ball, origin, direction), expected, 1e-12) << rho;
  }
}

TEST(TomoPhantom, AnalyticProjectionOfABallMatchesItsChords) {
  const double radius = 0.5;
  const std::vector<PhantomPart> ball = {{{{radius, radius, radius}, {0.0, 0.0, 0.0}, 0.0}, 1.0}};
  const int64_t n = 16;
  const std::vector<double> poses = tilt_poses({-45.0, 0.0, 30.0});
  std::vector<float> stack(3 * n * n);
  detail::tomo::project_parts(ball, poses.data(), stack.data(), 3, n, n, 1);
  for (int64_t m = 0; m < 3; ++m) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        // A centred ball looks the same from every tilt: chord at rho = |(u, v)|.
        const double u = cell_centre(j, n), v = cell_centre(i, n);
        const double rho2 = u * u + v * v;
        const double expected =
            rho2 < radius * radius ? 2.0 * std::sqrt(radius * radius - rho2) : 0;
        EXPECT_NEAR(stack[(m * n + i) * n + j], expected, 1e-6) << m << " " << i << " " << j;
      }
    }
  }
}

TEST(TomoPhantom, TruthHasTheDocumentedDensities) {
  const int64_t n = 64;  // voxel 32 is [0, 1/32]^3, wholly inside the central particle
  std::vector<float> truth(n * n * n);
  tomo_phantom_volume(host(truth, {n, n, n}), 3);
  const auto at = [&](int64_t d, int64_t h, int64_t w) { return truth[(d * n + h) * n + w]; };
  EXPECT_FLOAT_EQ(at(0, 0, 0), 0.0f);  // outside the body
  // Centre voxel: the body plus the central particle (both cover the whole voxel).
  EXPECT_NEAR(at(n / 2, n / 2, n / 2), 2.5f, 1e-5);
  // Halfway out along x at z = y = 0, body only (0.5): voxel centre x ≈ 0.53 lies in no other part.
  EXPECT_NEAR(at(n / 2, n / 2, 48), 0.5f, 1e-5);
  double sum = 0.0;
  for (const float v : truth) sum += v;
  // Mass: body (4/3)π·0.8·0.7·0.3·0.5, inclusions, particles, all exact volumes of ellipsoids.
  const double pi = 3.14159265358979323846;
  double mass = 0.0;
  for (const PhantomPart& part : detail::tomo::embedded_phantom()) {
    mass += 4.0 / 3.0 * pi * part.shape.semi_axes[0] * part.shape.semi_axes[1] *
            part.shape.semi_axes[2] * part.density;
  }
  const double voxel_volume = 8.0 / static_cast<double>(n * n * n);
  EXPECT_NEAR(sum * voxel_volume, mass, 0.01 * mass);
}

TEST(TomoPhantom, Float64AgreesWithFloat32) {
  const int64_t n = 12;
  std::vector<float> volume32(n * n * n);
  std::vector<double> volume64(n * n * n);
  tomo_phantom_volume(host(volume32, {n, n, n}), 2);
  tomo_phantom_volume(host(volume64, {n, n, n}), 2);
  std::vector<double> poses = tilt_poses({-60.0, 10.0});
  std::vector<float> stack32(2 * n * n);
  std::vector<double> stack64(2 * n * n);
  tomo_phantom_projections(host(poses, {2, 3, 3}), host(stack32, {2, n, n}), 2);
  tomo_phantom_projections(host(poses, {2, 3, 3}), host(stack64, {2, n, n}), 2);
  for (std::size_t i = 0; i < volume32.size(); ++i) {
    EXPECT_EQ(volume32[i], static_cast<float>(volume64[i])) << i;  // one rounding of the same sum
  }
  double peak = 0.0;
  for (std::size_t i = 0; i < stack32.size(); ++i) {
    EXPECT_EQ(stack32[i], static_cast<float>(stack64[i])) << i;
    peak = std::max(peak, stack64[i]);
  }
  EXPECT_GT(peak, 0.5);  // the body's thickness 0.6 × 0.5 and more: the stack is not empty
}

// The projector applied to the voxelised truth agrees with the analytic projections (no shared
// code: chords against Joseph's interpolation): relative RMS difference below 3% over the stack,
// the discretisation error of a 64^3 grid at the phantom's sharp edges (measured 1.2%).
TEST(TomoPhantom, ProjectorOfTheTruthMatchesTheAnalyticProjections) {
  const int64_t n = 64;
  std::vector<float> truth(n * n * n);
  tomo_phantom_volume(host(truth, {n, n, n}), 3);
  const std::vector<double> angles = {-60.0, -33.0, 0.0, 21.0, 60.0};
  const auto m = static_cast<int64_t>(angles.size());
  std::vector<double> poses = tilt_poses(angles);
  std::vector<float> analytic(m * n * n), ours(m * n * n);
  tomo_phantom_projections(host(poses, {m, 3, 3}), host(analytic, {m, n, n}), 3);
  std::vector<float> poses_f(poses.begin(), poses.end());
  project_forward(host(truth, {n, n, n}), host(poses_f, {m, 3, 3}), TensorRef{},
                  host(ours, {m, n, n}));
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    diff += std::pow(ours[i] - analytic[i], 2);
    norm += std::pow(analytic[i], 2);
  }
  const double relative = std::sqrt(diff / norm);
  std::printf("relative RMS difference %.4f\n", relative);
  EXPECT_LT(relative, 0.03);
  EXPECT_GT(norm, 0.0);
}

void expect_error(const std::function<void()>& call, ErrorKind kind, const std::string& text) {
  fftest::expect_error(call, kind, {text});
}

TEST(TomoPhantomErrors, EveryArgumentIsChecked) {
  std::vector<float> volume(4 * 4 * 4);
  std::vector<int32_t> ints(64);
  std::vector<double> poses = tilt_poses({0.0, 30.0});
  std::vector<float> poses_f(poses.begin(), poses.end());
  std::vector<float> stack(2 * 16);
  const auto v = host(volume, {4, 4, 4});
  expect_error([&] { tomo_phantom_volume(v, 0); }, ErrorKind::Value,
               "tomo_phantom_volume(): expected supersample to be in [1, 16], but got 0");
  expect_error([&] { tomo_phantom_volume(v, 17); }, ErrorKind::Value, "but got 17");
  expect_error(
      [&] {
        tomo_phantom_volume(host(volume, {16, 4}), 1);
      },
      ErrorKind::Value,
      "tomo_phantom_volume(): expected volume to have shape [D, H, W] (3 dims), but got "
      "shape [16, 4]");
  expect_error(
      [&] {
        tomo_phantom_volume(TensorRef::contiguous(ints.data(), DType::Int32, {}, {4, 4, 4}), 1);
      },
      ErrorKind::Type, "expected volume to have dtype float32 or float64, but got int32");
  TensorRef strided = v;
  strided.sizes[2] = 2;
  strided.strides[2] = 2;
  expect_error([&] { tomo_phantom_volume(strided, 1); }, ErrorKind::Value, "volume");
  TensorRef on_gpu = v;
  on_gpu.device = {DeviceType::CUDA, 0};
  expect_error([&] { tomo_phantom_volume(on_gpu, 1); }, ErrorKind::Value,
               "expected volume on the CPU");

  const auto p = host(stack, {2, 4, 4});
  expect_error(
      [&] {
        tomo_phantom_projections(host(poses, {1, 3, 3}), p, 1);
      },
      ErrorKind::Value,
      "tomo_phantom_projections(): expected rotations to have shape [2, 3, 3] (one per "
      "projection), but got shape [1, 3, 3]");
  expect_error(
      [&] {
        tomo_phantom_projections(host(poses_f, {2, 3, 3}), p, 1);
      },
      ErrorKind::Type, "expected rotations to have dtype float64");
  expect_error(
      [&] {
        tomo_phantom_projections(host(poses, {2, 3, 3}), p, -1);
      },
      ErrorKind::Value, "expected supersample to be in [1, 16], but got -1");
  expect_error(
      [&] {
        tomo_phantom_projections(host(poses, {2, 3, 3}), host(stack, {32}), 1);
      },
      ErrorKind::Value, "expected projections to have shape [n, Hd, Wd]");
}

TEST(TomoPhantom, StridedRotationsAreRead) {
  const int64_t n = 8;
  std::vector<double> poses = tilt_poses({-30.0, 45.0});
  // The same poses stored transposed (column-major) and read through swapped strides.
  std::vector<double> transposed(18);
  for (int m = 0; m < 2; ++m)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) transposed[9 * m + 3 * c + r] = poses[9 * m + 3 * r + c];
  TensorRef view = host(transposed, {2, 3, 3});
  std::swap(view.strides[1], view.strides[2]);
  std::vector<float> a(2 * n * n), b(2 * n * n);
  tomo_phantom_projections(host(poses, {2, 3, 3}), host(a, {2, n, n}), 1);
  tomo_phantom_projections(view, host(b, {2, n, n}), 1);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace fieldfuse
