// SPDX-License-Identifier: Apache-2.0
// Tests of the tomo C++ API on the CPU: tilt poses against explicit matrices.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fieldfuse/tomo.h"

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

}  // namespace
}  // namespace fftest
