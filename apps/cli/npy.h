// SPDX-License-Identifier: Apache-2.0
// Reading NumPy .npy arrays (numeric dtypes, C or Fortran order) and writing float32 .npy files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fieldfuse::cli {

/// An n-d array converted to float32, values in C (row-major) order whatever the file's order.
struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

/// Parses .npy format versions 1-3 holding bool, int8..int64, uint8..uint64, float32 or float64
/// (little-endian or single-byte). Anything else, truncation included, is an input error
/// naming `source_name`.
NpyArray parse_npy(const std::vector<std::uint8_t>& bytes, const std::string& source_name);

/// Reads and parses `path`.
NpyArray read_npy(const std::string& path);

/// Encodes a C-order float32 array as a version 1.0 .npy file.
std::vector<std::uint8_t> encode_npy_float32(const std::vector<std::int64_t>& shape,
                                             const float* values);

void write_npy_float32(const std::string& path, const std::vector<std::int64_t>& shape,
                       const float* values);

}  // namespace fieldfuse::cli
