// SPDX-License-Identifier: Apache-2.0
// TIFF stacks through libtiff: every page of a file becomes one slice of a [pages, height, width]
// float32 volume, with the file's claims checked against its size before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "raw_samples.h"

namespace fieldfuse::cli {

/// All full-resolution pages of a TIFF file as one [pages, height, width] stack (C order).
struct TiffStack {
  std::int64_t pages = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  SampleFormat sample_format;  ///< as stored in the file, for messages and reports
  std::vector<float> values;
};

/// Reads classic TIFF and BigTIFF, either byte order, strips or tiles, with any compression the
/// system's libtiff decodes (LZW, Deflate, PackBits, ZSTD, ... with or without a predictor). Each
/// page must hold one sample per pixel of 8/16/32/64-bit unsigned or signed integers or
/// 16/32/64-bit IEEE floats. Reduced-resolution pages (thumbnails) are skipped; every other page
/// must match the first in size and sample type. Before allocating, every strip or tile must lie
/// inside the file, hold its full size when uncompressed, and expand by at most
/// kMaxCompressionRatio when compressed, so a small file cannot make the reader allocate gigabytes.
/// Anything else (RGB, palette, 1- or 12-bit samples, complex samples, damage) is an input error
/// (exit 3) naming the path and the problem; anything but a regular file is refused unread.
TiffStack read_tiff(const std::string& path);

/// The most a compressed strip or tile may expand: above the limits of the common lossless codecs
/// (Deflate about 1032:1, LZW about 2700:1 at 12-bit codes, PackBits 64:1), far below what a
/// crafted file claiming gigapixel pages in a few bytes needs.
constexpr std::uint64_t kMaxCompressionRatio = 4096;

}  // namespace fieldfuse::cli
