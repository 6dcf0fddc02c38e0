// SPDX-License-Identifier: Apache-2.0
// Reading input files safely: regular files only, sized before anything is allocated, and every
// failure an input error naming the path and the reason.
#pragma once

#include <cstdint>
#include <string>

namespace fieldfuse::cli {

/// A regular file opened for reading. Opening refuses anything else (a directory, a FIFO, a
/// device such as /dev/zero) before reading a byte, so a reader can trust size() and check a
/// header's promises against it before it allocates.
class InputFile {
 public:
  /// Opens `path`; failures are input errors (exit 3) naming the path and the reason.
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  /// The open descriptor, for libraries that read by descriptor (libtiff); owned by this object.
  int fd() const { return fd_; }
  /// Reads exactly `bytes` bytes at the current position; running out is an input error that
  /// says the file is truncated, with `what` naming the part being read.
  void read_exact(void* destination, std::uint64_t bytes, const char* what);

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// The lower-cased extension including the dot (".npy"), or "" when there is none.
std::string lowercase_extension(const std::string& path);

}  // namespace fieldfuse::cli
