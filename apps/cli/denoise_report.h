// SPDX-License-Identifier: Apache-2.0
// The JSON report of `fieldfuse denoise`: what ran, on what, how it converged and how it scored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "denoise_options.h"
#include "solver.h"

namespace fieldfuse::cli {

/// The solver works on (v − offset) / scale, which makes λ and eps independent of the data's units.
struct Normalisation {
  double offset = 0.0;
  double scale = 1.0;
};

struct Metrics {
  double data_range = 0.0;
  double psnr_noisy = 0.0, psnr_denoised = 0.0;
  double ssim_noisy = 0.0, ssim_denoised = 0.0;
};

struct Timings {
  double load = 0.0, solve = 0.0, metrics = 0.0, write = 0.0, total = 0.0;
};

/// Everything the report states about one run.
struct DenoiseRecord {
  const DenoiseOptions* options = nullptr;
  bool from_phantom = false;
  std::vector<std::int64_t> shape;
  std::string clean_source;  ///< "phantom", the --clean path, or "" (none: written as null)
  std::string device;        ///< the backend's description
  Normalisation normalisation;
  const SolverOutcome* outcome = nullptr;
  const Metrics* metrics = nullptr;  ///< null without a clean reference
  Timings timings;
  std::vector<std::string> outputs;  ///< volume, preview, report paths
};

/// The report as pretty-printed JSON (two-space indent, trailing newline). Always valid JSON:
/// non-finite numbers become null, and bytes of a path that are not UTF-8 (say 0xFF) become
/// U+FFFD, since JSON text must be UTF-8.
std::string denoise_report_json(const DenoiseRecord& record);

}  // namespace fieldfuse::cli
