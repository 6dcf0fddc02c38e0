// SPDX-License-Identifier: Apache-2.0
// The flags of `fieldfuse tomo`: their defaults, their table (parsing, validation and --help) and
// the checks across flags.
#include "tomo_options.h"

#include <CLI/CLI.hpp>
#include <limits>

#include "cli_error.h"
#include "command_line.h"
#include "file_io.h"
#include "mrc.h"
#include "tilt_angles.h"
#include "tomo_kplanes_options.h"

namespace fieldfuse::cli {
namespace {

// SIRT on the embedded 64^3 phantom (2% noise) peaks in PSNR near 60-70 iterations (28.6 dB) and
// then slowly fits the noise (28.5 dB at 100): 50 is within 0.05 dB of the peak at ~5 s on 2 cores.
constexpr std::int64_t kDefaultIterations = 50;
constexpr std::int64_t kMaxIterations = 1000000;
constexpr double kDefaultRelaxation = 1.0;
// On the embedded phantom (2% noise) Hann gives FBP's best PSNR and SSIM: 26.9 dB / 0.49 against
// Shepp-Logan's 26.7 / 0.44 and the bare ramp's 26.6 / 0.41; noisy data want the window.
constexpr const char* kDefaultFilter = "hann";
constexpr const char* kDefaultPhantomAngles = "-60:60:3";  // IMOD's common range: 41 tilts
constexpr std::int64_t kDefaultPhantomSize = 64;
constexpr std::int64_t kMaxPhantomSize = 512;
// Gaussian noise sigma as a fraction of the largest noiseless projection value.
constexpr double kDefaultNoise = 0.02;
constexpr double kMaxNoise = 10.0;
constexpr std::uint64_t kDefaultSeed = 1;
constexpr std::int64_t kDefaultProgressEvery = 10;
// Volumes beyond 2^15 per axis would not fit any memory this app runs in.
constexpr std::int64_t kMaxVolumeExtent = 32768;

const char* const kHelpHint = "see 'fieldfuse tomo --help'";

// Flags that only a file run takes, and those only the embedded phantom takes.
const std::vector<const char*> kFileFlags = {"--tlt", "--tilt-axis", "--truth", "--output"};
const std::vector<const char*> kPhantomFlags = {"--phantom-size", "--noise", "--output-dir"};

std::array<std::int64_t, 3> parse_shape(const std::string& flag, const std::string& text) {
  std::array<std::int64_t, 3> shape{};
  std::size_t start = 0;
  for (int axis = 0; axis < 3; ++axis) {
    const std::size_t comma = text.find(',', start);
    if ((axis < 2) == (comma == std::string::npos)) {
      throw usage_error(flag + " expects D,H,W (three whole numbers), got '" + text + "'");
    }
    const std::string part = text.substr(start, axis < 2 ? comma - start : std::string::npos);
    shape[axis] = parse_integer(flag, part, 1, kMaxVolumeExtent);
    start = comma + 1;
  }
  return shape;
}

FlagTable tomo_flags(TomoOptions& options) {
  const std::string io = "Input and output";
  const std::string method = "Method";
  const std::string phantom = "Embedded phantom (only without --input)";
  constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
  FlagTable table = {
      {"--input", "PATH",
       "tilt stack [n, H, W]: MRC (.mrc .st .ali; modes 0, 1, 2, 6, 12, either\n"
       "byte order), a multi-page TIFF (one page per projection) or .npy",
       "", io, [&options](const std::string& v) { options.input = v; }},
      {"--tlt", "PATH", "IMOD tilt angles (.tlt/.rawtlt): degrees, one per line", "", io,
       [&options](const std::string& v) { options.tlt = v; }},
      {"--angles", "START:STOP:STEP",
       "tilt angles in degrees, stop included when on the grid\n"
       "(-60:60:3 gives 41); the embedded phantom's tilts",
       kDefaultPhantomAngles, io,
       [&options](const std::string& v) {
         parse_angle_range(v, "--angles");  // validated now, a usage error
         options.angles = v;
       }},
      {"--tilt-axis", "x|y",
       "the image axis the tilt axis runs along; y (vertical, IMOD's\n"
       "aligned stacks) transposes each image on input and the volume back",
       "y", io,
       [&options](const std::string& v) {
         options.tilt_axis = parse_choice("--tilt-axis", v, {"x", "y"})[0];
       }},
      {"--truth", "PATH", "a volume [D, H, W] (.mrc, .npy, .tif) to score against (PSNR, SSIM)", "",
       io, [&options](const std::string& v) { options.truth = v; }},
      {"--output", "PATH",
       "the volume [D, H, W] (x = image x, y = image y, z = beam): .mrc/.rec\n"
       "(float32, voxel size from the input's MRC header), .tif (float32\n"
       "pages) or .npy",
       "", io,
       [&options](const std::string& v) {
         const std::string extension = lowercase_extension(v);
         if (!is_mrc_extension(extension) && extension != ".npy" && extension != ".tif" &&
             extension != ".tiff") {
           throw usage_error("--output '" + v + "': unsupported type '" + extension +
                             "' (expected .mrc, .rec, .st, .ali, .map, .tif, .tiff or .npy)");
         }
         options.output = v;
       }},
      {"--output-dir", "DIR", "embedded run: writes <method>.mrc for each method and truth.mrc", "",
       io, [&options](const std::string& v) { options.output_dir = v; }},
      {"--png-dir", "DIR", "writes <method>.png: central ortho-slices (rows: result, truth)", "",
       io, [&options](const std::string& v) { options.png_dir = v; }},
      {"--report", "PATH", "JSON report: settings, residuals, timings, metrics", "", io,
       [&options](const std::string& v) { options.report = v; }},
      {"--method", "sirt|fbp|kplanes",
       "sirt:    x <- x + lambda*C*A^T*R*(b - A*x) on the voxel grid\n"
       "fbp:     filtered back-projection\n"
       "kplanes: a K-Planes neural field trained on the projections\n"
       "default: sirt for --input, every method for the embedded run",
       "", method,
       [&options](const std::string& v) {
         const std::string name = parse_choice("--method", v, {"sirt", "fbp", "kplanes"});
         options.methods = {name == "sirt"  ? TomoMethod::Sirt
                            : name == "fbp" ? TomoMethod::Fbp
                                            : TomoMethod::KPlanes};
       }},
      {"--iterations", "N", "SIRT iterations", std::to_string(kDefaultIterations), method,
       [&options](const std::string& v) {
         options.iterations = parse_integer("--iterations", v, 1, kMaxIterations);
       }},
      {"--relaxation", "X", "SIRT relaxation lambda, in (0, 2)", number_text(kDefaultRelaxation),
       method,
       [&options](const std::string& v) {
         options.relaxation = parse_number_in("--relaxation", v, 0.0, 2.0, true);
         if (options.relaxation >= 2.0) {
           throw usage_error("--relaxation must be > 0 and < 2, got " + v);
         }
       }},
      {"--positivity", "", "SIRT: clamp the volume at 0 after each update", "", method,
       [&options](const std::string&) { options.positivity = true; }},
      {"--filter", "ramp|shepp-logan|hann", "FBP filter: the ramp, alone or windowed",
       kDefaultFilter, method,
       [&options](const std::string& v) {
         options.filter = parse_choice("--filter", v, {"ramp", "shepp-logan", "hann"});
       }},
      {"--volume-shape", "D,H,W",
       "voxels over the region the detector sees (x, y) and, along the beam\n"
       "(z), the image's extent across the tilt axis",
       "one voxel per pixel", method,
       [&options](const std::string& v) {
         options.volume_shape = parse_shape("--volume-shape", v);
       }},
      {"--thickness", "T", "keep the central T slices along z (the beam)", "all D", method,
       [&options](const std::string& v) {
         options.thickness = parse_integer("--thickness", v, 1, kMaxVolumeExtent);
       }},
      {"--phantom-size", "N", "volume N^3 and detector N^2", std::to_string(kDefaultPhantomSize),
       phantom,
       [&options](const std::string& v) {
         options.phantom_size = parse_integer("--phantom-size", v, 8, kMaxPhantomSize);
       }},
      {"--noise", "SIGMA",
       "Gaussian noise sigma, as a fraction of the largest noiseless\nprojection value",
       number_text(kDefaultNoise), phantom,
       [&options](const std::string& v) {
         options.noise = parse_number_in("--noise", v, 0.0, kMaxNoise);
       }},
      {"--seed", "S", "the phantom's noise and K-Planes' draws and initialisation",
       std::to_string(kDefaultSeed), method,
       [&options](const std::string& v) {
         options.seed = static_cast<std::uint64_t>(parse_integer("--seed", v, 0, kInt64Max));
       }},
  };
  for (Flag& flag : kplanes_flags(options, "K-Planes (--method kplanes)")) {
    table.push_back(std::move(flag));
  }
  const FlagTable shared = run_flags(options, "");
  // --help lists flags in table order: --device with the method's flags, the rest at the end.
  FlagTable ordered;
  for (Flag& flag : table) {
    ordered.push_back(std::move(flag));
    if (ordered.back().name != "--thickness") continue;
    for (const Flag& shared_flag : shared) {
      if (shared_flag.name != "--device") continue;
      ordered.push_back(shared_flag);
      ordered.back().group = method;
    }
  }
  for (const Flag& shared_flag : shared) {
    if (shared_flag.name == "--progress" || shared_flag.name == "--quiet") {
      ordered.push_back(shared_flag);
    }
  }
  return ordered;
}

}  // namespace

const char* tomo_method_name(TomoMethod method) {
  switch (method) {
    case TomoMethod::Sirt:
      return "sirt";
    case TomoMethod::Fbp:
      return "fbp";
    case TomoMethod::KPlanes:
      break;
  }
  return "kplanes";
}

std::vector<TomoMethod> tomo_methods() {
  return {TomoMethod::Sirt, TomoMethod::Fbp, TomoMethod::KPlanes};
}

CLI::App* add_tomo_command(CLI::App& app, TomoOptions& options) {
  options.output = "";
  options.iterations = kDefaultIterations;
  options.relaxation = kDefaultRelaxation;
  options.filter = kDefaultFilter;
  options.phantom_size = kDefaultPhantomSize;
  options.noise = kDefaultNoise;
  options.seed = kDefaultSeed;
  options.progress_every = kDefaultProgressEvery;
  return add_command(
      app, "tomo",
      "tomographic reconstruction of a tilt series (parallel beam): SIRT, FBP or K-Planes",
      tomo_flags(options),
      "Without --input it reconstructs an embedded phantom (ellipsoids and dense particles,\n"
      "projected analytically over -60..60 degrees every 3 with noise) with every method\n"
      "and prints PSNR/SSIM and per-axis errors against the truth. Full reference:\n"
      "docs/tomo_cli.md.");
}

void finish_tomo_options(const CLI::App& command, TomoOptions& options) {
  reject_leftovers(command, kHelpHint);
  const bool from_file = !options.input.empty();
  for (const char* flag : from_file ? kPhantomFlags : kFileFlags) {
    if (command.count(flag) > 0) {
      throw usage_error(std::string(flag) + (from_file ? " applies only to the embedded phantom, "
                                                         "not to --input"
                                                       : " needs --input"));
    }
  }
  const bool has_angles = command.count("--angles") > 0;
  if (from_file && has_angles == !options.tlt.empty()) {
    throw usage_error(has_angles ? "give the tilt angles once: --tlt or --angles, not both"
                                 : "--input needs its tilt angles: --tlt FILE or --angles "
                                   "START:STOP:STEP");
  }
  if (!from_file && !has_angles) options.angles = kDefaultPhantomAngles;
  if (options.methods.empty()) {
    options.methods = from_file ? std::vector<TomoMethod>{TomoMethod::Sirt} : tomo_methods();
  }
  finish_kplanes_options(command, options, from_file);
}

TomoOptions parse_tomo_options(const std::vector<std::string>& args) {
  std::vector<std::string> full = {"tomo"};
  full.insert(full.end(), args.begin(), args.end());
  CommandLine command_line;
  command_line.parse(full);
  if (!command_line.tomo_selected()) throw usage_error("expected the tomo command");
  return command_line.tomo_options();
}

}  // namespace fieldfuse::cli
