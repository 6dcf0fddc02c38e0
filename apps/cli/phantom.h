// SPDX-License-Identifier: Apache-2.0
// The built-in test volume: a 3-D modified Shepp-Logan head phantom and seeded Gaussian noise.
#pragma once

#include <cstdint>

#include "volume.h"

namespace fieldfuse::cli {

/// A `size`^3 modified (high-contrast) Shepp-Logan phantom: ten ellipsoids whose intensities add,
/// giving values in [0, 1] (0 outside the head, 1 for the skull, 0.2-0.4 inside). Axes map as
/// D = z (head to foot), H = y (top of the image is +y), W = x, each spanning [-1, 1].
Volume shepp_logan_3d(std::int64_t size);

/// Adds i.i.d. N(0, sigma^2) noise. The generator is written out (64-bit Mersenne Twister and the
/// Box-Muller transform) so a seed gives the same volume with every compiler and standard library.
void add_gaussian_noise(Volume& volume, double sigma, std::uint64_t seed);

}  // namespace fieldfuse::cli
