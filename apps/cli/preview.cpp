// SPDX-License-Identifier: Apache-2.0
// The PNG preview of a run: the three central orthogonal slices of each volume, one row per volume.
#include "preview.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "png.h"

namespace fieldfuse::cli {
namespace {

constexpr std::int64_t kGap = 2;       // pixels between panels
constexpr std::uint8_t kGapGray = 64;  // dark gray, distinct from the black background
constexpr int kColumns = 3;

std::uint8_t to_gray(float value, const IntensityRange& window) {
  const double span = window.span() > 0.0 ? window.span() : 1.0;
  const double scaled = std::round(255.0 * (value - window.low) / span);
  return static_cast<std::uint8_t>(std::clamp(scaled, 0.0, 255.0));
}

// Panel c of a volume: its size and the voxel at panel pixel (row, col).
struct Panel {
  std::int64_t rows;
  std::int64_t cols;
};

Panel panel_size(const Volume& v, int column) {
  switch (column) {
    case 0:
      return {v.height, v.width};  // axial: fixed d
    case 1:
      return {v.depth, v.width};  // coronal: fixed h
    default:
      return {v.depth, v.height};  // sagittal: fixed w
  }
}

float panel_voxel(const Volume& v, int column, std::int64_t row, std::int64_t col) {
  switch (column) {
    case 0:
      return v.at(v.depth / 2, row, col);
    case 1:
      return v.at(row, v.height / 2, col);
    default:
      return v.at(row, col, v.width / 2);
  }
}

}  // namespace

std::vector<std::uint8_t> encode_slice_preview(const std::vector<const Volume*>& rows,
                                               const IntensityRange& window) {
  const Volume& first = *rows.front();
  std::int64_t column_left[kColumns];
  std::int64_t image_width = 0;
  std::int64_t row_height = 0;
  for (int c = 0; c < kColumns; ++c) {
    const Panel panel = panel_size(first, c);
    column_left[c] = image_width + (c > 0 ? kGap : 0);
    image_width = column_left[c] + panel.cols;
    row_height = std::max(row_height, panel.rows);
  }
  const auto row_count = static_cast<std::int64_t>(rows.size());
  const std::int64_t image_height = row_count * row_height + (row_count - 1) * kGap;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(image_width * image_height), kGapGray);

  for (std::int64_t r = 0; r < row_count; ++r) {
    const Volume& volume = *rows[static_cast<std::size_t>(r)];
    const std::int64_t top = r * (row_height + kGap);
    for (int c = 0; c < kColumns; ++c) {
      const Panel panel = panel_size(volume, c);
      for (std::int64_t y = 0; y < row_height; ++y) {
        std::uint8_t* line = pixels.data() + (top + y) * image_width + column_left[c];
        for (std::int64_t x = 0; x < panel.cols; ++x) {
          // Shorter panels leave black below them rather than gap gray.
          line[x] = y < panel.rows ? to_gray(panel_voxel(volume, c, y, x), window) : 0;
        }
      }
    }
  }
  return encode_png_gray8(image_width, image_height, pixels.data());
}

}  // namespace fieldfuse::cli
