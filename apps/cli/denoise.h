// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse denoise` subcommand: load or synthesise a volume, denoise it, score and save it.
#pragma once

#include "denoise_options.h"

namespace fieldfuse::cli {

/// Runs `fieldfuse denoise` with parsed options and returns the exit code. Failures throw CliError
/// (or fieldfuse::Error from the library); main() reports them. Outputs that would overwrite an
/// input are refused before any work; the outputs are written all or nothing.
int run_denoise(const DenoiseOptions& options);

}  // namespace fieldfuse::cli
