// SPDX-License-Identifier: Apache-2.0
// Decoding of packed integer and floating-point samples of either byte order into float32.
#include "raw_samples.h"

#include <cstring>

namespace fieldfuse::cli {
namespace {

// Assembles the sample's bits from bytes in the file's order, so the host's order never matters.
std::uint64_t load_bits(const std::uint8_t* src, int bytes, bool big_endian) {
  std::uint64_t bits = 0;
  for (int b = 0; b < bytes; ++b) {
    const int shift = 8 * (big_endian ? bytes - 1 - b : b);
    bits |= static_cast<std::uint64_t>(src[b]) << shift;
  }
  return bits;
}

float bits_to_float(std::uint64_t bits, const SampleFormat& format) {
  const int width = 8 * format.bytes;
  switch (format.kind) {
    case SampleKind::UnsignedInt:
      return static_cast<float>(bits);
    case SampleKind::SignedInt: {
      // Sign-extend from the sample's width.
      const std::uint64_t sign_bit = std::uint64_t{1} << (width - 1);
      const std::int64_t value = width == 64 ? static_cast<std::int64_t>(bits)
                                             : static_cast<std::int64_t>((bits ^ sign_bit)) -
                                                   static_cast<std::int64_t>(sign_bit);
      return static_cast<float>(value);
    }
    case SampleKind::Float:
      break;
  }
  if (format.bytes == 2) return half_to_float(static_cast<std::uint16_t>(bits));
  if (format.bytes == 4) {
    const auto narrow = static_cast<std::uint32_t>(bits);
    float value;
    std::memcpy(&value, &narrow, sizeof(value));
    return value;
  }
  double value;
  std::memcpy(&value, &bits, sizeof(value));
  return static_cast<float>(value);
}

}  // namespace

float half_to_float(std::uint16_t bits) {
  // binary16: 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits. Every value is exact in
  // float32 (bias 127, 23 fraction bits), so only the fields move.
  const std::uint32_t sign = static_cast<std::uint32_t>(bits >> 15) << 31;
  const std::uint32_t exponent = (bits >> 10) & 0x1f;
  std::uint32_t fraction = bits & 0x3ff;
  std::uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (fraction << 13);  // infinity or NaN (payload kept)
  } else if (exponent != 0) {
    out = sign | ((exponent + 127 - 15) << 23) | (fraction << 13);
  } else if (fraction == 0) {
    out = sign;  // signed zero
  } else {
    // Subnormal: value = fraction * 2^-24; normalise it for float32.
    int shift = 0;
    while ((fraction & 0x400) == 0) {
      fraction <<= 1;
      ++shift;
    }
    out = sign | (static_cast<std::uint32_t>(127 - 15 + 1 - shift) << 23) |
          ((fraction & 0x3ff) << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

bool is_supported(const SampleFormat& format) {
  if (format.kind == SampleKind::Float) {
    return format.bytes == 2 || format.bytes == 4 || format.bytes == 8;
  }
  return format.bytes == 1 || format.bytes == 2 || format.bytes == 4 || format.bytes == 8;
}

std::string sample_type_name(const SampleFormat& format) {
  const char* prefix = format.kind == SampleKind::Float       ? "float"
                       : format.kind == SampleKind::SignedInt ? "int"
                                                              : "uint";
  return prefix + std::to_string(8 * format.bytes);
}

void decode_samples(const std::uint8_t* src, std::int64_t count, const SampleFormat& format,
                    float* dst) {
  for (std::int64_t i = 0; i < count; ++i) {
    dst[i] =
        bits_to_float(load_bits(src + i * format.bytes, format.bytes, format.big_endian), format);
  }
}

}  // namespace fieldfuse::cli
