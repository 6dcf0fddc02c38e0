// SPDX-License-Identifier: Apache-2.0
// The flags of `fieldfuse tomo`: their defaults, their table (parsing, validation and --help) and
// the checks across flags.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fieldfuse/tomo_kplanes.h"
#include "flag_table.h"

namespace CLI {
class App;
}

namespace fieldfuse::cli {

/// A reconstruction method of `fieldfuse tomo`. Adding one means a value here, its name in
/// tomo_method_name(), its flags in the table and its branch in tomo_methods.cpp.
enum class TomoMethod { Sirt, Fbp, KPlanes };

/// "sirt", "fbp", "kplanes".
const char* tomo_method_name(TomoMethod method);
/// Every method this build offers, in the order the embedded run compares them.
std::vector<TomoMethod> tomo_methods();

/// RunOptions carries --output (here the volume's path, "" = none), --iterations, --device,
/// --progress and --quiet.
struct TomoOptions : RunOptions {
  // Input and output.
  std::string input;       ///< tilt stack; "" = the embedded phantom
  std::string tlt;         ///< IMOD .tlt/.rawtlt file
  std::string angles;      ///< START:STOP:STEP, "" unless given
  char tilt_axis = 'y';    ///< 'x' or 'y': the image axis the tilt axis runs along
  std::string truth;       ///< a volume to score against
  std::string output_dir;  ///< embedded run: one volume per method
  std::string png_dir;     ///< ortho-slice PNGs
  std::string report;      ///< JSON report
  // Method.
  std::vector<TomoMethod> methods;  ///< one with --method; every method for the embedded run
  double relaxation = 0.0;
  bool positivity = false;
  std::string filter;
  /// Output frame [D, H, W]; all 0 = the default (see --help).
  std::array<std::int64_t, 3> volume_shape{};
  std::int64_t thickness = 0;  ///< 0 = all of D
  // K-Planes (tomo_kplanes_options.h): the library's options (resolutions empty = the phantom or
  // detector size), and the checkpoint files.
  fieldfuse::KPlanesReconOptions kplanes;
  std::string checkpoint;             ///< "" = none; saved at the end and every checkpoint_every
  std::int64_t checkpoint_every = 0;  ///< steps; 0 = only at the end
  std::string resume;                 ///< "" = start from step 0
  // Embedded phantom.
  std::int64_t phantom_size = 0;
  double noise = 0.0;
  std::uint64_t seed = 0;  ///< the phantom's noise and K-Planes' draws and initialisation
};

/// Registers `fieldfuse tomo` and its flag table on `app`; `options` receives the defaults now and
/// the values when the command line is parsed (it must outlive `app`).
CLI::App* add_tomo_command(CLI::App& app, TomoOptions& options);

/// After parsing: rejects leftovers and inconsistent flags (file-only or phantom-only flags on the
/// other kind of run, --angles with --tlt, a missing angle source) and settles the method list.
void finish_tomo_options(const CLI::App& command, TomoOptions& options);

/// Parses the arguments after `tomo` (tests): add, parse, finish.
TomoOptions parse_tomo_options(const std::vector<std::string>& args);

}  // namespace fieldfuse::cli
