// SPDX-License-Identifier: Apache-2.0
// Naive float64 reference loops for the tv family, written straight from specs/tv.md.
//
// Arrays here are logical row-major std::vector<double> with an explicit shape; nothing in this
// file knows about TensorRef or the library, so a bug in the library cannot leak into its oracle.
// Every sum also records the sum of the absolute values of its terms: the scale that rounding
// error follows, from which the tests derive their tolerances.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace naive {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

/// sign with sign(0) = 0, the convention of tv_l1_3d and tv_weighted_l1.
inline double sign(double x) { return static_cast<double>((x > 0) - (x < 0)); }

/// A scalar sum plus the sum of the absolute values of its terms.
struct Sum {
  double value = 0.0;
  double abs = 0.0;
  void add(double term) {
    value += term;
    abs += std::fabs(term);
  }
};

/// A gradient plus, per element, the sum of the absolute values of its contributions.
struct Grad {
  std::vector<double> value;
  std::vector<double> abs;
  explicit Grad(int64_t n) : value(static_cast<size_t>(n), 0.0), abs(static_cast<size_t>(n), 0.0) {}
  void add(int64_t e, double term) {
    value[static_cast<size_t>(e)] += term;
    abs[static_cast<size_t>(e)] += std::fabs(term);
  }
};

/// Calls fn(lo, hi) for every forward-difference pair Δ = v[hi] − v[lo] along `dim`.
template <class F>
void for_each_pair(const Shape& shape, int dim, F&& fn) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = shape[static_cast<size_t>(dim)];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i + 1 < n; ++i)
      for (int64_t r = 0; r < inner; ++r) {
        const int64_t lo = (o * n + i) * inner + r;
        fn(lo, lo + inner);
      }
}

/// Position of element e along `dim`, with that dim's size and stride.
struct AxisPos {
  int64_t coord, size, stride;
};
inline AxisPos axis_pos(const Shape& shape, int dim, int64_t e) {
  int64_t stride = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) stride *= shape[d];
  const int64_t size = shape[static_cast<size_t>(dim)];
  return {(e / stride) % size, size, stride};
}

// ---- tv_sq_3d -----------------------------------------------------------------------------

/// S = Σ over the last three axes of Σ Δ².
inline Sum sq_forward(const std::vector<double>& v, const Shape& shape) {
  Sum s;
  const int nd = static_cast<int>(shape.size());
  for (int dim = nd - 3; dim < nd; ++dim)
    for_each_pair(shape, dim, [&](int64_t lo, int64_t hi) {
      const double d = v[hi] - v[lo];
      s.add(d * d);
    });
  return s;
}

/// Per voxel: g·2·Σ_axes [(v − prev)·[prev exists] − (next − v)·[next exists]].
inline Grad sq_backward(const std::vector<double>& v, const Shape& shape, double g) {
  Grad grad(numel(shape));
  const int nd = static_cast<int>(shape.size());
  for (int64_t e = 0; e < numel(shape); ++e)
    for (int dim = nd - 3; dim < nd; ++dim) {
      const AxisPos p = axis_pos(shape, dim, e);
      if (p.coord > 0) grad.add(e, g * 2.0 * (v[e] - v[e - p.stride]));
      if (p.coord + 1 < p.size) grad.add(e, -g * 2.0 * (v[e + p.stride] - v[e]));
    }
  return grad;
}

// ---- tv_l1_3d ------------------------------------------------------------------------------

/// [Σ|Δd|, Σ|Δh|, Σ|Δw|] over all slices.
inline std::vector<Sum> l1_forward(const std::vector<double>& v, const Shape& shape) {
  std::vector<Sum> out(3);
  const int nd = static_cast<int>(shape.size());
  for (int a = 0; a < 3; ++a)
    for_each_pair(shape, nd - 3 + a,
                  [&](int64_t lo, int64_t hi) { out[a].add(std::fabs(v[hi] - v[lo])); });
  return out;
}

/// Per voxel: Σ_axes g_a·[sign(v − prev)·[prev exists] − sign(next − v)·[next exists]].
inline Grad l1_backward(const std::vector<double>& v, const Shape& shape,
                        const std::vector<double>& g) {
  Grad grad(numel(shape));
  const int nd = static_cast<int>(shape.size());
  for (int64_t e = 0; e < numel(shape); ++e)
    for (int a = 0; a < 3; ++a) {
      const AxisPos p = axis_pos(shape, nd - 3 + a, e);
      if (p.coord > 0) grad.add(e, g[a] * sign(v[e] - v[e - p.stride]));
      if (p.coord + 1 < p.size) grad.add(e, -g[a] * sign(v[e + p.stride] - v[e]));
    }
  return grad;
}

// ---- tv_iso_3d -----------------------------------------------------------------------------

/// The corner anchored at voxel e (caller guarantees it exists): its three differences and s.
struct Corner {
  double dd, dh, dw, s;
};
inline Corner iso_corner(const std::vector<double>& v, const Shape& shape, int64_t e, double eps) {
  const int nd = static_cast<int>(shape.size());
  const int64_t sw = 1, sh = shape[nd - 1], sd = shape[nd - 1] * shape[nd - 2];
  Corner c{v[e + sd] - v[e], v[e + sh] - v[e], v[e + sw] - v[e], 0.0};
  c.s = std::sqrt(c.dd * c.dd + c.dh * c.dh + c.dw * c.dw + eps);
  return c;
}

/// Whether voxel e anchors a corner shifted by (-od, -oh, -ow): every coordinate of the anchor in
/// [0, size − 2].
inline bool iso_has_corner(const Shape& shape, int64_t e, int od, int oh, int ow) {
  const int nd = static_cast<int>(shape.size());
  const int off[3] = {od, oh, ow};
  for (int a = 0; a < 3; ++a) {
    const AxisPos p = axis_pos(shape, nd - 3 + a, e);
    const int64_t c = p.coord - off[a];
    if (c < 0 || c > p.size - 2) return false;
  }
  return true;
}

/// N = B·(D−1)(H−1)(W−1), or 0 when any of D, H, W < 2.
inline double iso_count(const Shape& shape) {
  const int nd = static_cast<int>(shape.size());
  double n = 1.0;
  for (int d = 0; d < nd; ++d) n *= static_cast<double>(d < nd - 3 ? shape[d] : shape[d] - 1);
  for (int d = nd - 3; d < nd; ++d)
    if (shape[d] < 2) return 0.0;
  return n;
}

/// L = Σ_corners s / N.
inline Sum iso_forward(const std::vector<double>& v, const Shape& shape, double eps) {
  Sum s;
  const double n = iso_count(shape);
  if (n == 0.0) return s;
  for (int64_t e = 0; e < numel(shape); ++e)
    if (iso_has_corner(shape, e, 0, 0, 0)) s.add(iso_corner(v, shape, e, eps).s / n);
  return s;
}

/// 4-corner gather per voxel, times g/N.
inline Grad iso_backward(const std::vector<double>& v, const Shape& shape, double eps, double g) {
  Grad grad(numel(shape));
  const double n = iso_count(shape);
  if (n == 0.0) return grad;
  const int nd = static_cast<int>(shape.size());
  const int64_t sd = shape[nd - 1] * shape[nd - 2], sh = shape[nd - 1], sw = 1;
  const double k = g / n;
  for (int64_t e = 0; e < numel(shape); ++e) {
    if (iso_has_corner(shape, e, 0, 0, 0)) {
      const Corner c = iso_corner(v, shape, e, eps);
      grad.add(e, -k * (c.dd + c.dh + c.dw) / c.s);
    }
    if (iso_has_corner(shape, e, 1, 0, 0)) {
      const Corner c = iso_corner(v, shape, e - sd, eps);
      grad.add(e, k * c.dd / c.s);
    }
    if (iso_has_corner(shape, e, 0, 1, 0)) {
      const Corner c = iso_corner(v, shape, e - sh, eps);
      grad.add(e, k * c.dh / c.s);
    }
    if (iso_has_corner(shape, e, 0, 0, 1)) {
      const Corner c = iso_corner(v, shape, e - sw, eps);
      grad.add(e, k * c.dw / c.s);
    }
  }
  return grad;
}

// ---- tv_weighted_l1 ------------------------------------------------------------------------

/// mean(|diff(array, dim)|), over every difference along `dim`.
inline double mean_abs_diff(const std::vector<double>& v, const Shape& shape, int dim) {
  double sum = 0.0;
  int64_t count = 0;
  for_each_pair(shape, dim, [&](int64_t lo, int64_t hi) {
    sum += std::fabs(v[hi] - v[lo]);
    ++count;
  });
  return sum / static_cast<double>(count);
}

/// The ptychography loop of specs/tv.md (`ObjectConstraints._calc_tv_loss`), verbatim in C++, for
/// a 2-D (y, x) or 3-D (slices, y, x) array.
inline double ptycho_tv_loss(const std::vector<double>& array, const Shape& shape, double w_z,
                             double w_xy) {
  const int ndim = static_cast<int>(shape.size());
  double loss = 0.0;
  int n = 0;
  for (int dim = 0; dim < ndim; ++dim) {
    const double w = (dim == 0 && ndim == 3) ? w_z : w_xy;
    if (w > 0) {
      n += 1;
      loss += w * mean_abs_diff(array, shape, dim);
    }
  }
  if (n > 0) loss /= n;
  return loss;
}

/// Number of weights that are > 0, at least 1 (the divisor of the loss).
inline double weighted_divisor(const std::vector<double>& w) {
  int n = 0;
  for (double x : w) n += x > 0 ? 1 : 0;
  return n > 0 ? n : 1;
}

/// L = Σ_a w_a·mean|Δ_a| / max(1, #{w_a > 0}) over the trailing w.size() axes, leading dims
/// included in each mean.
inline Sum weighted_l1_forward(const std::vector<double>& v, const Shape& shape,
                               const std::vector<double>& w) {
  Sum s;
  const int k = static_cast<int>(w.size()), nd = static_cast<int>(shape.size());
  for (int a = 0; a < k; ++a)
    if (w[a] > 0) s.add(w[a] * mean_abs_diff(v, shape, nd - k + a) / weighted_divisor(w));
  return s;
}

/// g·∂L/∂v: each difference along a weighted axis moves its two ends by ∓ c·sign(Δ),
/// c = g·w_a / (#differences on axis a · divisor).
inline Grad weighted_l1_backward(const std::vector<double>& v, const Shape& shape,
                                 const std::vector<double>& w, double g) {
  Grad grad(numel(shape));
  const int k = static_cast<int>(w.size()), nd = static_cast<int>(shape.size());
  for (int a = 0; a < k; ++a) {
    if (!(w[a] > 0)) continue;
    const int dim = nd - k + a;
    const double count = static_cast<double>(numel(shape) / shape[dim] * (shape[dim] - 1));
    const double c = g * w[a] / (count * weighted_divisor(w));
    for_each_pair(shape, dim, [&](int64_t lo, int64_t hi) {
      const double s = sign(v[hi] - v[lo]);
      grad.add(hi, c * s);
      grad.add(lo, -c * s);
    });
  }
  return grad;
}

}  // namespace naive
