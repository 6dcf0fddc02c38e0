// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by the sirt and fbp fronts: the stack, the poses and the volume.
#pragma once

#include <cstdint>

#include "fieldfuse/core.h"
#include "tomo/tomo_drivers.h"

namespace fieldfuse::detail::tomo {

/// Checks projections [n, Hd, Wd] (float32 or float64, or float32 only when `float32_only`, on a
/// device this build runs on), rotations [n, 3, 3], shifts [n, 2] or absent, and volume [D, H, W]
/// (contiguous, written, overlapping no input), all on projections' device with its dtype.
void check_reconstruction(const char* op, const TensorRef& projections, const TensorRef& rotations,
                          const TensorRef& shifts, const TensorRef& volume, bool float32_only);

/// A 3-D tensor as a View3.
View3 view_of(const TensorRef& t);

/// Bytes of `count` elements of `bytes_each`, rounded up to the workspace alignment (8), so every
/// segment of a carved workspace starts aligned.
std::size_t aligned_bytes(int64_t count, std::size_t bytes_each);

}  // namespace fieldfuse::detail::tomo
