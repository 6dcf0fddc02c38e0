// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse denoise` subcommand: load or synthesise a volume, denoise it, score and save it.
#include "denoise.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "atomic_outputs.h"
#include "backend.h"
#include "cli_error.h"
#include "denoise_options.h"
#include "denoise_report.h"
#include "fieldfuse/metrics.h"
#include "npy.h"
#include "phantom.h"
#include "preview.h"
#include "solver.h"
#include "volume_io.h"

namespace fieldfuse::cli {
namespace {

// Quantiles of the robust intensity range: wide enough to keep real structure, narrow enough that
// a few hot pixels or noise tails do not set the scale.
constexpr double kRobustLow = 0.005;
constexpr double kRobustHigh = 0.995;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Inputs {
  Volume noisy;
  Volume clean;  ///< empty when unknown
  bool has_clean = false;
  bool from_phantom = false;
  std::string source;        ///< "phantom" or the input path
  std::string clean_source;  ///< "phantom", the --clean path, or ""
};

Inputs load_inputs(const DenoiseOptions& options) {
  Inputs inputs;
  if (options.input.empty()) {
    inputs.clean = shepp_logan_3d(options.phantom_size);
    inputs.noisy = inputs.clean;
    add_gaussian_noise(inputs.noisy, options.noise_sigma, options.seed);
    inputs.has_clean = true;
    inputs.from_phantom = true;
    inputs.source = inputs.clean_source = "phantom";
    return inputs;
  }
  inputs.noisy = load_volume(options.input, "--input");
  inputs.source = options.input;
  if (!options.clean.empty()) {
    inputs.clean = load_volume(options.clean, "--clean");
    if (!inputs.clean.same_shape(inputs.noisy)) {
      throw input_error("--clean '" + options.clean + "': shape " + inputs.clean.shape_str() +
                        " does not match --input's " + inputs.noisy.shape_str());
    }
    inputs.has_clean = true;
    inputs.clean_source = options.clean;
  }
  return inputs;
}

Normalisation normalisation_for(const Volume& noisy) {
  const IntensityRange robust = quantile_range(noisy.voxels, kRobustLow, kRobustHigh);
  Normalisation n;
  n.offset = robust.low;
  n.scale = robust.span();
  if (!(n.scale > 0.0)) n.scale = min_max(noisy.voxels).span();  // mostly-constant volumes
  if (!(n.scale > 0.0)) n.scale = 1.0;                           // a constant volume
  return n;
}

Volume transformed(const Volume& volume, double multiply, double add) {
  Volume out = volume;
  for (float& v : out.voxels) v = static_cast<float>(v * multiply + add);
  return out;
}

// The peak of PSNR and L of SSIM: the clean volume's range, or 1 for a constant one.
double reference_range(const Volume& clean) {
  const double span = min_max(clean.voxels).span();
  return span > 0.0 ? span : 1.0;
}

Metrics score(const Volume& noisy, const Volume& denoised, const Volume& clean) {
  Metrics m;
  m.data_range = reference_range(clean);
  m.psnr_noisy = fieldfuse::psnr(host_view(noisy), host_view(clean), m.data_range);
  m.psnr_denoised = fieldfuse::psnr(host_view(denoised), host_view(clean), m.data_range);
  m.ssim_noisy = fieldfuse::ssim_3d(host_view(noisy), host_view(clean), m.data_range);
  m.ssim_denoised = fieldfuse::ssim_3d(host_view(denoised), host_view(clean), m.data_range);
  return m;
}

void print_progress(const ProgressReport& report, std::int64_t max_iterations) {
  std::printf("  iter %6lld/%lld  objective %.6e", static_cast<long long>(report.iteration),
              static_cast<long long>(max_iterations), report.objective);
  std::printf("  |x-x*|/|y| <= %.1e", report.distance_bound);
  if (!std::isnan(report.psnr)) std::printf("  PSNR %.2f dB", report.psnr);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int run_denoise(const DenoiseOptions& options) {
  const Clock::time_point start = Clock::now();
  check_output_directory("--output", options.output);
  const std::vector<std::string> output_paths = {options.output + ".npy", options.output + ".png",
                                                 options.output + ".json"};
  refuse_outputs_that_are_inputs(
      {{"--output", output_paths[0]}, {"--output", output_paths[1]}, {"--output", output_paths[2]}},
      {{"--input", options.input}, {"--clean", options.clean}});

  Timings timings;
  Clock::time_point phase = Clock::now();
  const Inputs inputs = load_inputs(options);
  timings.load = seconds_since(phase);
  Backend backend = Backend::create(options.device);
  const Normalisation normalisation = normalisation_for(inputs.noisy);
  const std::string label = inputs.from_phantom ? "phantom" : "'" + inputs.source + "'";
  std::printf("fieldfuse denoise: %s %s, tv=%s lambda=%g, on %s\n", label.c_str(),
              inputs.noisy.shape_str().c_str(), tv_kind_name(options.tv), options.lambda,
              backend.description().c_str());

  SolverSettings settings;
  settings.kind = options.tv;
  settings.lambda = options.lambda;
  settings.eps = options.eps;
  settings.max_iterations = options.iterations;
  settings.tolerance = options.tolerance;
  settings.progress_every = options.quiet ? 0 : options.progress_every;
  const double to_unit = 1.0 / normalisation.scale;
  const Volume noisy_unit = transformed(inputs.noisy, to_unit, -normalisation.offset * to_unit);
  const Volume clean_unit =
      inputs.has_clean ? transformed(inputs.clean, to_unit, -normalisation.offset * to_unit)
                       : Volume();
  const double psnr_range_unit = inputs.has_clean ? reference_range(inputs.clean) * to_unit : 1.0;

  phase = Clock::now();
  Volume denoised_unit;
  const SolverOutcome outcome = solve_tv_denoising(
      backend, settings, noisy_unit, inputs.has_clean ? &clean_unit : nullptr, psnr_range_unit,
      [&](const ProgressReport& report) { print_progress(report, options.iterations); },
      denoised_unit);
  timings.solve = seconds_since(phase);
  const Volume denoised = transformed(denoised_unit, normalisation.scale, normalisation.offset);

  phase = Clock::now();
  Metrics metrics;
  if (inputs.has_clean) metrics = score(inputs.noisy, denoised, inputs.clean);
  timings.metrics = seconds_since(phase);

  // All three outputs land together or not at all (Note [atomic outputs]).
  phase = Clock::now();
  std::vector<const Volume*> rows = {&inputs.noisy, &denoised};
  if (inputs.has_clean) rows.push_back(&inputs.clean);
  const IntensityRange window =
      inputs.has_clean
          ? min_max(inputs.clean.voxels)
          : IntensityRange{normalisation.offset, normalisation.offset + normalisation.scale};
  DenoiseRecord record;
  record.options = &options;
  record.from_phantom = inputs.from_phantom;
  record.shape = inputs.noisy.shape();
  record.clean_source = inputs.has_clean ? inputs.clean_source : "";
  record.device = backend.description();
  record.normalisation = normalisation;
  record.outcome = &outcome;
  record.metrics = inputs.has_clean ? &metrics : nullptr;
  record.outputs = output_paths;
  AtomicOutputs outputs;
  outputs.add(output_paths[0], [&](OutputStream& out) {
    write_npy_float32(out, denoised.shape(), denoised.voxels.data());
  });
  outputs.add(output_paths[1], [&](OutputStream& out) {
    const std::vector<std::uint8_t> png = encode_slice_preview(rows, window);
    out.write(png.data(), png.size());
  });
  // Written last, so its timings cover the other two.
  outputs.add(output_paths[2], [&](OutputStream& out) {
    record.timings = timings;
    record.timings.write = seconds_since(phase);
    record.timings.total = seconds_since(start);
    const std::string json = denoise_report_json(record);
    out.write(json.data(), json.size());
  });
  outputs.commit();
  timings.total = seconds_since(start);

  std::printf("solver: %s, %lld iterations%s, %.2f s\n", outcome.method.c_str(),
              static_cast<long long>(outcome.iterations), outcome.converged ? " (converged)" : "",
              timings.solve);
  if (inputs.has_clean) {
    std::printf("PSNR  noisy %.2f dB -> denoised %.2f dB\n", metrics.psnr_noisy,
                metrics.psnr_denoised);
    std::printf("SSIM  noisy %.4f -> denoised %.4f\n", metrics.ssim_noisy, metrics.ssim_denoised);
  }
  std::printf("wrote %s, %s, %s (total %.2f s)\n", output_paths[0].c_str(), output_paths[1].c_str(),
              output_paths[2].c_str(), timings.total);
  return 0;
}

}  // namespace fieldfuse::cli
