// SPDX-License-Identifier: Apache-2.0
// An 8-bit grayscale PNG writer that needs no zlib: the image data goes into stored deflate blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fieldfuse::cli {

/// CRC-32 as PNG chunks and zlib use it (reflected polynomial 0xEDB88320). Pass the previous result
/// as `crc` to continue a running checksum; start from 0.
std::uint32_t crc32(const std::uint8_t* data, std::size_t size, std::uint32_t crc = 0);

/// Adler-32 as the zlib stream trailer uses it (RFC 1950).
std::uint32_t adler32(const std::uint8_t* data, std::size_t size);

/// A complete PNG file of `pixels` (row-major, `width * height` bytes, 0 = black).
std::vector<std::uint8_t> encode_png_gray8(std::int64_t width, std::int64_t height,
                                           const std::uint8_t* pixels);

}  // namespace fieldfuse::cli
