// SPDX-License-Identifier: Apache-2.0
// Tests of the tilt-angle sources: IMOD .tlt files, start:stop:step ranges and the count check.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_error.h"
#include "tilt_angles.h"

namespace fieldfuse::cli {
namespace {

namespace fs = std::filesystem;

std::string write_text(const std::string& name, const std::string& text) {
  const fs::path file =
      fs::temp_directory_path() / ("fieldfuse_tlt_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(file, std::ios::binary) << text;
  return file.string();
}

template <class F>
std::string message_of(F&& call, ErrorKind kind) {
  try {
    call();
  } catch (const CliError& error) {
    EXPECT_EQ(error.kind(), kind);
    return error.what();
  }
  return "no error";
}

TEST(TiltAngles, ReadsOneAnglePerLineSkippingBlankLines) {
  const std::string file = write_text("ok.tlt", "  -60.00\n-57.5\n\n   \n0\r\n3e1\n60");
  EXPECT_EQ(read_tilt_file(file, "--tlt"), (std::vector<double>{-60.0, -57.5, 0.0, 30.0, 60.0}));
  fs::remove(file);
}

TEST(TiltAngles, ABadLineNamesTheFileAndTheLine) {
  const std::string file = write_text("bad.rawtlt", "-3\n\n0 1\n3\n");
  const std::string message = message_of([&] { read_tilt_file(file, "--tlt"); }, ErrorKind::Input);
  EXPECT_NE(message.find("--tlt '" + file + "', line 3: expected one angle in degrees, got '0 1'"),
            std::string::npos)
      << message;
  fs::remove(file);
  const std::string nan_file = write_text("nan.tlt", "1\nnan\n");
  EXPECT_NE(message_of([&] { read_tilt_file(nan_file, "--tlt"); }, ErrorKind::Input).find("line 2"),
            std::string::npos);
  fs::remove(nan_file);
}

TEST(TiltAngles, EmptyOrMissingFilesAreInputErrors) {
  const std::string file = write_text("empty.tlt", "\n  \n");
  EXPECT_NE(
      message_of([&] { read_tilt_file(file, "--tlt"); }, ErrorKind::Input).find("holds no angle"),
      std::string::npos);
  fs::remove(file);
  EXPECT_NE(message_of([] { read_tilt_file("/nonexistent/a.tlt", "--tlt"); }, ErrorKind::Input)
                .find("--tlt: cannot open '/nonexistent/a.tlt'"),
            std::string::npos);
}

TEST(TiltAngles, RangesIncludeStopWhenItLandsOnTheGrid) {
  const std::vector<double> imod = parse_angle_range("-60:60:3", "--angles");
  ASSERT_EQ(imod.size(), 41u);
  EXPECT_DOUBLE_EQ(imod.front(), -60.0);
  EXPECT_DOUBLE_EQ(imod[20], 0.0);
  EXPECT_DOUBLE_EQ(imod.back(), 60.0);
  EXPECT_EQ(parse_angle_range("-60:60:7", "--angles").size(), 18u);    // -60 .. 59, 60 not on grid
  EXPECT_EQ(parse_angle_range("0.1:0.7:0.1", "--angles").size(), 7u);  // 6 steps despite rounding
  EXPECT_EQ(parse_angle_range("60:-60:-2", "--angles").size(), 61u);
  EXPECT_EQ(parse_angle_range("5:5:1", "--angles"), (std::vector<double>{5.0}));
}

TEST(TiltAngles, BadRangesAreUsageErrorsNamingTheFlag) {
  for (const char* text : {"-60:60", "a:b:c", "-60:60:0", "-60:60:-3", "1:2:3:4", "-60:60:1e-9"}) {
    const std::string message =
        message_of([&] { parse_angle_range(text, "--angles"); }, ErrorKind::Usage);
    EXPECT_EQ(message.rfind("--angles", 0), 0u) << text << ": " << message;
  }
}

TEST(TiltAngles, CountMismatchNamesBothNumbers) {
  EXPECT_NO_THROW(check_angle_count(41, 41, "--angles", "the stack"));
  const std::string message = message_of(
      [] { check_angle_count(41, 40, "--tlt 'a.tlt'", "--input 'a.st'"); }, ErrorKind::Input);
  EXPECT_EQ(message,
            "--tlt 'a.tlt' gives 41 angles, but --input 'a.st' holds 40 projections (one angle "
            "per projection)");
}

}  // namespace
}  // namespace fieldfuse::cli
