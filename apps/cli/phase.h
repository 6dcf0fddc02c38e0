// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse phase` subcommand: load a defocus stack (or simulate the embedded default), tile
// it, optimise and reconstruct every tile, blend, score and save the results.
#pragma once

#include "phase_options.h"

namespace fieldfuse::cli {

/// Runs `fieldfuse phase` with parsed options and returns the exit code. Failures throw CliError
/// (or fieldfuse::Error from the library); main() reports them. Outputs that would overwrite an
/// input are refused before any work; the outputs are written all or nothing.
int run_phase(const PhaseOptions& options);

}  // namespace fieldfuse::cli
