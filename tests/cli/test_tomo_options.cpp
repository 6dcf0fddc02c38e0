// SPDX-License-Identifier: Apache-2.0
// Tests of `fieldfuse tomo` flag parsing and its report: defaults, the checks across flags, and a
// report that is valid JSON with the residuals and scores where readers look for them.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_error.h"
#include "tomo_options.h"
#include "tomo_report.h"

namespace fieldfuse::cli {
namespace {

std::string usage_error_of(const std::vector<std::string>& args) {
  try {
    parse_tomo_options(args);
  } catch (const CliError& error) {
    EXPECT_EQ(error.exit_code(), 2) << error.what();
    return error.what();
  }
  return "no error";
}

TEST(TomoOptions, TheEmbeddedRunComparesEveryMethodOnItsDefaultTilts) {
  const TomoOptions options = parse_tomo_options({});
  EXPECT_TRUE(options.input.empty());
  EXPECT_EQ(options.methods, tomo_methods());
  EXPECT_EQ(options.angles, "-60:60:3");
  EXPECT_EQ(options.tilt_axis, 'y');
  EXPECT_EQ(options.iterations, 50);
  EXPECT_DOUBLE_EQ(options.relaxation, 1.0);
  EXPECT_FALSE(options.positivity);
  EXPECT_EQ(options.filter, "hann");
  EXPECT_EQ(options.phantom_size, 64);
  EXPECT_EQ(options.volume_shape[0], 0);
}

TEST(TomoOptions, AFileRunDefaultsToSirtAndTakesEveryValue) {
  const TomoOptions options =
      parse_tomo_options({"--input", "a.st", "--tlt", "a.tlt", "--tilt-axis=x", "--iterations", "7",
                          "--relaxation", "0.5", "--positivity", "--volume-shape", "32,64,48",
                          "--thickness", "20", "--device", "cpu", "--output", "v.rec"});
  EXPECT_EQ(options.methods, std::vector<TomoMethod>{TomoMethod::Sirt});
  EXPECT_EQ(options.tilt_axis, 'x');
  EXPECT_EQ(options.iterations, 7);
  EXPECT_DOUBLE_EQ(options.relaxation, 0.5);
  EXPECT_TRUE(options.positivity);
  EXPECT_EQ(options.volume_shape, (std::array<std::int64_t, 3>{32, 64, 48}));
  EXPECT_EQ(options.thickness, 20);
  EXPECT_EQ(options.device, DeviceChoice::Cpu);
  EXPECT_EQ(options.output, "v.rec");
  EXPECT_EQ(parse_tomo_options({"--method", "fbp"}).methods,
            std::vector<TomoMethod>{TomoMethod::Fbp});
}

TEST(TomoOptions, InconsistentFlagsAreUsageErrorsNamingTheFlag) {
  EXPECT_NE(usage_error_of({"--input", "a.st", "--tlt", "a.tlt", "--angles", "0:1:1"})
                .find("--tlt or --angles, not both"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--input", "a.st"}).find("--input needs its tilt angles"),
            std::string::npos);
  for (const char* flag : {"--tlt", "--truth", "--output", "--tilt-axis"}) {
    const std::string value = std::string(flag) == "--tilt-axis" ? "x" : "a.mrc";
    EXPECT_NE(usage_error_of({flag, value}).find(std::string(flag) + " needs --input"),
              std::string::npos)
        << flag;
  }
  for (const char* flag : {"--phantom-size", "--noise", "--seed", "--output-dir"}) {
    const std::string value = std::string(flag) == "--output-dir" ? "d" : "8";
    EXPECT_NE(usage_error_of({"--input", "a.st", "--angles", "0:0:1", flag, value})
                  .find(std::string(flag) + " applies only to the embedded phantom"),
              std::string::npos)
        << flag;
  }
  EXPECT_NE(usage_error_of({"--iterations", "0"}).find("--iterations must be between 1"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--relaxation", "0"}).find("--relaxation must be > 0"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--volume-shape", "4,0,4"}).find("--volume-shape must be between 1"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--volume-shape", "4,4,4,4"}).find("--volume-shape expects D,H,W"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--tilt-axis", "z"}).find("--tilt-axis must be one of x, y"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--phantom-size", "4"}).find("--phantom-size must be between 8"),
            std::string::npos);
}

TEST(TomoReport, HoldsResidualsScoresAndStaysValidJson) {
  TomoOptions options = parse_tomo_options({"--input", "tilt\xff.st", "--angles", "-3:3:3"});
  MethodResult result;
  result.iterations = {{1, 1.0, 0.01}, {2, 0.5, 0.01}};
  result.seconds = 0.02;
  TomoRecord record;
  record.options = &options;
  record.stack_shape = {3, 8, 8};
  record.angles = {-3.0, 0.0, 3.0};
  record.input_format = "mrc";
  record.normalisation = 4.0;
  record.volume_shape = {8, 8, 8};
  record.device = "cpu (2 threads)";
  TomoMethodRecord method;
  method.result = &result;
  method.scored = true;
  method.scores.psnr = std::numeric_limits<double>::infinity();
  method.scores.axis_error = {0.5, 0.1, 0.2};
  record.methods = {method};
  const std::string text = tomo_report_json(record);
  nlohmann::json report;
  ASSERT_NO_THROW(report = nlohmann::json::parse(text)) << text;
  EXPECT_EQ(report["command"], "tomo");
  EXPECT_EQ(report["input"]["path"], "tilt\xEF\xBF\xBD.st");
  EXPECT_EQ(report["input"]["normalisation_divisor"], 4.0);
  EXPECT_EQ(report["methods"][0]["method"], "sirt");
  EXPECT_EQ(report["methods"][0]["relative_residual"], nlohmann::json({1.0, 0.5}));
  EXPECT_TRUE(report["methods"][0]["metrics"]["psnr_db"].is_null());
  EXPECT_EQ(report["methods"][0]["metrics"]["profile_error"]["z"], 0.5);
  EXPECT_TRUE(report["plain_backprojection"].is_null());
  EXPECT_TRUE(report["data_range"].is_null());
}

}  // namespace
}  // namespace fieldfuse::cli
