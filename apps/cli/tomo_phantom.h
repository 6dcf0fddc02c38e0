// SPDX-License-Identifier: Apache-2.0
// The embedded tomography phantom: ellipsoids (a soft body, inclusions) and small dense particles,
// voxelised exactly for the truth and projected analytically (chord lengths) for the data.
#pragma once

#include <cstdint>
#include <vector>

#include "ellipsoid.h"
#include "volume.h"

namespace fieldfuse::cli {

/// One part of the phantom: an ellipsoid adding `density` inside it (parts overlap additively).
struct PhantomPart {
  EllipsoidShape shape;
  double density;
};

/// The embedded default: in the box [-1, 1]^3 (x, y, z), a slab-like soft body (semi-axes 0.8,
/// 0.7, 0.3, density 0.5) as a specimen lies in the microscope, three inclusions (+0.4, −0.25,
/// +0.3) and six dense spherical particles (radius 0.06, density 2). Everything lies within the
/// cylinder y² + z² < 1 about the tilt axis x, so every tilt projects the whole object onto the
/// detector [-1, 1]^2.
std::vector<PhantomPart> embedded_phantom();

/// The truth on a [D, H, W] grid over the box: each voxel is the mean density of `supersample`^3
/// points spread evenly over its cell (voxel centres as in project.h: x along W, y along H, z along
/// D, no flips), so edges are partial volumes rather than staircases.
Volume voxelise_phantom(const std::vector<PhantomPart>& parts, std::int64_t depth,
                        std::int64_t height, std::int64_t width, int supersample);

/// The exact line integrals of the phantom for the projector's geometry (project.h): pixel (m, i,
/// j) of a [n, Hd, Wd] stack integrates along { R_m·(u, v, t) : t real } (no shifts), each part
/// contributing density × its chord (ellipsoid_chord), averaged over `supersample`^2 points spread
/// evenly over the pixel. `rotations` holds n row-major 3×3 rotations (9·n values).
Volume project_phantom(const std::vector<PhantomPart>& parts, const std::vector<double>& rotations,
                       std::int64_t detector_height, std::int64_t detector_width, int supersample);

}  // namespace fieldfuse::cli
