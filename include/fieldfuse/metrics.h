// SPDX-License-Identifier: Apache-2.0
// Image-quality metrics of a volume against a reference, on host TensorRef views: PSNR, 3-D SSIM
// and the per-axis profile error (the missing-wedge measure of the tomography app).
//
// Common to psnr, ssim_3d and profile_error: `estimate` and `reference` have the same shape and
// dtype (float32 or float64), live on the CPU and are contiguous; every sum is taken in float64
// in an order fixed by the shape, so results repeat bit for bit on any number of threads. Errors
// are fieldfuse::Error whose message starts with the function's name ("psnr(): ") and names the
// argument.
#pragma once

#include "fieldfuse/core.h"

namespace fieldfuse {

/// 10·log10(data_range² / mse); +infinity when mse is 0 (no checks: a plain formula).
double psnr_from_mse(double mse, double data_range);

/// PSNR of `estimate` against `reference` (any shape, the same for both): psnr_from_mse of their
/// mean squared difference; +infinity for identical or empty arrays. `data_range` (the peak L) is
/// finite and > 0.
double psnr(const TensorRef& estimate, const TensorRef& reference, double data_range);

/// Mean structural similarity (Wang et al. 2004) of two [D, H, W] volumes over all voxels, with
/// the local statistics taken under a separable 3-D Gaussian window (sigma 1.5, 11 taps per axis)
/// and the usual constants C1 = (0.01·L)², C2 = (0.03·L)², L = data_range (finite, > 0). Near the
/// borders the window is cut at the volume edge and renormalised, so every voxel counts and any
/// size works; an empty volume scores 1. Symmetric in its two arguments.
double ssim_3d(const TensorRef& estimate, const TensorRef& reference, double data_range);

/// An error measure per axis, free of Fourier shell correlation: the [D, H, W] volumes' mean
/// profiles along `axis` (0 = D, 1 = H, 2 = W; each value the mean over the plane across the axis)
/// compared as ‖p(estimate) − p(reference)‖ / ‖p(reference)‖. Averaging over whole planes removes
/// the noise, so what remains is how well a method recovers structure along that axis: the missing
/// wedge of a tilt series (no data along the beam beyond the largest tilt) shows as a large z
/// (axis 0) value. +infinity for an all-zero reference profile unless both are zero (then 0).
double profile_error(const TensorRef& estimate, const TensorRef& reference, int axis);

}  // namespace fieldfuse
