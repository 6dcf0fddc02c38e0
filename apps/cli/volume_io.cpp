// SPDX-License-Identifier: Apache-2.0
// Loading a 3-D volume from .npy or TIFF with the checks the denoiser needs.
#include "volume_io.h"

#include <cmath>
#include <vector>

#include "cli_error.h"
#include "file_io.h"
#include "npy.h"
#include "tiff.h"

namespace fieldfuse::cli {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

Volume volume_from_npy(const std::string& path, const std::string& where) {
  NpyArray array = read_npy(path);
  if (array.shape.size() != 3) {
    throw input_error(where + ": expected a 3-D volume [D, H, W], but the array has shape " +
                      shape_text(array.shape));
  }
  Volume volume;
  volume.depth = array.shape[0];
  volume.height = array.shape[1];
  volume.width = array.shape[2];
  volume.voxels = std::move(array.values);
  return volume;
}

Volume volume_from_tiff(const std::string& path, const std::string& where) {
  TiffStack stack = read_tiff(path);
  if (stack.pages < 2) {
    throw input_error(
        where + ": expected a 3-D volume (a multi-page TIFF stack), but the file holds " +
        "a single " + std::to_string(stack.width) + "x" + std::to_string(stack.height) + " image");
  }
  Volume volume;
  volume.depth = stack.pages;
  volume.height = stack.height;
  volume.width = stack.width;
  volume.voxels = std::move(stack.values);
  return volume;
}

}  // namespace

Volume load_volume(const std::string& path, const std::string& flag) {
  const std::string where = flag + " '" + path + "'";
  const std::string extension = lowercase_extension(path);
  Volume volume;
  try {
    if (extension == ".npy") {
      volume = volume_from_npy(path, where);
    } else if (extension == ".tif" || extension == ".tiff") {
      volume = volume_from_tiff(path, where);
    } else {
      throw input_error(where + ": unsupported file type '" + extension +
                        "' (expected .npy, .tif or .tiff)");
    }
  } catch (const CliError& error) {
    // Readers name the file but not the flag; add it so the user knows which input is at fault.
    const std::string message = error.what();
    if (message.rfind(flag, 0) == 0) throw;
    throw CliError(error.kind(), flag + ": " + message);
  }
  if (volume.numel() == 0) {
    throw input_error(where + ": the volume is empty (shape " + volume.shape_str() + ")");
  }
  std::int64_t bad_count = 0;
  const std::int64_t first_bad = find_non_finite(volume.voxels, &bad_count);
  if (first_bad >= 0) {
    const std::int64_t plane = volume.height * volume.width;
    const float value = volume.voxels[static_cast<std::size_t>(first_bad)];
    throw input_error(
        where + ": contains " + std::to_string(bad_count) + " non-finite value" +
        (bad_count == 1 ? "" : "s") + " (the first, " + (std::isnan(value) ? "NaN" : "Inf") +
        ", at voxel [" + std::to_string(first_bad / plane) + ", " +
        std::to_string(first_bad % plane / volume.width) + ", " +
        std::to_string(first_bad % volume.width) + "]); the denoiser needs finite values");
  }
  return volume;
}

}  // namespace fieldfuse::cli
