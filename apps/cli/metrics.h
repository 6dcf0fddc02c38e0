// SPDX-License-Identifier: Apache-2.0
// Image-quality metrics of a volume against a reference: PSNR and 3-D SSIM.
#pragma once

#include <cstdint>

#include "volume.h"

namespace fieldfuse::cli {

/// 10·log10(data_range² / mse); +infinity when mse is 0.
double psnr_from_mse(double mse, double data_range);

/// Mean of (a − b)² over `count` values, accumulated in float64.
double mean_squared_error(const float* a, const float* b, std::int64_t count);

/// PSNR of `estimate` against `reference` (same shape).
double psnr(const Volume& estimate, const Volume& reference, double data_range);

/// Mean structural similarity (Wang et al. 2004) over all voxels, with the local statistics taken
/// under a separable 3-D Gaussian window (sigma 1.5, 11 taps per axis) and the usual constants
/// C1 = (0.01·L)², C2 = (0.03·L)², L = data_range. Near the borders the window is cut at the volume
/// edge and renormalised, so every voxel counts and any size works. Same shape required.
double ssim_3d(const Volume& estimate, const Volume& reference, double data_range);

/// An error measure per axis, free of Fourier shell correlation: the volumes' mean profiles along
/// `axis` (0 = D, 1 = H, 2 = W; each value the mean over the plane across the axis) compared as
/// ‖p(estimate) − p(reference)‖ / ‖p(reference)‖. Averaging over whole planes removes the noise,
/// so what remains is how well the method recovers structure along that axis: the missing wedge
/// of a tilt series (no data along the beam beyond the largest tilt) shows as a large z value.
/// Same shape required; +infinity for an all-zero reference profile unless both are zero.
double profile_error(const Volume& estimate, const Volume& reference, int axis);

}  // namespace fieldfuse::cli
