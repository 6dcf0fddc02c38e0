// SPDX-License-Identifier: Apache-2.0
// The analytic tomography phantom of issue 14 (the `fieldfuse tomo` embedded default): its truth
// voxelised on a grid and its exact line integrals for any poses, on host TensorRef views.
//
// The phantom, in the box [-1, 1]^3 (x, y, z) of the projector (include/fieldfuse/project.h): a
// slab-like soft body (an ellipsoid with semi-axes 0.8, 0.7, 0.3 along x, y, z and density 0.5, as
// a specimen lies in the microscope), three inclusions (+0.4, −0.25, +0.3) and six dense spherical
// particles (radius 0.06, density 2); densities add where parts overlap. Everything lies within
// the cylinder y² + z² < 1 about the tilt axis x, so every tilt about x projects the whole object
// onto the detector [-1, 1]^2. The projections are computed from the ellipsoids' exact chords,
// never with the projector, so a reconstruction tested on them commits no inverse crime.
//
// Units are the projector's: lengths in box units (the box is 2 long), so projecting the
// voxelised truth with `project_forward` agrees with `tomo_phantom_projections` up to the grid's
// discretisation error. Both functions are deterministic (every value is computed alone in
// double precision and rounded once) and run on the CPU (OpenMP). Errors are fieldfuse::Error
// whose message starts with the function's name and names the argument.
#pragma once

#include "fieldfuse/core.h"

namespace fieldfuse {

/// Writes the phantom's density into `volume [D, H, W]` (float32 or float64, CPU, contiguous):
/// voxel (k, i, j) is the mean density of `supersample`^3 points spread evenly over its cell,
/// whose centre is (x, y, z) = (−1 + (2j+1)/W, −1 + (2i+1)/H, −1 + (2k+1)/D) as in project.h, so
/// edges are partial volumes rather than staircases. `supersample` in [1, 16].
void tomo_phantom_volume(const TensorRef& volume, int supersample);

/// Writes the phantom's exact line integrals into `projections [n, Hd, Wd]` (float32 or float64,
/// CPU, contiguous) for the poses `rotations [n, 3, 3]` (float64, CPU, any strides; R_m applied
/// as R·p, no shifts): pixel (m, i, j) integrates along { R_m·(u, v, t) : t real }, each part
/// contributing density × its chord, averaged over `supersample`^2 points spread evenly over the
/// pixel ((u, v) the pixel centre as in project.h). `supersample` in [1, 16].
void tomo_phantom_projections(const TensorRef& rotations, const TensorRef& projections,
                              int supersample);

}  // namespace fieldfuse
