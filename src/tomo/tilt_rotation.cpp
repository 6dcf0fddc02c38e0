// SPDX-License-Identifier: Apache-2.0
// tilt_rotation: the tilt-series pose R = Rz(-z1)·Rx(tilt)·Rz(-z3) of specs/tomography.md, by the
// formula the K-Planes reconstruction's pose stage uses (pose_rotation), so the two cannot drift.
#include "fieldfuse/tomo.h"
#include "tomo/kplanes_recon_math.h"

namespace fieldfuse {

void tilt_rotation(double tilt_degrees, double z1_degrees, double z3_degrees, double* out) {
  double dz1[9], dz3[9];  // the derivatives pose_rotation also gives; not needed here
  detail::tomo::pose_rotation(tilt_degrees, z1_degrees, z3_degrees, out, dz1, dz3);
}

}  // namespace fieldfuse
