// SPDX-License-Identifier: Apache-2.0
// Decoding of packed integer and floating-point samples of either byte order into float32.
#pragma once

#include <cstdint>
#include <string>

namespace fieldfuse::cli {

enum class SampleKind { UnsignedInt, SignedInt, Float };

/// How one sample is stored: .npy descriptors and TIFF sample tags both reduce to this.
struct SampleFormat {
  SampleKind kind = SampleKind::Float;
  int bytes = 4;
  bool big_endian = false;
};

/// Integers of 1, 2, 4 or 8 bytes and floats of 4 or 8 bytes.
bool is_supported(const SampleFormat& format);

/// "uint16", "float64", ... for messages.
std::string sample_type_name(const SampleFormat& format);

/// Converts `count` packed samples at `src` to float32 (64-bit values are rounded to the nearest
/// float; the solver works in float32). `format` must be supported.
void decode_samples(const std::uint8_t* src, std::int64_t count, const SampleFormat& format,
                    float* dst);

}  // namespace fieldfuse::cli
