// SPDX-License-Identifier: Apache-2.0
// Command-line flag parsing: a table of flags, strict number parsing and usage errors that say why.
#include "flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cli_error.h"

namespace fieldfuse::cli {

void parse_flags(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
                 const std::string& help_hint) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      throw usage_error("unexpected argument '" + arg + "' (flags start with --; " + help_hint +
                        ")");
    }
    const std::size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& candidate : specs) {
      if (candidate.name == name) spec = &candidate;
    }
    if (spec == nullptr) throw usage_error("unknown flag '" + name + "' (" + help_hint + ")");
    if (!spec->takes_value) {
      if (equals != std::string::npos)
        throw usage_error(name + " takes no value, got '" + arg + "'");
      spec->apply("");
      continue;
    }
    if (equals != std::string::npos) {
      spec->apply(arg.substr(equals + 1));
    } else if (i + 1 < args.size()) {
      spec->apply(args[++i]);
    } else {
      throw usage_error(name + " needs a value (" + help_hint + ")");
    }
  }
}

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

double parse_number(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE ||
      !std::isfinite(value)) {
    throw usage_error(flag + " expects a finite number, got '" + text + "'");
  }
  return value;
}

double parse_non_negative(const std::string& flag, const std::string& text,
                          bool strictly_positive) {
  const double value = parse_number(flag, text);
  if (strictly_positive && value <= 0.0) throw usage_error(flag + " must be > 0, got " + text);
  if (value < 0.0) throw usage_error(flag + " must be >= 0, got " + text);
  return value;
}

std::int64_t parse_integer(const std::string& flag, const std::string& text, std::int64_t min,
                           std::int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    throw usage_error(flag + " expects a whole number, got '" + text + "'");
  }
  if (value < min || value > max) {
    throw usage_error(flag + " must be between " + std::to_string(min) + " and " +
                      std::to_string(max) + ", got " + text);
  }
  return value;
}

std::string parse_choice(const std::string& flag, const std::string& text,
                         const std::vector<std::string>& choices) {
  std::string listed;
  for (const std::string& choice : choices) {
    if (choice == text) return text;
    listed += (listed.empty() ? "" : ", ") + choice;
  }
  throw usage_error(flag + " must be one of " + listed + ", got '" + text + "'");
}

}  // namespace fieldfuse::cli
