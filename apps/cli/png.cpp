// SPDX-License-Identifier: Apache-2.0
// An 8-bit grayscale PNG writer that needs no zlib: the image data goes into stored deflate blocks.
//
// A PNG is an 8-byte signature and chunks (big-endian length, 4-letter type, data, CRC-32 of type
// and data): IHDR, IDAT, IEND. IDAT holds a zlib stream (RFC 1950) of the scanlines, each prefixed
// by its filter type (0 = none). Deflate (RFC 1951) allows "stored" blocks: a header byte, LEN and
// its one's complement NLEN, then LEN raw bytes; the previews are small, so compression is not
// worth a dependency.
#include "png.h"

#include <algorithm>
#include <array>
#include <limits>

#include "cli_error.h"

namespace fieldfuse::cli {
namespace {

constexpr std::uint8_t kSignature[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr std::size_t kMaxStoredBlock = 65535;  // LEN is 16 bits
constexpr std::uint32_t kAdlerModulus = 65521;  // largest prime below 2^16
// CMF = 0x78 (deflate, 32 KiB window) and FLG = 0x01 make (CMF * 256 + FLG) a multiple of 31.
constexpr std::uint8_t kZlibHeader[] = {0x78, 0x01};

const std::array<std::uint32_t, 256>& crc_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> entries{};
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      entries[n] = c;
    }
    return entries;
  }();
  return table;
}

void append_u32_big_endian(std::vector<std::uint8_t>& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::uint8_t>(value >> shift));
}

void append_chunk(std::vector<std::uint8_t>& out, const char type[4],
                  const std::vector<std::uint8_t>& data) {
  append_u32_big_endian(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t type_start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  append_u32_big_endian(out, crc32(out.data() + type_start, out.size() - type_start));
}

std::vector<std::uint8_t> zlib_stored(const std::vector<std::uint8_t>& raw) {
  std::vector<std::uint8_t> stream(kZlibHeader, kZlibHeader + sizeof(kZlibHeader));
  std::size_t offset = 0;
  do {
    const std::size_t length = std::min(kMaxStoredBlock, raw.size() - offset);
    const bool final_block = offset + length == raw.size();
    stream.push_back(final_block ? 1 : 0);  // BFINAL bit, BTYPE = 00 (stored)
    stream.push_back(static_cast<std::uint8_t>(length & 0xff));
    stream.push_back(static_cast<std::uint8_t>(length >> 8));
    stream.push_back(static_cast<std::uint8_t>(~length & 0xff));
    stream.push_back(static_cast<std::uint8_t>((~length >> 8) & 0xff));
    stream.insert(stream.end(), raw.begin() + offset, raw.begin() + offset + length);
    offset += length;
  } while (offset < raw.size());
  append_u32_big_endian(stream, adler32(raw.data(), raw.size()));
  return stream;
}

}  // namespace

std::uint32_t crc32(const std::uint8_t* data, std::size_t size, std::uint32_t crc) {
  const auto& table = crc_table();
  crc = ~crc;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t adler32(const std::uint8_t* data, std::size_t size) {
  std::uint32_t a = 1;
  std::uint32_t b = 0;
  for (std::size_t i = 0; i < size; ++i) {
    a = (a + data[i]) % kAdlerModulus;
    b = (b + a) % kAdlerModulus;
  }
  return (b << 16) | a;
}

std::vector<std::uint8_t> encode_png_gray8(std::int64_t width, std::int64_t height,
                                           const std::uint8_t* pixels) {
  constexpr std::int64_t kMaxSide = std::numeric_limits<std::int32_t>::max();  // PNG's limit
  if (width <= 0 || height <= 0 || width > kMaxSide || height > kMaxSide) {
    throw runtime_error("cannot encode a " + std::to_string(width) + "x" + std::to_string(height) +
                        " PNG image");
  }
  std::vector<std::uint8_t> header;
  append_u32_big_endian(header, static_cast<std::uint32_t>(width));
  append_u32_big_endian(header, static_cast<std::uint32_t>(height));
  header.push_back(8);  // bit depth
  header.push_back(0);  // colour type 0: grayscale
  header.push_back(0);  // compression method 0: deflate
  header.push_back(0);  // filter method 0
  header.push_back(0);  // no interlace

  std::vector<std::uint8_t> scanlines;
  scanlines.reserve(static_cast<std::size_t>((width + 1) * height));
  for (std::int64_t row = 0; row < height; ++row) {
    scanlines.push_back(0);  // filter type None
    scanlines.insert(scanlines.end(), pixels + row * width, pixels + (row + 1) * width);
  }

  std::vector<std::uint8_t> png(kSignature, kSignature + sizeof(kSignature));
  append_chunk(png, "IHDR", header);
  append_chunk(png, "IDAT", zlib_stored(scanlines));
  append_chunk(png, "IEND", {});
  return png;
}

}  // namespace fieldfuse::cli
