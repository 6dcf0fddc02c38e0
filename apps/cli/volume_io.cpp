// SPDX-License-Identifier: Apache-2.0
// Loading a 3-D volume or tilt stack from .npy, TIFF or MRC with the checks the apps need.
#include "volume_io.h"

#include <cmath>
#include <vector>

#include "cli_error.h"
#include "file_io.h"
#include "mrc.h"
#include "npy.h"
#include "tiff.h"

namespace fieldfuse::cli {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

Volume volume_from_npy(const std::string& path, const std::string& where, const ArrayRole& role) {
  NpyArray array = read_npy(path);
  if (array.shape.size() != 3) {
    throw input_error(where + ": expected a 3-D " + role.noun + " " + role.axes +
                      ", but the array has shape " + shape_text(array.shape));
  }
  Volume volume;
  volume.depth = array.shape[0];
  volume.height = array.shape[1];
  volume.width = array.shape[2];
  volume.voxels = std::move(array.values);
  return volume;
}

Volume volume_from_tiff(const std::string& path, const std::string& where, const ArrayRole& role) {
  TiffStack stack = read_tiff(path);
  if (stack.pages < 2) {
    throw input_error(where + ": expected a 3-D " + role.noun +
                      " (a multi-page TIFF stack), but the file holds " + "a single " +
                      std::to_string(stack.width) + "x" + std::to_string(stack.height) + " image");
  }
  Volume volume;
  volume.depth = stack.pages;
  volume.height = stack.height;
  volume.width = stack.width;
  volume.voxels = std::move(stack.values);
  return volume;
}

Volume volume_from_mrc(const std::string& path, VolumeFileInfo& info) {
  MrcData data = read_mrc(path);
  info.voxel_size = data.voxel_size;
  Volume volume;
  volume.depth = data.nz;
  volume.height = data.ny;
  volume.width = data.nx;
  volume.voxels = std::move(data.values);
  return volume;
}

}  // namespace

Volume load_volume(const std::string& path, const std::string& flag, const ArrayRole& role,
                   VolumeFileInfo* info) {
  VolumeFileInfo facts;
  const std::string where = flag + " '" + path + "'";
  const std::string extension = lowercase_extension(path);
  Volume volume;
  try {
    if (extension == ".npy") {
      facts.format = "npy";
      volume = volume_from_npy(path, where, role);
    } else if (extension == ".tif" || extension == ".tiff") {
      facts.format = "tiff";
      volume = volume_from_tiff(path, where, role);
    } else if (is_mrc_extension(extension)) {
      facts.format = "mrc";
      volume = volume_from_mrc(path, facts);
    } else {
      throw input_error(where + ": unsupported file type '" + extension +
                        "' (expected .npy, .tif, .tiff, .mrc, .st, .ali, .rec or .map)");
    }
  } catch (const CliError& error) {
    // Readers name the file but not the flag; add it so the user knows which input is at fault.
    const std::string message = error.what();
    if (message.rfind(flag, 0) == 0) throw;
    throw CliError(error.kind(), flag + ": " + message);
  }
  if (volume.numel() == 0) {
    throw input_error(where + ": the " + role.noun + " is empty (shape " + volume.shape_str() +
                      ")");
  }
  std::int64_t bad_count = 0;
  const std::int64_t first_bad = find_non_finite(volume.voxels, &bad_count);
  if (first_bad >= 0) {
    const std::int64_t plane = volume.height * volume.width;
    const float value = volume.voxels[static_cast<std::size_t>(first_bad)];
    throw input_error(
        where + ": contains " + std::to_string(bad_count) + " non-finite value" +
        (bad_count == 1 ? "" : "s") + " (the first, " + (std::isnan(value) ? "NaN" : "Inf") +
        ", at " + role.element + " [" + std::to_string(first_bad / plane) + ", " +
        std::to_string(first_bad % plane / volume.width) + ", " +
        std::to_string(first_bad % volume.width) + "]); " + role.consumer + " needs finite values");
  }
  if (info != nullptr) *info = facts;
  return volume;
}

}  // namespace fieldfuse::cli
