// SPDX-License-Identifier: Apache-2.0
// A host-side 3-D float32 volume [D, H, W] and the intensity statistics the app needs from it.
#include "volume.h"

#include <algorithm>
#include <cmath>

namespace fieldfuse::cli {

std::string Volume::shape_str() const {
  return "[" + std::to_string(depth) + ", " + std::to_string(height) + ", " +
         std::to_string(width) + "]";
}

fieldfuse::TensorRef host_view(const Volume& volume) {
  return fieldfuse::TensorRef::contiguous(const_cast<float*>(volume.voxels.data()),
                                          fieldfuse::DType::Float32, {},
                                          {volume.depth, volume.height, volume.width});
}

IntensityRange min_max(const std::vector<float>& values) {
  if (values.empty()) return {};
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  return {*low, *high};
}

IntensityRange quantile_range(const std::vector<float>& values, double lower, double upper) {
  if (values.empty()) return {};
  std::vector<float> scratch(values);
  const auto nth = [&](double fraction) {
    const auto rank = static_cast<std::ptrdiff_t>(std::llround(fraction * (scratch.size() - 1)));
    std::nth_element(scratch.begin(), scratch.begin() + rank, scratch.end());
    return static_cast<double>(scratch[static_cast<std::size_t>(rank)]);
  };
  const double low = nth(lower);
  return {low, nth(upper)};
}

std::int64_t find_non_finite(const std::vector<float>& values, std::int64_t* count) {
  std::int64_t first = -1;
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++bad;
    }
  }
  if (count != nullptr) *count = bad;
  return first;
}

}  // namespace fieldfuse::cli
