// SPDX-License-Identifier: Apache-2.0
// MRC2014 files (the electron-microscopy standard of IMOD, ChimeraX, Fiji, RELION): reading the
// common real modes of either byte order into float32, and writing float32 volumes and stacks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "atomic_outputs.h"

namespace fieldfuse::cli {

/// The size of the main header; an extended header of `nsymbt` bytes may follow it.
constexpr std::int64_t kMrcHeaderBytes = 1024;

/// An MRC file's data as float32 [nz, ny, nx] (x fastest, as stored) and the header facts the app
/// uses.
struct MrcData {
  std::int64_t nx = 0, ny = 0, nz = 0;
  std::int32_t mode = 2;
  std::int32_t ispg = 0;    ///< 0 = image stack (a tilt series), 1 = volume
  bool big_endian = false;  ///< the file's byte order (machst)
  /// Voxel size in Å along x, y, z: cell length / sampling (m). 0 where the header leaves it
  /// undefined (m or the cell length 0).
  std::array<double, 3> voxel_size{};
  std::vector<float> values;
};

/// Reads `path`: modes 0 (int8), 1 (int16), 2 (float32), 6 (uint16) and 12 (float16) into float32,
/// in the byte order `machst` gives (0x44 0x44 or 0x44 0x41 little, 0x11 0x11 big; a file with
/// machst unset, as some old writers leave it, is taken as the order in which its mode is valid),
/// skipping `nsymbt` bytes of extended header. Other modes (4 complex64, 3 complex int16, 101
/// 4-bit,
/// ...) are refused naming the mode; so are negative sizes and a file shorter than its header
/// says (truncated). Bytes after the data are ignored, as IMOD does. Every failure is an input
/// error (exit 3) naming the path; anything but a regular file is refused unread.
MrcData read_mrc(const std::string& path);

/// What the writer puts into the header besides the data.
struct MrcWriteInfo {
  bool is_volume = true;  ///< ispg 1 and mz = nz; false: an image stack (ispg 0, mz = 1)
  /// Voxel size in Å along x, y, z; the cell becomes size × sampling. 0 or less: 1 Å.
  std::array<double, 3> voxel_size{};
  /// Up to 80 characters (longer is cut); the header's only label (nlabl 1).
  std::string label;
};

/// The 1024-byte little-endian MRC2014 header of a float32 (mode 2) file of [nz, ny, nx] `values`:
/// nversion 20140, "MAP ", machst 0x44 0x44 0 0, mapc/mapr/maps 1/2/3, cell angles 90°, origin 0,
/// dmin/dmax/dmean/rms (rms deviation from the mean) computed from the values in float64.
std::vector<std::uint8_t> encode_mrc_header(std::int64_t nz, std::int64_t ny, std::int64_t nx,
                                            const float* values, const MrcWriteInfo& info);

/// Streams the header and the data (little-endian float32) into `out`.
void write_mrc_float32(OutputStream& out, std::int64_t nz, std::int64_t ny, std::int64_t nx,
                       const float* values, const MrcWriteInfo& info);

/// True for the extensions MRC files go by: .mrc .st .ali .rec .map (any case).
bool is_mrc_extension(const std::string& lowercase_extension);

}  // namespace fieldfuse::cli
