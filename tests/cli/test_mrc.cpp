// SPDX-License-Identifier: Apache-2.0
// Tests of the MRC2014 reader and writer: round trip, header bytes, big-endian and every bad file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "atomic_outputs.h"
#include "cli_error.h"
#include "mrc.h"
#include "scratch_dir.h"

namespace fieldfuse::cli {
namespace {

namespace fs = std::filesystem;

// Builds MRC headers byte by byte, independently of the writer under test.
struct HeaderBuilder {
  std::vector<std::uint8_t> bytes = std::vector<std::uint8_t>(1024, 0);
  bool big_endian = false;

  void u32(std::size_t offset, std::uint32_t value) {
    for (int b = 0; b < 4; ++b) {
      bytes[offset + b] = static_cast<std::uint8_t>(value >> (8 * (big_endian ? 3 - b : b)));
    }
  }
  void i32(std::size_t offset, std::int32_t value) {
    u32(offset, static_cast<std::uint32_t>(value));
  }
  void f32(std::size_t offset, float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    u32(offset, bits);
  }
  // A minimal valid header: sizes, mode, sampling = sizes, cell = sizes * voxel, machst.
  HeaderBuilder(std::int32_t nx, std::int32_t ny, std::int32_t nz, std::int32_t mode, bool big,
                float voxel = 2.5f)
      : big_endian(big) {
    const std::int32_t sizes[3] = {nx, ny, nz};
    for (int axis = 0; axis < 3; ++axis) {
      i32(4 * axis, sizes[axis]);
      i32(28 + 4 * axis, sizes[axis]);
      f32(40 + 4 * axis, voxel * static_cast<float>(sizes[axis]));
    }
    i32(12, mode);
    std::memcpy(bytes.data() + 208, "MAP ", 4);
    bytes[212] = big ? 0x11 : 0x44;
    bytes[213] = big ? 0x11 : 0x44;
  }
};

std::uint32_t le_u32(const std::vector<std::uint8_t>& h, std::size_t offset) {
  std::uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= static_cast<std::uint32_t>(h[offset + b]) << (8 * b);
  return v;
}
std::int32_t le_i32(const std::vector<std::uint8_t>& h, std::size_t offset) {
  return static_cast<std::int32_t>(le_u32(h, offset));
}
float le_f32(const std::vector<std::uint8_t>& h, std::size_t offset) {
  const std::uint32_t bits = le_u32(h, offset);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

class MrcTest : public ScratchDirTest {
 protected:
  MrcTest() : ScratchDirTest("fieldfuse_mrc") {}

  std::string put(const std::string& name, const std::vector<std::uint8_t>& header,
                  const std::vector<std::uint8_t>& rest) const {
    const std::string file = path(name);
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), header.size());
    out.write(reinterpret_cast<const char*>(rest.data()), rest.size());
    return file;
  }
  std::vector<std::uint8_t> get(const std::string& file) const {
    std::ifstream in(file, std::ios::binary);
    return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
  }
  std::string error_of(const std::string& file) const {
    try {
      read_mrc(file);
    } catch (const CliError& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Input);
      return error.what();
    }
    return "no error";
  }
};

TEST_F(MrcTest, WrittenVolumeReadsBackWithItsVoxelSize) {
  const std::int64_t nz = 3, ny = 4, nx = 5;
  std::vector<float> values(nz * ny * nx);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i) - 3.0f;
  const std::string file = path("vol.mrc");
  MrcWriteInfo info;
  info.voxel_size = {1.5, 2.0, 3.25};
  info.label = "fieldfuse test";
  AtomicOutputs outputs;
  outputs.add(file,
              [&](OutputStream& out) { write_mrc_float32(out, nz, ny, nx, values.data(), info); });
  outputs.commit();
  EXPECT_EQ(fs::file_size(file), 1024u + values.size() * 4);
  const MrcData back = read_mrc(file);
  EXPECT_EQ(back.nx, nx);
  EXPECT_EQ(back.ny, ny);
  EXPECT_EQ(back.nz, nz);
  EXPECT_EQ(back.mode, 2);
  EXPECT_EQ(back.ispg, 1);
  EXPECT_FALSE(back.big_endian);
  EXPECT_DOUBLE_EQ(back.voxel_size[0], 1.5);
  EXPECT_DOUBLE_EQ(back.voxel_size[1], 2.0);
  EXPECT_DOUBLE_EQ(back.voxel_size[2], 3.25);
  EXPECT_EQ(back.values, values);
}

TEST_F(MrcTest, HeaderFieldsSitAtTheirByteOffsets) {
  const std::vector<float> values = {1.0f, -1.0f, 3.0f, 5.0f, 2.0f, 2.0f};  // [1, 2, 3]
  MrcWriteInfo info;
  info.voxel_size = {2.0, 4.0, 0.0};  // z unknown: 1 Å
  info.label = "fieldfuse 0.1.0 tomo sirt";
  const std::vector<std::uint8_t> h = encode_mrc_header(1, 2, 3, values.data(), info);
  ASSERT_EQ(h.size(), 1024u);
  EXPECT_EQ(le_i32(h, 0), 3);                                                   // nx
  EXPECT_EQ(le_i32(h, 4), 2);                                                   // ny
  EXPECT_EQ(le_i32(h, 8), 1);                                                   // nz
  EXPECT_EQ(le_i32(h, 12), 2);                                                  // mode float32
  for (int axis = 0; axis < 3; ++axis) EXPECT_EQ(le_i32(h, 16 + 4 * axis), 0);  // start
  EXPECT_EQ(le_i32(h, 28), 3);                                                  // mx
  EXPECT_EQ(le_i32(h, 32), 2);                                                  // my
  EXPECT_EQ(le_i32(h, 36), 1);                                                  // mz
  EXPECT_FLOAT_EQ(le_f32(h, 40), 6.0f);                                         // 3 × 2 Å
  EXPECT_FLOAT_EQ(le_f32(h, 44), 8.0f);                                         // 2 × 4 Å
  EXPECT_FLOAT_EQ(le_f32(h, 48), 1.0f);                                         // 1 × 1 Å
  for (int axis = 0; axis < 3; ++axis) {
    EXPECT_FLOAT_EQ(le_f32(h, 52 + 4 * axis), 90.0f);
    EXPECT_EQ(le_i32(h, 64 + 4 * axis), axis + 1);  // mapc, mapr, maps
  }
  EXPECT_FLOAT_EQ(le_f32(h, 76), -1.0f);  // dmin
  EXPECT_FLOAT_EQ(le_f32(h, 80), 5.0f);   // dmax
  EXPECT_FLOAT_EQ(le_f32(h, 84), 2.0f);   // dmean
  EXPECT_EQ(le_i32(h, 88), 1);            // ispg: volume
  EXPECT_EQ(le_i32(h, 92), 0);            // nsymbt
  EXPECT_EQ(le_i32(h, 108), 20140);       // nversion
  for (int axis = 0; axis < 3; ++axis) EXPECT_FLOAT_EQ(le_f32(h, 196 + 4 * axis), 0.0f);
  EXPECT_EQ(std::string(h.begin() + 208, h.begin() + 212), "MAP ");
  EXPECT_EQ(h[212], 0x44);
  EXPECT_EQ(h[213], 0x44);
  EXPECT_EQ(h[214], 0x00);
  EXPECT_EQ(h[215], 0x00);
  // rms deviation from the mean 2: sqrt((1 + 9 + 1 + 9 + 0 + 0) / 6).
  EXPECT_FLOAT_EQ(le_f32(h, 216), static_cast<float>(std::sqrt(20.0 / 6.0)));
  EXPECT_EQ(le_i32(h, 220), 1);  // nlabl
  const std::string label(h.begin() + 224, h.begin() + 304);
  EXPECT_EQ(label.substr(0, 25), "fieldfuse 0.1.0 tomo sirt");
  EXPECT_EQ(label.find_first_not_of(' ', 25), std::string::npos);  // padded with spaces
  EXPECT_EQ(h[304], 0);                                            // label 2 unused
}

TEST_F(MrcTest, StackHeaderHasIspgZeroAndUnitZSampling) {
  const std::vector<float> values(2 * 2 * 2, 1.0f);
  MrcWriteInfo info;
  info.is_volume = false;
  info.voxel_size = {3.0, 3.0, 3.0};
  const std::vector<std::uint8_t> h = encode_mrc_header(2, 2, 2, values.data(), info);
  EXPECT_EQ(le_i32(h, 88), 0);
  EXPECT_EQ(le_i32(h, 36), 1);
  EXPECT_FLOAT_EQ(le_f32(h, 48), 3.0f);
  EXPECT_FLOAT_EQ(le_f32(h, 216), 0.0f);
}

TEST_F(MrcTest, ReadsBigEndianInt16WithExtendedHeader) {
  HeaderBuilder header(3, 2, 1, 1, /*big=*/true, 4.0f);
  header.i32(92, 8);  // nsymbt: 8 bytes of extended header to skip
  header.i32(88, 0);
  std::vector<std::uint8_t> rest(8, 0xAB);
  const std::int16_t values[6] = {-300, -1, 0, 1, 2, 32767};
  for (const std::int16_t v : values) {
    const auto bits = static_cast<std::uint16_t>(v);
    rest.push_back(static_cast<std::uint8_t>(bits >> 8));
    rest.push_back(static_cast<std::uint8_t>(bits & 0xff));
  }
  const MrcData data = read_mrc(put("big.st", header.bytes, rest));
  EXPECT_TRUE(data.big_endian);
  EXPECT_EQ(data.nx, 3);
  EXPECT_EQ(data.ny, 2);
  EXPECT_EQ(data.nz, 1);
  EXPECT_EQ(data.ispg, 0);
  EXPECT_DOUBLE_EQ(data.voxel_size[0], 4.0);
  EXPECT_EQ(data.values, (std::vector<float>{-300, -1, 0, 1, 2, 32767}));
}

TEST_F(MrcTest, ReadsInt8Uint16AndFloat16) {
  {
    HeaderBuilder header(4, 1, 1, 0, false);
    const MrcData data = read_mrc(put("i8.mrc", header.bytes, {0x80, 0xff, 0x00, 0x7f}));
    EXPECT_EQ(data.values, (std::vector<float>{-128, -1, 0, 127}));
  }
  {
    HeaderBuilder header(2, 1, 1, 6, false);
    const MrcData data = read_mrc(put("u16.mrc", header.bytes, {0xff, 0xff, 0x02, 0x01}));
    EXPECT_EQ(data.values, (std::vector<float>{65535, 258}));
  }
  {
    HeaderBuilder header(3, 1, 1, 12, false);
    // binary16: 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800.
    const MrcData data =
        read_mrc(put("f16.mrc", header.bytes, {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38}));
    EXPECT_EQ(data.values, (std::vector<float>{1.0f, -2.0f, 0.5f}));
  }
}

TEST_F(MrcTest, MachineStampUnsetFallsBackToTheOrderOfAValidMode) {
  HeaderBuilder header(1, 1, 1, 2, /*big=*/true);
  header.bytes[212] = header.bytes[213] = 0;
  const std::vector<std::uint8_t> value = {0x3f, 0x80, 0x00, 0x00};  // 1.0f big-endian
  const MrcData data = read_mrc(put("old.mrc", header.bytes, value));
  EXPECT_TRUE(data.big_endian);
  EXPECT_EQ(data.values, (std::vector<float>{1.0f}));
}

TEST_F(MrcTest, TrailingBytesAfterTheDataAreIgnored) {
  HeaderBuilder header(1, 1, 1, 0, false);
  EXPECT_EQ(read_mrc(put("pad.mrc", header.bytes, {0x05, 0x00, 0x00})).values,
            (std::vector<float>{5.0f}));
}

TEST_F(MrcTest, UnsupportedModesAreRefusedByName) {
  HeaderBuilder complex(2, 2, 1, 4, false);
  EXPECT_NE(error_of(put("c.mrc", complex.bytes, std::vector<std::uint8_t>(32)))
                .find("MRC mode 4 (complex float32) is not supported"),
            std::string::npos);
  HeaderBuilder other(2, 2, 1, 3, false);
  EXPECT_NE(error_of(put("c3.mrc", other.bytes, std::vector<std::uint8_t>(16))).find("mode 3"),
            std::string::npos);
  HeaderBuilder nonsense(2, 2, 1, 77, false);
  EXPECT_NE(error_of(put("m77.mrc", nonsense.bytes, {})).find("MRC mode 77 is not supported"),
            std::string::npos);
}

TEST_F(MrcTest, TruncatedAndMalformedFilesAreInputErrors) {
  HeaderBuilder header(4, 4, 2, 2, false);
  const std::string truncated = put("t.mrc", header.bytes, std::vector<std::uint8_t>(100));
  EXPECT_NE(error_of(truncated).find("is truncated: its header describes 4 x 4 x 2 float32"),
            std::string::npos)
      << error_of(truncated);
  const std::string short_header =
      put("h.mrc", std::vector<std::uint8_t>(header.bytes.begin(), header.bytes.begin() + 500), {});
  EXPECT_NE(error_of(short_header).find("less than the 1024-byte MRC header"), std::string::npos);
  HeaderBuilder extended(1, 1, 1, 2, false);
  extended.i32(92, 1 << 20);
  EXPECT_NE(error_of(put("e.mrc", extended.bytes, std::vector<std::uint8_t>(4)))
                .find("announces 1048576 bytes of extended header"),
            std::string::npos);
  HeaderBuilder negative(-3, 1, 1, 2, false);
  EXPECT_NE(error_of(put("n.mrc", negative.bytes, {})).find("negative sizes"), std::string::npos);
  HeaderBuilder huge(2000000000, 2000000000, 2000000000, 2, false);  // 2^93 bytes: no overflow
  EXPECT_NE(error_of(put("huge.mrc", huge.bytes, {})).find("is truncated"), std::string::npos);
  HeaderBuilder garbage(1, 1, 1, 0x12345, false);
  garbage.bytes[212] = garbage.bytes[213] = 0;
  EXPECT_NE(error_of(put("g.mrc", garbage.bytes, {})).find("is not an MRC file"),
            std::string::npos);
  EXPECT_NE(error_of(dir_.string()).find("it is a directory"), std::string::npos);
  EXPECT_NE(error_of((dir_ / "missing.mrc").string()).find("cannot open"), std::string::npos);
}

TEST_F(MrcTest, KnowsTheMrcExtensions) {
  for (const char* e : {".mrc", ".st", ".ali", ".rec", ".map"}) EXPECT_TRUE(is_mrc_extension(e));
  EXPECT_FALSE(is_mrc_extension(".npy"));
  EXPECT_FALSE(is_mrc_extension(".tif"));
}

}  // namespace
}  // namespace fieldfuse::cli
