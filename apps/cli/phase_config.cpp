// SPDX-License-Identifier: Apache-2.0
// The settings file of `fieldfuse phase`: a flat JSON object, TOML table or YAML mapping whose keys
// are flag names.
#include "phase_config.h"

#include <toml++/toml.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_error.h"
#include "file_io.h"

namespace fieldfuse::cli {
namespace {

// A settings file is a few hundred bytes; anything this large is not one (and is not read).
constexpr std::uint64_t kMaxConfigBytes = 1 << 20;
const char* const kExpectedValue = "expected a number, a string, a boolean or an array of strings";

// %.17g round-trips a double, so the flag parses the very number the file holds.
std::string double_text(double value) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// Collects the settings of one file in its order, with the messages every format shares.
class Settings {
 public:
  explicit Settings(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }
  std::string where(const std::string& key) const { return source_ + ", key '" + key + "'"; }

  void value(const std::string& key, std::string text) { add(key, std::move(text), false, false); }
  void boolean(const std::string& key, bool on) { add(key, "", true, on); }
  /// An array: every item must be a string (`item_type` otherwise names what it is).
  void list(const std::string& key, const std::vector<std::string>& items) {
    std::string joined;
    for (const std::string& item : items) joined += (joined.empty() ? "" : ",") + item;
    add(key, joined, false, false);
    settings_.back().list = true;
  }
  [[noreturn]] void wrong_item(const std::string& key, const std::string& item_type) const {
    throw input_error(where(key) + ": expected an array of strings, got an element of type " +
                      item_type);
  }
  [[noreturn]] void wrong_type(const std::string& key, const std::string& type) const {
    throw input_error(where(key) + ": " + kExpectedValue + ", got " + type);
  }
  std::vector<ConfigSetting> take() { return std::move(settings_); }

 private:
  void add(const std::string& key, std::string text, bool is_boolean, bool on) {
    ConfigSetting setting;
    setting.key = key;
    setting.flag = "--" + key;
    for (char& c : setting.flag) c = c == '_' ? '-' : c;
    // pixel_size and pixel-size are the same flag: a file giving both is ambiguous.
    if (!flags_.insert(setting.flag).second) {
      throw input_error(where(key) + ": " + setting.flag + " is given twice in the file");
    }
    setting.value = std::move(text);
    setting.boolean = is_boolean;
    setting.on = on;
    settings_.push_back(std::move(setting));
  }

  std::string source_;
  std::vector<ConfigSetting> settings_;
  std::set<std::string> flags_;
};

std::vector<ConfigSetting> read_json(const std::string& text, Settings settings) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw input_error(settings.source() + ": not valid JSON (" + std::string(error.what()) + ")");
  }
  if (!root.is_object()) {
    throw input_error(settings.source() + ": expected a JSON object of settings, got a " +
                      std::string(root.type_name()));
  }
  for (const auto& [key, value] : root.items()) {
    if (value.is_number_integer()) {
      settings.value(key, std::to_string(value.get<long long>()));
    } else if (value.is_number_unsigned()) {
      settings.value(key, std::to_string(value.get<unsigned long long>()));
    } else if (value.is_number()) {
      settings.value(key, double_text(value.get<double>()));
    } else if (value.is_string()) {
      settings.value(key, value.get<std::string>());
    } else if (value.is_boolean()) {
      settings.boolean(key, value.get<bool>());
    } else if (value.is_array()) {
      std::vector<std::string> items;
      for (const nlohmann::json& item : value) {
        if (!item.is_string()) settings.wrong_item(key, item.type_name());
        items.push_back(item.get<std::string>());
      }
      settings.list(key, items);
    } else {
      settings.wrong_type(key, value.type_name());
    }
  }
  return settings.take();
}

std::string toml_type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::vector<ConfigSetting> read_toml(const std::string& text, Settings settings) {
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error& error) {
    const toml::source_position at = error.source().begin;
    throw input_error(settings.source() + ": not valid TOML (line " + std::to_string(at.line) +
                      ", column " + std::to_string(at.column) + ": " +
                      std::string(error.description()) + ")");
  }
  for (const auto& [name, node] : root) {
    const std::string key(name.str());
    if (const auto* integer = node.as_integer()) {
      settings.value(key, std::to_string(integer->get()));
    } else if (const auto* floating = node.as_floating_point()) {
      settings.value(key, double_text(floating->get()));
    } else if (const auto* string = node.as_string()) {
      settings.value(key, string->get());
    } else if (const auto* boolean = node.as_boolean()) {
      settings.boolean(key, boolean->get());
    } else if (const auto* array = node.as_array()) {
      std::vector<std::string> items;
      for (const toml::node& item : *array) {
        if (!item.is_string()) settings.wrong_item(key, toml_type_name(item.type()));
        items.push_back(item.as_string()->get());
      }
      settings.list(key, items);
    } else {
      settings.wrong_type(key, toml_type_name(node.type()));
    }
  }
  return settings.take();
}

std::string yaml_type_name(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "mapping";
    case YAML::NodeType::Sequence:
      return "sequence";
    case YAML::NodeType::Scalar:
      return "scalar";
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// YAML 1.2's core schema: only plain (unquoted) true and false are booleans; yes/no/on/off are
// text.
bool is_yaml_boolean(const YAML::Node& node, bool* on) {
  if (node.Tag() != "?") return false;  // quoted ("!") or explicitly tagged
  const std::string& text = node.Scalar();
  for (const char* word : {"true", "True", "TRUE"})
    if (text == word) return *on = true;
  for (const char* word : {"false", "False", "FALSE"}) {
    if (text == word) {
      *on = false;
      return true;
    }
  }
  return false;
}

std::vector<ConfigSetting> read_yaml(const std::string& text, Settings settings) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& error) {
    throw input_error(settings.source() + ": not valid YAML (" + std::string(error.what()) + ")");
  }
  if (!root.IsMap()) {
    throw input_error(settings.source() + ": expected a YAML mapping of settings, got a " +
                      yaml_type_name(root));
  }
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) {
      throw input_error(settings.source() + ": expected text keys, got a " +
                        yaml_type_name(entry.first));
    }
    const std::string key = entry.first.Scalar();
    const YAML::Node& value = entry.second;
    bool on = false;
    if (value.IsScalar() && is_yaml_boolean(value, &on)) {
      settings.boolean(key, on);
    } else if (value.IsScalar()) {
      // Numbers stay text: the flag's own parser reads (and judges) them.
      settings.value(key, value.Scalar());
    } else if (value.IsSequence()) {
      std::vector<std::string> items;
      for (const YAML::Node& item : value) {
        if (!item.IsScalar()) settings.wrong_item(key, yaml_type_name(item));
        items.push_back(item.Scalar());
      }
      settings.list(key, items);
    } else {
      settings.wrong_type(key, yaml_type_name(value));
    }
  }
  return settings.take();
}

}  // namespace

std::vector<ConfigSetting> read_phase_config(const std::string& path) {
  const std::string source = "--config '" + path + "'";
  const std::string extension = lowercase_extension(path);
  using Reader = std::vector<ConfigSetting> (*)(const std::string&, Settings);
  const Reader reader = extension == ".json"                          ? read_json
                        : extension == ".toml"                        ? read_toml
                        : extension == ".yaml" || extension == ".yml" ? read_yaml
                                                                      : nullptr;
  if (reader == nullptr) {
    throw input_error(source + ": unsupported settings file type '" + extension +
                      "' (expected .json, .toml, .yaml or .yml)");
  }
  InputFile file(path);
  if (file.size() > kMaxConfigBytes) {
    throw input_error(source + ": " + std::to_string(file.size()) +
                      " bytes is too large for a settings file");
  }
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  file.read_exact(text.data(), file.size(), "the settings");
  return reader(text, Settings(source));
}

}  // namespace fieldfuse::cli
