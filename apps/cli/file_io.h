// SPDX-License-Identifier: Apache-2.0
// Whole-file reads and writes that report failures as CliErrors naming the path and the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fieldfuse::cli {

/// Reads all of `path`; an input error (exit 3) names the path and the system's reason.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

/// Creates or replaces `path`; a runtime error (exit 1) names the path and the reason.
void write_file_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes);
void write_file_text(const std::string& path, const std::string& text);

/// The lower-cased extension including the dot (".npy"), or "" when there is none.
std::string lowercase_extension(const std::string& path);

}  // namespace fieldfuse::cli
