// SPDX-License-Identifier: Apache-2.0
// The flags of `fieldfuse denoise`: their defaults, their parsing and validation, and the help
// text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "tv_term.h"

namespace fieldfuse::cli {

struct DenoiseOptions {
  std::string input;  ///< "" = the built-in phantom
  std::string clean;  ///< optional reference for metrics
  std::string output = "denoised";
  TvKind tv = TvKind::Isotropic;
  double lambda = -1.0;  ///< < 0 until set: the default depends on the functional
  double eps = 0.0;
  std::int64_t iterations = 0;
  double tolerance = 0.0;
  DeviceChoice device = DeviceChoice::Auto;
  std::int64_t phantom_size = 0;
  double noise_sigma = 0.0;
  std::uint64_t seed = 0;
  std::int64_t progress_every = 0;
  bool quiet = false;
};

/// Parses and validates the arguments after `denoise`; usage errors (exit 2) name the flag.
DenoiseOptions parse_denoise_options(const std::vector<std::string>& args);

/// The text `fieldfuse denoise --help` prints.
std::string denoise_help();

}  // namespace fieldfuse::cli
