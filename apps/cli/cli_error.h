// SPDX-License-Identifier: Apache-2.0
// The one exception type of the fieldfuse command-line app, carrying the exit code it maps to.
#pragma once

#include <stdexcept>
#include <string>

namespace fieldfuse::cli {

/// What went wrong, which decides the process exit code (documented in `fieldfuse --help`).
enum class ErrorKind {
  Usage,    ///< a bad flag or flag value (exit 2)
  Input,    ///< an unreadable, malformed or unsuitable input file (exit 3)
  Runtime,  ///< a failure while running: CUDA, file writing, ... (exit 1)
};

constexpr int kExitRuntimeError = 1;
constexpr int kExitUsageError = 2;
constexpr int kExitInputError = 3;

class CliError : public std::runtime_error {
 public:
  CliError(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const {
    switch (kind_) {
      case ErrorKind::Usage:
        return kExitUsageError;
      case ErrorKind::Input:
        return kExitInputError;
      case ErrorKind::Runtime:
        break;
    }
    return kExitRuntimeError;
  }

 private:
  ErrorKind kind_;
};

inline CliError usage_error(const std::string& message) {
  return CliError(ErrorKind::Usage, message);
}
inline CliError input_error(const std::string& message) {
  return CliError(ErrorKind::Input, message);
}
inline CliError runtime_error(const std::string& message) {
  return CliError(ErrorKind::Runtime, message);
}

}  // namespace fieldfuse::cli
