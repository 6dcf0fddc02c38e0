// SPDX-License-Identifier: Apache-2.0
// Tests of the tomo C++ API on the CPU: tilt poses against explicit matrices; SIRT against the same
// iteration with a dense matrix built column by column from the projector; FBP's angular weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fieldfuse/project.h"
#include "fieldfuse/tomo.h"
#include "tomo/tomo_math.h"

namespace fftest {
namespace {

constexpr double kPi = 3.14159265358979323846;

/// Row-major 3×3 product, written out independently of the library's.
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(9, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) out[3 * i + j] += a[3 * i + k] * b[3 * k + j];
  return out;
}

std::vector<double> rx(double radians) {
  const double c = std::cos(radians), s = std::sin(radians);
  return {1, 0, 0, 0, c, -s, 0, s, c};
}

std::vector<double> rz(double radians) {
  const double c = std::cos(radians), s = std::sin(radians);
  return {c, -s, 0, s, c, 0, 0, 0, 1};
}

std::vector<double> tilt(double tilt_degrees, double z1, double z3) {
  std::vector<double> out(9);
  fieldfuse::tilt_rotation(tilt_degrees, z1, z3, out.data());
  return out;
}

TEST(TiltRotation, PureTiltIsRxAndSendsTheBeamToMinusSinCos) {
  for (double degrees : {-60.0, -3.0, 0.0, 17.5, 45.0, 90.0}) {
    const double r = degrees * kPi / 180.0;
    const std::vector<double> got = tilt(degrees, 0.0, 0.0);
    const std::vector<double> want = rx(r);
    for (int k = 0; k < 9; ++k) EXPECT_NEAR(got[k], want[k], 1e-15) << degrees << " " << k;
    // Ray direction R·e_z is the last column.
    EXPECT_NEAR(got[2], 0.0, 1e-15);
    EXPECT_NEAR(got[5], -std::sin(r), 1e-15);
    EXPECT_NEAR(got[8], std::cos(r), 1e-15);
  }
  // Exactly the identity at 0 (cos 0 = 1, sin 0 = 0 exactly).
  const std::vector<double> identity = tilt(0.0, 0.0, 0.0);
  for (int k = 0; k < 9; ++k) EXPECT_EQ(identity[k], (k % 4 == 0) ? 1.0 : 0.0);
}

TEST(TiltRotation, InPlaneAnglesComposeAsRzMinusZ1RxRzMinusZ3) {
  const double cases[][3] = {
      {30.0, 10.0, -20.0}, {-55.0, 90.0, 5.0}, {0.0, 33.0, 0.0}, {12.0, 0.0, -70.0}};
  for (const auto& c : cases) {
    const double d = kPi / 180.0;
    const std::vector<double> want = matmul(matmul(rz(-c[1] * d), rx(c[0] * d)), rz(-c[2] * d));
    const std::vector<double> got = tilt(c[0], c[1], c[2]);
    for (int k = 0; k < 9; ++k) EXPECT_NEAR(got[k], want[k], 1e-15) << k;
    // A rotation: RᵀR = I and det R = +1.
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        double dot = 0.0;
        for (int k = 0; k < 3; ++k) dot += got[3 * k + i] * got[3 * k + j];
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-15);
      }
    }
    const double det = got[0] * (got[4] * got[8] - got[5] * got[7]) -
                       got[1] * (got[3] * got[8] - got[5] * got[6]) +
                       got[2] * (got[3] * got[7] - got[4] * got[6]);
    EXPECT_NEAR(det, 1.0, 1e-14);
  }
}

TEST(TiltRotation, NanAngleGivesNan) {
  const std::vector<double> got = tilt(std::nan(""), 0.0, 0.0);
  // The tilt's cosine and sine reach every entry through the products with Rz (0·NaN = NaN).
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_TRUE(std::isnan(got[8]));
}

// ---------------------------------------------------------------------------------------------
// SIRT
// ---------------------------------------------------------------------------------------------

using fieldfuse::TensorRef;

/// A small tilt series (float64): volume 3 × 4 × 5, 5 tilts over ±60° with in-plane angles and
/// shifts, detector 4 × 6 (some rays miss the volume, so R has zeros).
struct SirtProblem {
  int64_t n = 5, depth = 3, height = 4, width = 5, det_height = 4, det_width = 6;
  std::vector<double> rotations, shifts, truth;

  SirtProblem() {
    std::mt19937 gen(14u);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int64_t m = 0; m < n; ++m) {
      double r[9];
      fieldfuse::tilt_rotation(-60.0 + 30.0 * static_cast<double>(m), 7.0, -4.0, r);
      rotations.insert(rotations.end(), r, r + 9);
      shifts.push_back(0.3 * uniform(gen) - 0.15);
      shifts.push_back(0.6 * uniform(gen) - 0.3);
    }
    for (int64_t v = 0; v < voxels(); ++v) truth.push_back(uniform(gen));
  }
  int64_t voxels() const { return depth * height * width; }
  int64_t pixels() const { return n * det_height * det_width; }
  TensorRef volume_ref(double* data) const {
    return TensorRef::contiguous(data, fieldfuse::DType::Float64, {}, {depth, height, width});
  }
  TensorRef stack_ref(double* data) const {
    return TensorRef::contiguous(data, fieldfuse::DType::Float64, {}, {n, det_height, det_width});
  }
  TensorRef rotations_ref() const {
    return TensorRef::contiguous(const_cast<double*>(rotations.data()), fieldfuse::DType::Float64,
                                 {}, {n, 3, 3});
  }
  TensorRef shifts_ref() const {
    return TensorRef::contiguous(const_cast<double*>(shifts.data()), fieldfuse::DType::Float64, {},
                                 {n, 2});
  }
  std::vector<double> project(const std::vector<double>& volume) const {
    std::vector<double> out(static_cast<size_t>(pixels()));
    fieldfuse::project_forward(volume_ref(const_cast<double*>(volume.data())), rotations_ref(),
                               shifts_ref(), stack_ref(out.data()));
    return out;
  }
  /// A [pixels × voxels] row-major, column v the projection of the unit volume e_v.
  std::vector<double> dense() const {
    std::vector<double> a(static_cast<size_t>(pixels() * voxels()));
    for (int64_t v = 0; v < voxels(); ++v) {
      std::vector<double> unit(static_cast<size_t>(voxels()), 0.0);
      unit[static_cast<size_t>(v)] = 1.0;
      const std::vector<double> column = project(unit);
      for (int64_t p = 0; p < pixels(); ++p) a[p * voxels() + v] = column[p];
    }
    return a;
  }
  /// Runs the library's SIRT from `initial`.
  std::vector<double> sirt(const std::vector<double>& b, const std::vector<double>& initial,
                           const fieldfuse::SirtOptions& options,
                           const fieldfuse::SirtProgress& progress = {}) const {
    std::vector<double> x = initial;
    std::vector<double> stack = b;
    const TensorRef bs = stack_ref(stack.data()), vol = volume_ref(x.data());
    std::vector<char> workspace(fieldfuse::sirt_workspace_size(bs, vol) + 8);
    void* aligned = workspace.data() + (8 - reinterpret_cast<uintptr_t>(workspace.data()) % 8) % 8;
    fieldfuse::sirt(bs, rotations_ref(), shifts_ref(), options, vol, aligned,
                    fieldfuse::sirt_workspace_size(bs, vol), {}, progress);
    return x;
  }
};

/// The SIRT iteration written with the dense matrix (double, straightforward loops).
std::vector<double> dense_sirt(const SirtProblem& p, const std::vector<double>& a,
                               const std::vector<double>& b, std::vector<double> x, int iterations,
                               double relaxation, bool positivity) {
  const int64_t rows = p.pixels(), cols = p.voxels();
  std::vector<double> inv_row(rows, 0.0), inv_col(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0.0;
    for (int64_t j = 0; j < cols; ++j) s += a[i * cols + j];
    inv_row[i] = s == 0.0 ? 0.0 : 1.0 / s;
  }
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0.0;
    for (int64_t i = 0; i < rows; ++i) s += a[i * cols + j];
    inv_col[j] = s == 0.0 ? 0.0 : 1.0 / s;
  }
  for (int it = 0; it < iterations; ++it) {
    std::vector<double> r(rows);
    for (int64_t i = 0; i < rows; ++i) {
      double ax = 0.0;
      for (int64_t j = 0; j < cols; ++j) ax += a[i * cols + j] * x[j];
      r[i] = inv_row[i] * (b[i] - ax);
    }
    for (int64_t j = 0; j < cols; ++j) {
      double back = 0.0;
      for (int64_t i = 0; i < rows; ++i) back += a[i * cols + j] * r[i];
      x[j] += relaxation * inv_col[j] * back;
      if (positivity && x[j] < 0.0) x[j] = 0.0;
    }
  }
  return x;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::fmax(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(Sirt, MatchesTheDenseIterationInDouble) {
  const SirtProblem p;
  const std::vector<double> a = p.dense();
  std::vector<double> b = p.project(p.truth);
  std::mt19937 gen(3u);
  std::normal_distribution<double> noise(0.0, 0.05);
  for (double& v : b) v += noise(gen);  // inconsistent data: the positivity clamp engages
  const std::vector<double> start(static_cast<size_t>(p.voxels()), 0.1);
  for (bool positivity : {false, true}) {
    for (double relaxation : {0.5, 1.0, 1.9}) {
      fieldfuse::SirtOptions options;
      options.iterations = 7;
      options.relaxation = relaxation;
      options.positivity = positivity;
      const std::vector<double> got = p.sirt(b, start, options);
      const std::vector<double> want = dense_sirt(p, a, b, start, 7, relaxation, positivity);
      EXPECT_LT(max_abs_diff(got, want), 1e-10) << positivity << " " << relaxation;
    }
  }
}

TEST(Sirt, ResidualDecreasesOnConsistentData) {
  const SirtProblem p;
  const std::vector<double> b = p.project(p.truth);
  std::vector<double> residuals;
  fieldfuse::SirtOptions options;
  options.iterations = 30;
  const std::vector<double> x =
      p.sirt(b, std::vector<double>(static_cast<size_t>(p.voxels()), 0.0), options,
             [&](int iteration, double relative) {
               EXPECT_EQ(iteration, static_cast<int>(residuals.size()) + 1);
               residuals.push_back(relative);
               return true;
             });
  ASSERT_EQ(residuals.size(), 30u);
  EXPECT_NEAR(residuals[0], 1.0, 1e-12);  // the cold start's residual is b itself
  for (size_t k = 1; k < residuals.size(); ++k) EXPECT_LT(residuals[k], residuals[k - 1]);
  EXPECT_LT(residuals.back(), 0.2 * residuals[0]);
}

TEST(Sirt, PositivityClampsEveryVoxel) {
  const SirtProblem p;
  std::vector<double> b = p.project(p.truth);
  for (size_t i = 0; i < b.size(); i += 2) b[i] = -b[i];  // data that pulls voxels negative
  fieldfuse::SirtOptions options;
  options.iterations = 5;
  const std::vector<double> start(static_cast<size_t>(p.voxels()), 0.0);
  const std::vector<double> free = p.sirt(b, start, options);
  options.positivity = true;
  const std::vector<double> clamped = p.sirt(b, start, options);
  bool any_negative = false;
  for (double v : free) any_negative = any_negative || v < 0.0;
  EXPECT_TRUE(any_negative);
  for (double v : clamped) EXPECT_GE(v, 0.0);
}

TEST(Sirt, ZeroIterationsLeaveTheVolumeUnchanged) {
  const SirtProblem p;
  fieldfuse::SirtOptions options;
  options.iterations = 0;
  int calls = 0;
  const std::vector<double> x = p.sirt(p.project(p.truth), p.truth, options, [&](int, double) {
    ++calls;
    return true;
  });
  EXPECT_EQ(x, p.truth);
  EXPECT_EQ(calls, 0);
}

TEST(Sirt, ProgressReturningFalseStopsEarly) {
  const SirtProblem p;
  const std::vector<double> a = p.dense();
  const std::vector<double> b = p.project(p.truth);
  const std::vector<double> start(static_cast<size_t>(p.voxels()), 0.0);
  fieldfuse::SirtOptions options;
  options.iterations = 50;
  int calls = 0;
  const std::vector<double> got = p.sirt(b, start, options, [&](int iteration, double) {
    ++calls;
    return iteration < 3;
  });
  EXPECT_EQ(calls, 3);
  EXPECT_LT(max_abs_diff(got, dense_sirt(p, a, b, start, 3, 1.0, false)), 1e-10);
}

// ---------------------------------------------------------------------------------------------
// FBP formulas
// ---------------------------------------------------------------------------------------------

TEST(FbpMath, IntervalsOfEvenAnglesAreTheStepInAnyOrder) {
  const double angles[] = {0.3, -0.1, 0.1, -0.3, 0.5};  // step 0.2, shuffled
  for (int64_t m = 0; m < 5; ++m) {
    EXPECT_NEAR(fieldfuse::detail::tomo::fbp_interval(angles, 5, m), 0.2, 1e-15) << m;
  }
  const double uneven[] = {0.0, 0.1, 0.4};
  EXPECT_NEAR(fieldfuse::detail::tomo::fbp_interval(uneven, 3, 0), 0.05 + 0.1, 1e-15);
  EXPECT_NEAR(fieldfuse::detail::tomo::fbp_interval(uneven, 3, 1), 0.2, 1e-15);
  EXPECT_NEAR(fieldfuse::detail::tomo::fbp_interval(uneven, 3, 2), 0.15 + 0.1, 1e-15);
  const double twice[] = {0.2, 0.2, 0.6};  // a repeated angle: ordered by index
  EXPECT_NEAR(fieldfuse::detail::tomo::fbp_interval(twice, 3, 0), 0.0 + 0.1, 1e-15);
  EXPECT_NEAR(fieldfuse::detail::tomo::fbp_interval(twice, 3, 1), 0.2, 1e-15);
  const double one[] = {0.7};
  EXPECT_NEAR(fieldfuse::detail::tomo::fbp_interval(one, 1, 0), 3.14159265358979323846, 1e-15);
}

TEST(FbpMath, TiltAngleOfRxIsTheTilt) {
  for (double degrees : {-80.0, -10.0, 0.0, 45.0, 89.0}) {
    double r[9];
    fieldfuse::tilt_rotation(degrees, 0.0, 0.0, r);
    EXPECT_NEAR(fieldfuse::detail::tomo::tilt_angle(r[5], r[8]), degrees * kPi / 180.0, 1e-14);
  }
}

TEST(FbpMath, RampKernelTaps) {
  using fieldfuse::detail::tomo::ramp_tap;
  EXPECT_EQ(ramp_tap(0), 0.25);
  EXPECT_EQ(ramp_tap(2), 0.0);
  EXPECT_EQ(ramp_tap(-4), 0.0);
  EXPECT_NEAR(ramp_tap(1), -1.0 / (kPi * kPi), 1e-17);
  EXPECT_NEAR(ramp_tap(-3), -1.0 / (9.0 * kPi * kPi), 1e-17);
  EXPECT_EQ(fieldfuse::detail::tomo::ramp_tap_circular(7, 8), ramp_tap(-1));
  EXPECT_EQ(fieldfuse::detail::tomo::fbp_padded_length(5), 16);
  EXPECT_EQ(fieldfuse::detail::tomo::fbp_padded_length(8), 16);
  EXPECT_EQ(fieldfuse::detail::tomo::fbp_padded_length(0), 2);
}

}  // namespace
}  // namespace fftest
