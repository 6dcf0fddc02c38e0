// SPDX-License-Identifier: Apache-2.0
// Tilt angles of a tilt series: IMOD .tlt/.rawtlt text files and `--angles start:stop:step` ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fieldfuse::cli {

/// Reads an IMOD tilt-angle file (.tlt, .rawtlt): one angle in degrees per line, in the order of
/// the stack's sections. Blank lines (spaces only) are skipped; any other line must be exactly one
/// finite number, else an input error (exit 3) names the file, the line number and its text. An
/// unreadable file or one with no angle is an input error too. `flag` starts every message.
std::vector<double> read_tilt_file(const std::string& path, const std::string& flag);

/// Parses `start:stop:step` (degrees) into start, start + step, ... up to stop: stop is included
/// when it lands on the grid (to within 1e-9 of the step, so -60:60:3 gives 41 angles), as in
/// IMOD. step must be non-zero and point from start towards stop (a negative step counts down);
/// start == stop gives one angle. Anything else is a usage error (exit 2) naming `flag`.
std::vector<double> parse_angle_range(const std::string& text, const std::string& flag);

/// Checks that there is one angle per projection; otherwise an input error (exit 3) naming both
/// counts and where the angles came from (`angles_source`, e.g. "--tlt 'a.tlt'").
void check_angle_count(std::size_t angles, std::int64_t projections,
                       const std::string& angles_source, const std::string& stack_source);

}  // namespace fieldfuse::cli
