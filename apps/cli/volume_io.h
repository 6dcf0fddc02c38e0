// SPDX-License-Identifier: Apache-2.0
// Loading a 3-D volume from .npy or TIFF with the checks the denoiser needs.
#pragma once

#include <string>

#include "volume.h"

namespace fieldfuse::cli {

/// Loads `path` by its extension (.npy, .tif, .tiff) and checks that it is a non-empty 3-D volume
/// of finite values. Every failure is an input error (exit 3) that starts with `flag` and the path,
/// e.g. "--input 'a.npy': expected a 3-D volume [D, H, W], but the array has shape [64, 64]".
Volume load_volume(const std::string& path, const std::string& flag);

}  // namespace fieldfuse::cli
