// SPDX-License-Identifier: Apache-2.0
// Tests of `fieldfuse tomo` flag parsing and its report: defaults, the checks across flags, and a
// report that is valid JSON with the residuals and scores where readers look for them.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
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
  for (const char* flag : {"--phantom-size", "--noise", "--output-dir"}) {
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

TEST(TomoOptions, KPlanesTakesEveryFlagAndTheEmbeddedRunItsOwnDefaults) {
  const TomoOptions file = parse_tomo_options({"--input",
                                               "a.st",
                                               "--angles",
                                               "0:0:1",
                                               "--method",
                                               "kplanes",
                                               "--tilts",
                                               "2",
                                               "--channels",
                                               "4",
                                               "--resolution",
                                               "32,64",
                                               "--decoder",
                                               "mlp",
                                               "--hidden",
                                               "32",
                                               "--layers",
                                               "3",
                                               "--rays",
                                               "100",
                                               "--epochs",
                                               "2.5",
                                               "--tv-volume",
                                               "0",
                                               "--tv-points",
                                               "50",
                                               "--tv-plane",
                                               "0.5",
                                               "--sparsity",
                                               "0.01",
                                               "--lr-planes",
                                               "0.2",
                                               "--lr-decoder",
                                               "0.3",
                                               "--lr-rotations",
                                               "0.4",
                                               "--lr-pose",
                                               "0.05",
                                               "--no-pose-refinement",
                                               "--no-cuda-graph",
                                               "--seed",
                                               "9",
                                               "--checkpoint",
                                               "k.ckpt",
                                               "--checkpoint-every",
                                               "7",
                                               "--resume",
                                               "old.ckpt"});
  const fieldfuse::KPlanesReconOptions& k = file.kplanes;
  EXPECT_EQ(file.methods, std::vector<TomoMethod>{TomoMethod::KPlanes});
  EXPECT_EQ(k.num_tilts, 2);
  EXPECT_EQ(k.channels, 4);
  EXPECT_EQ(k.resolutions, (std::vector<std::int64_t>{32, 64}));
  EXPECT_EQ(k.decoder, "mlp");
  EXPECT_EQ(k.hidden, 32);
  EXPECT_EQ(k.layers, 3);
  EXPECT_EQ(k.rays, 100);
  EXPECT_DOUBLE_EQ(k.epochs, 2.5);
  EXPECT_DOUBLE_EQ(k.tv_volume, 0.0);
  EXPECT_EQ(k.tv_points, 50);
  EXPECT_DOUBLE_EQ(k.tv_plane, 0.5);
  EXPECT_DOUBLE_EQ(k.sparsity, 0.01);
  EXPECT_DOUBLE_EQ(k.lr_planes, 0.2);
  EXPECT_DOUBLE_EQ(k.lr_decoder, 0.3);
  EXPECT_DOUBLE_EQ(k.lr_rotations, 0.4);
  EXPECT_DOUBLE_EQ(k.lr_pose, 0.05);
  EXPECT_FALSE(k.pose_refinement);
  EXPECT_FALSE(k.cuda_graph);
  EXPECT_EQ(k.seed, 9u);
  EXPECT_EQ(file.checkpoint, "k.ckpt");
  EXPECT_EQ(file.checkpoint_every, 7);
  EXPECT_EQ(file.resume, "old.ckpt");
  // A file run keeps the library's defaults; the embedded run trains faster (tomo_kplanes_options).
  const fieldfuse::KPlanesReconOptions library;
  const TomoOptions plain =
      parse_tomo_options({"--input", "a.st", "--angles", "0:0:1", "--method", "kplanes"});
  EXPECT_EQ(plain.kplanes.rays, library.rays);
  EXPECT_EQ(plain.kplanes.tv_points, library.tv_points);
  EXPECT_DOUBLE_EQ(plain.kplanes.lr_planes, library.lr_planes);
  EXPECT_EQ(plain.kplanes.iterations, library.iterations);
  EXPECT_EQ(plain.kplanes.seed, 1u);  // --seed's default
  const TomoOptions embedded = parse_tomo_options({});
  EXPECT_EQ(embedded.kplanes.rays, 1024);
  EXPECT_EQ(embedded.kplanes.tv_points, 2000);
  EXPECT_DOUBLE_EQ(embedded.kplanes.lr_planes, 0.1);
  EXPECT_EQ(embedded.kplanes.iterations, 600);
  EXPECT_EQ(parse_tomo_options({"--epochs", "2"}).kplanes.iterations, library.iterations);
  EXPECT_EQ(parse_tomo_options({"--rays", "64"}).kplanes.rays, 64);  // a given flag wins
}

TEST(TomoOptions, KPlanesFlagsAreCheckedAcrossFlags) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--method", "fbp", "--rays", "8"}, "--rays applies only to --method kplanes"},
      {{"--layers", "2"}, "--layers needs --decoder mlp"},
      {{"--hidden", "24", "--decoder", "mlp"}, "--hidden must be a multiple of 16"},
      {{"--epochs", "1", "--kplanes-iterations", "3"}, "not both"},
      {{"--checkpoint-every", "3"}, "needs --checkpoint PATH"},
      {{"--resolution", "32,,64"}, "--resolution expects a whole number"},
      {{"--epochs", "0"}, "--epochs must be > 0"},
      {{"--tv-plane", "-1"}, "--tv-plane must be >= 0"},
  };
  for (const auto& [args, message] : cases) {
    EXPECT_NE(usage_error_of(args).find(message), std::string::npos) << message;
  }
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

TEST(TomoReport, KPlanesHasLossesPosesAndTimings) {
  TomoOptions options = parse_tomo_options({"--method", "kplanes", "--checkpoint", "k.ckpt"});
  MethodResult result;
  result.iterations = {{10, 0.5, 0.02}, {20, 0.25, 0.03}};
  result.kplanes.options = {{"num_tilts", "4"}, {"rays", "1024"}};
  result.kplanes.iterations = 20;
  result.kplanes.steps_run = 20;
  result.kplanes.train_seconds = 0.5;
  result.kplanes.normalisation = 1.5;
  result.kplanes.reference_projection = 1;
  result.kplanes.poses = {{-3.0, 0.1, 0.2, 0.01, 0.02}, {0.0, 0.0, 0.0, 0.0, 0.0}};
  result.kplanes.checkpoint_steps = {20};
  TomoRecord record;
  record.options = &options;
  record.from_phantom = true;
  TomoMethodRecord method;
  method.method = TomoMethod::KPlanes;
  method.result = &result;
  record.methods = {method};
  const nlohmann::json entry = nlohmann::json::parse(tomo_report_json(record))["methods"][0];
  EXPECT_EQ(entry["method"], "kplanes");
  EXPECT_EQ(entry["settings"]["rays"], "1024");
  EXPECT_EQ(entry["settings"]["checkpoint"], "k.ckpt");
  EXPECT_EQ(entry["logged_steps"], nlohmann::json({10, 20}));
  EXPECT_EQ(entry["loss"], nlohmann::json({0.5, 0.25}));
  EXPECT_EQ(entry["step_seconds"], nlohmann::json({0.02, 0.03}));
  EXPECT_DOUBLE_EQ(entry["seconds_per_step"].get<double>(), 0.025);
  EXPECT_EQ(entry["normalisation_divisor"], 1.5);
  EXPECT_EQ(entry["reference_projection"], 1);
  EXPECT_EQ(entry["poses_degrees_and_detector_units"]["z1"], nlohmann::json({0.1, 0.0}));
  EXPECT_EQ(entry["poses_degrees_and_detector_units"]["shift_v"], nlohmann::json({0.02, 0.0}));
  EXPECT_EQ(entry["checkpoint_steps"], nlohmann::json({20}));
}

}  // namespace
}  // namespace fieldfuse::cli
