// SPDX-License-Identifier: Apache-2.0
// Reading NumPy .npy arrays (real numeric dtypes, either byte order, C or Fortran order) and
// writing float32 .npy files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "atomic_outputs.h"

namespace fieldfuse::cli {

/// An n-d array converted to float32, values in C (row-major) order whatever the file's order.
struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

/// Parses .npy format versions 1-3 holding bool, int8..int64, uint8..uint64, float16, float32 or
/// float64, little- or big-endian, in C or Fortran order. Complex, structured, string, object and
/// datetime dtypes are refused with a message saying why; so is a file whose size does not match
/// what its header describes (truncated, or with bytes after the data). Every failure is an input
/// error naming `source_name`.
NpyArray parse_npy(const std::vector<std::uint8_t>& bytes, const std::string& source_name);

/// Reads `path` as parse_npy does, checking the magic and the header against the file's size
/// before it allocates or reads the data; anything but a regular file is refused unread.
NpyArray read_npy(const std::string& path);

/// Encodes a C-order float32 array as a version 1.0 .npy file.
std::vector<std::uint8_t> encode_npy_float32(const std::vector<std::int64_t>& shape,
                                             const float* values);

/// Streams the same file into `out` (no second copy of the volume).
void write_npy_float32(OutputStream& out, const std::vector<std::int64_t>& shape,
                       const float* values);

}  // namespace fieldfuse::cli
