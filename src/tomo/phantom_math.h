// SPDX-License-Identifier: Apache-2.0
// The formulas of the analytic tomography phantom (tomo_phantom.h): cell centres on [-1, 1], and
// the ellipsoid with the membership of a point and the exact chord of a line. Host only.
#pragma once

#include <cmath>
#include <cstdint>

#include "tomo/tomo_math.h"  // kPi

namespace fieldfuse::detail::tomo {

/// Centre of cell `index` of `count` along an axis spanning [-1, 1]: −1 + (2·index + 1)/count, the
/// voxel and detector-pixel centres of the projector (include/fieldfuse/project.h).
inline double cell_centre(double index, std::int64_t count) {
  return (2.0 * index + 1.0) / static_cast<double>(count) - 1.0;
}

/// Semi-axes along its own x, y, z; centred at `centre`; turned by `rotation_degrees` about the
/// z axis (counter-clockwise from +x towards +y). Coordinates are those of the box [-1, 1]^3.
struct EllipsoidShape {
  double semi_axes[3];
  double centre[3];
  double rotation_degrees;
};

/// Maps a vector of the box into the frame where the ellipsoid is the unit ball: turned by
/// −rotation about z, then divided by the semi-axes. Pass `point` true for a position (the centre
/// is subtracted first), false for a direction.
inline void to_unit_ball_frame(const EllipsoidShape& e, const double in[3], bool point,
                               double out[3]) {
  const double angle = e.rotation_degrees * kPi / 180.0;
  const double c = std::cos(angle), s = std::sin(angle);
  const double dx = point ? in[0] - e.centre[0] : in[0];
  const double dy = point ? in[1] - e.centre[1] : in[1];
  const double dz = point ? in[2] - e.centre[2] : in[2];
  out[0] = (dx * c + dy * s) / e.semi_axes[0];
  out[1] = (-dx * s + dy * c) / e.semi_axes[1];
  out[2] = dz / e.semi_axes[2];
}

/// True when (x, y, z) lies inside or on the ellipsoid.
inline bool ellipsoid_contains(const EllipsoidShape& e, double x, double y, double z) {
  const double p[3] = {x, y, z};
  double q[3];
  to_unit_ball_frame(e, p, true, q);
  return q[0] * q[0] + q[1] * q[1] + q[2] * q[2] <= 1.0;
}

/// Length of the part of the line { origin + t·direction } inside the ellipsoid, in units of t
/// (arc length when |direction| = 1): in the unit-ball frame the line is o + t·d, and
/// |o + t·d|² = 1 has the roots' distance sqrt(disc) / |d|², disc = (o·d)² − |d|²(|o|² − 1)
/// (the quadratic formula divided through by 4). 0 when the line misses.
inline double ellipsoid_chord(const EllipsoidShape& e, const double origin[3],
                              const double direction[3]) {
  double o[3], d[3];
  to_unit_ball_frame(e, origin, true, o);
  to_unit_ball_frame(e, direction, false, d);
  const double dd = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
  const double od = o[0] * d[0] + o[1] * d[1] + o[2] * d[2];
  const double oo = o[0] * o[0] + o[1] * o[1] + o[2] * o[2];
  const double disc = od * od - dd * (oo - 1.0);
  return disc > 0.0 ? 2.0 * std::sqrt(disc) / dd : 0.0;
}

}  // namespace fieldfuse::detail::tomo
