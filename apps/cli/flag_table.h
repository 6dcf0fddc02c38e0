// SPDX-License-Identifier: Apache-2.0
// The flag tables of the subcommands: each flag's parsing, validation and --help line in one
// place, registered on CLI11, plus the flags every reconstruction subcommand shares.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.h"

namespace CLI {
class App;
}

namespace fieldfuse::cli {

/// One flag of a subcommand: the single source of how it parses and of its --help line.
struct Flag {
  std::string name;          ///< with the dashes: "--lambda"
  std::string value_name;    ///< "X", "PATH", ...; empty for a switch
  std::string help;          ///< what --help says (lines after the first are indented)
  std::string default_text;  ///< shown as "[default: ...]"; empty for none
  std::string group;         ///< the --help section, e.g. "Model and solver"
  /// Parses and stores the value ("" for a switch); throws usage_error naming the flag.
  std::function<void(const std::string& value)> apply;
};
using FlagTable = std::vector<Flag>;

/// Registers every flag of `table` on `command`: `--name VALUE` and `--name=VALUE` both work, a
/// repeated flag's last value wins, a switch takes no value, and --help lists the flags by group
/// in table order. Unknown flags and stray arguments are left for reject_leftovers().
void add_flags(CLI::App& command, const FlagTable& table);

/// Adds subcommand `name` to `app` with its description, its flags (add_flags) and a --help
/// footer of `about` followed by the exit codes.
CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description,
                      const FlagTable& table, const std::string& about);

/// After parsing: a usage error for the first argument `command` did not take ("unknown flag
/// '--x'" or "unexpected argument 'x'"), ending with `help_hint`.
void reject_leftovers(const CLI::App& command, const std::string& help_hint);

/// The flags every reconstruction subcommand shares (denoise; tomo and phase next).
struct RunOptions {
  std::string output;  ///< the output prefix
  DeviceChoice device = DeviceChoice::Auto;
  std::int64_t iterations = 0;
  double tolerance = 0.0;
  std::int64_t progress_every = 0;
  bool quiet = false;
};

/// `options` holds the subcommand's defaults when called; the table stores into it.
FlagTable run_flags(RunOptions& options, const std::string& output_help);

/// A finite number, all of `text`; otherwise a usage error naming `flag`.
double parse_number(const std::string& flag, const std::string& text);
/// A finite number in [min, max] (above min when `exclusive_min`); otherwise a usage error naming
/// `flag`, the range and, for a value above `max`, `why` the cap is what it is.
double parse_number_in(const std::string& flag, const std::string& text, double min, double max,
                       bool exclusive_min = false, const std::string& why = "");
/// A whole number in [min, max]; otherwise a usage error naming `flag` and the range.
std::int64_t parse_integer(const std::string& flag, const std::string& text, std::int64_t min,
                           std::int64_t max);
/// One of `choices`; otherwise a usage error listing them.
std::string parse_choice(const std::string& flag, const std::string& text,
                         const std::vector<std::string>& choices);

/// A number as --help and messages print it: "0.05", "1e-05", "1e+06".
std::string number_text(double value);

}  // namespace fieldfuse::cli
