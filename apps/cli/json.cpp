// SPDX-License-Identifier: Apache-2.0
// A tiny JSON object builder for the run reports (write-only; keys keep insertion order).
#include "json.h"

#include <cmath>
#include <cstdio>

namespace fieldfuse::cli {

std::string json_quote(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;  // UTF-8 bytes pass through unchanged, as JSON allows
        }
    }
  }
  return out + "\"";
}

JsonObject& JsonObject::add(const std::string& key, double value) {
  if (!std::isfinite(value)) return add_null(key);
  char text[32];
  // 10 significant digits: enough for any metric or timing in a report, and easy to read.
  std::snprintf(text, sizeof(text), "%.10g", value);
  entries_.push_back({key, text, nullptr});
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, std::int64_t value) {
  entries_.push_back({key, std::to_string(value), nullptr});
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, bool value) {
  entries_.push_back({key, value ? "true" : "false", nullptr});
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, const std::string& value) {
  entries_.push_back({key, json_quote(value), nullptr});
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, const std::vector<std::int64_t>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  }
  entries_.push_back({key, text + "]", nullptr});
  return *this;
}

JsonObject& JsonObject::add_null(const std::string& key) {
  entries_.push_back({key, "null", nullptr});
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, JsonObject child) {
  entries_.push_back({key, "", std::make_shared<JsonObject>(std::move(child))});
  return *this;
}

void JsonObject::dump_into(std::string& out, int depth) const {
  if (entries_.empty()) {
    out += "{}";
    return;
  }
  const std::string indent(2 * (depth + 1), ' ');
  out += "{\n";
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    out += indent + json_quote(entry.key) + ": ";
    if (entry.child) {
      entry.child->dump_into(out, depth + 1);
    } else {
      out += entry.scalar_text;
    }
    out += i + 1 < entries_.size() ? ",\n" : "\n";
  }
  out += std::string(2 * depth, ' ') + "}";
}

std::string JsonObject::dump() const {
  std::string out;
  dump_into(out, 0);
  return out + "\n";
}

}  // namespace fieldfuse::cli
