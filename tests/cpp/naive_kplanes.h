// SPDX-License-Identifier: Apache-2.0
// Naive float64 reference loops for the K-Planes family, written straight from specs/kplanes.md.
//
// Nothing here uses the library or its math header (kplanes_math.h): planes are logical row-major
// [P, C, H, W] std::vector<double>, points are world coordinates, and every feature is recomputed
// from scratch by the spec's formulas (rotate, pick the plane pair, border-clamped bilinear sample,
// product over the three planes, times the gate). Tap positions are formed the way the spec
// defines them, p + h·e_i in world space, and then rotated; the library's R·p + h·R[:, i] is the
// same point up to rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace naive_kplanes {

/// One level: P planes of C channels of H×W cells, row-major [P, C, H, W].
struct Level {
  int64_t planes = 0, channels = 0, height = 0, width = 0;
  std::vector<double> values;

  int64_t numel() const { return planes * channels * height * width; }
  int64_t index(int64_t k, int64_t c, int64_t y, int64_t x) const {
    return ((k * channels + c) * height + y) * width + x;
  }
  double at(int64_t k, int64_t c, int64_t y, int64_t x) const { return values[index(k, c, y, x)]; }
};

/// A whole field: the variant, the T rotations (tilted only) and the levels with their gates.
struct Field {
  bool tilted = true;
  int num_tilts = 1;              ///< 1 for the axis-aligned variant
  std::vector<double> rotations;  ///< [T, 3, 3] row-major; empty for the axis-aligned variant
  std::vector<Level> levels;      ///< each [3T, C, H, W]
  std::vector<double> gates;      ///< one per level

  /// First feature column of level l: T·Σ_{m<l} C_m.
  int64_t column(int level) const {
    int64_t col = 0;
    for (int m = 0; m < level; ++m) col += num_tilts * levels[m].channels;
    return col;
  }
  int64_t num_features() const { return column(static_cast<int>(levels.size())); }
};

/// F.grid_sample's align_corners=True index of grid coordinate g on an axis of `size` samples,
/// clamped to the border (padding_mode="border").
inline double clamped_index(double g, int64_t size) {
  const double last = static_cast<double>(size - 1);
  const double u = (g + 1.0) / 2.0 * last;
  return std::min(std::max(u, 0.0), last);
}

/// The bilinear sample of channel c of plane k at grid point (gx, gy): x is the width axis.
inline double sample(const Level& lv, int64_t k, int64_t c, double gx, double gy) {
  const double ix = clamped_index(gx, lv.width), iy = clamped_index(gy, lv.height);
  const int64_t x0 = static_cast<int64_t>(std::floor(ix));
  const int64_t y0 = static_cast<int64_t>(std::floor(iy));
  const int64_t x1 = std::min(x0 + 1, lv.width - 1), y1 = std::min(y0 + 1, lv.height - 1);
  const double tx = ix - static_cast<double>(x0), ty = iy - static_cast<double>(y0);
  return (1 - tx) * (1 - ty) * lv.at(k, c, y0, x0) + tx * (1 - ty) * lv.at(k, c, y0, x1) +
         (1 - tx) * ty * lv.at(k, c, y1, x0) + tx * ty * lv.at(k, c, y1, x1);
}

/// The point the planes of tilt t see: R_t·p (tilted) or p itself (axis-aligned).
inline void rotated(const Field& f, int t, const double (&p)[3], double (&r)[3]) {
  for (int i = 0; i < 3; ++i) {
    if (!f.tilted) {
      r[i] = p[i];
      continue;
    }
    r[i] = 0.0;
    for (int j = 0; j < 3; ++j) r[i] += f.rotations[static_cast<size_t>(9 * t + 3 * i + j)] * p[j];
  }
}

/// The (gx, gy) pair of plane q ∈ {0, 1, 2} of a tilt, from its point r.
///   tilted:       (r_x, r_y), (r_z, r_x), (r_y, r_z)
///   axis-aligned: (p_x, p_y), (p_x, p_z), (p_y, p_z)
inline void plane_pair(bool tilted, int q, const double (&r)[3], double& gx, double& gy) {
  static const int kTilted[3][2] = {{0, 1}, {2, 0}, {1, 2}};
  static const int kAxisAligned[3][2] = {{0, 1}, {0, 2}, {1, 2}};
  const int(&pair)[2] = tilted ? kTilted[q] : kAxisAligned[q];
  gx = r[pair[0]];
  gy = r[pair[1]];
}

/// Feature (level, tilt, channel) of world point p: gate · Π_q sample(3t + q, c, pair_q).
inline double channel_feature(const Field& f, const double (&p)[3], int level, int t, int64_t c) {
  const Level& lv = f.levels[static_cast<size_t>(level)];
  double r[3];
  rotated(f, t, p, r);
  double product = 1.0;
  for (int q = 0; q < 3; ++q) {
    double gx, gy;
    plane_pair(f.tilted, q, r, gx, gy);
    product *= sample(lv, 3 * t + q, c, gx, gy);
  }
  return f.gates[static_cast<size_t>(level)] * product;
}

/// Calls fn(level, tilt, channel, column) for every feature column, in column order.
template <class Fn>
void for_each_column(const Field& f, Fn&& fn) {
  for (int l = 0; l < static_cast<int>(f.levels.size()); ++l)
    for (int t = 0; t < f.num_tilts; ++t)
      for (int64_t c = 0; c < f.levels[static_cast<size_t>(l)].channels; ++c)
        fn(l, t, c, f.column(l) + t * f.levels[static_cast<size_t>(l)].channels + c);
}

/// Row b of the points array [B, 3].
inline void point(const std::vector<double>& pts, int64_t b, double (&p)[3]) {
  for (int i = 0; i < 3; ++i) p[i] = pts[static_cast<size_t>(3 * b + i)];
}

/// Tap `tap` of world point p: p itself, then p + h·e_x, p + h·e_y, p + h·e_z.
inline void tap_point(const double (&p)[3], int tap, double h, double (&q)[3]) {
  for (int i = 0; i < 3; ++i) q[i] = p[i] + (tap == i + 1 ? h : 0.0);
}

/// features [B, F] of points [B, 3].
inline std::vector<double> features(const Field& f, const std::vector<double>& pts) {
  const int64_t rows = static_cast<int64_t>(pts.size()) / 3, cols = f.num_features();
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t b = 0; b < rows; ++b) {
    double p[3];
    point(pts, b, p);
    for_each_column(f, [&](int l, int t, int64_t c, int64_t col) {
      out[static_cast<size_t>(b * cols + col)] = channel_feature(f, p, l, t, c);
    });
  }
  return out;
}

/// tap_features [4, N, F] of tap points [N, 3] with step h.
inline std::vector<double> tap_features(const Field& f, const std::vector<double>& tap_pts,
                                        double h) {
  const int64_t rows = static_cast<int64_t>(tap_pts.size()) / 3, cols = f.num_features();
  std::vector<double> out(static_cast<size_t>(4 * rows * cols));
  for (int tap = 0; tap < 4; ++tap)
    for (int64_t n = 0; n < rows; ++n) {
      double p[3], q[3];
      point(tap_pts, n, p);
      tap_point(p, tap, h, q);
      for_each_column(f, [&](int l, int t, int64_t c, int64_t col) {
        out[static_cast<size_t>((tap * rows + n) * cols + col)] = channel_feature(f, q, l, t, c);
      });
    }
  return out;
}

/// The smallest distance, in index units, between any grid coordinate of p (every tilt, level and
/// plane) and a kink of the sampled function: a cell line inside the plane or its border. Central
/// differences with steps well below it see one smooth polynomial piece. Size-1 axes have no kinks.
inline double kink_margin(const Field& f, const double (&p)[3]) {
  double margin = std::numeric_limits<double>::infinity();
  for (int t = 0; t < f.num_tilts; ++t) {
    double r[3];
    rotated(f, t, p, r);
    for (const Level& lv : f.levels)
      for (int q = 0; q < 3; ++q) {
        double g[2];
        plane_pair(f.tilted, q, r, g[0], g[1]);
        const int64_t sizes[2] = {lv.width, lv.height};
        for (int a = 0; a < 2; ++a) {
          if (sizes[a] < 2) continue;
          const double last = static_cast<double>(sizes[a] - 1);
          const double u = (g[a] + 1.0) / 2.0 * last;
          const double d = u < 0 ? -u : (u > last ? u - last : std::fabs(u - std::round(u)));
          margin = std::min(margin, d);
        }
      }
  }
  return margin;
}

// ---- plane_tv
// ------------------------------------------------------------------------------------

/// A value with the sum of the absolute values of its terms (the scale of its rounding error).
struct Sum {
  double value = 0.0, abs = 0.0;
  void add(double term) {
    value += term;
    abs += std::fabs(term);
  }
};

/// The per-cell factor H_l·W_l / max_m(H_m·W_m), or 1 for the mean norm.
inline double tv_factor(const std::vector<Level>& levels, size_t l, bool per_cell) {
  if (!per_cell) return 1.0;
  double largest = 0.0;
  for (const Level& lv : levels) largest = std::max(largest, double(lv.height * lv.width));
  return double(levels[l].height * levels[l].width) / largest;
}

/// plane_tv's level terms: factor·(1/T)·Σ_k [ΣΔH²/(C(H−1)W) + ΣΔW²/(CH(W−1))]; an axis of size 1
/// contributes 0.
inline std::vector<Sum> plane_tv(const std::vector<Level>& levels, int num_tilts, bool per_cell) {
  std::vector<Sum> out(levels.size());
  for (size_t l = 0; l < levels.size(); ++l) {
    const Level& lv = levels[l];
    const double C = double(lv.channels), H = double(lv.height), W = double(lv.width);
    const double scale = tv_factor(levels, l, per_cell) / num_tilts;
    for (int64_t k = 0; k < lv.planes; ++k)
      for (int64_t c = 0; c < lv.channels; ++c)
        for (int64_t y = 0; y < lv.height; ++y)
          for (int64_t x = 0; x < lv.width; ++x) {
            if (y + 1 < lv.height) {
              const double d = lv.at(k, c, y + 1, x) - lv.at(k, c, y, x);
              out[l].add(scale * d * d / (C * (H - 1) * W));
            }
            if (x + 1 < lv.width) {
              const double d = lv.at(k, c, y, x + 1) - lv.at(k, c, y, x);
              out[l].add(scale * d * d / (C * H * (W - 1)));
            }
          }
  }
  return out;
}

/// grad_out[l]·∂level_l/∂planes[l] (row-major like Level::values), with per-element abs scales.
struct LevelGrad {
  std::vector<double> value, abs;
};

inline std::vector<LevelGrad> plane_tv_backward(const std::vector<Level>& levels, int num_tilts,
                                                bool per_cell,
                                                const std::vector<double>& grad_out) {
  std::vector<LevelGrad> out(levels.size());
  for (size_t l = 0; l < levels.size(); ++l) {
    const Level& lv = levels[l];
    out[l].value.assign(static_cast<size_t>(lv.numel()), 0.0);
    out[l].abs.assign(static_cast<size_t>(lv.numel()), 0.0);
    const double C = double(lv.channels), H = double(lv.height), W = double(lv.width);
    const double scale = grad_out[l] * tv_factor(levels, l, per_cell) / num_tilts;
    auto add = [&](int64_t e, double term) {
      out[l].value[static_cast<size_t>(e)] += term;
      out[l].abs[static_cast<size_t>(e)] += std::fabs(term);
    };
    for (int64_t k = 0; k < lv.planes; ++k)
      for (int64_t c = 0; c < lv.channels; ++c)
        for (int64_t y = 0; y < lv.height; ++y)
          for (int64_t x = 0; x < lv.width; ++x) {
            if (y + 1 < lv.height) {  // d/dG of d² with d = G[y+1] − G[y]
              const double d = lv.at(k, c, y + 1, x) - lv.at(k, c, y, x);
              const double g = 2.0 * scale * d / (C * (H - 1) * W);
              add(lv.index(k, c, y + 1, x), g);
              add(lv.index(k, c, y, x), -g);
            }
            if (x + 1 < lv.width) {
              const double d = lv.at(k, c, y, x + 1) - lv.at(k, c, y, x);
              const double g = 2.0 * scale * d / (C * H * (W - 1));
              add(lv.index(k, c, y, x + 1), g);
              add(lv.index(k, c, y, x), -g);
            }
          }
  }
  return out;
}

}  // namespace naive_kplanes
