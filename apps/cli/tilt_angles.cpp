// SPDX-License-Identifier: Apache-2.0
// Tilt angles of a tilt series: IMOD .tlt/.rawtlt text files and `--angles start:stop:step` ranges.
#include "tilt_angles.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cli_error.h"
#include "file_io.h"

namespace fieldfuse::cli {
namespace {

// A text file of angles is tiny; a larger file is surely not one (and is not read into memory).
constexpr std::uint64_t kMaxTiltFileBytes = std::uint64_t{16} << 20;
// A range that would list more angles than any tilt series has is a typo (a step of 1e-9).
constexpr double kMaxRangeAngles = 1e6;

bool is_blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\v\f") == std::string::npos;
}

// The whole of `text`, leading and trailing blanks aside, as a finite number.
bool parse_finite(const std::string& text, double& value) {
  const std::size_t first = text.find_first_not_of(" \t\r\v\f");
  const std::size_t last = text.find_last_not_of(" \t\r\v\f");
  if (first == std::string::npos) return false;
  const std::string trimmed = text.substr(first, last - first + 1);
  errno = 0;
  char* end = nullptr;
  value = std::strtod(trimmed.c_str(), &end);
  return end == trimmed.c_str() + trimmed.size() && errno != ERANGE && std::isfinite(value);
}

}  // namespace

std::vector<double> read_tilt_file(const std::string& path, const std::string& flag) {
  const std::string where = flag + " '" + path + "'";
  std::string text;
  try {
    InputFile file(path);
    if (file.size() > kMaxTiltFileBytes) {
      throw input_error("'" + path + "' is " + std::to_string(file.size()) +
                        " bytes, too large for a tilt-angle file (one angle per line)");
    }
    text.resize(static_cast<std::size_t>(file.size()));
    file.read_exact(text.data(), text.size(), "the angles");
  } catch (const CliError& error) {
    throw CliError(error.kind(), flag + ": " + error.what());
  }
  std::vector<double> angles;
  std::size_t line_number = 0;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    ++line_number;
    start = end + 1;
    if (is_blank(line)) continue;
    double angle = 0.0;
    if (!parse_finite(line, angle)) {
      throw input_error(where + ", line " + std::to_string(line_number) + ": expected one angle " +
                        "in degrees, got '" + line + "'");
    }
    angles.push_back(angle);
  }
  if (angles.empty()) throw input_error(where + ": holds no angle");
  return angles;
}

std::vector<double> parse_angle_range(const std::string& text, const std::string& flag) {
  const std::size_t first = text.find(':');
  const std::size_t second = first == std::string::npos ? first : text.find(':', first + 1);
  if (second == std::string::npos || text.find(':', second + 1) != std::string::npos) {
    throw usage_error(flag + " expects START:STOP:STEP in degrees (e.g. -60:60:3), got '" + text +
                      "'");
  }
  double start = 0.0, stop = 0.0, step = 0.0;
  const std::string parts[3] = {text.substr(0, first), text.substr(first + 1, second - first - 1),
                                text.substr(second + 1)};
  double* values[3] = {&start, &stop, &step};
  const char* names[3] = {"START", "STOP", "STEP"};
  for (int i = 0; i < 3; ++i) {
    if (!parse_finite(parts[i], *values[i])) {
      throw usage_error(flag + ": " + names[i] + " must be a finite number, got '" + parts[i] +
                        "' in '" + text + "'");
    }
  }
  if (start == stop) return {start};
  if (step == 0.0 || (stop - start) / step < 0.0) {
    throw usage_error(flag + ": STEP " + parts[2] + " does not lead from START " + parts[0] +
                      " to STOP " + parts[1] + " (it must be non-zero, negative to count down)");
  }
  const double intervals = (stop - start) / step;
  if (intervals + 1.0 > kMaxRangeAngles) {
    throw usage_error(flag + ": '" + text + "' gives more than " +
                      std::to_string(static_cast<long long>(kMaxRangeAngles)) + " angles");
  }
  // Stop is included when it lands on the grid, up to the rounding of the division.
  const auto count = static_cast<std::int64_t>(std::floor(intervals + 1e-9)) + 1;
  std::vector<double> angles(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) angles[static_cast<std::size_t>(i)] = start + i * step;
  return angles;
}

void check_angle_count(std::size_t angles, std::int64_t projections,
                       const std::string& angles_source, const std::string& stack_source) {
  if (static_cast<std::int64_t>(angles) != projections) {
    throw input_error(angles_source + " gives " + std::to_string(angles) + " angle" +
                      (angles == 1 ? "" : "s") + ", but " + stack_source + " holds " +
                      std::to_string(projections) + " projection" + (projections == 1 ? "" : "s") +
                      " (one angle per projection)");
  }
}

}  // namespace fieldfuse::cli
