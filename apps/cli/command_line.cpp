// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse` command line: its subcommands, each with its flag table, parsed by CLI11 into
// options, with every parse problem a usage error (exit 2).
#include "command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "cli_error.h"

namespace fieldfuse::cli {

const char* const kExitCodesText =
    "Exit codes: 0 success, 1 runtime failure, 2 bad flags or values, 3 bad input file.";

namespace {

// Wide enough for "--device auto|cpu|cuda" and the like next to their descriptions.
constexpr std::size_t kHelpColumn = 26;

// CLI11's wording for the two mistakes its own parser catches, in the style of the others.
std::string usage_message(const std::string& cli11) {
  const std::size_t override_at = cli11.find(" was given a disallowed flag override");
  if (override_at != std::string::npos) {
    return "--" + cli11.substr(0, override_at) + " takes no value";
  }
  const std::size_t colon = cli11.find(": ");
  if (colon != std::string::npos && cli11.find(" required ") != std::string::npos &&
      cli11.find(" missing") != std::string::npos) {
    return cli11.substr(0, colon) + " needs a value";
  }
  return cli11;
}

}  // namespace

CommandLine::CommandLine() : app_(std::make_unique<CLI::App>()) {
  CLI::App& app = *app_;
  app.name("fieldfuse");
  app.description("fieldfuse: fused, differentiable kernels for physics-based 3-D reconstruction");
  app.get_formatter()->column_width(kHelpColumn);
  app.footer(std::string("'fieldfuse <command> --help' describes a command.\n") + kExitCodesText);
  app.add_flag("--version", version_, "version and build facts");
  app.require_subcommand(0, 1);
  denoise_ = add_denoise_command(app, denoise_options_);
  tomo_ = add_tomo_command(app, tomo_options_);
  phase_ = add_phase_command(app, phase_options_);
}

CommandLine::~CommandLine() = default;

void CommandLine::parse(const std::vector<std::string>& args) {
  CLI::App& app = *app_;
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    const auto named = app.get_subcommands(
        [&args](const CLI::App* command) { return command->get_name() == args[0]; });
    if (named.empty()) {
      throw usage_error("unknown command '" + args[0] + "' (see 'fieldfuse --help')");
    }
  }
  const bool in_command =
      !args.empty() && (args[0] == "denoise" || args[0] == "tomo" || args[0] == "phase");
  const std::string hint =
      in_command ? "see 'fieldfuse " + args[0] + " --help'" : "see 'fieldfuse --help'";
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    action_ = Action::Help;
    return;
  } catch (const CLI::ParseError& error) {
    throw usage_error(usage_message(error.what()) + " (" + hint + ")");
  }
  if (denoise_->parsed()) {
    finish_denoise_options(*denoise_, denoise_options_);
    action_ = Action::Denoise;
  } else if (tomo_->parsed()) {
    finish_tomo_options(*tomo_, tomo_options_);
    action_ = Action::Tomo;
  } else if (phase_->parsed()) {
    finish_phase_options(*phase_, phase_options_);
    action_ = Action::Phase;
  } else if (version_) {
    action_ = Action::Version;
  } else {
    reject_leftovers(app, hint);
    action_ = Action::Help;
  }
}

std::string CommandLine::help() const { return app_->help(); }

std::string CommandLine::help_of(const std::string& name) const {
  return app_->get_subcommand(name)->help("fieldfuse");
}

}  // namespace fieldfuse::cli
