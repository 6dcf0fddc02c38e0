// SPDX-License-Identifier: Apache-2.0
// The PNG preview of a run: the three central orthogonal slices of each volume, one row per volume.
#pragma once

#include <cstdint>
#include <vector>

#include "volume.h"

namespace fieldfuse::cli {

/// Encodes an 8-bit grayscale PNG with one row per volume (e.g. noisy / denoised / clean) and three
/// columns: the central axial (H×W), coronal (D×W) and sagittal (D×H) slices. Every panel uses the
/// same intensity window, `window.low` → black and `window.high` → white, so rows compare directly.
/// All volumes must have the same shape.
std::vector<std::uint8_t> encode_slice_preview(const std::vector<const Volume*>& rows,
                                               const IntensityRange& window);

}  // namespace fieldfuse::cli
