// SPDX-License-Identifier: Apache-2.0
// The tiles of `fieldfuse phase`: where they lie in the field, cutting them out of a stack, and
// blending their results back into one image with smooth weights.
#pragma once

#include <cstdint>
#include <vector>

namespace fieldfuse::cli {

/// Where the tiles start along one axis of `extent` pixels: every `tile - overlap` pixels from 0,
/// the last aligned to the far edge (so it may share more than `overlap` with its neighbour).
/// Needs 8 <= tile <= extent and 0 <= overlap < tile.
std::vector<std::int64_t> tile_starts(std::int64_t extent, std::int64_t tile, std::int64_t overlap);

/// The tiles covering a [height, width] field, row by row (tile b at starts_y[b / tiles_x()],
/// starts_x[b % tiles_x()]).
struct TileGrid {
  std::int64_t height = 0, width = 0, tile = 0, overlap = 0;
  std::vector<std::int64_t> starts_y, starts_x;

  TileGrid(std::int64_t height, std::int64_t width, std::int64_t tile, std::int64_t overlap);
  std::int64_t tiles_y() const { return static_cast<std::int64_t>(starts_y.size()); }
  std::int64_t tiles_x() const { return static_cast<std::int64_t>(starts_x.size()); }
  std::int64_t count() const { return tiles_y() * tiles_x(); }
  std::int64_t y0(std::int64_t b) const {
    return starts_y[static_cast<std::size_t>(b / tiles_x())];
  }
  std::int64_t x0(std::int64_t b) const {
    return starts_x[static_cast<std::size_t>(b % tiles_x())];
  }
};

/// Copies tiles [first, first + count) of `grid` out of the C-order `stack` [slices, height,
/// width] into `out` [count, slices, tile, tile].
void cut_tiles(const float* stack, std::int64_t slices, const TileGrid& grid, std::int64_t first,
               std::int64_t count, float* out);

/// The blending weight along one axis of a tile: sin^2 rising over the first `overlap` pixels,
/// 1 in the middle, cos^2 falling over the last `overlap`; sampled at pixel centres, so every
/// weight is positive and two ramps `tile - overlap` apart add to exactly 1.
std::vector<double> blend_ramp(std::int64_t tile, std::int64_t overlap);

/// Sums weighted tile results over the field and divides by the summed weights, so the seams of
/// any layout (the last, edge-aligned tiles included) vanish.
class TileBlender {
 public:
  explicit TileBlender(const TileGrid& grid);
  /// Adds tile `b`'s [tile, tile] result.
  void add(std::int64_t b, const float* values);
  /// The blended [height, width] image (every pixel is covered by at least one tile).
  std::vector<float> image() const;

 private:
  const TileGrid& grid_;
  std::vector<double> ramp_;
  std::vector<double> sum_, weight_;
};

}  // namespace fieldfuse::cli
