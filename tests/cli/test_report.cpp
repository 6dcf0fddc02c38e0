// SPDX-License-Identifier: Apache-2.0
// Tests that the JSON report is valid JSON for any path and any number.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "denoise_report.h"

namespace fieldfuse::cli {
namespace {

// A path with byte 0xFF (not UTF-8) once went into the report verbatim: invalid JSON.
TEST(DenoiseReport, IsValidJsonForNonUtf8PathsAndNonFiniteNumbers) {
  DenoiseOptions options;
  options.input = "scan\xff.npy";
  options.output = "out\xff";
  options.lambda = 0.05;
  SolverOutcome outcome;
  outcome.method = "FISTA with adaptive restart";
  outcome.gap = std::numeric_limits<double>::quiet_NaN();
  outcome.step_size = 0.001;
  Metrics metrics;
  metrics.psnr_denoised = std::numeric_limits<double>::infinity();
  DenoiseRecord record;
  record.options = &options;
  record.shape = {1, 2, 3};
  record.device = "cpu (2 threads)";
  record.outcome = &outcome;
  record.metrics = &metrics;
  record.outputs = {"out\xff.npy", "out\xff.png", "out\xff.json"};

  const std::string text = denoise_report_json(record);
  nlohmann::json report;
  ASSERT_NO_THROW(report = nlohmann::json::parse(text)) << text;  // the parser checks UTF-8
  EXPECT_EQ(report["input"]["path"], "scan\xEF\xBF\xBD.npy");     // U+FFFD for the 0xFF byte
  EXPECT_EQ(report["outputs"]["report"], "out\xEF\xBF\xBD.json");
  EXPECT_TRUE(report["solver"]["duality_gap"].is_null());
  EXPECT_TRUE(report["metrics"]["psnr_denoised"].is_null());
  EXPECT_EQ(report["input"]["shape"], nlohmann::json({1, 2, 3}));
  EXPECT_TRUE(report["input"]["clean_reference"].is_null());
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace fieldfuse::cli
