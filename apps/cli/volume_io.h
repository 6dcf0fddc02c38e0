// SPDX-License-Identifier: Apache-2.0
// Loading a 3-D volume or tilt stack from .npy, TIFF or MRC with the checks the apps need.
#pragma once

#include <array>
#include <string>

#include "volume.h"

namespace fieldfuse::cli {

/// What the loaded array is, for the messages: a volume [D, H, W] of voxels for the denoiser, or a
/// tilt stack [n, H, W] of pixels for the reconstruction.
struct ArrayRole {
  const char* noun = "volume";
  const char* axes = "[D, H, W]";
  const char* element = "voxel";
  const char* consumer = "the denoiser";
};
constexpr ArrayRole kTiltStackRole = {"tilt stack", "[n, H, W]", "pixel", "the reconstruction"};

/// Facts of the file beyond its values.
struct VolumeFileInfo {
  std::string format;  ///< "npy", "tiff" or "mrc"
  /// Å per voxel along x (W), y (H), z (D) from an MRC header; 0 where unknown (other formats).
  std::array<double, 3> voxel_size{};
};

/// Loads `path` by its extension (.npy, .tif, .tiff, or an MRC extension: .mrc .st .ali .rec .map)
/// and checks that it is a non-empty 3-D array of finite values. Every failure is an input error
/// (exit 3) that starts with `flag` and the path, e.g. "--input 'a.npy': expected a 3-D volume
/// [D, H, W], but the array has shape [64, 64]". `info`, when given, receives the file's facts.
Volume load_volume(const std::string& path, const std::string& flag, const ArrayRole& role = {},
                   VolumeFileInfo* info = nullptr);

}  // namespace fieldfuse::cli
