// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse denoise` subcommand: load or synthesise a volume, denoise it, score and save it.
#pragma once

#include <string>
#include <vector>

namespace fieldfuse::cli {

/// Runs `fieldfuse denoise` with the arguments that follow the subcommand and returns the exit
/// code. Failures throw CliError (or fieldfuse::Error from the library); main() reports them.
int run_denoise(const std::vector<std::string>& args);

}  // namespace fieldfuse::cli
