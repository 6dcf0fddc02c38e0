// SPDX-License-Identifier: Apache-2.0
// All-or-nothing output files: each is written to a temporary file beside it and renamed into
// place only once every output of the run is complete and on disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fieldfuse::cli {

/// Where a writer puts an output's bytes (a temporary file until commit).
class OutputStream {
 public:
  OutputStream(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  /// Writes all `bytes`; a failure (a full disk, a file-size limit) is a runtime error (exit 1)
  /// naming the final path and the system's reason.
  void write(const void* data, std::size_t bytes);
  /// Writes `count` floats as little-endian IEEE binary32 (the byte order of .npy '<f4' and of the
  /// MRC files we write) whatever the host's order, in chunks, without a copy of the whole array.
  void write_float32_le(const float* values, std::int64_t count);

 private:
  int fd_;
  std::string path_;
};

/// A set of output files written together.
///
/// Note [atomic outputs]
/// Writing in place loses data: a full disk leaves a truncated file where a good one was, and an
/// output that names an input destroys it. commit() therefore writes every output to a temporary
/// file in the output's own directory (so the rename below cannot cross file systems), flushes it
/// to disk with fsync, and only when all are complete renames them over their targets. Existing
/// targets are first hard-linked to backups, so if a rename fails every target already replaced is
/// put back: the set lands completely or not at all. A failure before the renames leaves no
/// temporary file and every target untouched. (A crash between two renames can still leave a mix;
/// each single file is always either its old or its new version.)
class AtomicOutputs {
 public:
  using Writer = std::function<void(OutputStream&)>;

  /// Registers `path` and the function that writes its content (run by commit()).
  void add(const std::string& path, Writer writer);
  /// Writes, flushes and renames every registered output; throws a runtime CliError (exit 1) that
  /// names the file and the reason. An output that is a symbolic link is replaced by a file.
  void commit();
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::vector<std::string> paths_;
  std::vector<Writer> writers_;
};

/// Fails before the work rather than after it when an output has nowhere to go: a usage error
/// (exit 2) naming `flag` and `path` when the directory `path` would be written in does not exist.
void check_output_directory(const std::string& flag, const std::string& path);

/// Refuses (usage error, exit 2) any output path that is the same file as an input path, however
/// spelled: the same path, another spelling (./x, a/../x), a symbolic or a hard link. Each entry
/// is (the flag that gave it, the path).
void refuse_outputs_that_are_inputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                                    const std::vector<std::pair<std::string, std::string>>& inputs);

}  // namespace fieldfuse::cli
