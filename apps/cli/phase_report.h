// SPDX-License-Identifier: Apache-2.0
// The JSON report of `fieldfuse phase`: the input, the settings, the tiles, the timings, a per-tile
// summary and, for the embedded default, how well it was recovered.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phase_engine.h"
#include "phase_options.h"
#include "phase_simulate.h"
#include "phase_tiles.h"

namespace fieldfuse::cli {

struct PhaseTimings {
  double load = 0.0, simulate = 0.0, optimize = 0.0, reconstruct = 0.0, blend = 0.0, total = 0.0;
};

/// Everything the report states about one run.
struct PhaseRecord {
  const PhaseOptions* options = nullptr;
  bool embedded = false;
  std::vector<std::int64_t> stack_shape;  ///< [Z, Y, X]
  std::string input_format;               ///< "npy", "tiff" or "simulated"
  const TileGrid* grid = nullptr;
  const TileParameters* parameters = nullptr;  ///< the tiles' final parameters
  std::int64_t batches = 0;
  std::string device;
  PhaseTimings seconds;
  bool has_recovery = false;
  PhaseRecovery recovery;
  std::vector<std::string> outputs;
};

/// Pretty-printed JSON (two-space indent, trailing newline); angles in degrees, non-finite numbers
/// become null and invalid UTF-8 in paths U+FFFD, so it is always valid JSON.
std::string phase_report_json(const PhaseRecord& record);

}  // namespace fieldfuse::cli
