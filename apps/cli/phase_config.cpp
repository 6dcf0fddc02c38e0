// SPDX-License-Identifier: Apache-2.0
// The settings file of `fieldfuse phase`: a flat JSON object whose keys are flag names.
#include "phase_config.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "file_io.h"

namespace fieldfuse::cli {
namespace {

// A settings file is a few hundred bytes; anything this large is not one (and is not read).
constexpr std::uint64_t kMaxConfigBytes = 1 << 20;

std::string number_value(const nlohmann::json& value) {
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  if (value.is_number_unsigned()) return std::to_string(value.get<unsigned long long>());
  // %.17g round-trips a double, so the flag parses the very number the file holds.
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value.get<double>());
  return text;
}

}  // namespace

std::vector<ConfigSetting> read_phase_config(const std::string& path) {
  const std::string source = "--config '" + path + "'";
  const std::string extension = lowercase_extension(path);
  if (extension != ".json") {
    throw input_error(source + ": unsupported settings file type '" + extension +
                      "' (expected .json)");
  }
  InputFile file(path);
  if (file.size() > kMaxConfigBytes) {
    throw input_error(source + ": " + std::to_string(file.size()) +
                      " bytes is too large for a settings file");
  }
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  file.read_exact(text.data(), file.size(), "the settings");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw input_error(source + ": not valid JSON (" + std::string(error.what()) + ")");
  }
  if (!root.is_object()) {
    throw input_error(source + ": expected a JSON object of settings, got a " +
                      std::string(root.type_name()));
  }
  std::vector<ConfigSetting> settings;
  for (const auto& [key, value] : root.items()) {
    ConfigSetting setting;
    setting.key = key;
    setting.flag = "--" + key;
    for (char& c : setting.flag) c = c == '_' ? '-' : c;
    const std::string where = source + ", key '" + key + "'";
    if (value.is_number()) {
      setting.value = number_value(value);
    } else if (value.is_string()) {
      setting.value = value.get<std::string>();
    } else if (value.is_boolean()) {
      setting.boolean = true;
      setting.on = value.get<bool>();
    } else if (value.is_array()) {
      for (const nlohmann::json& item : value) {
        if (!item.is_string()) {
          throw input_error(where + ": expected an array of strings, got an element of type " +
                            std::string(item.type_name()));
        }
        setting.value += (setting.value.empty() ? "" : ",") + item.get<std::string>();
      }
    } else {
      throw input_error(where + ": expected a number, a string, a boolean or an array of " +
                        "strings, got " + std::string(value.type_name()));
    }
    settings.push_back(std::move(setting));
  }
  return settings;
}

}  // namespace fieldfuse::cli
