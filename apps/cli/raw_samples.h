// SPDX-License-Identifier: Apache-2.0
// Decoding of packed integer and floating-point samples of either byte order into float32.
#pragma once

#include <cstdint>
#include <string>

namespace fieldfuse::cli {

enum class SampleKind { UnsignedInt, SignedInt, Float };

/// True on a big-endian host (readers that get host-order samples, such as libtiff, say so).
constexpr bool kHostBigEndian = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;

/// How one sample is stored: .npy descriptors and TIFF sample tags both reduce to this.
struct SampleFormat {
  SampleKind kind = SampleKind::Float;
  int bytes = 4;
  bool big_endian = false;
};

/// Integers of 1, 2, 4 or 8 bytes and IEEE floats of 2, 4 or 8 bytes (half, single, double).
bool is_supported(const SampleFormat& format);

/// "uint16", "float64", ... for messages.
std::string sample_type_name(const SampleFormat& format);

/// Converts `count` packed samples at `src` to float32: integers and float16 exactly where float32
/// can hold them (all of float16, integers up to 2^24), 64-bit values rounded to the nearest float
/// (the solver works in float32), so a float64 beyond float32's range becomes infinite and is
/// then refused as non-finite. `format` must be supported.
void decode_samples(const std::uint8_t* src, std::int64_t count, const SampleFormat& format,
                    float* dst);

/// The float32 value of IEEE 754 binary16 bits (subnormals, infinities and NaN included).
float half_to_float(std::uint16_t bits);

}  // namespace fieldfuse::cli
