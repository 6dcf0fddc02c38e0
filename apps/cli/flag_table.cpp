// SPDX-License-Identifier: Apache-2.0
// The flag tables of the subcommands: each flag's parsing, validation and --help line in one
// place, registered on CLI11, plus the flags every reconstruction subcommand shares.
#include "flag_table.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "cli_error.h"
#include "command_line.h"

namespace fieldfuse::cli {
namespace {

constexpr std::int64_t kMaxIterations = 1000000;

}  // namespace

void add_flags(CLI::App& command, const FlagTable& table) {
  // Stray arguments are collected, not rejected by CLI11, so reject_leftovers() can say which.
  command.allow_extras();
  for (const Flag& flag : table) {
    const std::string help =
        flag.help + (flag.default_text.empty() ? "" : " [default: " + flag.default_text + "]");
    CLI::Option* option = nullptr;
    if (flag.value_name.empty()) {
      const auto apply = flag.apply;
      option = command.add_flag_callback(
          flag.name, [apply] { apply(""); }, help);
      option->disable_flag_override();  // "--quiet=yes" is an error, not a value
    } else {
      option = command.add_option_function<std::string>(flag.name, flag.apply, help);
      option->type_name(flag.value_name)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    option->group(flag.group);
  }
}

CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description,
                      const FlagTable& table, const std::string& about) {
  CLI::App* command = app.add_subcommand(name, description);
  add_flags(*command, table);
  command->footer(about + "\n\n" + kExitCodesText);
  return command;
}

void reject_leftovers(const CLI::App& command, const std::string& help_hint) {
  for (const std::string& argument : command.remaining()) {
    if (argument.size() > 1 && argument[0] == '-') {
      const std::string name = argument.substr(0, argument.find('='));
      throw usage_error("unknown flag '" + name + "' (" + help_hint + ")");
    }
    throw usage_error("unexpected argument '" + argument + "' (flags start with --; " + help_hint +
                      ")");
  }
}

FlagTable run_flags(RunOptions& options, const std::string& output_help) {
  const std::string io = "Input and output";
  const std::string solver = "Model and solver";
  const std::string control = "Output control";
  return {
      {"--output", "PREFIX", output_help, options.output, io,
       [&options](const std::string& v) {
         if (v.empty()) throw usage_error("--output needs a non-empty prefix");
         options.output = v;
       }},
      {"--iters", "N", "most iterations", std::to_string(options.iterations), solver,
       [&options](const std::string& v) {
         options.iterations = parse_integer("--iters", v, 1, kMaxIterations);
       }},
      {"--tol", "X",
       "stop once the result is certified within X*||y|| of the exact\n"
       "minimiser (by strong convexity); 0 = run all --iters",
       number_text(options.tolerance), solver,
       [&options](const std::string& v) {
         options.tolerance =
             parse_number_in("--tol", v, 0.0, std::numeric_limits<double>::infinity());
       }},
      {"--device", "auto|cpu|cuda",
       "where to run; auto = CUDA when built with it and a GPU is visible", "auto", solver,
       [&options](const std::string& v) {
         const std::string device = parse_choice("--device", v, {"auto", "cpu", "cuda"});
         options.device = device == "cpu"    ? DeviceChoice::Cpu
                          : device == "cuda" ? DeviceChoice::Cuda
                                             : DeviceChoice::Auto;
       }},
      {"--progress", "N", "a progress line every N iterations, 0 = none",
       std::to_string(options.progress_every), control,
       [&options](const std::string& v) {
         options.progress_every = parse_integer("--progress", v, 0, kMaxIterations);
       }},
      {"--quiet", "", "no progress lines", "", control,
       [&options](const std::string&) { options.quiet = true; }},
  };
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

double parse_number_in(const std::string& flag, const std::string& text, double min, double max,
                       bool exclusive_min, const std::string& why) {
  const double value = parse_number(flag, text);
  const bool low = exclusive_min ? value <= min : value < min;
  if (low && max == std::numeric_limits<double>::infinity()) {
    throw usage_error(flag + " must be " + (exclusive_min ? "> " : ">= ") + number_text(min) +
                      ", got " + text);
  }
  if (low || value > max) {
    // The reason for a cap is worth reading only by someone who went past it.
    throw usage_error(flag + " must be " + (exclusive_min ? "> " : ">= ") + number_text(min) +
                      " and <= " + number_text(max) + ", got " + text +
                      (why.empty() || low ? "" : " (" + why + ")"));
  }
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

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

}  // namespace fieldfuse::cli
