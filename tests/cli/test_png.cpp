// SPDX-License-Identifier: Apache-2.0
// Tests of the PNG writer: checksums against published check values, chunk CRCs, stored-deflate
// decoding.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "png.h"

namespace fieldfuse::cli {
namespace {

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

struct Chunk {
  std::string type;
  std::vector<std::uint8_t> data;
};

// Splits a PNG into chunks, checking each CRC on the way.
std::vector<Chunk> read_chunks(const std::vector<std::uint8_t>& png) {
  const std::uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_TRUE(std::equal(signature, signature + 8, png.begin()));
  std::vector<Chunk> chunks;
  for (std::size_t at = 8; at + 12 <= png.size();) {
    const std::uint32_t length = big_endian_u32(png.data() + at);
    Chunk chunk;
    chunk.type.assign(png.begin() + at + 4, png.begin() + at + 8);
    chunk.data.assign(png.begin() + at + 8, png.begin() + at + 8 + length);
    const std::uint32_t stored_crc = big_endian_u32(png.data() + at + 8 + length);
    EXPECT_EQ(stored_crc, crc32(png.data() + at + 4, length + 4)) << "CRC of " << chunk.type;
    chunks.push_back(chunk);
    at += 12 + length;
  }
  return chunks;
}

// Inflates a zlib stream made only of stored blocks, checking the header and the Adler-32.
std::vector<std::uint8_t> inflate_stored(const std::vector<std::uint8_t>& stream) {
  EXPECT_EQ((stream[0] * 256 + stream[1]) % 31, 0);
  EXPECT_EQ(stream[0] & 0x0f, 8);  // deflate
  std::vector<std::uint8_t> out;
  std::size_t at = 2;
  for (bool final_block = false; !final_block;) {
    final_block = stream[at] & 1;
    EXPECT_EQ((stream[at] >> 1) & 3, 0) << "not a stored block";
    const std::uint32_t length = stream[at + 1] | stream[at + 2] << 8;
    const std::uint32_t complement = stream[at + 3] | stream[at + 4] << 8;
    EXPECT_EQ(length ^ 0xffffu, complement);
    out.insert(out.end(), stream.begin() + at + 5, stream.begin() + at + 5 + length);
    at += 5 + length;
  }
  EXPECT_EQ(big_endian_u32(stream.data() + at), adler32(out.data(), out.size()));
  EXPECT_EQ(at + 4, stream.size());
  return out;
}

TEST(Png, ChecksumsMatchPublishedCheckValues) {
  const std::string digits = "123456789";
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(digits.data());
  EXPECT_EQ(crc32(bytes, digits.size()), 0xCBF43926u);           // the CRC-32 check value
  EXPECT_EQ(crc32(bytes + 4, 5, crc32(bytes, 4)), 0xCBF43926u);  // continued in two parts
  const std::string word = "Wikipedia";
  EXPECT_EQ(adler32(reinterpret_cast<const std::uint8_t*>(word.data()), word.size()), 0x11E60398u);
  EXPECT_EQ(adler32(nullptr, 0), 1u);
}

void expect_round_trip(std::int64_t width, std::int64_t height) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width * height));
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<std::uint8_t>(i * 7 + i / 13);
  const std::vector<Chunk> chunks = read_chunks(encode_png_gray8(width, height, pixels.data()));
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].type, "IHDR");
  EXPECT_EQ(chunks[1].type, "IDAT");
  EXPECT_EQ(chunks[2].type, "IEND");
  EXPECT_TRUE(chunks[2].data.empty());
  const std::vector<std::uint8_t>& header = chunks[0].data;
  ASSERT_EQ(header.size(), 13u);
  EXPECT_EQ(big_endian_u32(header.data()), width);
  EXPECT_EQ(big_endian_u32(header.data() + 4), height);
  EXPECT_EQ(header[8], 8);  // bit depth
  EXPECT_EQ(header[9], 0);  // grayscale

  const std::vector<std::uint8_t> scanlines = inflate_stored(chunks[1].data);
  ASSERT_EQ(scanlines.size(), static_cast<std::size_t>((width + 1) * height));
  for (std::int64_t row = 0; row < height; ++row) {
    const std::uint8_t* line = scanlines.data() + row * (width + 1);
    EXPECT_EQ(line[0], 0) << "filter byte of row " << row;
    for (std::int64_t x = 0; x < width; ++x) ASSERT_EQ(line[1 + x], pixels[row * width + x]);
  }
}

TEST(Png, SmallImageDecodesToItsPixels) { expect_round_trip(5, 3); }

TEST(Png, ImageLargerThanOneStoredBlockSpansSeveral) { expect_round_trip(300, 260); }

TEST(Png, OnePixelImage) { expect_round_trip(1, 1); }

}  // namespace
}  // namespace fieldfuse::cli
