// SPDX-License-Identifier: Apache-2.0
// The tiles of `fieldfuse phase`: where they lie in the field, cutting them out of a stack, and
// blending their results back into one image with smooth weights.
#include "phase_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fieldfuse::cli {

std::vector<std::int64_t> tile_starts(std::int64_t extent, std::int64_t tile,
                                      std::int64_t overlap) {
  std::vector<std::int64_t> starts;
  const std::int64_t stride = tile - overlap;
  for (std::int64_t start = 0; start + tile < extent; start += stride) starts.push_back(start);
  starts.push_back(extent - tile);
  return starts;
}

TileGrid::TileGrid(std::int64_t height_, std::int64_t width_, std::int64_t tile_,
                   std::int64_t overlap_)
    : height(height_),
      width(width_),
      tile(tile_),
      overlap(overlap_),
      starts_y(tile_starts(height_, tile_, overlap_)),
      starts_x(tile_starts(width_, tile_, overlap_)) {}

void cut_tiles(const float* stack, std::int64_t slices, const TileGrid& grid, std::int64_t first,
               std::int64_t count, float* out) {
  const std::int64_t t = grid.tile;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t b = first + k;
    for (std::int64_t z = 0; z < slices; ++z) {
      for (std::int64_t y = 0; y < t; ++y) {
        const float* row = stack + (z * grid.height + grid.y0(b) + y) * grid.width + grid.x0(b);
        std::memcpy(out + ((k * slices + z) * t + y) * t, row,
                    static_cast<std::size_t>(t) * sizeof(float));
      }
    }
  }
}

std::vector<double> blend_ramp(std::int64_t tile, std::int64_t overlap) {
  constexpr double kHalfPi = 1.57079632679489661923;
  std::vector<double> ramp(static_cast<std::size_t>(tile), 1.0);
  for (std::int64_t i = 0; i < overlap; ++i) {
    const double rise = std::sin(kHalfPi * (static_cast<double>(i) + 0.5) / overlap);
    ramp[static_cast<std::size_t>(i)] = rise * rise;
    ramp[static_cast<std::size_t>(tile - 1 - i)] = rise * rise;
  }
  return ramp;
}

TileBlender::TileBlender(const TileGrid& grid)
    : grid_(grid),
      ramp_(blend_ramp(grid.tile, grid.overlap)),
      sum_(static_cast<std::size_t>(grid.height * grid.width), 0.0),
      weight_(sum_.size(), 0.0) {}

void TileBlender::add(std::int64_t b, const float* values) {
  const std::int64_t t = grid_.tile;
  for (std::int64_t y = 0; y < t; ++y) {
    const std::size_t row = static_cast<std::size_t>((grid_.y0(b) + y) * grid_.width + grid_.x0(b));
    for (std::int64_t x = 0; x < t; ++x) {
      const double w = ramp_[static_cast<std::size_t>(y)] * ramp_[static_cast<std::size_t>(x)];
      sum_[row + static_cast<std::size_t>(x)] += w * values[y * t + x];
      weight_[row + static_cast<std::size_t>(x)] += w;
    }
  }
}

std::vector<float> TileBlender::image() const {
  std::vector<float> out(sum_.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(sum_[i] / weight_[i]);
  return out;
}

}  // namespace fieldfuse::cli
