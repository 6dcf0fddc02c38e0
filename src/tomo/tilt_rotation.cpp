// SPDX-License-Identifier: Apache-2.0
// tilt_rotation: the tilt-series pose R = Rz(-z1)·Rx(tilt)·Rz(-z3) of specs/tomography.md.
#include <cmath>

#include "fieldfuse/tomo.h"

namespace fieldfuse {
namespace {

constexpr double kRadiansPerDegree = 3.14159265358979323846 / 180.0;

/// out = a·b for row-major 3×3 matrices (out may not alias a or b).
void multiply3(const double* a, const double* b, double* out) {
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      out[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
    }
  }
}

/// Right-handed rotation by `degrees` about z, row-major.
void rotation_z(double degrees, double* out) {
  const double c = std::cos(degrees * kRadiansPerDegree);
  const double s = std::sin(degrees * kRadiansPerDegree);
  const double m[9] = {c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0};
  for (int k = 0; k < 9; ++k) out[k] = m[k];
}

}  // namespace

void tilt_rotation(double tilt_degrees, double z1_degrees, double z3_degrees, double* out) {
  const double c = std::cos(tilt_degrees * kRadiansPerDegree);
  const double s = std::sin(tilt_degrees * kRadiansPerDegree);
  const double rx[9] = {1.0, 0.0, 0.0, 0.0, c, -s, 0.0, s, c};
  double rz1[9], rz3[9], left[9];
  rotation_z(-z1_degrees, rz1);
  rotation_z(-z3_degrees, rz3);
  multiply3(rz1, rx, left);
  multiply3(left, rz3, out);
}

}  // namespace fieldfuse
