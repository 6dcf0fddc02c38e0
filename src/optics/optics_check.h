// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by the optics fronts (settings, real/complex dtype pairs).
#pragma once

#include "fieldfuse/core.h"
#include "fieldfuse/optics.h"

namespace fieldfuse::detail::optics {

/// The complex dtype paired with a real one (float32 -> complex64, float64 -> complex128).
DType complex_partner(DType real);

/// float32 or float64 (a Type error naming `arg` otherwise).
void check_real_dtype(const char* op, const char* arg, const TensorRef& t);

/// Every microscope setting finite and in range: pixel_size, wavelength, index_medium,
/// na_detection and pupil_steepness > 0, na_illumination >= 0.
void check_microscope(const char* op, const MicroscopeSettings& settings);

/// thin_upsampling_factor with errors naming `op`.
int upsampling_factor(const char* op, const MicroscopeSettings& settings);

}  // namespace fieldfuse::detail::optics
