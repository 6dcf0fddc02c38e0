// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse tomo` subcommand: load a tilt series (or make the embedded phantom's), reconstruct
// it with each chosen method, score and save the results.
#pragma once

#include "tomo_options.h"

namespace fieldfuse::cli {

/// Runs `fieldfuse tomo` with parsed options and returns the exit code. Failures throw CliError
/// (or fieldfuse::Error from the library); main() reports them. Outputs that would overwrite an
/// input are refused before any work; the outputs are written all or nothing.
int run_tomo(const TomoOptions& options);

}  // namespace fieldfuse::cli
