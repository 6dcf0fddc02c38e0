// SPDX-License-Identifier: Apache-2.0
// Command-line flag parsing: a table of flags, strict number parsing and usage errors that say why.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fieldfuse::cli {

/// One accepted flag. Flags with a value take it as `--name VALUE` or `--name=VALUE`.
struct FlagSpec {
  std::string name;  ///< with the dashes: "--lambda"
  bool takes_value = true;
  std::function<void(const std::string& value)> apply;  ///< gets "" for switches
};

/// Applies `args` in order (a repeated flag's last value wins). Unknown flags, positional
/// arguments and missing values are usage errors naming the argument; `help_hint` ends them.
void parse_flags(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
                 const std::string& help_hint);

/// True when `args` asks for help (-h or --help anywhere).
bool wants_help(const std::vector<std::string>& args);

/// A finite number, all of `text`; otherwise a usage error naming `flag`.
double parse_number(const std::string& flag, const std::string& text);
/// A finite number >= 0 (or > 0 when `strictly_positive`); otherwise a usage error naming `flag`.
double parse_non_negative(const std::string& flag, const std::string& text,
                          bool strictly_positive = false);
/// A whole number in [min, max], all of `text`; otherwise a usage error naming `flag` and the
/// range.
std::int64_t parse_integer(const std::string& flag, const std::string& text, std::int64_t min,
                           std::int64_t max);
/// One of `choices`; otherwise a usage error listing them.
std::string parse_choice(const std::string& flag, const std::string& text,
                         const std::vector<std::string>& choices);

}  // namespace fieldfuse::cli
