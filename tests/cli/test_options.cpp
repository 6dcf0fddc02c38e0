// SPDX-License-Identifier: Apache-2.0
// Tests of `fieldfuse denoise` flag parsing: defaults, both value spellings, and usage errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_error.h"
#include "denoise_options.h"

namespace fieldfuse::cli {
namespace {

std::string usage_error_of(const std::vector<std::string>& args) {
  try {
    parse_denoise_options(args);
  } catch (const CliError& error) {
    EXPECT_EQ(error.exit_code(), 2) << error.what();
    return error.what();
  }
  return "no error";
}

TEST(DenoiseOptions, DefaultsDescribeTheBuiltInPhantomRun) {
  const DenoiseOptions options = parse_denoise_options({});
  EXPECT_TRUE(options.input.empty());
  EXPECT_EQ(options.output, "denoised");
  EXPECT_EQ(options.tv, TvKind::Isotropic);
  EXPECT_GT(options.lambda, 0.0);
  EXPECT_EQ(options.device, DeviceChoice::Auto);
  EXPECT_GT(options.phantom_size, 0);
  EXPECT_FALSE(options.quiet);
}

TEST(DenoiseOptions, ValuesParseInBothSpellingsAndTheDefaultLambdaFollowsTheFunctional) {
  const DenoiseOptions a = parse_denoise_options({"--tv", "l1", "--lambda=0.5", "--iters", "7",
                                                  "--device=cpu", "--quiet", "--input", "v.npy"});
  EXPECT_EQ(a.tv, TvKind::L1);
  EXPECT_DOUBLE_EQ(a.lambda, 0.5);
  EXPECT_EQ(a.iterations, 7);
  EXPECT_EQ(a.device, DeviceChoice::Cpu);
  EXPECT_TRUE(a.quiet);
  EXPECT_EQ(a.input, "v.npy");
  EXPECT_NE(parse_denoise_options({"--tv", "sq"}).lambda,
            parse_denoise_options({"--tv", "iso"}).lambda);
}

TEST(DenoiseOptions, BadFlagsAndValuesNameTheFlag) {
  EXPECT_NE(usage_error_of({"--frobnicate"}).find("unknown flag '--frobnicate'"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--device", "tpu"}).find("--device must be one of auto, cpu, cuda"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--tv", "l2"}).find("--tv must be one of sq, iso, l1"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--lambda", "-0.1"}).find("--lambda must be >= 0"), std::string::npos);
  EXPECT_NE(usage_error_of({"--lambda", "nan"}).find("--lambda expects a finite number"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--lambda", "1e999"}).find("--lambda expects a finite number"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--eps", "0"}).find("--eps must be > 0"), std::string::npos);
  EXPECT_NE(usage_error_of({"--iters", "0"}).find("--iters must be between"), std::string::npos);
  EXPECT_NE(usage_error_of({"--iters", "12abc"}).find("--iters expects a whole number"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--size", "100000"}).find("--size must be between"), std::string::npos);
  EXPECT_NE(usage_error_of({"--noise", "-1"}).find("--noise must be >= 0"), std::string::npos);
  EXPECT_NE(usage_error_of({"--output"}).find("--output needs a value"), std::string::npos);
  EXPECT_NE(usage_error_of({"volume.npy"}).find("unexpected argument 'volume.npy'"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--quiet=yes"}).find("--quiet takes no value"), std::string::npos);
  EXPECT_NE(usage_error_of({"--clean", "c.npy"}).find("--clean needs --input"), std::string::npos);
  EXPECT_NE(usage_error_of({"--input", "v.npy", "--seed", "3"}).find("--seed applies only"),
            std::string::npos);
}

// --lambda 1e33 once ran to an all-NaN volume with exit 0: lambda times the voxel count overflowed
// float32. The flag's range now stops it, and the message says what the range is and why.
TEST(DenoiseOptions, LambdaBeyondItsRangeIsRefusedWithTheRangeAndTheReason) {
  const std::string message = usage_error_of({"--lambda", "1e33"});
  EXPECT_NE(message.find("--lambda must be >= 0 and <= 1e+06, got 1e33"), std::string::npos)
      << message;
  EXPECT_NE(message.find("float32"), std::string::npos) << message;
  EXPECT_DOUBLE_EQ(parse_denoise_options({"--lambda", "1e6"}).lambda, kMaxLambda);
  EXPECT_NE(usage_error_of({"--input", "v.npy", "--lambda", "1e38"}).find("--lambda must be"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--eps", "1e30"}).find("--eps must be > 0 and <= 1e+06"),
            std::string::npos);
  EXPECT_NE(usage_error_of({"--noise", "1e38"}).find("--noise must be >= 0 and <= 1e+06"),
            std::string::npos);
}

TEST(DenoiseOptions, RepeatedFlagsTakeTheLastValue) {
  const DenoiseOptions options = parse_denoise_options({"--iters", "5", "--iters=9", "--tv", "sq"});
  EXPECT_EQ(options.iterations, 9);
  EXPECT_EQ(options.tv, TvKind::Squared);
}

TEST(DenoiseOptions, HelpListsEveryFlag) {
  const std::string help = denoise_help();
  for (const char* flag :
       {"--input", "--clean", "--output", "--tv", "--lambda", "--eps", "--iters", "--tol",
        "--device", "--size", "--noise", "--seed", "--progress", "--quiet", "--help"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  // Generated from the table: the defaults and groups come from the same entries the parser uses.
  EXPECT_NE(help.find("[default: 200]"), std::string::npos) << help;
  EXPECT_NE(help.find("Built-in phantom (only without --input)"), std::string::npos);
  EXPECT_NE(help.find("Exit codes: 0 success, 1 runtime failure, 2 bad flags or values, 3 bad "
                      "input file."),
            std::string::npos);
}

}  // namespace
}  // namespace fieldfuse::cli
