// SPDX-License-Identifier: Apache-2.0
// Tests of the baseline TIFF reader against files written by the test's own tiny TIFF writer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_error.h"
#include "tiff.h"
#include "tiff_test_writer.h"

namespace fieldfuse::cli {
namespace {

using testing::TestTiffLayout;
using testing::TestTiffWriter;

std::vector<double> ramp(std::size_t count, double start, double step) {
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = start + step * static_cast<double>(i);
  return values;
}

std::vector<float> as_floats(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

std::string error_of(const TestTiffLayout& layout, const std::vector<double>& values) {
  try {
    parse_tiff(TestTiffWriter(layout).write(values), "test.tif");
  } catch (const CliError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Input);
    return error.what();
  }
  return "no error";
}

struct SampleCase {
  bool big_endian;
  std::uint16_t bits;
  std::uint16_t sample_format;
  double start;
  double step;
};

class TiffSamples : public ::testing::TestWithParam<SampleCase> {};

TEST_P(TiffSamples, MultiPageStackReadsBackExactly) {
  const SampleCase c = GetParam();
  TestTiffLayout layout;
  layout.big_endian = c.big_endian;
  layout.bits_per_sample = c.bits;
  layout.sample_format = c.sample_format;
  layout.width = 5;
  layout.height = 4;
  layout.pages = 3;
  const std::vector<double> values = ramp(60, c.start, c.step);
  const TiffStack stack = parse_tiff(TestTiffWriter(layout).write(values), "mem.tif");
  EXPECT_EQ(stack.pages, 3);
  EXPECT_EQ(stack.height, 4);
  EXPECT_EQ(stack.width, 5);
  EXPECT_EQ(stack.values, as_floats(values));
}

INSTANTIATE_TEST_SUITE_P(
    ByteOrderAndSampleType, TiffSamples,
    ::testing::Values(SampleCase{false, 8, 1, 0, 4}, SampleCase{true, 8, 1, 10, 3},
                      SampleCase{false, 16, 1, 0, 1000}, SampleCase{true, 16, 1, 60000, 7},
                      SampleCase{false, 16, 2, -30000, 1000}, SampleCase{true, 16, 2, -7, 1},
                      SampleCase{false, 32, 1, 3e9, 12345}, SampleCase{true, 32, 2, -2e9, 6.5e7},
                      SampleCase{false, 8, 2, -100, 3}, SampleCase{false, 32, 3, -1.5, 0.25},
                      SampleCase{true, 32, 3, 100, -3.125}, SampleCase{false, 64, 3, -1e5, 0.5},
                      SampleCase{true, 64, 3, 2.5, 1e3}));

TEST(Tiff, SeveralStripsPerPageAreJoinedInOrder) {
  TestTiffLayout layout;
  layout.width = 3;
  layout.height = 7;
  layout.pages = 2;
  layout.rows_per_strip = 2;  // strips of 2, 2, 2 and 1 rows
  layout.bits_per_sample = 16;
  const std::vector<double> values = ramp(42, 1, 1);
  EXPECT_EQ(parse_tiff(TestTiffWriter(layout).write(values), "m").values, as_floats(values));
}

TEST(Tiff, UnsupportedFeaturesAreNamed) {
  TestTiffLayout compressed;
  compressed.compression = 5;  // LZW
  EXPECT_NE(error_of(compressed, ramp(24, 0, 1)).find("compressed"), std::string::npos);

  TestTiffLayout rgb;
  rgb.samples_per_pixel = 3;
  EXPECT_NE(error_of(rgb, ramp(72, 0, 1)).find("3 samples per pixel"), std::string::npos);

  TestTiffLayout twelve_bit;
  twelve_bit.bits_per_sample = 24;
  EXPECT_NE(error_of(twelve_bit, ramp(24, 0, 1)).find("24-bit"), std::string::npos);

  TestTiffLayout half_float;
  half_float.bits_per_sample = 16;
  half_float.sample_format = 3;
  EXPECT_NE(error_of(half_float, ramp(24, 0, 1)).find("16-bit"), std::string::npos);

  TestTiffLayout big;
  big.big_tiff_magic = true;
  EXPECT_NE(error_of(big, ramp(24, 0, 1)).find("BigTIFF"), std::string::npos);
}

TEST(Tiff, DamagedFilesAreInputErrors) {
  TestTiffLayout layout;
  std::vector<std::uint8_t> bytes = TestTiffWriter(layout).write(ramp(24, 0, 1));
  std::vector<std::uint8_t> cut(bytes.begin(),
                                bytes.begin() + 20);  // IFD offset points past the end
  try {
    parse_tiff(cut, "cut.tif");
    FAIL() << "expected an error";
  } catch (const CliError& error) {
    EXPECT_NE(std::string(error.what()).find("truncated"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("cut.tif"), std::string::npos);
  }
  EXPECT_THROW(parse_tiff({'G', 'I', 'F', '8', '9', 'a', 0, 0}, "x.tif"), CliError);
  EXPECT_THROW(parse_tiff({}, "empty.tif"), CliError);

  // A chain of directories that points back at itself must not loop forever.
  layout.pages = 1;
  bytes = TestTiffWriter(layout).write(ramp(12, 0, 1));
  const std::size_t next_slot = bytes.size() - 4;
  const std::uint8_t first_ifd[4] = {bytes[4], bytes[5], bytes[6], bytes[7]};
  std::copy(first_ifd, first_ifd + 4, bytes.begin() + static_cast<std::ptrdiff_t>(next_slot));
  try {
    parse_tiff(bytes, "loop.tif");
    FAIL() << "expected an error";
  } catch (const CliError& error) {
    EXPECT_NE(std::string(error.what()).find("loop"), std::string::npos) << error.what();
  }
}

TEST(Tiff, PagesOfDifferentSizesAreRejected) {
  TestTiffLayout layout;
  layout.width = 4;
  layout.height = 3;
  layout.pages = 2;
  layout.last_page_width = 6;
  const std::string message = error_of(layout, ramp(12 + 18, 0, 1));
  EXPECT_NE(message.find("page 2 is 6x3"), std::string::npos) << message;
  EXPECT_NE(message.find("all pages of a stack must match"), std::string::npos) << message;
}

}  // namespace
}  // namespace fieldfuse::cli
