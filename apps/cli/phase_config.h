// SPDX-License-Identifier: Apache-2.0
// The settings file of `fieldfuse phase`: a flat JSON object, TOML table or YAML mapping whose keys
// are flag names.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fieldfuse::cli {

/// One setting of the file: the flag it stands for ("--pixel-size") and its value as the command
/// line would spell it ("0.1"; "" for a switch that is on).
struct ConfigSetting {
  std::string key;   ///< as written in the file, for messages
  std::string flag;  ///< "--" + key with '_' read as '-'
  std::string value;
  bool boolean = false;  ///< given as true or false (only switches take these)
  bool on = false;       ///< the boolean's value; false leaves the switch's default
  bool list = false;     ///< given as an array (only list flags take these)
};

/// Reads `path` (flag `--config`): by its extension a JSON object (.json), a TOML table (.toml) or
/// a YAML mapping (.yaml, .yml), one schema for all three: keys are flag names without the dashes
/// (pixel_size or pixel-size), values numbers, strings, booleans (switches; in YAML only plain
/// true/false) or arrays of strings (joined by commas, e.g. optimize = ["z", "zenith"]). Other
/// extensions, unreadable or malformed files, nested tables, nulls, dates, arrays of anything but
/// strings and a flag given twice are input errors (exit 3) naming the file (and the key).
std::vector<ConfigSetting> read_phase_config(const std::string& path);

}  // namespace fieldfuse::cli
