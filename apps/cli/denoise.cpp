// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse denoise` subcommand: load or synthesise a volume, denoise it, score and save it.
#include "denoise.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "backend.h"
#include "cli_error.h"
#include "denoise_options.h"
#include "fieldfuse/core.h"
#include "file_io.h"
#include "flags.h"
#include "json.h"
#include "metrics.h"
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

// Fails before the work rather than after it when the outputs have nowhere to go.
void check_output_directory(const std::string& prefix) {
  const std::filesystem::path parent = std::filesystem::path(prefix).parent_path();
  std::error_code error;
  if (!parent.empty() && !std::filesystem::is_directory(parent, error)) {
    throw usage_error("--output '" + prefix + "': directory '" + parent.string() +
                      "' does not exist");
  }
}

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

// The solver works on (v − offset) / scale, which makes λ and eps independent of the data's units.
struct Normalisation {
  double offset = 0.0;
  double scale = 1.0;
};

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

struct Metrics {
  double data_range = 0.0;
  double psnr_noisy = 0.0, psnr_denoised = 0.0;
  double ssim_noisy = 0.0, ssim_denoised = 0.0;
};

// The peak of PSNR and L of SSIM: the clean volume's range, or 1 for a constant one.
double reference_range(const Volume& clean) {
  const double span = min_max(clean.voxels).span();
  return span > 0.0 ? span : 1.0;
}

Metrics score(const Volume& noisy, const Volume& denoised, const Volume& clean) {
  Metrics m;
  m.data_range = reference_range(clean);
  m.psnr_noisy = psnr(noisy, clean, m.data_range);
  m.psnr_denoised = psnr(denoised, clean, m.data_range);
  m.ssim_noisy = ssim_3d(noisy, clean, m.data_range);
  m.ssim_denoised = ssim_3d(denoised, clean, m.data_range);
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

struct Timings {
  double load = 0.0, solve = 0.0, metrics = 0.0, write = 0.0, total = 0.0;
};

JsonObject build_report(const DenoiseOptions& options, const Inputs& inputs, const Backend& backend,
                        const Normalisation& normalisation, const SolverOutcome& outcome,
                        const Metrics* metrics, const Timings& timings) {
  JsonObject input;
  input.add("source", inputs.from_phantom ? "phantom" : "file");
  if (inputs.from_phantom) {
    JsonObject phantom;
    phantom.add("kind", "modified Shepp-Logan 3-D")
        .add("size", options.phantom_size)
        .add("noise_sigma", options.noise_sigma)
        .add("seed", static_cast<std::int64_t>(options.seed));
    input.add("phantom", std::move(phantom));
  } else {
    input.add("path", inputs.source);
  }
  input.add("shape", inputs.noisy.shape());
  if (inputs.has_clean) {
    input.add("clean_reference", inputs.clean_source);
  } else {
    input.add_null("clean_reference");
  }

  JsonObject settings;
  settings.add("tv", tv_kind_name(options.tv))
      .add("lambda", options.lambda)
      .add("eps", options.tv == TvKind::Isotropic ? options.eps : std::nan(""))
      .add("max_iterations", options.iterations)
      .add("tolerance", options.tolerance)
      .add("device", backend.description())
      .add("intensity_offset", normalisation.offset)
      .add("intensity_scale", normalisation.scale);

  JsonObject solver;
  solver.add("method", outcome.method)
      .add("iterations", outcome.iterations)
      .add("converged", outcome.converged)
      .add("objective_normalised", outcome.objective)
      .add("restarts", outcome.restarts)
      .add("distance_bound", outcome.distance_bound)
      .add("step_size", outcome.step_size)
      .add("duality_gap", outcome.gap);

  JsonObject times;
  times.add("load", timings.load)
      .add("solve", timings.solve)
      .add("metrics", timings.metrics)
      .add("write", timings.write)
      .add("total", timings.total);

  JsonObject outputs;
  outputs.add("volume", options.output + ".npy")
      .add("preview", options.output + ".png")
      .add("report", options.output + ".json");

  JsonObject report;
  report.add("fieldfuse_version", fieldfuse::build_info().version)
      .add("command", "denoise")
      .add("input", std::move(input))
      .add("settings", std::move(settings))
      .add("solver", std::move(solver));
  if (metrics != nullptr) {
    JsonObject scores;
    scores.add("data_range", metrics->data_range)
        .add("psnr_noisy", metrics->psnr_noisy)
        .add("psnr_denoised", metrics->psnr_denoised)
        .add("ssim_noisy", metrics->ssim_noisy)
        .add("ssim_denoised", metrics->ssim_denoised);
    report.add("metrics", std::move(scores));
  } else {
    report.add_null("metrics");
  }
  report.add("timings_s", std::move(times)).add("outputs", std::move(outputs));
  return report;
}

}  // namespace

int run_denoise(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << denoise_help();
    return 0;
  }
  const Clock::time_point start = Clock::now();
  const DenoiseOptions options = parse_denoise_options(args);
  check_output_directory(options.output);
  Backend backend = Backend::create(options.device);

  Timings timings;
  Clock::time_point phase = Clock::now();
  const Inputs inputs = load_inputs(options);
  timings.load = seconds_since(phase);
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

  phase = Clock::now();
  save_volume_npy(options.output + ".npy", denoised);
  std::vector<const Volume*> rows = {&inputs.noisy, &denoised};
  if (inputs.has_clean) rows.push_back(&inputs.clean);
  const IntensityRange window =
      inputs.has_clean
          ? min_max(inputs.clean.voxels)
          : IntensityRange{normalisation.offset, normalisation.offset + normalisation.scale};
  write_slice_preview(options.output + ".png", rows, window);
  timings.write = seconds_since(phase);
  timings.total = seconds_since(start);
  write_file_text(options.output + ".json",
                  build_report(options, inputs, backend, normalisation, outcome,
                               inputs.has_clean ? &metrics : nullptr, timings)
                      .dump());

  std::printf("solver: %s, %lld iterations%s, %.2f s\n", outcome.method.c_str(),
              static_cast<long long>(outcome.iterations), outcome.converged ? " (converged)" : "",
              timings.solve);
  if (inputs.has_clean) {
    std::printf("PSNR  noisy %.2f dB -> denoised %.2f dB\n", metrics.psnr_noisy,
                metrics.psnr_denoised);
    std::printf("SSIM  noisy %.4f -> denoised %.4f\n", metrics.ssim_noisy, metrics.ssim_denoised);
  }
  std::printf("wrote %s.npy, %s.png, %s.json (total %.2f s)\n", options.output.c_str(),
              options.output.c_str(), options.output.c_str(), timings.total);
  return 0;
}

}  // namespace fieldfuse::cli
