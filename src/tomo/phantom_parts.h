// SPDX-License-Identifier: Apache-2.0
// The analytic phantom as a list of ellipsoids, and the voxelisation and projection of any such
// list: the machinery behind tomo_phantom.h, open to tests that need a simpler phantom (a ball).
#pragma once

#include <cstdint>
#include <vector>

#include "tomo/phantom_math.h"

namespace fieldfuse::detail::tomo {

/// One part of a phantom: an ellipsoid adding `density` inside it (parts overlap additively).
struct PhantomPart {
  EllipsoidShape shape;
  double density;
};

/// The embedded default described in include/fieldfuse/tomo_phantom.h.
std::vector<PhantomPart> embedded_phantom();

/// The parts' mean density over `supersample`^3 points per voxel of a contiguous [D, H, W] array.
template <class T>
void voxelise_parts(const std::vector<PhantomPart>& parts, T* volume, int64_t depth, int64_t height,
                    int64_t width, int supersample);

/// The parts' exact line integrals into a contiguous [n, Hd, Wd] array, averaged over
/// `supersample`^2 rays per pixel; `rotations` holds n row-major 3×3 poses (9·n values).
template <class T>
void project_parts(const std::vector<PhantomPart>& parts, const double* rotations, T* projections,
                   int64_t count, int64_t detector_height, int64_t detector_width, int supersample);

// Instantiated for float and double in phantom.cpp.
extern template void voxelise_parts<float>(const std::vector<PhantomPart>&, float*, int64_t,
                                           int64_t, int64_t, int);
extern template void voxelise_parts<double>(const std::vector<PhantomPart>&, double*, int64_t,
                                            int64_t, int64_t, int);
extern template void project_parts<float>(const std::vector<PhantomPart>&, const double*, float*,
                                          int64_t, int64_t, int64_t, int);
extern template void project_parts<double>(const std::vector<PhantomPart>&, const double*, double*,
                                           int64_t, int64_t, int64_t, int);

}  // namespace fieldfuse::detail::tomo
