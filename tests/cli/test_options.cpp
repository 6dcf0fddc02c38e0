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

TEST(DenoiseOptions, HelpListsEveryFlag) {
  const std::string help = denoise_help();
  for (const char* flag :
       {"--input", "--clean", "--output", "--tv", "--lambda", "--eps", "--iters", "--tol",
        "--device", "--size", "--noise", "--seed", "--progress", "--quiet", "--help"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace fieldfuse::cli
