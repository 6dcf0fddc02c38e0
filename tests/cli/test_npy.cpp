// SPDX-License-Identifier: Apache-2.0
// Tests of the .npy reader and writer: round trips, dtypes, Fortran order and malformed files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "cli_error.h"
#include "npy.h"
#include "raw_samples.h"

namespace fieldfuse::cli {
namespace {

// A .npy file with the given header dict and raw little-endian data, padded like numpy's.
std::vector<std::uint8_t> make_npy(const std::string& dict, const std::vector<std::uint8_t>& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += {'\x01', '\x00', static_cast<char>(header.size() & 0xff),
           static_cast<char>(header.size() >> 8)};
  file += header;
  file.append(data.begin(), data.end());
  return std::vector<std::uint8_t>(file.begin(), file.end());
}

template <class T>
std::vector<std::uint8_t> raw_bytes(const std::vector<T>& values) {
  std::vector<std::uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());  // the test hosts are little-endian
  return bytes;
}

std::string error_of(const std::vector<std::uint8_t>& bytes) {
  try {
    parse_npy(bytes, "test.npy");
  } catch (const CliError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Input);
    return error.what();
  }
  return "no error";
}

TEST(Npy, Float32RoundTripKeepsShapeAndBits) {
  const std::vector<std::int64_t> shape = {2, 3, 5};
  std::vector<float> values(30);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * static_cast<float>(i) - 1.0f;
  values[7] = -0.0f;
  const NpyArray back = parse_npy(encode_npy_float32(shape, values.data()), "mem");
  EXPECT_EQ(back.shape, shape);
  ASSERT_EQ(back.values.size(), values.size());
  EXPECT_EQ(0, std::memcmp(back.values.data(), values.data(), values.size() * sizeof(float)));
}

TEST(Npy, WrittenHeaderIsAlignedAndParsesForOneAndZeroDims) {
  const float value = 3.5f;
  const std::vector<std::uint8_t> one_d = encode_npy_float32({1}, &value);
  EXPECT_EQ((one_d.size() - sizeof(float)) % 64, 0u);  // numpy's 64-byte data alignment
  EXPECT_NE(std::string(one_d.begin(), one_d.end()).find("'shape': (1,)"), std::string::npos);
  EXPECT_EQ(parse_npy(one_d, "mem").values, std::vector<float>{3.5f});
  const NpyArray scalar = parse_npy(encode_npy_float32({}, &value), "mem");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.values, std::vector<float>{3.5f});
}

TEST(Npy, ReadsEveryIntegerAndFloatDtype) {
  const std::string shape = "'fortran_order': False, 'shape': (3,), }";
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '<f8', " + shape, raw_bytes<double>({1.5, -2.25, 1e10})), "m")
          .values,
      (std::vector<float>{1.5f, -2.25f, 1e10f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '|u1', " + shape, raw_bytes<std::uint8_t>({0, 128, 255})), "m")
          .values,
      (std::vector<float>{0.0f, 128.0f, 255.0f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '|i1', " + shape, raw_bytes<std::int8_t>({-128, -1, 127})), "m")
          .values,
      (std::vector<float>{-128.0f, -1.0f, 127.0f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '<i2', " + shape, raw_bytes<std::int16_t>({-32768, -5, 300})),
                "m")
          .values,
      (std::vector<float>{-32768.0f, -5.0f, 300.0f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '<u2', " + shape, raw_bytes<std::uint16_t>({0, 40000, 65535})),
                "m")
          .values,
      (std::vector<float>{0.0f, 40000.0f, 65535.0f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '<i4', " + shape, raw_bytes<std::int32_t>({-70000, 0, 70000})),
                "m")
          .values,
      (std::vector<float>{-70000.0f, 0.0f, 70000.0f}));
  EXPECT_EQ(
      parse_npy(
          make_npy("{'descr': '<u4', " + shape, raw_bytes<std::uint32_t>({1, 2, 4000000000u})), "m")
          .values,
      (std::vector<float>{1.0f, 2.0f, 4e9f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '<i8', " + shape, raw_bytes<std::int64_t>({-3, 0, 1LL << 40})),
                "m")
          .values,
      (std::vector<float>{-3.0f, 0.0f, 1099511627776.0f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '<u8', " + shape, raw_bytes<std::uint64_t>({7, 8, 9})), "m")
          .values,
      (std::vector<float>{7.0f, 8.0f, 9.0f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '|b1', " + shape, raw_bytes<std::uint8_t>({1, 0, 1})), "m")
          .values,
      (std::vector<float>{1.0f, 0.0f, 1.0f}));
}

TEST(Npy, FortranOrderIsReturnedInCOrder) {
  // A 2x3x2 array a[i][j][k] = 100i + 10j + k, stored with i fastest.
  std::vector<float> fortran;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) fortran.push_back(static_cast<float>(100 * i + 10 * j + k));
  const NpyArray array = parse_npy(
      make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 2), }", raw_bytes(fortran)),
      "m");
  ASSERT_EQ(array.values.size(), 12u);
  std::size_t c = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k)
        EXPECT_EQ(array.values[c++], static_cast<float>(100 * i + 10 * j + k));
}

TEST(Npy, VersionTwoHeadersParse) {
  std::vector<std::uint8_t> bytes = make_npy(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw_bytes<float>({1.0f, 2.0f}));
  // Version 2 widens the header length to 4 bytes.
  bytes[6] = 2;
  bytes.insert(bytes.begin() + 10, {0, 0});
  EXPECT_EQ(parse_npy(bytes, "m").values, (std::vector<float>{1.0f, 2.0f}));
}

TEST(Npy, MalformedFilesAreInputErrorsThatSayWhy) {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  EXPECT_NE(error_of({'n', 'o', 't', ' ', 'n', 'p', 'y', '!', 0, 0, 0}).find("not a .npy file"),
            std::string::npos);
  EXPECT_NE(error_of(make_npy(good_dict, raw_bytes<float>({1.0f, 2.0f}))).find("truncated"),
            std::string::npos);
  const std::string complex_error = error_of(make_npy(
      "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", raw_bytes<double>({1.0})));
  EXPECT_NE(complex_error.find("'<c8'"), std::string::npos);
  EXPECT_NE(complex_error.find("complex values"), std::string::npos) << complex_error;
  EXPECT_NE(complex_error.find("np.abs(a)"), std::string::npos) << complex_error;
  EXPECT_NE(error_of(make_npy("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }",
                              std::vector<std::uint8_t>(16)))
                .find("extended-precision"),
            std::string::npos);
  EXPECT_NE(error_of(make_npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", {}))
                .find("not supported"),
            std::string::npos);
  EXPECT_NE(error_of(make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                              raw_bytes<float>({1.0f})))
                .find("structured"),
            std::string::npos);
  EXPECT_NE(error_of(make_npy("{'descr': '<f4', 'shape': (1,), }", raw_bytes<float>({1.0f})))
                .find("fortran_order"),
            std::string::npos);
  std::vector<std::uint8_t> cut = make_npy(good_dict, raw_bytes<float>({1, 2, 3, 4}));
  cut.resize(20);  // inside the header
  EXPECT_NE(error_of(cut).find("truncated inside its header"), std::string::npos);
}

// Big-endian files as numpy writes them with dtype '>f4' etc.: the bytes of each value reversed.
template <class T>
std::vector<std::uint8_t> big_endian_bytes(const std::vector<T>& values) {
  std::vector<std::uint8_t> bytes = raw_bytes(values);
  for (std::size_t i = 0; i < bytes.size(); i += sizeof(T))
    std::reverse(bytes.begin() + i, bytes.begin() + i + sizeof(T));
  return bytes;
}

TEST(Npy, ReadsBigEndianDtypes) {
  const std::string shape = "'fortran_order': False, 'shape': (3,), }";
  EXPECT_EQ(
      parse_npy(
          make_npy("{'descr': '>f4', " + shape, big_endian_bytes<float>({1.5f, -2.0f, 3e30f})), "m")
          .values,
      (std::vector<float>{1.5f, -2.0f, 3e30f}));
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '>f8', " + shape, big_endian_bytes<double>({0.25, -1e10, 7.0})),
                "m")
          .values,
      (std::vector<float>{0.25f, -1e10f, 7.0f}));
  EXPECT_EQ(parse_npy(make_npy("{'descr': '>i2', " + shape,
                               big_endian_bytes<std::int16_t>({-300, 0, 32767})),
                      "m")
                .values,
            (std::vector<float>{-300.0f, 0.0f, 32767.0f}));
  EXPECT_EQ(parse_npy(make_npy("{'descr': '>u4', " + shape,
                               big_endian_bytes<std::uint32_t>({1, 65536, 4000000000u})),
                      "m")
                .values,
            (std::vector<float>{1.0f, 65536.0f, 4e9f}));
}

TEST(Npy, ReadsFloat16IncludingSubnormalsInfinitiesAndNegativeZero) {
  // binary16 bit patterns and their exact values.
  const std::vector<std::uint16_t> bits = {0x3c00, 0xc000, 0x7bff, 0x0001,
                                           0x03ff, 0x8000, 0x7c00, 0x3555};
  const std::vector<float> expected = {1.0f,
                                       -2.0f,
                                       65504.0f,
                                       5.9604645e-8f,
                                       6.0975552e-5f,
                                       -0.0f,
                                       std::numeric_limits<float>::infinity(),
                                       0.33325195f};
  const NpyArray array = parse_npy(
      make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (8,), }", raw_bytes(bits)), "m");
  ASSERT_EQ(array.values.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(array.values[i], expected[i]) << i;
    EXPECT_EQ(std::signbit(array.values[i]), std::signbit(expected[i])) << i;
  }
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  // Big-endian float16 too.
  EXPECT_EQ(
      parse_npy(make_npy("{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }", {0x3c, 0x00}),
                "m")
          .values,
      std::vector<float>{1.0f});
}

TEST(Npy, FortranOrderBigEndianFloat16Together) {
  // a[i][j] = 3i + j for a 2x3 array, stored column by column (0, 3, 1, 4, 2, 5) as big-endian
  // float16.
  const std::vector<std::uint8_t> data = {0x00, 0x00, 0x42, 0x00, 0x3c, 0x00,
                                          0x44, 0x00, 0x40, 0x00, 0x45, 0x00};
  const NpyArray array =
      parse_npy(make_npy("{'descr': '>f2', 'fortran_order': True, 'shape': (2, 3), }", data), "m");
  EXPECT_EQ(array.values, (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST(Npy, SizeMustMatchTheHeader) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  std::vector<std::uint8_t> longer = make_npy(dict, raw_bytes<float>({1.0f, 2.0f, 3.0f}));
  EXPECT_NE(error_of(longer).find("4 bytes after the data its header describes"),
            std::string::npos);
  // A header length field of 4 GiB - 1 in a version 2 file is refused, not allocated.
  std::vector<std::uint8_t> huge_header = {0x93, 'N', 'U',  'M',  'P',  'Y',
                                           2,    0,   0xff, 0xff, 0xff, 0xff};
  huge_header.resize(64, ' ');
  EXPECT_NE(error_of(huge_header).find("header"), std::string::npos);
}

// Reading checks the file before its content: a device, a directory or a pipe named .npy is
// refused at once, never read until memory runs out (or forever).
TEST(Npy, NonRegularFilesAreRefusedUnread) {
  const auto message_of = [](const std::string& path) -> std::string {
    try {
      read_npy(path);
    } catch (const CliError& error) {
      EXPECT_EQ(error.exit_code(), 3);
      return error.what();
    }
    return "no error";
  };
  EXPECT_NE(message_of("/dev/zero").find("is a character device, not a regular file"),
            std::string::npos);
  EXPECT_NE(message_of("/").find("is a directory"), std::string::npos);
  const std::filesystem::path fifo =
      std::filesystem::temp_directory_path() / ("fieldfuse_npy_fifo_" + std::to_string(::getpid()));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(message_of(fifo.string()).find("is a pipe"), std::string::npos);
  std::filesystem::remove(fifo);
}

TEST(Npy, MissingFileIsAnInputErrorNamingThePath) {
  try {
    read_npy("/nonexistent/dir/volume.npy");
    FAIL() << "expected an error";
  } catch (const CliError& error) {
    EXPECT_EQ(error.exit_code(), 3);
    EXPECT_NE(std::string(error.what()).find("/nonexistent/dir/volume.npy"), std::string::npos);
  }
}

}  // namespace
}  // namespace fieldfuse::cli
