// SPDX-License-Identifier: Apache-2.0
// A minimal baseline TIFF reader: uncompressed, single-channel strips; pages stack into a volume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "raw_samples.h"

namespace fieldfuse::cli {

/// All pages of a TIFF file as one [pages, height, width] stack of float32 values (C order).
struct TiffStack {
  std::int64_t pages = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  SampleFormat sample_format;  ///< as stored in the file, for messages and reports
  std::vector<float> values;
};

/// Reads classic (not Big) TIFF, either byte order, following the TIFF 6.0 baseline: one sample
/// per pixel of 8/16/32-bit unsigned or signed integers or 32/64-bit IEEE floats, stored as
/// uncompressed strips. Reduced-resolution pages (thumbnails) are skipped; every other page must
/// match the first in size and sample type. Anything else, e.g. compression, tiles, RGB or a
/// truncated file, is an input error naming `source_name` and the unsupported feature.
TiffStack parse_tiff(const std::vector<std::uint8_t>& bytes, const std::string& source_name);

TiffStack read_tiff(const std::string& path);

}  // namespace fieldfuse::cli
