// SPDX-License-Identifier: Apache-2.0
// A host-side 3-D float32 volume [D, H, W] and the intensity statistics the app needs from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fieldfuse/core.h"

namespace fieldfuse::cli {

struct Volume {
  std::int64_t depth = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::vector<float> voxels;  ///< C order: w fastest, then h, then d

  Volume() = default;
  Volume(std::int64_t d, std::int64_t h, std::int64_t w)
      : depth(d), height(h), width(w), voxels(static_cast<std::size_t>(d * h * w), 0.0f) {}

  std::int64_t numel() const { return depth * height * width; }
  std::vector<std::int64_t> shape() const { return {depth, height, width}; }
  /// "[D, H, W]", for messages.
  std::string shape_str() const;
  float at(std::int64_t d, std::int64_t h, std::int64_t w) const {
    return voxels[static_cast<std::size_t>((d * height + h) * width + w)];
  }
  bool same_shape(const Volume& other) const {
    return depth == other.depth && height == other.height && width == other.width;
  }
};

/// A contiguous float32 [D, H, W] host view of `volume`, for the library's host functions (metrics,
/// the phantom); it writes through the view only where the callee documents an output.
fieldfuse::TensorRef host_view(const Volume& volume);

struct IntensityRange {
  double low = 0.0;
  double high = 0.0;
  double span() const { return high - low; }
};

/// Smallest and largest value.
IntensityRange min_max(const std::vector<float>& values);

/// The values at two quantiles (fractions in [0, 1]), e.g. 0.005 and 0.995 for a range that a
/// few outliers (hot pixels, noise tails) cannot stretch.
IntensityRange quantile_range(const std::vector<float>& values, double lower, double upper);

/// Index of the first NaN or infinity, or -1 when every value is finite; `count` gets how many.
std::int64_t find_non_finite(const std::vector<float>& values, std::int64_t* count);

}  // namespace fieldfuse::cli
