// SPDX-License-Identifier: Apache-2.0
// The flags of `fieldfuse phase`: their defaults, their table (parsing, validation and --help), the
// optional settings file, and the checks across flags.
#include "phase_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <limits>
#include <set>

#include "cli_error.h"
#include "command_line.h"
#include "file_io.h"
#include "phase_config.h"

namespace fieldfuse::cli {
namespace {

// The embedded default's microscope: a 0.55 NA objective with 0.4 NA illumination at 532 nm, in
// air, 0.1 um pixels (Nyquist-sampled, so the thin model needs no upsampling) and 7 slices
// 1.5 um apart, close to the 1.76 um depth of field lambda/NA^2: only at such a spacing does the
// mid-band sharpness peak at the true focus (at 0.4-0.6 um it keeps rising past it).
constexpr double kDefaultPixelSize = 0.1;
constexpr double kDefaultWavelength = 0.532;
constexpr double kDefaultNaIllumination = 0.4;
constexpr double kDefaultNaDetection = 0.55;
constexpr double kDefaultZSpacing = 1.5;
// waveorder's default Tikhonov strength for intensities normalised to x/mean - 1.
constexpr double kDefaultRegularization = 1e-3;
// waveorder's default: a nearly binary pupil edge.
constexpr double kDefaultPupilSteepness = 1e4;
// 128^2 tiles with 16 pixels of overlap: the production layout (256 tiles per 2048^2 field).
constexpr std::int64_t kDefaultTile = 128;
constexpr std::int64_t kDefaultOverlap = 16;
// The embedded default's layout: 25 tiles of 64^2 over 256^2, a field of tiles that optimises in
// seconds on two CPU cores.
constexpr std::int64_t kEmbeddedTile = 64;
constexpr std::int64_t kEmbeddedOverlap = 8;
// Fields beyond 2^16 pixels a side would not fit any memory this app runs in.
constexpr std::int64_t kMaxExtent = 65536;
constexpr std::int64_t kMinTile = 8;
// Newton by default: on the embedded default its exact diagonal second derivatives reach in 15
// iterations the optimum NAdam needs 60 for (the same errors to 0.01 slice and 0.1 degree), and
// an iteration costs about the same.
constexpr auto kDefaultMethod = fieldfuse::TileOptimizerMethod::Newton;
constexpr std::int64_t kDefaultIterations = 20;
constexpr std::int64_t kMaxIterations = 100000;
// Default learning rates per method, tuned on the embedded default (offsets up to 0.56 slice and
// 15 degrees of zenith from a start at 0). Adam/NAdam: step sizes; a step of 1 degree of zenith
// crosses 15 degrees in the first 20 iterations, 0.05 slice settles the focus to 0.01-0.05 slice
// without overshoot (Adam's larger per-step noise leaves it at 0.15). Newton: the damping floor and
// step cap of -g/max(h, lr); caps of 0.2 slice, 2 and 10 degrees keep the first steps, taken far
// from the optimum where the curvature misleads, within the basin.
struct MethodRates {
  double z, zenith, azimuth;  // slices, degrees, degrees
};
constexpr MethodRates kAdamRates = {0.05, 1.0, 5.0};
constexpr MethodRates kNewtonRates = {0.2, 2.0, 10.0};
constexpr std::int64_t kDefaultSize = 256;  // 25 tiles of 64^2
constexpr std::int64_t kMaxSize = 8192;
constexpr double kDefaultNoise = 0.01;  // of the background intensity
constexpr double kMaxNoise = 10.0;
constexpr std::uint64_t kDefaultSeed = 1;

const char* const kHelpHint = "see 'fieldfuse phase --help'";

// Flags only a file run takes, and those only the embedded default takes.
const std::vector<const char*> kEmbeddedFlags = {"--size", "--noise", "--seed"};
// The microscope a file run must state (on the command line or in --config).
const std::vector<const char*> kRequiredWithInput = {
    "--pixel-size", "--wavelength", "--na-illumination", "--na-detection", "--z-spacing"};
// Flags a settings file may not give: where the data and the results are is the command line's.
// Flags whose value is a comma-separated list, which a settings file may give as an array.
const std::vector<const char*> kListFlags = {"--optimize"};
const std::vector<const char*> kCommandLineOnly = {
    "--input", "--config", "--output", "--png", "--absorption", "--parameter-maps", "--report"};

void parse_optimize(PhaseOptions& options, const std::string& text) {
  options.optimize_z = options.optimize_zenith = options.optimize_azimuth = false;
  if (text == "none") return;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? comma : comma - start);
    bool* chosen = name == "z"         ? &options.optimize_z
                   : name == "zenith"  ? &options.optimize_zenith
                   : name == "azimuth" ? &options.optimize_azimuth
                                       : nullptr;
    if (chosen == nullptr) {
      throw usage_error(
          "--optimize expects none or a comma-separated subset of z, zenith, "
          "azimuth, got '" +
          text + "'");
    }
    *chosen = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

// A learning rate's default for --help: "adam/nadam 0.05, newton 0.2".
std::string rates_text(double MethodRates::*rate) {
  return "adam/nadam " + number_text(kAdamRates.*rate) + ", newton " +
         number_text(kNewtonRates.*rate);
}

std::string image_output(const std::string& flag, const std::string& path) {
  const std::string extension = lowercase_extension(path);
  if (extension != ".npy" && extension != ".tif" && extension != ".tiff") {
    throw usage_error(flag + " '" + path + "': unsupported type '" + extension +
                      "' (expected .tif, .tiff or .npy)");
  }
  return path;
}

FlagTable phase_flags(PhaseOptions& options) {
  const std::string io = "Input and output";
  const std::string optics = "Microscope (required with --input, as flags or in --config)";
  const std::string tiling = "Tiling and reconstruction";
  const std::string optimise = "Per-tile optimisation of focus and tilt";
  const std::string embedded = "Embedded default (only without --input)";
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
  fieldfuse::MicroscopeSettings& m = options.microscope;
  FlagTable table = {
      {"--input", "PATH",
       "defocus stack [Z, Y, X] (a whole field of view): .npy or a multi-page\n"
       ".tif/.tiff (one page per slice, slice k at z = (floor(Z/2) - k)*dz)",
       "", io, [&options](const std::string& v) { options.input = v; }},
      {"--config", "PATH",
       "settings file (.json, .toml, .yaml/.yml), one flat table whose keys\n"
       "are flag names without the dashes: numbers, strings, true/false for\n"
       "switches, lists of strings, e.g. {\"pixel_size\": 0.1, \"optimize\": [\"z\"]}\n"
       "or pixel_size = 0.1; flags on the command line override it; unknown\n"
       "keys and wrong types are errors naming the key",
       "", io, [&options](const std::string& v) { options.config = v; }},
      {"--output", "PATH", "the phase image [Y, X] (radians, float32): .tif, .tiff or .npy", "", io,
       [&options](const std::string& v) { options.output = image_output("--output", v); }},
      {"--png", "PATH",
       "preview PNG of the phase (0.5-99.5 percentile stretch); the embedded\n"
       "default puts the truth beside it",
       "", io, [&options](const std::string& v) { options.png = v; }},
      {"--absorption", "PATH", "the absorption image [Y, X] (float32): .tif, .tiff or .npy", "", io,
       [&options](const std::string& v) { options.absorption = image_output("--absorption", v); }},
      {"--parameter-maps", "PREFIX",
       "per-tile maps [tiles_y, tiles_x] as float32 .npy: PREFIX_z_offset\n"
       "(slices), PREFIX_zenith, PREFIX_azimuth (degrees, zenith >= 0) and\n"
       "PREFIX_loss",
       "", io,
       [&options](const std::string& v) {
         if (v.empty()) throw usage_error("--parameter-maps needs a non-empty prefix");
         options.parameter_maps = v;
       }},
      {"--report", "PATH",
       "JSON report: settings, tiles, timings, per-tile summary and, for the\n"
       "embedded default, the recovery errors",
       "", io, [&options](const std::string& v) { options.report = v; }},
      {"--pixel-size", "UM", "object-space pixel size (one length unit for all, e.g. um)",
       "embedded: " + number_text(kDefaultPixelSize), optics,
       [&m](const std::string& v) {
         m.pixel_size = parse_number_in("--pixel-size", v, 0.0, kInf, true);
       }},
      {"--wavelength", "UM", "vacuum illumination wavelength",
       "embedded: " + number_text(kDefaultWavelength), optics,
       [&m](const std::string& v) {
         m.wavelength = parse_number_in("--wavelength", v, 0.0, kInf, true);
       }},
      {"--index-medium", "N", "refractive index of the medium", "1", optics,
       [&m](const std::string& v) {
         m.index_medium = parse_number_in("--index-medium", v, 0.0, kInf, true);
       }},
      {"--na-illumination", "NA",
       "illumination NA (>= --na-detection is taken as 0.9 x --na-detection)",
       "embedded: " + number_text(kDefaultNaIllumination), optics,
       [&m](const std::string& v) {
         m.na_illumination = parse_number_in("--na-illumination", v, 0.0, kInf);
       }},
      {"--na-detection", "NA", "detection NA (below --index-medium)",
       "embedded: " + number_text(kDefaultNaDetection), optics,
       [&m](const std::string& v) {
         m.na_detection = parse_number_in("--na-detection", v, 0.0, kInf, true);
       }},
      {"--z-spacing", "UM", "distance between slices", "embedded: " + number_text(kDefaultZSpacing),
       optics,
       [&options](const std::string& v) {
         options.z_spacing = parse_number_in("--z-spacing", v, 0.0, kInf, true);
       }},
      {"--invert-phase-contrast", "", "negate the defocus (a stack taken in the other direction)",
       "", optics, [&m](const std::string&) { m.invert_phase_contrast = true; }},
      {"--pupil-steepness", "S", "steepness of the pupil's edge, sigmoid(S*(NA/lambda - |f|))",
       number_text(kDefaultPupilSteepness), optics,
       [&m](const std::string& v) {
         m.pupil_steepness = parse_number_in("--pupil-steepness", v, 0.0, kInf, true);
       }},
      {"--regularization", "X", "Tikhonov strength of the inverse",
       number_text(kDefaultRegularization), tiling,
       [&options](const std::string& v) {
         options.regularization = parse_number_in("--regularization", v, 0.0, kInf, true);
       }},
      {"--tile", "N",
       "tile size: tiles of N x N cover the field, the last of each row and\n"
       "column aligned to its edge",
       std::to_string(kDefaultTile) + " (embedded: " + std::to_string(kEmbeddedTile) + ")", tiling,
       [&options](const std::string& v) {
         options.tile = parse_integer("--tile", v, kMinTile, kMaxExtent);
       }},
      {"--overlap", "N",
       "pixels shared by neighbouring tiles, blended with cosine ramps (< --tile)",
       std::to_string(kDefaultOverlap) + " (embedded: " + std::to_string(kEmbeddedOverlap) + ")",
       tiling,
       [&options](const std::string& v) {
         options.overlap = parse_integer("--overlap", v, 0, kMaxExtent);
       }},
      {"--batch", "B", "tiles per library call (memory), 0 = all at once", "0", tiling,
       [&options](const std::string& v) {
         options.batch = parse_integer("--batch", v, 0, kInt64Max);
       }},
      {"--optimize", "LIST",
       "parameters to optimise per tile, a subset of z,zenith,azimuth, or\n"
       "none (the sharpness of each tile's phase, fieldfuse::optimize_tiles)",
       "embedded: z,zenith,azimuth; --input: none", optimise,
       [&options](const std::string& v) { parse_optimize(options, v); }},
      {"--method", "adam|nadam|newton",
       "the optimiser: Adam or NAdam steps, or newton, the damped diagonal\n"
       "step -g/max(h, lr) capped at +-lr (exact second derivatives)",
       "newton", optimise,
       [&options](const std::string& v) {
         const std::string name = parse_choice("--method", v, {"adam", "nadam", "newton"});
         options.method = name == "adam"    ? fieldfuse::TileOptimizerMethod::Adam
                          : name == "nadam" ? fieldfuse::TileOptimizerMethod::NAdam
                                            : fieldfuse::TileOptimizerMethod::Newton;
       }},
      {"--iterations", "N", "optimiser iterations", std::to_string(kDefaultIterations), optimise,
       [&options](const std::string& v) {
         options.iterations = parse_integer("--iterations", v, 0, kMaxIterations);
       }},
      {"--lr-z", "SLICES", "learning rate of the focus offset (Newton: its step cap)",
       rates_text(&MethodRates::z), optimise,
       [&options](const std::string& v) {
         options.lr_z = parse_number_in("--lr-z", v, 0.0, kInf);
       }},
      {"--lr-zenith", "DEG", "learning rate of the zenith angle", rates_text(&MethodRates::zenith),
       optimise,
       [&options](const std::string& v) {
         options.lr_zenith = parse_number_in("--lr-zenith", v, 0.0, kInf);
       }},
      {"--lr-azimuth", "DEG", "learning rate of the azimuth angle",
       rates_text(&MethodRates::azimuth), optimise,
       [&options](const std::string& v) {
         options.lr_azimuth = parse_number_in("--lr-azimuth", v, 0.0, kInf);
       }},
      {"--z-offset", "SLICES", "focus offset of every tile (the start when optimised)", "0",
       optimise,
       [&options](const std::string& v) { options.z_offset = parse_number("--z-offset", v); }},
      {"--zenith", "DEG", "illumination tilt from the axis (the start when optimised)", "0",
       optimise,
       [&options](const std::string& v) {
         options.zenith = parse_number_in("--zenith", v, -90.0, 90.0);
       }},
      {"--azimuth", "DEG", "direction of the tilt from +x towards +y", "0", optimise,
       [&options](const std::string& v) {
         options.azimuth = parse_number_in("--azimuth", v, -360.0, 360.0);
       }},
      {"--size", "N", "the simulated field is N x N", std::to_string(kDefaultSize), embedded,
       [&options](const std::string& v) {
         options.size = parse_integer("--size", v, kMinTile, kMaxSize);
       }},
      {"--noise", "SIGMA", "Gaussian noise sigma, as a fraction of the background intensity",
       number_text(kDefaultNoise), embedded,
       [&options](const std::string& v) {
         options.noise = parse_number_in("--noise", v, 0.0, kMaxNoise);
       }},
      {"--seed", "S", "the phase object's and the noise's seed", std::to_string(kDefaultSeed),
       embedded,
       [&options](const std::string& v) {
         options.seed = static_cast<std::uint64_t>(parse_integer("--seed", v, 0, kInt64Max));
       }},
  };
  for (const Flag& shared : run_flags(options, "")) {
    if (shared.name == "--device") {
      table.push_back(shared);
      table.back().group = tiling;
    } else if (shared.name == "--quiet") {
      table.push_back(shared);
      table.back().help = "no summary lines";
    }
  }
  return table;
}

bool in(const std::vector<const char*>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Applies the --config file to every flag the command line left out; returns the flags it gave.
std::set<std::string> apply_config(const CLI::App& command, PhaseOptions& options) {
  std::set<std::string> given;
  if (options.config.empty()) return given;
  const std::string source = "--config '" + options.config + "'";
  const FlagTable table = phase_flags(options);  // stores into the same options
  for (const ConfigSetting& setting : read_phase_config(options.config)) {
    const auto flag = std::find_if(table.begin(), table.end(),
                                   [&](const Flag& f) { return f.name == setting.flag; });
    const std::string where = source + ", key '" + setting.key + "'";
    if (flag == table.end()) {
      throw input_error(where + ": unknown setting (the keys are flag names without the dashes; " +
                        kHelpHint + ")");
    }
    if (in(kCommandLineOnly, flag->name) || flag->name == "--device" || flag->name == "--quiet") {
      throw input_error(where + ": give " + flag->name + " on the command line, not in the file");
    }
    const bool is_switch = flag->value_name.empty();
    if (is_switch != setting.boolean) {
      throw input_error(where + (is_switch
                                     ? ": expected true or false"
                                     : ": expected a value, " + std::string("got a boolean")));
    }
    if (setting.list && !in(kListFlags, flag->name)) {
      throw input_error(where + ": expected a single value, got an array");
    }
    given.insert(flag->name);
    if (command.count(flag->name) > 0) continue;  // the command line wins
    if (is_switch && !setting.on) continue;
    try {
      flag->apply(setting.value);
    } catch (const CliError& error) {
      throw input_error(where + ": " + error.what());
    }
  }
  return given;
}

}  // namespace

const char* tile_method_name(fieldfuse::TileOptimizerMethod method) {
  switch (method) {
    case fieldfuse::TileOptimizerMethod::Adam:
      return "adam";
    case fieldfuse::TileOptimizerMethod::NAdam:
      return "nadam";
    case fieldfuse::TileOptimizerMethod::Newton:
      break;
  }
  return "newton";
}

CLI::App* add_phase_command(CLI::App& app, PhaseOptions& options) {
  options.output = "";
  options.microscope = fieldfuse::MicroscopeSettings{};
  options.microscope.pupil_steepness = kDefaultPupilSteepness;
  options.regularization = kDefaultRegularization;
  options.tile = kDefaultTile;
  options.overlap = kDefaultOverlap;
  options.method = kDefaultMethod;
  options.iterations = kDefaultIterations;
  options.size = kDefaultSize;
  options.noise = kDefaultNoise;
  options.seed = kDefaultSeed;
  return add_command(
      app, "phase",
      "quantitative phase (and absorption) of a defocus stack, tile by tile, with optional "
      "per-tile focus and tilt",
      phase_flags(options),
      "Tiles of --tile pixels (--overlap shared) are reconstructed with the thin-object\n"
      "transfer functions and the Tikhonov inverse, after optimising each tile's focus\n"
      "offset and illumination tilt when --optimize names them, and blended back with\n"
      "cosine ramps over the overlaps. Without --input it simulates a field (Gaussian\n"
      "blobs of phase, each tile imaged through the thin forward model with its own\n"
      "known focus offset and tilt: a z ramp of +-0.75 slice across x and a tilt of up to\n"
      "15 degrees pointing away from the centre, plus noise), optimises focus and tilt\n"
      "and reports how well the parameters and the phase were recovered, and the phase's\n"
      "correlation with the truth with and without the optimisation. The inverse applies\n"
      "its filter unconjugated (waveorder's convention), which inverts a tilted stack\n"
      "exactly at azimuth + 180 degrees, so the simulation images each tile with the\n"
      "transfer functions of azimuth + 180 degrees (the conjugates of the true ones) and\n"
      "the true parameters are the optimum.");
}

void finish_phase_options(const CLI::App& command, PhaseOptions& options) {
  reject_leftovers(command, kHelpHint);
  const bool from_file = !options.input.empty();
  if (from_file) {
    for (const char* flag : kEmbeddedFlags) {
      if (command.count(flag) > 0) {
        throw usage_error(std::string(flag) + " applies only to the embedded default, not to " +
                          "--input");
      }
    }
  }
  const std::set<std::string> from_config = apply_config(command, options);
  const auto given = [&](const char* flag) {
    return command.count(flag) > 0 || from_config.count(flag) > 0;
  };
  fieldfuse::MicroscopeSettings& m = options.microscope;
  if (from_file) {
    std::string missing;
    for (const char* flag : kRequiredWithInput) {
      if (!given(flag)) missing += (missing.empty() ? "" : ", ") + std::string(flag);
    }
    if (!missing.empty()) {
      throw usage_error("--input needs the microscope's " + missing + " (as flags or in --config)");
    }
  } else {
    if (!given("--pixel-size")) m.pixel_size = kDefaultPixelSize;
    if (!given("--wavelength")) m.wavelength = kDefaultWavelength;
    if (!given("--na-illumination")) m.na_illumination = kDefaultNaIllumination;
    if (!given("--na-detection")) m.na_detection = kDefaultNaDetection;
    if (!given("--z-spacing")) options.z_spacing = kDefaultZSpacing;
    if (!given("--tile")) options.tile = kEmbeddedTile;
    if (!given("--overlap")) options.overlap = kEmbeddedOverlap;
  }
  const MethodRates& rates =
      options.method == fieldfuse::TileOptimizerMethod::Newton ? kNewtonRates : kAdamRates;
  if (!given("--lr-z")) options.lr_z = rates.z;
  if (!given("--lr-zenith")) options.lr_zenith = rates.zenith;
  if (!given("--lr-azimuth")) options.lr_azimuth = rates.azimuth;
  if (!given("--optimize") && !from_file) {
    options.optimize_z = options.optimize_zenith = options.optimize_azimuth = true;
  }
  if (m.na_detection >= m.index_medium) {
    throw usage_error("--na-detection " + number_text(m.na_detection) +
                      " must be below --index-medium " + number_text(m.index_medium));
  }
  if (options.overlap >= options.tile) {
    throw usage_error("--overlap " + std::to_string(options.overlap) +
                      " must be smaller than --tile " + std::to_string(options.tile));
  }
  if (!from_file && options.tile > options.size) {
    throw usage_error("--tile " + std::to_string(options.tile) +
                      " is larger than the simulated field (--size " +
                      std::to_string(options.size) + ")");
  }
}

PhaseOptions parse_phase_options(const std::vector<std::string>& args) {
  std::vector<std::string> full = {"phase"};
  full.insert(full.end(), args.begin(), args.end());
  CommandLine command_line;
  command_line.parse(full);
  if (!command_line.phase_selected()) throw usage_error("expected the phase command");
  return command_line.phase_options();
}

}  // namespace fieldfuse::cli
