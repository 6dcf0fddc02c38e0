// SPDX-License-Identifier: Apache-2.0
// Reading input files safely: regular files only, sized before anything is allocated, and every
// failure an input error naming the path and the reason.
#include "file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "cli_error.h"

namespace fieldfuse::cli {

InputFile::InputFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; the
  // fstat below refuses it right after. Regular files ignore the flag.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw input_error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    throw input_error("cannot read '" + path + "': " + std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    const char* kind = S_ISDIR(info.st_mode)    ? "a directory"
                       : S_ISFIFO(info.st_mode) ? "a pipe"
                       : S_ISCHR(info.st_mode)  ? "a character device"
                       : S_ISBLK(info.st_mode)  ? "a block device"
                       : S_ISSOCK(info.st_mode) ? "a socket"
                                                : "not a regular file";
    throw input_error("cannot read '" + path + "': it is " + kind +
                      ", not a regular file (inputs are read only from regular files)");
  }
  size_ = static_cast<std::uint64_t>(info.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_exact(void* destination, std::uint64_t bytes, const char* what) {
  auto* out = static_cast<unsigned char*>(destination);
  while (bytes > 0) {
    // Linux reads at most about 2 GiB per call.
    constexpr std::uint64_t kMaxChunk = std::uint64_t{1} << 30;
    const ssize_t got = ::read(fd_, out, bytes < kMaxChunk ? bytes : kMaxChunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw input_error("cannot read '" + path_ + "': " + std::strerror(errno));
    if (got == 0) throw input_error("'" + path_ + "' is truncated inside " + what);
    out += got;
    bytes -= static_cast<std::uint64_t>(got);
  }
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
