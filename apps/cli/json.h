// SPDX-License-Identifier: Apache-2.0
// A tiny JSON object builder for the run reports (write-only; keys keep insertion order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fieldfuse::cli {

class JsonObject {
 public:
  /// Non-finite numbers (an infinite PSNR of a perfect result, say) are written as null, the only
  /// JSON spelling that strict parsers accept.
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, std::int64_t value);
  JsonObject& add(const std::string& key, int value) { return add(key, std::int64_t{value}); }
  JsonObject& add(const std::string& key, bool value);
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, const char* value) {
    return add(key, std::string(value));
  }
  JsonObject& add(const std::string& key, const std::vector<std::int64_t>& values);
  JsonObject& add_null(const std::string& key);
  JsonObject& add(const std::string& key, JsonObject child);

  /// Pretty-printed with two-space indentation and a trailing newline at the top level.
  std::string dump() const;

 private:
  struct Entry {
    std::string key;
    std::string scalar_text;            // the rendered value, unless `child` is set
    std::shared_ptr<JsonObject> child;  // shared_ptr because JsonObject is incomplete here
  };
  void dump_into(std::string& out, int depth) const;

  std::vector<Entry> entries_;
};

/// `text` as a quoted JSON string with the required escapes.
std::string json_quote(const std::string& text);

}  // namespace fieldfuse::cli
