// SPDX-License-Identifier: Apache-2.0
// Tests of the TIFF reader against files written by libtiff's own tools (make_tiff_inputs.sh):
// every sample type, compression, tiles, BigTIFF, both byte orders, and files it must refuse.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_error.h"
#include "tiff.h"
#include "tiff_fixture_values.h"

namespace fieldfuse::cli {
namespace {

using testing::kTiffHeight;
using testing::kTiffPages;
using testing::kTiffWidth;
using testing::TiffSampleType;

std::string input(const std::string& name) {
  return std::string(FIELDFUSE_CLI_INPUTS) + "/" + name;
}

const TiffSampleType& sample_type(const std::string& raw2tiff_name) {
  for (const TiffSampleType& type : testing::tiff_sample_types()) {
    if (raw2tiff_name == type.raw2tiff_name) return type;
  }
  throw std::logic_error("no sample type " + raw2tiff_name);
}

void expect_ramp(const std::string& file, const std::string& type_name) {
  SCOPED_TRACE(file);
  const TiffStack stack = read_tiff(input(file));
  ASSERT_EQ(stack.pages, kTiffPages);
  ASSERT_EQ(stack.height, kTiffHeight);
  ASSERT_EQ(stack.width, kTiffWidth);
  const TiffSampleType& type = sample_type(type_name);
  ASSERT_EQ(stack.values.size(), static_cast<std::size_t>(kTiffPages * kTiffHeight * kTiffWidth));
  for (std::size_t i = 0; i < stack.values.size(); ++i) {
    ASSERT_EQ(stack.values[i],
              static_cast<float>(testing::tiff_fixture_value(type, static_cast<std::int64_t>(i))))
        << "sample " << i;
  }
}

std::string error_of(const std::string& path) {
  try {
    read_tiff(path);
  } catch (const CliError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Input) << error.what();
    return error.what();
  }
  return "no error";
}

class TiffSampleTypes : public ::testing::TestWithParam<std::string> {};

TEST_P(TiffSampleTypes, UncompressedStackReadsBackExactly) {
  expect_ramp("ramp_" + GetParam() + ".tif", GetParam());
}

INSTANTIATE_TEST_SUITE_P(Raw2tiffTypes, TiffSampleTypes,
                         ::testing::Values("byte", "sbyte", "short", "sshort", "long", "slong",
                                           "float", "double"));

struct Variant {
  const char* file;
  const char* type;
};

class TiffVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(TiffVariants, ReadBackExactly) { expect_ramp(GetParam().file, GetParam().type); }

INSTANTIATE_TEST_SUITE_P(
    CompressionTilesBigTiffByteOrder, TiffVariants,
    ::testing::Values(Variant{"ramp_short_lzw.tif", "short"},
                      Variant{"ramp_short_zip_predictor.tif", "short"},
                      Variant{"ramp_short_packbits.tif", "short"},
                      Variant{"ramp_short_tiled.tif", "short"},
                      Variant{"ramp_short_bigtiff.tif", "short"},
                      Variant{"ramp_short_strips_of_3_rows.tif", "short"},
                      Variant{"ramp_short_bigendian_tiled_lzw_bigtiff.tif", "short"},
                      Variant{"ramp_sshort_bigendian_zip.tif", "sshort"},
                      Variant{"ramp_float_lzw_float_predictor.tif", "float"},
                      Variant{"ramp_double_bigendian_tiled_zip.tif", "double"}));

TEST(Tiff, MultiChannelAndMismatchedPagesAreRefusedWithTheReason) {
  EXPECT_NE(error_of(input("rgb.tif")).find("3 samples per pixel"), std::string::npos);
  const std::string mismatch = error_of(input("mismatched_pages.tif"));
  EXPECT_NE(mismatch.find("page 2 is 21x37"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("all pages of a stack must match"), std::string::npos) << mismatch;
}

// A few kilobytes claiming 60000 x 60000 float pages (14 GB) must be refused from the tags alone,
// before any pixel buffer is allocated: quickly, and naming what does not add up.
TEST(Tiff, ClaimsBeyondTheFileAreRefusedBeforeAllocating) {
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of(input("huge_claims.tif"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_TRUE(message.find("claims") != std::string::npos ||
              message.find("truncated") != std::string::npos)
      << message;
}

TEST(Tiff, NonTiffContentAndNonRegularFilesAreInputErrors) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fieldfuse_tiff_test";
  std::filesystem::create_directories(dir);
  const std::string gif = (dir / "gif.tif").string();
  std::FILE* file = std::fopen(gif.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  std::fputs("GIF89a, not a TIFF at all", file);
  std::fclose(file);
  EXPECT_NE(error_of(gif).find("is not a TIFF file"), std::string::npos);
  EXPECT_NE(error_of(dir.string()).find("a directory"), std::string::npos);
  EXPECT_NE(error_of("/dev/zero").find("a character device"), std::string::npos);
  EXPECT_NE(error_of((dir / "missing.tif").string()).find("No such file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fieldfuse::cli
