// SPDX-License-Identifier: Apache-2.0
// Writing a float32 volume as a multi-page TIFF (one page per slice) through libtiff.
#pragma once

#include <cstdint>
#include <vector>

namespace fieldfuse::cli {

/// The TIFF file of [depth, height, width] `values` (C order): one page per slice, one 32-bit IEEE
/// float sample per pixel, little-endian, uncompressed, one strip per page, so Fiji, IMOD's
/// tif2mrc and tifffile read it as a stack. BigTIFF when the data pass 2 GiB. Built in memory (a
/// copy of the volume) because libtiff seeks back to link the pages; failures are runtime errors.
std::vector<std::uint8_t> encode_tiff_float32(std::int64_t depth, std::int64_t height,
                                              std::int64_t width, const float* values);

}  // namespace fieldfuse::cli
