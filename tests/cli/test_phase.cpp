// SPDX-License-Identifier: Apache-2.0
// Tests of `fieldfuse phase`'s pieces: the tile layout, the blending weights, the flags, the
// settings file, and the report.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_error.h"
#include "phase_options.h"
#include "phase_report.h"
#include "phase_simulate.h"
#include "phase_tiles.h"
#include "scratch_dir.h"

namespace fieldfuse::cli {
namespace {

TEST(PhaseTiles, StartsCoverTheFieldWithTheLastTileAtTheEdge) {
  EXPECT_EQ(tile_starts(512, 128, 16), (std::vector<std::int64_t>{0, 112, 224, 336, 384}));
  EXPECT_EQ(tile_starts(128, 128, 16), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(tile_starts(129, 128, 0), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(tile_starts(91, 32, 8), (std::vector<std::int64_t>{0, 24, 48, 59}));
  // No gap anywhere, whatever the sizes (odd ones included).
  for (std::int64_t extent : {33, 75, 91, 200, 257}) {
    for (std::int64_t overlap : {0, 1, 8, 31}) {
      const std::vector<std::int64_t> starts = tile_starts(extent, 32, overlap);
      EXPECT_EQ(starts.front(), 0);
      EXPECT_EQ(starts.back(), extent - 32);
      for (std::size_t i = 1; i < starts.size(); ++i) {
        EXPECT_LE(starts[i], starts[i - 1] + 32) << extent << " " << overlap;
        EXPECT_GT(starts[i], starts[i - 1]);
      }
    }
  }
}

TEST(PhaseTiles, RampsArePositiveAndNeighboursAddToOne) {
  const std::vector<double> ramp = blend_ramp(32, 8);
  for (const double w : ramp) EXPECT_GT(w, 0.0);
  for (std::int64_t i = 0; i < 8; ++i) {
    // Tile b's falling edge and tile b+1's rising edge share these pixels.
    EXPECT_NEAR(ramp[static_cast<std::size_t>(24 + i)] + ramp[static_cast<std::size_t>(i)], 1.0,
                1e-15);
  }
  EXPECT_EQ(blend_ramp(16, 0), std::vector<double>(16, 1.0));
}

TEST(PhaseTiles, BlendingTheTilesOfAnImageGivesItBackWithoutSeams) {
  const std::int64_t height = 75, width = 91;
  std::vector<float> image(static_cast<std::size_t>(height * width));
  for (std::int64_t i = 0; i < height * width; ++i) {
    image[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(0.37 * i) + 0.01 * i);
  }
  const TileGrid grid(height, width, 32, 8);
  EXPECT_EQ(grid.count(), 3 * 4);
  std::vector<float> tiles(static_cast<std::size_t>(grid.count() * 32 * 32));
  cut_tiles(image.data(), 1, grid, 0, grid.count(), tiles.data());
  EXPECT_EQ(tiles[static_cast<std::size_t>(5 * 32 * 32)],
            image[static_cast<std::size_t>(grid.y0(5) * width + grid.x0(5))]);
  TileBlender blender(grid);
  for (std::int64_t b = 0; b < grid.count(); ++b) blender.add(b, tiles.data() + b * 32 * 32);
  const std::vector<float> blended = blender.image();
  for (std::size_t i = 0; i < image.size(); ++i) ASSERT_NEAR(blended[i], image[i], 1e-5) << i;
}

TEST(PhaseSimulation, TheTruthRampsFocusAndTiltsAwayFromTheCentre) {
  const TileGrid grid(512, 512, 128, 16);
  const TileParameters truth = simulated_parameters(grid);
  ASSERT_EQ(truth.count(), 25);
  EXPECT_LT(truth.z_offset[0], -0.3f);  // left column
  EXPECT_GT(truth.z_offset[4], 0.3f);   // right column
  EXPECT_NEAR(truth.zenith[0], kSimulatedMaxZenithDegrees * M_PI / 180.0, 1e-6);
  EXPECT_NEAR(truth.azimuth[4], -M_PI / 4, 1e-6);  // top right: +x, -y
  const std::vector<float> a = simulated_phase_object(64, 80, 3),
                           b = simulated_phase_object(64, 80, 3);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, simulated_phase_object(64, 80, 4));
  EXPECT_NEAR(correlation(a, a), 1.0, 1e-12);
}

TEST(PhaseSimulation, ANegativeZenithIsTheOppositeAzimuth) {
  TileParameters p(1, 0.0, -0.1, 0.5);
  const TileParameters q = with_positive_zenith(p);
  EXPECT_FLOAT_EQ(q.zenith[0], 0.1f);
  EXPECT_NEAR(q.azimuth[0], 0.5 - M_PI, 1e-6);
}

std::string usage_error_of(const std::vector<std::string>& args) {
  try {
    parse_phase_options(args);
  } catch (const CliError& error) {
    EXPECT_EQ(error.exit_code(), 2) << error.what();
    return error.what();
  }
  return "no error";
}

TEST(PhaseOptions, TheEmbeddedDefaultOptimisesEverythingOnItsMicroscope) {
  const PhaseOptions o = parse_phase_options({});
  EXPECT_TRUE(o.input.empty());
  EXPECT_TRUE(o.optimize_z && o.optimize_zenith && o.optimize_azimuth);
  EXPECT_EQ(o.method, fieldfuse::TileOptimizerMethod::Newton);
  EXPECT_EQ(o.iterations, 20);
  EXPECT_EQ(o.tile, 64);
  EXPECT_EQ(o.overlap, 8);
  EXPECT_EQ(o.size, 256);
  EXPECT_DOUBLE_EQ(o.microscope.pixel_size, 0.1);
  EXPECT_DOUBLE_EQ(o.microscope.na_detection, 0.55);
  EXPECT_DOUBLE_EQ(o.z_spacing, 1.5);
  EXPECT_DOUBLE_EQ(o.regularization, 1e-3);
  // Newton's rates: step caps of 0.2 slice, 2 and 10 degrees.
  EXPECT_DOUBLE_EQ(o.lr_z, 0.2);
  EXPECT_DOUBLE_EQ(o.lr_zenith, 2.0);
  EXPECT_DOUBLE_EQ(o.lr_azimuth, 10.0);
}

TEST(PhaseOptions, LearningRatesDefaultPerMethodUnlessGiven) {
  for (const char* method : {"adam", "nadam"}) {
    const PhaseOptions o = parse_phase_options({"--method", method, "--lr-zenith", "0.25"});
    EXPECT_DOUBLE_EQ(o.lr_z, 0.05) << method;
    EXPECT_DOUBLE_EQ(o.lr_zenith, 0.25) << method;
    EXPECT_DOUBLE_EQ(o.lr_azimuth, 5.0) << method;
  }
  const PhaseOptions file = parse_phase_options({"--input", "s.npy", "--pixel-size", "0.1",
                                                 "--wavelength", "0.5", "--na-illumination", "0.3",
                                                 "--na-detection", "0.5", "--z-spacing", "1"});
  EXPECT_EQ(file.tile, 128);  // file runs keep the production layout
  EXPECT_EQ(file.overlap, 16);
  EXPECT_DOUBLE_EQ(file.lr_z, 0.2);
}

TEST(PhaseOptions, AFileRunTakesEveryValueAndOptimisesOnlyWhatItIsTold) {
  const PhaseOptions o = parse_phase_options({"--input",
                                              "s.npy",
                                              "--pixel-size",
                                              "0.2",
                                              "--wavelength",
                                              "0.45",
                                              "--na-illumination",
                                              "0.3",
                                              "--na-detection",
                                              "0.9",
                                              "--index-medium",
                                              "1.33",
                                              "--z-spacing",
                                              "0.5",
                                              "--invert-phase-contrast",
                                              "--tile",
                                              "64",
                                              "--overlap",
                                              "0",
                                              "--batch",
                                              "7",
                                              "--method",
                                              "newton",
                                              "--zenith",
                                              "3",
                                              "--device",
                                              "cpu",
                                              "--output",
                                              "p.tif"});
  EXPECT_FALSE(o.optimizes());
  EXPECT_DOUBLE_EQ(o.microscope.pixel_size, 0.2);
  EXPECT_DOUBLE_EQ(o.microscope.index_medium, 1.33);
  EXPECT_TRUE(o.microscope.invert_phase_contrast);
  EXPECT_EQ(o.batch, 7);
  EXPECT_EQ(o.method, fieldfuse::TileOptimizerMethod::Newton);
  EXPECT_DOUBLE_EQ(o.zenith, 3.0);
  EXPECT_EQ(o.device, DeviceChoice::Cpu);
  const PhaseOptions z = parse_phase_options({"--optimize", "zenith,z"});
  EXPECT_TRUE(z.optimize_z && z.optimize_zenith && !z.optimize_azimuth);
  EXPECT_FALSE(parse_phase_options({"--optimize", "none"}).optimizes());
}

TEST(PhaseOptions, BadFlagsAreUsageErrorsNamingThem) {
  EXPECT_EQ(usage_error_of({"--optimize", "z,focus"}),
            "--optimize expects none or a comma-separated subset of z, zenith, azimuth, got "
            "'z,focus'");
  EXPECT_EQ(usage_error_of({"--method", "sgd"}),
            "--method must be one of adam, nadam, newton, got 'sgd'");
  EXPECT_EQ(usage_error_of({"--tile", "64", "--overlap", "64"}),
            "--overlap 64 must be smaller than --tile 64");
  EXPECT_EQ(usage_error_of({"--size", "60"}),
            "--tile 64 is larger than the simulated field (--size 60)");
  EXPECT_EQ(usage_error_of({"--na-detection", "1.2"}),
            "--na-detection 1.2 must be below --index-medium 1");
  EXPECT_EQ(usage_error_of({"--pixel-size", "0"}), "--pixel-size must be > 0, got 0");
  EXPECT_EQ(usage_error_of({"--output", "p.png"}),
            "--output 'p.png': unsupported type '.png' (expected .tif, .tiff or .npy)");
  EXPECT_EQ(usage_error_of({"--input", "s.npy", "--seed", "3"}),
            "--seed applies only to the embedded default, not to --input");
  EXPECT_EQ(usage_error_of({"--input", "s.npy", "--pixel-size", "0.1", "--z-spacing", "1"}),
            "--input needs the microscope's --wavelength, --na-illumination, --na-detection (as "
            "flags or in --config)");
}

class PhaseConfig : public ScratchDirTest {
 protected:
  PhaseConfig() : ScratchDirTest("fieldfuse_phase_config") {}
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  std::string input_error_of(const std::string& config) {
    try {
      parse_phase_options({"--config", config});
    } catch (const CliError& error) {
      EXPECT_EQ(error.exit_code(), 3) << error.what();
      return error.what();
    }
    return "no error";
  }
};

TEST_F(PhaseConfig, TheFileGivesWhatTheCommandLineDoesNot) {
  const std::string config =
      write("s.json",
            R"({"pixel_size": 0.2, "wavelength": 0.45, "na-illumination": 0.3, "na_detection": 0.6,
          "z_spacing": 0.5, "tile": 96, "optimize": ["zenith"], "invert_phase_contrast": true,
          "method": "adam"})");
  const PhaseOptions o =
      parse_phase_options({"--input", "s.npy", "--config", config, "--tile", "64"});
  EXPECT_DOUBLE_EQ(o.microscope.pixel_size, 0.2);
  EXPECT_DOUBLE_EQ(o.microscope.na_illumination, 0.3);
  EXPECT_DOUBLE_EQ(o.z_spacing, 0.5);
  EXPECT_EQ(o.tile, 64);  // the command line wins
  EXPECT_TRUE(o.optimize_zenith && !o.optimize_z);
  EXPECT_TRUE(o.microscope.invert_phase_contrast);
  EXPECT_EQ(o.method, fieldfuse::TileOptimizerMethod::Adam);
}

TEST_F(PhaseConfig, BadFilesAreInputErrorsNamingTheKey) {
  const std::string name = path("c.json");
  EXPECT_EQ(input_error_of(write("c.json", R"({"pixel_sise": 0.1})")),
            "--config '" + name +
                "', key 'pixel_sise': unknown setting (the keys are flag names without the "
                "dashes; see 'fieldfuse phase --help')");
  EXPECT_EQ(input_error_of(write("c.json", R"({"tile": 4})")),
            "--config '" + name + "', key 'tile': --tile must be between 8 and 65536, got 4");
  EXPECT_EQ(input_error_of(write("c.json", R"({"output": "x.npy"})")),
            "--config '" + name +
                "', key 'output': give --output on the command line, not in "
                "the file");
  EXPECT_EQ(input_error_of(write("c.json", R"({"tile": true})")),
            "--config '" + name + "', key 'tile': expected a value, got a boolean");
  EXPECT_EQ(input_error_of(write("c.json", R"({"invert_phase_contrast": 1})")),
            "--config '" + name + "', key 'invert_phase_contrast': expected true or false");
  EXPECT_EQ(input_error_of(write("c.json", R"({"tile": null})")),
            "--config '" + name +
                "', key 'tile': expected a number, a string, a boolean or an array of strings, "
                "got null");
  EXPECT_EQ(input_error_of(write("c.json", "[1, 2]")),
            "--config '" + name + "': expected a JSON object of settings, got a array");
  EXPECT_NE(input_error_of(write("c.json", "{")).find("not valid JSON"), std::string::npos);
  EXPECT_EQ(input_error_of(write("c.json", R"({"tile": ["48"]})")),
            "--config '" + name + "', key 'tile': expected a single value, got an array");
  EXPECT_EQ(input_error_of(write("c.json", R"({"pixel_size": 0.1, "pixel-size": 0.2})")),
            "--config '" + name + "', key 'pixel_size': --pixel-size is given twice in the file");
  EXPECT_EQ(input_error_of(write("c.ini", "tile = 4")),
            "--config '" + path("c.ini") +
                "': unsupported settings file type '.ini' (expected .json, .toml, .yaml or .yml)");
}

// One schema for all three formats: the same settings give the same options.
TEST_F(PhaseConfig, TomlAndYamlReadLikeJson) {
  const std::vector<std::string> flags = {"--input", "s.npy", "--tile", "64"};
  const auto parse = [&](const std::string& config) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"--config", config});
    return parse_phase_options(args);
  };
  const PhaseOptions toml = parse(write("s.toml", R"(# microscope
pixel_size = 0.2
wavelength = 0.45
na-illumination = 0.3
na_detection = 0.6
z_spacing = 1
tile = 96
optimize = ["zenith", "z"]
invert_phase_contrast = true
method = "adam"
)"));
  const PhaseOptions yaml = parse(write("s.yml", R"(# microscope
pixel_size: 0.2
wavelength: 0.45
na-illumination: 0.3
na_detection: 0.6
z_spacing: 1
tile: 96
optimize:
  - zenith
  - z
invert_phase_contrast: true
method: adam
)"));
  for (const PhaseOptions* o : {&toml, &yaml}) {
    EXPECT_DOUBLE_EQ(o->microscope.pixel_size, 0.2);
    EXPECT_DOUBLE_EQ(o->microscope.wavelength, 0.45);
    EXPECT_DOUBLE_EQ(o->microscope.na_illumination, 0.3);
    EXPECT_DOUBLE_EQ(o->z_spacing, 1.0);
    EXPECT_EQ(o->tile, 64);  // the command line wins
    EXPECT_TRUE(o->optimize_zenith && o->optimize_z && !o->optimize_azimuth);
    EXPECT_TRUE(o->microscope.invert_phase_contrast);
    EXPECT_EQ(o->method, fieldfuse::TileOptimizerMethod::Adam);
    EXPECT_DOUBLE_EQ(o->lr_z, 0.05);  // Adam's default rate
  }
  // A switch set to false leaves it off.
  EXPECT_FALSE(parse(write("f.yaml",
                           "pixel_size: 0.1\nwavelength: 0.5\nna_illumination: 0.3\n"
                           "na_detection: 0.5\nz_spacing: 1\n"
                           "invert_phase_contrast: false\n"))
                   .microscope.invert_phase_contrast);
}

TEST_F(PhaseConfig, BadTomlAndYamlAreInputErrorsNamingTheKey) {
  const std::string any_value =
      "expected a number, a string, a boolean or an array of strings, got ";
  // {file, text, what the message says after "--config 'PATH'"}.
  const std::vector<std::array<std::string, 3>> cases = {
      {"c.toml", "pixel_sise = 0.1",
       ", key 'pixel_sise': unknown setting (the keys are flag names without the dashes; see "
       "'fieldfuse phase --help')"},
      {"c.toml", "tile = 4.5", ", key 'tile': --tile expects a whole number, got '4.5'"},
      {"c.toml", "tile = true", ", key 'tile': expected a value, got a boolean"},
      {"c.toml", "invert_phase_contrast = \"yes\"",
       ", key 'invert_phase_contrast': expected true or false"},
      {"c.toml", "optimize = [\"z\", 1]",
       ", key 'optimize': expected an array of strings, got an element of type integer"},
      {"c.toml", "[microscope]\npixel_size = 0.1", ", key 'microscope': " + any_value + "table"},
      {"c.toml", "seed = 1979-05-27", ", key 'seed': " + any_value + "date"},
      {"c.toml", "tile = 48\ntile = 64", ": not valid TOML (line 2"},
      {"c.yaml", "pixel_sise: 0.1", ", key 'pixel_sise': unknown setting"},
      {"c.yaml", "tile: sixty-four",
       ", key 'tile': --tile expects a whole number, got 'sixty-four'"},
      {"c.yaml", "tile:", ", key 'tile': " + any_value + "null"},
      {"c.yaml", "tile: {a: 1}", ", key 'tile': " + any_value + "mapping"},
      // YAML 1.2: only a plain true/false is a boolean; yes and a quoted "true" are text.
      {"c.yaml", "invert_phase_contrast: yes",
       ", key 'invert_phase_contrast': expected true or false"},
      {"c.yaml", "invert_phase_contrast: \"true\"",
       ", key 'invert_phase_contrast': expected true or false"},
      {"c.yaml", "optimize: [z, [zenith]]",
       ", key 'optimize': expected an array of strings, got an element of type sequence"},
      {"c.yaml", "tile: [48]", ", key 'tile': expected a single value, got an array"},
      {"c.yaml", "- tile\n- 48", ": expected a YAML mapping of settings, got a sequence"},
      {"c.yaml", "tile: [48", ": not valid YAML ("},
      {"c.yaml", "pixel_size: 0.1\npixel-size: 0.2",
       ", key 'pixel-size': --pixel-size is given twice in the file"},
  };
  for (const auto& [file, text, message] : cases) {
    const std::string expected = "--config '" + path(file) + "'" + message;
    // Messages that quote a parser's own words are checked up to them.
    EXPECT_EQ(input_error_of(write(file, text)).substr(0, expected.size()), expected) << text;
  }
}

TEST(PhaseReport, IsValidJsonWithTheRecoveryWhereReadersLook) {
  const PhaseOptions options = parse_phase_options({});
  const TileGrid grid(512, 512, 128, 16);
  const TileParameters parameters(grid.count(), 0.25, -0.1, 0.0);
  PhaseRecord record;
  record.options = &options;
  record.embedded = true;
  record.grid = &grid;
  record.parameters = &parameters;
  record.has_recovery = true;
  record.recovery.phase_correlation = 0.9;
  record.recovery.z_offset_rms_slices = std::nan("");
  const nlohmann::json report = nlohmann::json::parse(phase_report_json(record));
  EXPECT_EQ(report["command"], "phase");
  EXPECT_EQ(report["tiles"]["count"], 25);
  EXPECT_EQ(report["tiles"]["starts_x"], (std::vector<int>{0, 112, 224, 336, 384}));
  EXPECT_DOUBLE_EQ(report["recovery"]["phase_correlation"].get<double>(), 0.9);
  EXPECT_TRUE(report["recovery"]["z_offset_rms_slices"].is_null());
  // Reported with zenith >= 0: -0.1 rad at azimuth 0 is 5.73 degrees at 180.
  EXPECT_NEAR(report["per_tile"]["zenith_degrees"]["mean"].get<double>(), 5.7296, 1e-3);
  EXPECT_NEAR(std::abs(report["per_tile"]["azimuth_degrees"]["mean"].get<double>()), 180.0, 1e-3);
  EXPECT_EQ(report["settings"]["optimize"]["method"], "newton");
}

}  // namespace
}  // namespace fieldfuse::cli
