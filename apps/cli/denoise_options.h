// SPDX-License-Identifier: Apache-2.0
// The flags of `fieldfuse denoise`: their defaults, their table (parsing, validation and --help)
// and the checks across flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flag_table.h"
#include "tv_term.h"

namespace CLI {
class App;
}

namespace fieldfuse::cli {

struct DenoiseOptions : RunOptions {
  std::string input;  ///< "" = the built-in phantom
  std::string clean;  ///< optional reference for metrics
  TvKind tv = TvKind::Isotropic;
  double lambda = -1.0;  ///< < 0 until set: the default depends on the functional
  double eps = 0.0;
  std::int64_t phantom_size = 0;
  double noise_sigma = 0.0;
  std::uint64_t seed = 0;
};

/// The largest --lambda. It weights TV of intensities scaled to about 0..1 (the input's robust
/// range), where useful values lie far below 1 and 1e6 already flattens any volume; near 1e30,
/// lambda times the voxel count and the gradients overflow the solver's float32 arithmetic.
constexpr double kMaxLambda = 1e6;

/// Registers `fieldfuse denoise` and its flag table on `app`. `options` receives the defaults now
/// and the flags' values when the command line is parsed; it must outlive `app`.
CLI::App* add_denoise_command(CLI::App& app, DenoiseOptions& options);

/// After parsing: rejects leftovers and inconsistent flags, and fills defaults that depend on
/// other flags (lambda on --tv). Usage errors (exit 2) name the flag.
void finish_denoise_options(const CLI::App& command, DenoiseOptions& options);

/// Parses the arguments after `denoise` (for tests and embedding): add, parse, finish.
DenoiseOptions parse_denoise_options(const std::vector<std::string>& args);

/// The text `fieldfuse denoise --help` prints, generated from the flag table.
std::string denoise_help();

}  // namespace fieldfuse::cli
