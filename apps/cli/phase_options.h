// SPDX-License-Identifier: Apache-2.0
// The flags of `fieldfuse phase`: their defaults, their table (parsing, validation and --help), the
// optional settings file, and the checks across flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fieldfuse/optics.h"
#include "flag_table.h"

namespace CLI {
class App;
}

namespace fieldfuse::cli {

/// RunOptions carries --output (the phase image's path, "" = none), --iterations (the optimiser's),
/// --device and --quiet.
struct PhaseOptions : RunOptions {
  // Input and output.
  std::string input;           ///< defocus stack [Z, Y, X]; "" = the embedded default
  std::string config;          ///< settings file (.json, .toml, .yaml, .yml)
  std::string png;             ///< preview
  std::string absorption;      ///< absorption image
  std::string parameter_maps;  ///< prefix of the per-tile maps
  std::string report;          ///< JSON report
  // The microscope (flags or --config; required with --input).
  fieldfuse::MicroscopeSettings microscope;
  double z_spacing = 0.0;
  double regularization = 0.0;
  // Tiling.
  std::int64_t tile = 0;
  std::int64_t overlap = 0;
  std::int64_t batch = 0;  ///< tiles per library call; 0 = all at once
  // Per-tile optimisation: which parameters, how, and where each starts (degrees for the angles).
  bool optimize_z = false, optimize_zenith = false, optimize_azimuth = false;
  fieldfuse::TileOptimizerMethod method = fieldfuse::TileOptimizerMethod::Newton;
  double lr_z = 0.0, lr_zenith = 0.0, lr_azimuth = 0.0;  ///< slices, degrees, degrees
  double z_offset = 0.0, zenith = 0.0, azimuth = 0.0;    ///< slices, degrees, degrees
  // Embedded default.
  std::int64_t size = 0;
  double noise = 0.0;
  std::uint64_t seed = 0;

  bool optimizes() const { return optimize_z || optimize_zenith || optimize_azimuth; }
};

/// "adam", "nadam" or "newton".
const char* tile_method_name(fieldfuse::TileOptimizerMethod method);

/// Registers `fieldfuse phase` and its flag table on `app`; `options` receives the defaults now and
/// the values when the command line is parsed (it must outlive `app`).
CLI::App* add_phase_command(CLI::App& app, PhaseOptions& options);

/// After parsing: rejects leftovers, applies the --config file to every flag the command line did
/// not give (an unknown key or a bad value is an input error naming the file and the key), rejects
/// flags of the other kind of run and missing microscope settings, and checks tile against
/// overlap, NAs against the medium and, for the embedded default, the tile against --size. Fills
/// the defaults that depend on the run: the embedded default's microscope and tile layout, and
/// each learning rate the method's own unless given.
void finish_phase_options(const CLI::App& command, PhaseOptions& options);

/// Parses the arguments after `phase` (tests): add, parse, finish.
PhaseOptions parse_phase_options(const std::vector<std::string>& args);

}  // namespace fieldfuse::cli
