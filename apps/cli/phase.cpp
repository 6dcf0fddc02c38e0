// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse phase` subcommand: load a defocus stack (or simulate the embedded default), tile
// it, optimise and reconstruct every tile, blend, score and save the results.
#include "phase.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "atomic_outputs.h"
#include "cli_error.h"
#include "file_io.h"
#include "npy.h"
#include "phase_engine.h"
#include "phase_report.h"
#include "phase_simulate.h"
#include "phase_tiles.h"
#include "png.h"
#include "tiff_writer.h"
#include "volume_io.h"

namespace fieldfuse::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kRadians = 0.017453292519943295;  // pi / 180
constexpr ArrayRole kDefocusStackRole = {"defocus stack", "[Z, Y, X]", "pixel",
                                         "the reconstruction"};
// The preview's stretch: robust to hot pixels and to the few extreme values at blob peaks.
constexpr double kPreviewLow = 0.005, kPreviewHigh = 0.995;
constexpr std::int64_t kPreviewGap = 2;  // pixels between the result and the truth
// The parameter maps: file suffix, and which value of the tile each holds.
const char* const kMapNames[] = {"z_offset", "zenith", "azimuth", "loss"};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string map_path(const std::string& prefix, const char* name) {
  return prefix + "_" + name + ".npy";
}

// One [height, width] image, as .npy (2-D) or a one-page float32 TIFF.
void add_image_output(AtomicOutputs& outputs, const std::string& path,
                      const std::vector<float>& image, std::int64_t height, std::int64_t width) {
  if (lowercase_extension(path) == ".npy") {
    outputs.add(path, [&image, height, width](OutputStream& out) {
      write_npy_float32(out, {height, width}, image.data());
    });
  } else {
    outputs.add(path, [&image, height, width](OutputStream& out) {
      const std::vector<std::uint8_t> tiff = encode_tiff_float32(1, height, width, image.data());
      out.write(tiff.data(), tiff.size());
    });
  }
}

// Gray panels side by side, each stretched between its own robust percentiles.
std::vector<std::uint8_t> preview_png(const std::vector<const std::vector<float>*>& panels,
                                      std::int64_t height, std::int64_t width) {
  const auto count = static_cast<std::int64_t>(panels.size());
  const std::int64_t image_width = count * width + (count - 1) * kPreviewGap;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(height * image_width), 0);
  for (std::int64_t p = 0; p < count; ++p) {
    const std::vector<float>& values = *panels[static_cast<std::size_t>(p)];
    const IntensityRange window = quantile_range(values, kPreviewLow, kPreviewHigh);
    const double span = window.span() > 0.0 ? window.span() : 1.0;
    for (std::int64_t y = 0; y < height; ++y) {
      for (std::int64_t x = 0; x < width; ++x) {
        const double gray = std::round(
            255.0 * (values[static_cast<std::size_t>(y * width + x)] - window.low) / span);
        pixels[static_cast<std::size_t>(y * image_width + p * (width + kPreviewGap) + x)] =
            static_cast<std::uint8_t>(std::clamp(gray, 0.0, 255.0));
      }
    }
  }
  return encode_png_gray8(image_width, height, pixels.data());
}

// The run's field: the stack (a file's) or the simulated truth (the embedded default's).
struct Field {
  std::int64_t slices = 0, height = 0, width = 0;
  Volume stack;                    // file runs
  std::vector<float> truth_phase;  // embedded runs
  std::string format;
};

Field load_field(const PhaseOptions& options) {
  Field field;
  if (options.input.empty()) {
    field.slices = kSimulatedSlices;
    field.height = field.width = options.size;
    field.truth_phase = simulated_phase_object(options.size, options.size, options.seed);
    field.format = "simulated";
    return field;
  }
  VolumeFileInfo info;
  field.stack = load_volume(options.input, "--input", kDefocusStackRole, &info);
  field.slices = field.stack.depth;
  field.height = field.stack.height;
  field.width = field.stack.width;
  field.format = info.format;
  if (options.tile > field.height || options.tile > field.width) {
    throw usage_error("--tile " + std::to_string(options.tile) + " is larger than the field of " +
                      "--input '" + options.input + "' (Y " + std::to_string(field.height) +
                      ", X " + std::to_string(field.width) + " pixels)");
  }
  return field;
}

TileOptimization optimization_request(const PhaseOptions& options) {
  TileOptimization request;
  request.options.method = options.method;
  request.options.iterations = static_cast<int>(options.iterations);
  request.options.regularization = options.regularization;
  request.lr_z = options.optimize_z ? options.lr_z : 0.0;
  request.lr_zenith = options.optimize_zenith ? options.lr_zenith * kRadians : 0.0;
  request.lr_azimuth = options.optimize_azimuth ? options.lr_azimuth * kRadians : 0.0;
  return request;
}

void print_summary(const PhaseRecord& record) {
  const TileParameters p = with_positive_zenith(*record.parameters);
  double z = 0.0, zenith = 0.0;
  for (std::size_t b = 0; b < p.z_offset.size(); ++b) {
    z += p.z_offset[b];
    zenith += p.zenith[b];
  }
  const double n = static_cast<double>(p.z_offset.size());
  std::printf(
      "tiles: mean z offset %.3f slices, mean zenith %.2f deg (optimise %.2f s, "
      "reconstruct %.2f s)\n",
      z / n, zenith / n / kRadians, record.seconds.optimize, record.seconds.reconstruct);
  if (record.has_recovery) {
    const PhaseRecovery& r = record.recovery;
    std::printf(
        "recovery: z offset RMS %.3f slices, zenith RMS %.2f deg, azimuth RMS %.1f deg "
        "(%lld tiles)\n",
        r.z_offset_rms_slices, r.zenith_rms_degrees, r.azimuth_rms_degrees,
        static_cast<long long>(r.azimuth_tiles));
    std::printf(
        "phase: correlation %.4f with the truth (%.4f without optimising, %.4f at the true "
        "parameters), RMSE %.4f rad\n",
        r.phase_correlation, r.start_phase_correlation, r.truth_phase_correlation, r.phase_rmse);
  }
}

}  // namespace

int run_phase(const PhaseOptions& options) {
  const Clock::time_point start = Clock::now();
  const bool embedded = options.input.empty();
  std::vector<std::pair<std::string, std::string>> planned;  // (flag, path) of every output
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--output", options.output},
                                   {"--png", options.png},
                                   {"--absorption", options.absorption},
                                   {"--report", options.report}}) {
    if (path.empty()) continue;
    check_output_directory(flag, path);
    planned.emplace_back(flag, path);
  }
  if (!options.parameter_maps.empty()) {
    for (const char* name : kMapNames) {
      const std::string path = map_path(options.parameter_maps, name);
      check_output_directory("--parameter-maps", path);
      planned.emplace_back("--parameter-maps", path);
    }
  }
  refuse_outputs_that_are_inputs(planned,
                                 {{"--input", options.input}, {"--config", options.config}});

  PhaseRecord record;
  record.options = &options;
  record.embedded = embedded;
  Clock::time_point phase = Clock::now();
  const Field field = load_field(options);
  record.seconds.load = seconds_since(phase);
  record.stack_shape = {field.slices, field.height, field.width};
  record.input_format = field.format;
  const TileGrid grid(field.height, field.width, options.tile, options.overlap);
  record.grid = &grid;

  Backend backend = Backend::create(options.device);
  record.device = backend.description();
  if (!options.quiet) {
    std::printf(
        "fieldfuse phase: %s, %lld slices of %lldx%lld, %lld tiles of %lld^2 "
        "(overlap %lld), on %s\n",
        embedded ? "embedded default" : ("'" + options.input + "'").c_str(),
        static_cast<long long>(field.slices), static_cast<long long>(field.width),
        static_cast<long long>(field.height), static_cast<long long>(grid.count()),
        static_cast<long long>(grid.tile), static_cast<long long>(grid.overlap),
        record.device.c_str());
    std::fflush(stdout);
  }

  PhaseEngine engine(backend, options.microscope, options.z_spacing, field.slices, grid.tile);
  const TileParameters initial(grid.count(), options.z_offset, options.zenith * kRadians,
                               options.azimuth * kRadians);
  const TileParameters truth = embedded ? simulated_parameters(grid) : TileParameters();
  TileParameters found = initial;
  const TileOptimization request = optimization_request(options);
  TileBlender phase_blend(grid), absorption_blend(grid), start_blend(grid), truth_blend(grid);
  const bool score_start = embedded && options.optimizes();
  const std::int64_t batch = options.batch > 0 ? options.batch : grid.count();
  const std::int64_t t = grid.tile;
  for (std::int64_t first = 0; first < grid.count(); first += batch) {
    const std::int64_t count = std::min(batch, grid.count() - first);
    std::vector<float> tiles(static_cast<std::size_t>(count * field.slices * t * t));
    phase = Clock::now();
    if (embedded) {
      simulate_tiles(engine, grid, field.truth_phase, truth, first, count, options.noise,
                     options.seed, tiles.data());
      record.seconds.simulate += seconds_since(phase);
    } else {
      cut_tiles(field.stack.voxels.data(), field.slices, grid, first, count, tiles.data());
    }
    const TileParameters start_part = initial.slice(first, count);
    if (options.optimizes()) {
      phase = Clock::now();
      found.assign(first, engine.optimize(tiles.data(), start_part, request));
      record.seconds.optimize += seconds_since(phase);
    }
    std::vector<float> absorption(static_cast<std::size_t>(count * t * t)),
        phase_tiles(absorption.size());
    phase = Clock::now();
    engine.reconstruct(tiles.data(), found.slice(first, count), options.regularization,
                       absorption.data(), phase_tiles.data());
    record.seconds.reconstruct += seconds_since(phase);
    phase = Clock::now();
    for (std::int64_t k = 0; k < count; ++k) {
      phase_blend.add(first + k, phase_tiles.data() + k * t * t);
      absorption_blend.add(first + k, absorption.data() + k * t * t);
    }
    record.seconds.blend += seconds_since(phase);
    if (embedded) {
      // The same reconstruction at the starting and at the true parameters: what the
      // optimisation bought, and what it could have.
      const auto blend_at = [&](const TileParameters& parameters, TileBlender& blend) {
        engine.reconstruct(tiles.data(), parameters, options.regularization, absorption.data(),
                           phase_tiles.data());
        for (std::int64_t k = 0; k < count; ++k)
          blend.add(first + k, phase_tiles.data() + k * t * t);
      };
      if (score_start) blend_at(start_part, start_blend);
      blend_at(truth.slice(first, count), truth_blend);
    }
    ++record.batches;
  }
  phase = Clock::now();
  const std::vector<float> phase_image = phase_blend.image();
  const std::vector<float> absorption_image = absorption_blend.image();
  record.seconds.blend += seconds_since(phase);
  record.parameters = &found;
  if (embedded) {
    record.has_recovery = true;
    const std::vector<float> start_image = score_start ? start_blend.image() : phase_image;
    const std::vector<float> truth_image = truth_blend.image();
    record.recovery =
        score_recovery(truth, found, field.truth_phase, {phase_image, start_image, truth_image});
  }

  // Every output lands together or not at all (Note [atomic outputs]).
  AtomicOutputs outputs;
  if (!options.output.empty())
    add_image_output(outputs, options.output, phase_image, field.height, field.width);
  if (!options.absorption.empty())
    add_image_output(outputs, options.absorption, absorption_image, field.height, field.width);
  std::vector<std::uint8_t> png;
  if (!options.png.empty()) {
    std::vector<const std::vector<float>*> panels = {&phase_image};
    if (embedded) panels.push_back(&field.truth_phase);
    png = preview_png(panels, field.height, field.width);
    outputs.add(options.png, [&png](OutputStream& out) { out.write(png.data(), png.size()); });
  }
  const TileParameters shown = with_positive_zenith(found);
  std::vector<std::vector<float>> maps;
  if (!options.parameter_maps.empty()) {
    maps = {shown.z_offset, shown.zenith, shown.azimuth, shown.loss};
    for (float& v : maps[1]) v = static_cast<float>(v / kRadians);
    for (float& v : maps[2]) v = static_cast<float>(v / kRadians);
    for (std::size_t k = 0; k < maps.size(); ++k) {
      add_image_output(outputs, map_path(options.parameter_maps, kMapNames[k]), maps[k],
                       grid.tiles_y(), grid.tiles_x());
    }
  }
  record.outputs = outputs.paths();
  if (!options.report.empty()) {
    record.outputs.push_back(options.report);
    // Written last, so its total covers the others.
    outputs.add(options.report, [&](OutputStream& out) {
      record.seconds.total = seconds_since(start);
      const std::string json = phase_report_json(record);
      out.write(json.data(), json.size());
    });
  }
  outputs.commit();

  if (!options.quiet) {
    print_summary(record);
    if (!outputs.paths().empty()) {
      std::printf("wrote");
      for (const std::string& path : outputs.paths()) std::printf(" %s", path.c_str());
      std::printf(" (total %.2f s)\n", seconds_since(start));
    }
  }
  return 0;
}

}  // namespace fieldfuse::cli
