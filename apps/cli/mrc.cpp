// SPDX-License-Identifier: Apache-2.0
// MRC2014 files (the electron-microscopy standard of IMOD, ChimeraX, Fiji, RELION): reading the
// common real modes of either byte order into float32, and writing float32 volumes and stacks.
//
// Header words used here (4 bytes each, byte offsets): 0 nx, 4 ny, 8 nz, 12 mode, 16-24 start,
// 28-36 mx my mz, 40-48 cell lengths (Å), 52-60 cell angles, 64-72 mapc mapr maps, 76-84 dmin dmax
// dmean, 88 ispg, 92 nsymbt, 104 exttyp, 108 nversion, 196-204 origin, 208 "MAP ", 212 machst,
// 216 rms, 220 nlabl, 224 ten labels of 80 characters.
#include "mrc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cli_error.h"
#include "file_io.h"
#include "raw_samples.h"

namespace fieldfuse::cli {
namespace {

constexpr std::size_t kLabelBytes = 80;
constexpr std::int32_t kVersion = 20140;  // MRC2014, version 0

std::uint32_t load_u32(const std::uint8_t* bytes, bool big_endian) {
  std::uint32_t value = 0;
  for (int b = 0; b < 4; ++b) {
    value |= static_cast<std::uint32_t>(bytes[b]) << (8 * (big_endian ? 3 - b : b));
  }
  return value;
}

std::int32_t load_i32(const std::uint8_t* header, std::size_t offset, bool big_endian) {
  return static_cast<std::int32_t>(load_u32(header + offset, big_endian));
}

float load_f32(const std::uint8_t* header, std::size_t offset, bool big_endian) {
  const std::uint32_t bits = load_u32(header + offset, big_endian);
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

void store_u32(std::uint8_t* header, std::size_t offset, std::uint32_t value) {
  for (int b = 0; b < 4; ++b) header[offset + b] = static_cast<std::uint8_t>(value >> (8 * b));
}
void store_i32(std::uint8_t* header, std::size_t offset, std::int64_t value) {
  store_u32(header, offset, static_cast<std::uint32_t>(static_cast<std::int32_t>(value)));
}
void store_f32(std::uint8_t* header, std::size_t offset, double value) {
  const auto narrow = static_cast<float>(value);
  std::uint32_t bits;
  std::memcpy(&bits, &narrow, sizeof(bits));
  store_u32(header, offset, bits);
}

// The sample layout of each supported mode; false for any other mode.
bool mode_format(std::int32_t mode, bool big_endian, SampleFormat& format) {
  struct ModeLayout {
    std::int32_t mode;
    SampleKind kind;
    int bytes;
  };
  constexpr ModeLayout kModes[] = {{0, SampleKind::SignedInt, 1},
                                   {1, SampleKind::SignedInt, 2},
                                   {2, SampleKind::Float, 4},
                                   {6, SampleKind::UnsignedInt, 2},
                                   {12, SampleKind::Float, 2}};
  for (const ModeLayout& layout : kModes) {
    if (layout.mode == mode) {
      format = {layout.kind, layout.bytes, big_endian};
      return true;
    }
  }
  return false;
}

// The modes MRC2014 and its common extensions define, supported or not: a mode outside this set
// in one byte order but inside it in the other gives away the order of a file without machst.
bool is_defined_mode(std::int32_t mode) {
  return (mode >= 0 && mode <= 4) || mode == 6 || mode == 12 || mode == 101;
}

std::string mode_name(std::int32_t mode) {
  switch (mode) {
    case 3:
      return "mode 3 (complex int16)";
    case 4:
      return "mode 4 (complex float32)";
    case 101:
      return "mode 101 (4-bit integers)";
    default:
      return "mode " + std::to_string(mode);
  }
}

bool byte_order_from_machst(const std::uint8_t* header, const std::string& path) {
  const std::uint8_t first = header[212];
  if (first == 0x44 || first == 0x41) return false;  // 0x41: little-endian, as some writers put it
  if (first == 0x11) return true;
  // Unset (old writers leave zeros): the order in which the mode word holds a defined mode.
  const bool little_ok = is_defined_mode(load_i32(header, 12, false));
  const bool big_ok = is_defined_mode(load_i32(header, 12, true));
  if (!little_ok && big_ok) return true;
  if (!little_ok && !big_ok) {
    throw input_error("'" + path + "' is not an MRC file: its mode word (bytes 12-15) holds " +
                      std::to_string(load_i32(header, 12, false)) +
                      " and its machine stamp (bytes 212-213) is neither little- nor big-endian");
  }
  return false;
}

}  // namespace

MrcData read_mrc(const std::string& path) {
  InputFile file(path);
  if (file.size() < static_cast<std::uint64_t>(kMrcHeaderBytes)) {
    throw input_error("'" + path + "' is truncated: " + std::to_string(file.size()) +
                      " bytes, less than the 1024-byte MRC header");
  }
  std::uint8_t header[kMrcHeaderBytes];
  file.read_exact(header, kMrcHeaderBytes, "the MRC header");
  MrcData data;
  data.big_endian = byte_order_from_machst(header, path);
  const bool big = data.big_endian;
  data.nx = load_i32(header, 0, big);
  data.ny = load_i32(header, 4, big);
  data.nz = load_i32(header, 8, big);
  data.mode = load_i32(header, 12, big);
  data.ispg = load_i32(header, 88, big);
  const std::int32_t nsymbt = load_i32(header, 92, big);
  if (data.nx < 0 || data.ny < 0 || data.nz < 0) {
    throw input_error("'" + path + "': the MRC header gives negative sizes nx, ny, nz = " +
                      std::to_string(data.nx) + ", " + std::to_string(data.ny) + ", " +
                      std::to_string(data.nz));
  }
  SampleFormat format;
  if (!mode_format(data.mode, big, format)) {
    throw input_error("'" + path + "': MRC " + mode_name(data.mode) +
                      " is not supported (fieldfuse reads modes 0 int8, 1 int16, 2 float32, "
                      "6 uint16 and 12 float16)");
  }
  if (nsymbt < 0) {
    throw input_error("'" + path + "': the MRC header gives a negative extended header size " +
                      "(nsymbt " + std::to_string(nsymbt) + ")");
  }
  for (int axis = 0; axis < 3; ++axis) {
    const double cell = load_f32(header, 40 + 4 * axis, big);
    const std::int32_t sampling = load_i32(header, 28 + 4 * axis, big);
    data.voxel_size[axis] =
        sampling > 0 && std::isfinite(cell) && cell > 0.0 ? cell / sampling : 0.0;
  }
  // Sizes below 2^31 can still multiply past 64 bits: compare rows against the bytes available
  // per row, a division, so no product overflows before the file's size has bounded it.
  const std::uint64_t available = file.size() - static_cast<std::uint64_t>(kMrcHeaderBytes);
  if (static_cast<std::uint64_t>(nsymbt) > available) {
    throw input_error("'" + path + "' is truncated: its header announces " +
                      std::to_string(nsymbt) + " bytes of extended header, but only " +
                      std::to_string(available) + " bytes follow the main header");
  }
  const std::uint64_t data_bytes_available = available - static_cast<std::uint64_t>(nsymbt);
  const auto row_bytes = static_cast<std::uint64_t>(data.nx) * format.bytes;
  const auto rows = static_cast<std::uint64_t>(data.ny) * static_cast<std::uint64_t>(data.nz);
  const bool fits = row_bytes == 0 || rows == 0 || rows <= data_bytes_available / row_bytes;
  if (!fits) {
    throw input_error("'" + path + "' is truncated: its header describes " +
                      std::to_string(data.nx) + " x " + std::to_string(data.ny) + " x " +
                      std::to_string(data.nz) + " " + sample_type_name(format) + " values (" +
                      mode_name(data.mode) + "), more than the " +
                      std::to_string(data_bytes_available) + " bytes of data in the file");
  }
  std::vector<std::uint8_t> skip(static_cast<std::size_t>(nsymbt));
  file.read_exact(skip.data(), skip.size(), "the MRC extended header");
  const std::int64_t count = data.nx * data.ny * data.nz;
  data.values.resize(static_cast<std::size_t>(count));
  // Decoded in chunks, so the raw bytes never need a second copy of the volume.
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;
  std::vector<std::uint8_t> raw;
  for (std::int64_t first = 0; first < count; first += kChunk) {
    const std::int64_t n = std::min(kChunk, count - first);
    raw.resize(static_cast<std::size_t>(n * format.bytes));
    file.read_exact(raw.data(), raw.size(), "the MRC data");
    decode_samples(raw.data(), n, format, data.values.data() + first);
  }
  return data;
}

std::vector<std::uint8_t> encode_mrc_header(std::int64_t nz, std::int64_t ny, std::int64_t nx,
                                            const float* values, const MrcWriteInfo& info) {
  const std::int64_t limit = std::numeric_limits<std::int32_t>::max();
  if (nx > limit || ny > limit || nz > limit || nx < 0 || ny < 0 || nz < 0) {
    throw runtime_error("cannot write an MRC file of " + std::to_string(nz) + " x " +
                        std::to_string(ny) + " x " + std::to_string(nx) +
                        " values: MRC sizes are 32-bit");
  }
  std::vector<std::uint8_t> header(kMrcHeaderBytes, 0);
  std::uint8_t* h = header.data();
  const std::int64_t sizes[3] = {nx, ny, nz};
  const std::int64_t sampling[3] = {nx, ny, info.is_volume ? nz : 1};
  for (int axis = 0; axis < 3; ++axis) {
    const double voxel = info.voxel_size[axis] > 0.0 ? info.voxel_size[axis] : 1.0;
    store_i32(h, 4 * axis, sizes[axis]);
    store_i32(h, 28 + 4 * axis, sampling[axis]);
    store_f32(h, 40 + 4 * axis, voxel * static_cast<double>(sampling[axis]));
    store_f32(h, 52 + 4 * axis, 90.0);
    store_i32(h, 64 + 4 * axis, axis + 1);
  }
  store_i32(h, 12, 2);  // mode 2: float32
  const std::int64_t count = nx * ny * nz;
  double low = 0.0, high = 0.0, sum = 0.0;
  for (std::int64_t i = 0; i < count; ++i) {
    const double v = values[i];
    low = i == 0 ? v : std::min(low, v);
    high = i == 0 ? v : std::max(high, v);
    sum += v;
  }
  const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
  double squares = 0.0;
  for (std::int64_t i = 0; i < count; ++i) squares += (values[i] - mean) * (values[i] - mean);
  const double rms = count > 0 ? std::sqrt(squares / static_cast<double>(count)) : 0.0;
  store_f32(h, 76, low);
  store_f32(h, 80, high);
  store_f32(h, 84, mean);
  store_i32(h, 88, info.is_volume ? 1 : 0);
  store_i32(h, 92, 0);  // nsymbt: no extended header
  store_i32(h, 108, kVersion);
  std::memcpy(h + 208, "MAP ", 4);
  h[212] = 0x44;  // machst: little-endian
  h[213] = 0x44;
  store_f32(h, 216, rms);
  store_i32(h, 220, 1);
  std::memset(h + 224, ' ', kLabelBytes);
  std::memcpy(h + 224, info.label.data(), std::min(info.label.size(), kLabelBytes));
  return header;
}

void write_mrc_float32(OutputStream& out, std::int64_t nz, std::int64_t ny, std::int64_t nx,
                       const float* values, const MrcWriteInfo& info) {
  const std::vector<std::uint8_t> header = encode_mrc_header(nz, ny, nx, values, info);
  out.write(header.data(), header.size());
  out.write_float32_le(values, nx * ny * nz);
}

bool is_mrc_extension(const std::string& lowercase_extension) {
  for (const char* known : {".mrc", ".st", ".ali", ".rec", ".map"}) {
    if (lowercase_extension == known) return true;
  }
  return false;
}

}  // namespace fieldfuse::cli
