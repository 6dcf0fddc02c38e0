// SPDX-License-Identifier: Apache-2.0
// Entry point of the `fieldfuse` command-line app: subcommand dispatch, --help, --version, errors.
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli_error.h"
#include "command_line.h"
#include "denoise.h"
#include "fieldfuse/core.h"
#include "phase.h"
#include "tomo.h"

namespace {

void print_version() {
  const fieldfuse::BuildInfo info = fieldfuse::build_info();
  std::cout << "fieldfuse " << info.version << "\n"
            << "CUDA: "
            << (info.cuda ? "yes (architectures " + info.cuda_architectures + ")" : "no") << "\n"
            << "OpenMP: "
            << (info.openmp ? "yes (" + std::to_string(info.openmp_max_threads) + " threads)"
                            : "no")
            << "\n"
            << "CUDA devices visible: " << fieldfuse::cuda_device_count() << "\n";
}

int dispatch(const std::vector<std::string>& args, std::string& context) {
  using fieldfuse::cli::CommandLine;
  if (!args.empty() && (args[0] == "denoise" || args[0] == "tomo" || args[0] == "phase"))
    context = "fieldfuse " + args[0];
  CommandLine command_line;
  command_line.parse(args);
  switch (command_line.action()) {
    case CommandLine::Action::Help:
      std::cout << command_line.help();
      return 0;
    case CommandLine::Action::Version:
      print_version();
      return 0;
    case CommandLine::Action::Denoise:
      return fieldfuse::cli::run_denoise(command_line.denoise_options());
    case CommandLine::Action::Tomo:
      return fieldfuse::cli::run_tomo(command_line.tomo_options());
    case CommandLine::Action::Phase:
      break;
  }
  return fieldfuse::cli::run_phase(command_line.phase_options());
}

}  // namespace

int main(int argc, char** argv) {
  using fieldfuse::cli::CliError;
  std::string context = "fieldfuse";  // who failed, for the error prefix
  const auto report = [&context](const std::string& message, int code) {
    std::cout.flush();  // progress lines first, then the error, when both go to a terminal
    std::cerr << context << ": error: " << message << "\n";
    return code;
  };
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc), context);
  } catch (const CliError& error) {
    return report(error.what(), error.exit_code());
  } catch (const fieldfuse::Error& error) {
    // The library validates before launching, so a Value or Type error here means the app passed a
    // volume the library cannot take: an input problem, not a crash.
    const bool input_problem =
        error.kind() == fieldfuse::ErrorKind::Value || error.kind() == fieldfuse::ErrorKind::Type;
    return report(error.what(), input_problem ? fieldfuse::cli::kExitInputError
                                              : fieldfuse::cli::kExitRuntimeError);
  } catch (const std::bad_alloc&) {
    return report("out of memory", fieldfuse::cli::kExitRuntimeError);
  } catch (const std::exception& error) {
    return report(error.what(), fieldfuse::cli::kExitRuntimeError);
  }
}
