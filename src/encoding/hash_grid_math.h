// SPDX-License-Identifier: Apache-2.0
// The hash-grid formulas, once, for the CPU driver and the CUDA kernels: level geometry, vertex
// rows (dense or hashed), interpolation weights and their first and second derivatives.
//
// Note [tcnn layout]
// ------------------
// Facts checked against tiny-cuda-nn's public source (include/tiny-cuda-nn/encodings/grid.h and
// common_device.h, read for facts only; nothing copied), so a table trained there evaluates the
// same here:
// - level sizes: the constructor computes, per level, scale = exp2f(l · log2(b)) · N − 1 in float,
//   resolution = (uint32)ceilf(scale) + 1, then params_in_level = res^D (clamped to
//   UINT32_MAX / 2), rounded up to a multiple of 8, and for hash grids min(that, 2^T); the offset
//   table is the running sum. Rounding up to 8 happens before the min with 2^T (the two orders
//   differ only for T < 3).
// - positions: pos = fmaf(scale, x, 0.5f), grid cell = floor(pos), fraction = pos − floor; the
//   interpolation function (identity or smoothstep t²(3 − 2t)) is applied to the fraction.
//   tiny-cuda-nn does not clamp x; fieldfuse clamps to [0, 1] first (identical inside).
// - index: the dense stride loop stops once the stride exceeds the level's table size; the level
//   is hashed when its table size is smaller than res^D (so "dense" means res^D ≤ rows_l, which
//   compares with the level's own, 8-rounded size), and BOTH the dense and the hashed index are
//   taken modulo the level's size: the +0.5 offset puts the upper corner of the last cell at
//   vertex res (one past the grid), which wraps.
// - hash: XOR of pos_i · π_i in uint32 with π = (1, 2654435761, 805459861, ...).
// - corner order (bit i of the corner number selects the upper vertex on axis i) only fixes the
//   summation order; the result is the same multilinear sum.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace fieldfuse::detail::hash_grid {

/// Most levels: the drivers pass the per-level table by value to the kernels (tiny-cuda-nn's
/// offset table has the same bound).
constexpr int kMaxLevels = 32;
/// Finest scale allowed: positions up to 2^24 keep a float32 fraction and fit uint32 cells.
constexpr double kMaxScale = 16777216.0;
/// The largest dense level size before rounding (tiny-cuda-nn's UINT32_MAX / 2).
constexpr int64_t kMaxDenseRows = 2147483647;

/// One level's geometry (host-computed once; see Note [tcnn layout]).
struct LevelInfo {
  int64_t offset = 0;  ///< first row of the level in params
  uint32_t rows = 0;   ///< rows_l
  uint32_t res = 0;    ///< res_l
  bool dense = false;  ///< res_l^D ≤ rows_l
  float scale = 0.f;   ///< scale_l (a float32 value, as tiny-cuda-nn computes it)
};

/// scale_l in float32: exp2f(l · log2f(b)) · N − 1.
inline float level_scale(int level, double per_level_scale, int base_resolution) {
  const float log2_b = std::log2(static_cast<float>(per_level_scale));
  return std::exp2(static_cast<float>(level) * log2_b) * static_cast<float>(base_resolution) - 1.0f;
}

/// Rows and density of a level of resolution `res` in D dims with table size 2^T.
inline LevelInfo level_info(int dims, float scale, int log2_hashmap_size) {
  LevelInfo info;
  info.scale = scale;
  info.res = static_cast<uint32_t>(std::ceil(scale)) + 1u;
  // res_l^D, capped at kMaxDenseRows for the row count; `capped` remembers that the real product
  // is larger. A capped level is hashed even where its table is 2^31 rows (T = 31), which the
  // cap alone would fit: tiny-cuda-nn compares the real product with the level's rows.
  int64_t dense = 1;
  bool capped = false;
  for (int i = 0; i < dims; ++i) {
    if (dense > kMaxDenseRows / static_cast<int64_t>(info.res)) {
      dense = kMaxDenseRows;
      capped = true;
    } else {
      dense *= static_cast<int64_t>(info.res);
    }
  }
  const int64_t rounded = (dense + 7) / 8 * 8;
  const int64_t table = int64_t{1} << log2_hashmap_size;
  const int64_t rows = rounded < table ? rounded : table;
  info.rows = static_cast<uint32_t>(rows);
  info.dense = !capped && dense <= rows;
  return info;
}

// --- per-axis math ----------------------------------------------------------------------------

FF_HOST_DEVICE FF_FORCE_INLINE float fma_(float a, float b, float c) { return fmaf(a, b, c); }
FF_HOST_DEVICE FF_FORCE_INLINE double fma_(double a, double b, double c) { return fma(a, b, c); }
FF_HOST_DEVICE FF_FORCE_INLINE float floor_(float a) { return floorf(a); }
FF_HOST_DEVICE FF_FORCE_INLINE double floor_(double a) { return floor(a); }

/// One coordinate at one level: the lower vertex, the upper-corner weight s(t) and its first and
/// second derivatives with respect to the (unclamped) coordinate.
template <class T>
struct Axis {
  uint32_t cell;
  T w;    ///< s(t): weight of the upper vertex (the lower one has 1 − s(t))
  T dw;   ///< ds/dx = s'(t) · scale, 0 where x was clamped
  T d2w;  ///< d²s/dx² = s''(t) · scale², 0 where x was clamped
};

/// `x` clamped to [0, 1] (NaN to 0: callers flag NaN points separately, and no index may depend
/// on a NaN).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T clamp_unit(T x) {
  return x > T(1) ? T(1) : (x >= T(0) ? x : T(0));
}

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Axis<T> make_axis(T x, T scale, bool smoothstep) {
  const bool inside = x >= T(0) && x <= T(1);  // false for NaN, too
  const T pos = fma_(clamp_unit(x), scale, T(0.5));
  const T floor_pos = floor_(pos);
  const T t = pos - floor_pos;
  Axis<T> a;
  a.cell = static_cast<uint32_t>(floor_pos);  // pos ∈ [0.5, 2^24 + 0.5]: exact, non-negative
  const T factor = inside ? scale : T(0);
  if (smoothstep) {
    a.w = t * t * (T(3) - T(2) * t);
    a.dw = T(6) * t * (T(1) - t) * factor;
    a.d2w = (T(6) - T(12) * t) * factor * factor;
  } else {
    a.w = t;
    a.dw = factor;
    a.d2w = T(0);
  }
  return a;
}

// --- vertex rows --------------------------------------------------------------------------------

/// The spatial hash's per-axis primes π = (1, 2654435761, 805459861) (a function: device code
/// cannot read a host constexpr array).
FF_HOST_DEVICE constexpr uint32_t hash_prime(int axis) {
  return axis == 0 ? 1u : (axis == 1 ? 2654435761u : 805459861u);
}

/// The row (within its level) of vertex `v` (D coordinates).
template <int D>
FF_HOST_DEVICE FF_FORCE_INLINE uint32_t vertex_row(const uint32_t (&v)[D], uint32_t res,
                                                   uint32_t rows, bool dense) {
  uint32_t index = 0;
  if (dense) {
    // res^D ≤ rows ≤ 2^31 and v_i ≤ res: the sum stays below 2^32.
    uint32_t stride = 1;
    for (int i = 0; i < D; ++i) {
      index += v[i] * stride;
      stride *= res;
    }
  } else {
    for (int i = 0; i < D; ++i) index ^= v[i] * hash_prime(i);
  }
  return index % rows;
}

// --- corner weights -----------------------------------------------------------------------------

/// A corner's weight W = Π_i w_i(c_i), its gradient ∂_i W and Hessian ∂_i ∂_j W with respect to
/// the point (what the backward and double backward need; `Order` says how much to compute).
template <class T, int D>
struct Corner {
  uint32_t row;
  T w;
  T dw[D];
  T hw[D][D];
};

enum class Order { kValue = 0, kGradient = 1, kHessian = 2 };

/// Corner `c` (bit i: upper vertex on axis i) of the cell `axes` lies in. Factors per axis:
/// a_i = c_i ? s : 1 − s, a'_i = ±s', a''_i = ±s''.
template <Order O, class T, int D>
FF_HOST_DEVICE FF_FORCE_INLINE Corner<T, D> corner(const Axis<T> (&axes)[D], int c,
                                                   const LevelInfo& level) {
  Corner<T, D> k;
  uint32_t v[D];
  T a[D], da[D], d2a[D];
  for (int i = 0; i < D; ++i) {
    const bool upper = (c >> i) & 1;
    v[i] = axes[i].cell + (upper ? 1u : 0u);
    a[i] = upper ? axes[i].w : T(1) - axes[i].w;
    da[i] = upper ? axes[i].dw : -axes[i].dw;
    d2a[i] = upper ? axes[i].d2w : -axes[i].d2w;
  }
  k.row = vertex_row<D>(v, level.res, level.rows, level.dense);
  k.w = a[0];
  for (int i = 1; i < D; ++i) k.w *= a[i];
  if constexpr (O != Order::kValue) {
    for (int i = 0; i < D; ++i) {
      // Products of the other axes' factors (no division: a factor may be 0).
      T g = da[i];
      for (int j = 0; j < D; ++j) g *= (j == i ? T(1) : a[j]);
      k.dw[i] = g;
    }
  }
  if constexpr (O == Order::kHessian) {
    for (int i = 0; i < D; ++i) {
      for (int j = 0; j < D; ++j) {
        T h = (i == j) ? d2a[i] : da[i] * da[j];
        for (int m = 0; m < D; ++m) h *= (m == i || m == j) ? T(1) : a[m];
        k.hw[i][j] = h;
      }
    }
  }
  return k;
}

}  // namespace fieldfuse::detail::hash_grid
