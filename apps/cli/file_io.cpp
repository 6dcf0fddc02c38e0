// SPDX-License-Identifier: Apache-2.0
// Whole-file reads and writes that report failures as CliErrors naming the path and the reason.
#include "file_io.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "cli_error.h"

namespace fieldfuse::cli {
namespace {

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FileHandle = std::unique_ptr<std::FILE, FileCloser>;

std::string reason_from_errno() { return std::strerror(errno); }

void write_raw(const std::string& path, const void* data, std::size_t size) {
  FileHandle file(std::fopen(path.c_str(), "wb"));
  if (!file) {
    throw runtime_error("cannot create '" + path + "': " + reason_from_errno());
  }
  if (size > 0 && std::fwrite(data, 1, size, file.get()) != size) {
    throw runtime_error("cannot write '" + path + "': " + reason_from_errno());
  }
  // fclose flushes; a full disk can surface only here.
  if (std::fclose(file.release()) != 0) {
    throw runtime_error("cannot write '" + path + "': " + reason_from_errno());
  }
}

}  // namespace

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  errno = 0;
  FileHandle file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    throw input_error("cannot open '" + path + "': " + reason_from_errno());
  }
  std::vector<std::uint8_t> bytes;
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(chunk, 1, sizeof(chunk), file.get());
    bytes.insert(bytes.end(), chunk, chunk + got);
    if (got < sizeof(chunk)) break;
  }
  // Reading a directory "opens" on Linux but fails here with EISDIR.
  if (std::ferror(file.get())) {
    throw input_error("cannot read '" + path + "': " + reason_from_errno());
  }
  return bytes;
}

void write_file_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  write_raw(path, bytes.data(), bytes.size());
}

void write_file_text(const std::string& path, const std::string& text) {
  write_raw(path, text.data(), text.size());
}

std::string lowercase_extension(const std::string& path) {
  const std::size_t slash = path.find_last_of("/\\");
  const std::size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string extension = path.substr(dot);
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return extension;
}

}  // namespace fieldfuse::cli
