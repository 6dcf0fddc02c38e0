// SPDX-License-Identifier: Apache-2.0
// All-or-nothing output files: each is written to a temporary file beside it and renamed into
// place only once every output of the run is complete and on disk.
#include "atomic_outputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "cli_error.h"

namespace fieldfuse::cli {
namespace {

std::string reason(int error) { return std::strerror(error); }

std::string directory_of(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// A hidden sibling name that does not exist yet, e.g. "dir/.out.npy.tmp-3f9a1c20".
std::string sibling_name(const std::string& path, const char* kind) {
  static std::mt19937_64 engine{std::random_device{}()};
  const std::filesystem::path target(path);
  char suffix[20];
  std::snprintf(suffix, sizeof(suffix), "%08llx",
                static_cast<unsigned long long>(engine() & 0xffffffffu));
  return (target.parent_path() / ("." + target.filename().string() + "." + kind + "-" + suffix))
      .string();
}

// A temporary file, removed on destruction unless it was renamed away.
struct TempFile {
  std::string path;
  bool owned = false;
  ~TempFile() {
    if (owned) ::unlink(path.c_str());
  }
};

// New files get the permissions an ordinary create would give them (0666 less the umask).
mode_t default_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

void write_to_temp(const std::string& target, const AtomicOutputs::Writer& writer, TempFile& temp) {
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp.path = sibling_name(target, "tmp");
    fd = ::open(temp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, default_file_mode());
    if (fd < 0 && (errno != EEXIST || attempt > 100)) {
      throw runtime_error("cannot create a temporary file for '" + target + "' in '" +
                          directory_of(target) + "': " + reason(errno));
    }
  }
  temp.owned = true;
  try {
    OutputStream stream(fd, target);
    writer(stream);
    // A full disk may report itself only when the data is flushed.
    if (::fsync(fd) != 0) throw runtime_error("cannot write '" + target + "': " + reason(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw runtime_error("cannot write '" + target + "': " + reason(errno));
}

bool exists_no_follow(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the renames themselves have happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void OutputStream::write(const void* data, std::size_t bytes) {
  const auto* in = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const ssize_t put = ::write(fd_, in, bytes);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw runtime_error("cannot write '" + path_ + "': " + reason(errno));
    in += put;
    bytes -= static_cast<std::size_t>(put);
  }
}

void OutputStream::write_float32_le(const float* values, std::int64_t count) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 16;
  std::vector<std::uint8_t> chunk;
  for (std::int64_t first = 0; first < count; first += kChunk) {
    const std::int64_t n = std::min(kChunk, count - first);
    chunk.resize(static_cast<std::size_t>(n) * sizeof(float));
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &values[first + i], sizeof(bits));
      for (int b = 0; b < 4; ++b)
        chunk[static_cast<std::size_t>(4 * i + b)] = static_cast<std::uint8_t>(bits >> (8 * b));
    }
    write(chunk.data(), chunk.size());
  }
}

void AtomicOutputs::add(const std::string& path, Writer writer) {
  paths_.push_back(path);
  writers_.push_back(std::move(writer));
}

void AtomicOutputs::commit() {
  const std::size_t count = paths_.size();
  std::vector<TempFile> temps(count);
  for (std::size_t i = 0; i < count; ++i) write_to_temp(paths_[i], writers_[i], temps[i]);

  // Backups of the targets that exist, so a failed rename can be undone.
  std::vector<TempFile> backups(count);
  std::vector<bool> existed(count, false);
  for (std::size_t i = 0; i < count; ++i) {
    existed[i] = exists_no_follow(paths_[i]);
    if (!existed[i]) continue;
    for (int attempt = 0; attempt < 100; ++attempt) {
      backups[i].path = sibling_name(paths_[i], "old");
      if (::link(paths_[i].c_str(), backups[i].path.c_str()) == 0) {
        backups[i].owned = true;
        break;
      }
      if (errno != EEXIST) break;  // no hard links here: that target cannot be restored
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (::rename(temps[i].path.c_str(), paths_[i].c_str()) == 0) {
      temps[i].owned = false;
      continue;
    }
    const int error = errno;
    bool restored = true;
    for (std::size_t j = 0; j < i; ++j) {  // undo: each earlier target back to its old state
      if (backups[j].owned) {
        if (::rename(backups[j].path.c_str(), paths_[j].c_str()) == 0) {
          backups[j].owned = false;
        } else {
          restored = false;
        }
      } else if (existed[j]) {
        restored = false;  // replaced, with no backup to restore (no hard links there)
      } else {
        ::unlink(paths_[j].c_str());
      }
    }
    throw runtime_error("cannot replace '" + paths_[i] + "': " + reason(error) +
                        (restored ? "; no output was changed" : "; earlier outputs were replaced"));
  }
  // Success: the TempFile destructors drop the backups.
  for (std::size_t i = 0; i < count; ++i) sync_directory(directory_of(paths_[i]));
}

void check_output_directory(const std::string& flag, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty() && !std::filesystem::is_directory(parent, error)) {
    throw usage_error(flag + " '" + path + "': directory '" + parent.string() + "' does not exist");
  }
}

void refuse_outputs_that_are_inputs(
    const std::vector<std::pair<std::string, std::string>>& outputs,
    const std::vector<std::pair<std::string, std::string>>& inputs) {
  for (const auto& [output_flag, output] : outputs) {
    for (const auto& [input_flag, input] : inputs) {
      if (input.empty()) continue;
      std::error_code error;  // a path that does not exist (yet) is no input
      if (output == input || std::filesystem::equivalent(output, input, error)) {
        throw usage_error(output_flag + " would overwrite " + input_flag + " '" + input +
                          "' (the output '" + output +
                          "' is the same file); choose another output");
      }
    }
  }
}

}  // namespace fieldfuse::cli
