// SPDX-License-Identifier: Apache-2.0
// Parallel-beam projection on a voxel grid (the `project` family): forward projection of a volume
// to a stack of projections, and back projection, its exact adjoint (transpose).
//
// Coordinates (specs/tomography.md, the pose convention):
// - `volume [D, H, W]` (z, y, x) fills the box [-1, 1]^3; voxel (k, i, j) has its centre at
//   (x, y, z) = (-1 + (2j+1)/W, -1 + (2i+1)/H, -1 + (2k+1)/D) (align_corners=False, as in
//   grid_sample). Between centres the field is the trilinear interpolation of the voxels, 0
//   outside.
// - `projections [n, Hd, Wd]`: detector pixel (m, i, j) sits at (u, v) = (-1 + (2j+1)/Wd,
//   -1 + (2i+1)/Hd) on [-1, 1]^2 (u along the width, v along the height).
// - Pose of projection m: `rotations [n, 3, 3]` R_m (applied as R·p) and optional `shifts [n, 2]`
//   (s_u, s_v) in detector units; pixel (m, i, j) integrates along the line
//   { R_m·(u - s_u, v - s_v, t) : t real }, so with R = I the rays run along z and P = ∫ f dz.
//
// Discretisation (Joseph's method; Note [Joseph projector] in src/project/project_math.h): with
// d = R_m·e_z, the dominant axis a is the volume axis with the largest |d_a| (ties go to the
// earlier axis in z, y, x order). The ray meets each of the N_a voxel-centre planes of axis a at
// one point, whose two in-plane index coordinates give a bilinear interpolation of that slice (zero
// outside it); P = Δ·Σ_slices bilinear(slice, point) with Δ = (2/N_a)/|d_a|, the ray parameter
// between two planes. So P = A·volume for a sparse matrix A (entries Δ·bilinear weight), and back
// projection computes A^T·projections with bit-identical weights: <A x, y> = <x, A^T y> holds to
// the rounding of the sums. R_m is used as given; for a rotation, t is arc length.
//
// Common to both functions:
// - dtypes: float32 or float64 (every tensor the same), on CPU (OpenMP) or CUDA.
// - layout: inputs are read through their strides (any layout, expanded views included); outputs
//   may be strided but need distinct elements that overlap no input.
// - outputs are fully written (never accumulated into); empty sizes are allowed (n = 0, a zero
//   volume or detector dimension): the output is then all zeros, or empty.
// - determinism: no atomics; every output element is a sum in a fixed order (a ray's slices in
//   order; a voxel's projections in order m = 0..n-1), so results do not depend on the thread count
//   or the launch. CPU and CUDA agree to rounding (CUDA evaluates the index maps with FMAs).
// - a NaN voxel poisons only the rays whose interpolation gives it a non-zero weight; a NaN
//   detector pixel only the voxels it is spread to; a pose with NaN or infinite entries makes its
//   projection (and, back projected, the whole volume) NaN.
// - precision: float32 keeps index coordinates exact below 2^24 voxels or pixels per axis.
#pragma once

#include "fieldfuse/core.h"

namespace fieldfuse {

/// Forward projection: projections[m, i, j] = Δ_m·Σ_slices bilinear(volume slice, ray point).
///
/// volume [D, H, W]; rotations [n, 3, 3]; shifts [n, 2] or absent (default-constructed TensorRef);
/// projections [n, Hd, Wd] (written; any Hd, Wd >= 0). CPU: OpenMP over detector rows. CUDA: one
/// thread per pixel, warps over neighbouring pixels of one projection, each ray summed in the
/// input dtype. Runs on `stream` for CUDA tensors.
void project_forward(const TensorRef& volume, const TensorRef& rotations, const TensorRef& shifts,
                     const TensorRef& projections, Stream stream = {});

/// Back projection, the exact transpose of project_forward:
/// volume[v] = Σ_m Δ_m·Σ_pixels w_m(pixel, v)·projections[m, pixel], w the bilinear weight the
/// forward gives voxel v on that pixel's ray.
///
/// projections [n, Hd, Wd]; rotations [n, 3, 3]; shifts [n, 2] or absent; volume [D, H, W]
/// (written; any sizes >= 0). A gather: each voxel finds, per projection, the pixels whose sample
/// on its slice has it as a corner (Note [back projection gather] in src/project/project_math.h);
/// no atomics. CPU: OpenMP over voxel rows. CUDA: one thread per voxel, x fastest, the pose of a
/// chunk of projections computed once per block into shared memory.
void backproject_forward(const TensorRef& projections, const TensorRef& rotations,
                         const TensorRef& shifts, const TensorRef& volume, Stream stream = {});

}  // namespace fieldfuse
