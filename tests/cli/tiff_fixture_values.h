// SPDX-License-Identifier: Apache-2.0
// The sample values of the TIFF test files: make_cli_inputs writes them as raw pages, libtiff's
// tools turn those into TIFFs, and test_tiff checks that the reader gets them back.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fieldfuse::cli::testing {

// Pages of 37 x 21: more than one 16 x 16 tile each way, with partial tiles on the right and
// bottom edges; three pages make a stack.
constexpr std::int64_t kTiffWidth = 37;
constexpr std::int64_t kTiffHeight = 21;
constexpr std::int64_t kTiffPages = 3;

/// One sample type as raw2tiff names it (-d), with its size.
struct TiffSampleType {
  const char* raw2tiff_name;
  int bytes;
  char kind;  // 'u', 'i' or 'f'
};

inline const std::vector<TiffSampleType>& tiff_sample_types() {
  static const std::vector<TiffSampleType> types = {
      {"byte", 1, 'u'}, {"sbyte", 1, 'i'}, {"short", 2, 'u'}, {"sshort", 2, 'i'},
      {"long", 4, 'u'}, {"slong", 4, 'i'}, {"float", 4, 'f'}, {"double", 8, 'f'}};
  return types;
}

/// The value of sample `i` (C order over the whole stack) for `type`: spans the type's range
/// (negative values for signed types, fractions for floats), all exact in float32.
inline double tiff_fixture_value(const TiffSampleType& type, std::int64_t i) {
  const double ramp = static_cast<double>((i * 37) % 251);  // 0..250, scrambled
  switch (type.kind) {
    case 'u':
      return ramp * (type.bytes == 1 ? 1.0 : type.bytes == 2 ? 257.0 : 65537.0);
    case 'i':
      return (ramp - 125.0) * (type.bytes == 1 ? 1.0 : type.bytes == 2 ? 257.0 : 65537.0);
    default:
      return (ramp - 125.0) * 0.125;
  }
}

/// The stack's samples as raw little-endian bytes of `type` (raw2tiff's input; hosts are
/// little-endian).
inline std::vector<std::uint8_t> tiff_fixture_page_bytes(const TiffSampleType& type,
                                                         std::int64_t page) {
  std::vector<std::uint8_t> bytes;
  const std::int64_t plane = kTiffWidth * kTiffHeight;
  for (std::int64_t i = page * plane; i < (page + 1) * plane; ++i) {
    const double v = tiff_fixture_value(type, i);
    std::uint8_t raw[8] = {};
    if (type.kind == 'f' && type.bytes == 4) {
      const float f = static_cast<float>(v);
      std::memcpy(raw, &f, 4);
    } else if (type.kind == 'f') {
      std::memcpy(raw, &v, 8);
    } else {
      const auto n = static_cast<std::int64_t>(v);
      std::memcpy(raw, &n, 8);  // little-endian: the low bytes come first
    }
    bytes.insert(bytes.end(), raw, raw + type.bytes);
  }
  return bytes;
}

}  // namespace fieldfuse::cli::testing
