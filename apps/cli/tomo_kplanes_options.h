// SPDX-License-Identifier: Apache-2.0
// The K-Planes flags of `fieldfuse tomo` (--method kplanes): their table, the embedded run's
// settings and the checks across them.
#pragma once

#include <string>

#include "flag_table.h"
#include "tomo_options.h"

namespace fieldfuse::cli {

/// The K-Planes flags, defaults from fieldfuse::KPlanesReconOptions (include/fieldfuse/
/// tomo_kplanes.h) except where the embedded run sets its own (see --help), storing into
/// `options.kplanes`, `options.checkpoint`, `options.checkpoint_every` and `options.resume`.
FlagTable kplanes_flags(TomoOptions& options, const std::string& group);

/// After parsing: refuses K-Planes flags when no K-Planes run is asked for, --hidden/--layers
/// without --decoder mlp, --kplanes-iterations with --epochs and --checkpoint-every without
/// --checkpoint; gives the embedded run its settings where their flags were not given.
void finish_kplanes_options(const CLI::App& command, TomoOptions& options, bool from_file);

}  // namespace fieldfuse::cli
