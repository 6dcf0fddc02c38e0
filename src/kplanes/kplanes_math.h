// SPDX-License-Identifier: Apache-2.0
// The per-sample K-Planes formulas (grid coordinate, bilinear tap, plane pairs, rotation and
// product rules), written once as host+device functions that the CPU driver and the CUDA kernels
// both call.
#pragma once

#include <cmath>
#include <cstdint>

// Relative, unlike tv_math.h, so that the GoogleTest target (which sees only include/) can test
// this header directly; it resolves the same way for every translation unit.
#include "core/macros.h"

namespace fieldfuse::detail::kplanes {

// Note [border clip]
// Sampling follows F.grid_sample(mode="bilinear", align_corners=True, padding_mode="border"): a
// grid coordinate g ∈ [−1, 1] maps to the continuous index u = ((g + 1)/2)·(size − 1) (evaluated in
// that order, as PyTorch does), clamped to [0, size − 1]. The clamp is a clip, not a reflection, so
// ∂index/∂g is (size − 1)/2 only where the clip is inactive, *strictly* inside: a point exactly on
// ±1 or outside gets a zero coordinate gradient, as PyTorch's clip does. A size-1 axis has index 0
// and derivative 0 for every finite g (and ±inf maps to the border on every axis).
//
// NaN: a NaN coordinate keeps a NaN index (so the sample and its gradients are NaN: a NaN point is
// reported, not hidden), but its integer corners are 0 and min(1, size − 1), so no read or scatter
// ever leaves the plane. The derivative factor of a NaN coordinate is 0, and ∂s/∂ix does not
// involve tx, so that axis's own coordinate gradient is 0; the other axis's slope does involve tx,
// so dr and the point and rotation gradients still come out NaN. The spec leaves NaN open; this is
// our contract, not a PyTorch parity target.
//
// Note [bilinear term order]
// A tap's value is written exactly as the spec writes it,
//   s = (1−tx)(1−ty)·v00 + tx(1−ty)·v01 + (1−tx)ty·v10 + tx·ty·v11,
// summed left to right with every weight formed before it multiplies its corner, and the backward's
// scatter uses the same four weights. Both drivers evaluate the same expression tree, so CPU/CUDA
// parity can be compared bit for bit where the device does not contract a·b + c into an FMA (nvcc
// contracts by default; a driver that needs bit parity builds with --fmad=false, otherwise parity
// holds to one rounding per term). Against PyTorch, whose expression tree differs, the spec asks
// only for agreement to fp32 rounding.
//
// Corners are named v<row><column>: v01 = G[y0, x1], v10 = G[y1, x0]; x is the column (width) axis
// fed by gx, y the row (height) axis fed by gy.

// Float and double overloads, so nvcc and g++ both pick the type-exact floor.
FF_HOST_DEVICE FF_FORCE_INLINE float round_down(float x) { return floorf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double round_down(double x) { return floor(x); }

/// One axis of a sample: the clamped continuous index and its derivative ∂index/∂g.
template <class T>
struct AxisCoordinate {
  T index;  ///< in [0, size − 1], or NaN for a NaN coordinate
  T scale;  ///< (size − 1)/2 strictly inside the axis, else 0 (Note [border clip])
};

/// Maps a grid coordinate to a clamped index on an axis of `size` ≥ 1 samples (Note [border clip]).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE AxisCoordinate<T> map_coordinate(T g, int64_t size) {
  // A size-1 axis is special-cased: (g + 1)·0.5·0 would turn ±inf into NaN.
  if (size <= 1) return {g != g ? g : T(0), T(0)};
  const T last = static_cast<T>(size - 1);
  const T u = (g + T(1)) * T(0.5) * last;
  // Comparisons with NaN are false: NaN falls through both clamps and the interior test.
  const T index = u <= T(0) ? T(0) : (u >= last ? last : u);
  const T scale = (T(0) < u && u < last) ? last * T(0.5) : T(0);
  return {index, scale};
}

/// The two integer neighbours of a clamped index and the fraction between them.
template <class T>
struct AxisCorners {
  int32_t i0, i1;  ///< floor(index) and min(i0 + 1, size − 1); both in [0, size − 1]
  T t;             ///< index − i0 ∈ [0, 1), or NaN
};

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE AxisCorners<T> split_index(T index, int64_t size) {
  const T base = round_down(index);
  // `base >= 0` is false only for NaN (index is already clamped): it must not reach the cast.
  int64_t i0 = base >= T(0) ? static_cast<int64_t>(base) : int64_t(0);
  // In float32 (size − 1) can round up to size for sides past 2^24, and the clamped index with
  // it: clamp the corner too, so no read or scatter ever leaves the plane.
  i0 = i0 < size - 1 ? i0 : size - 1;
  const int64_t i1 = i0 + 1 < size ? i0 + 1 : size - 1;
  // 32-bit corners (plane sides are < 2^31, checked by the front) keep the per-tap state small in
  // the CUDA kernels' registers.
  return {static_cast<int32_t>(i0), static_cast<int32_t>(i1), index - base};
}

/// One bilinear tap on an H×W plane: corners, fractions and the coordinate derivative factors.
/// Built once per (point, plane) and reused for every channel.
template <class T>
struct BilinearTap {
  int32_t x0, x1, y0, y1;  ///< column (x) and row (y) corners, always inside the plane
  T tx, ty;                ///< fractions along x and y
  T sx, sy;                ///< ∂ix/∂gx and ∂iy/∂gy (Note [border clip])

  /// The corner weights w00, w01, w10, w11 (Note [bilinear term order]); they sum to 1.
  FF_HOST_DEVICE FF_FORCE_INLINE void weights(T (&w)[4]) const {
    const T ux = T(1) - tx, uy = T(1) - ty;
    w[0] = ux * uy;
    w[1] = tx * uy;
    w[2] = ux * ty;
    w[3] = tx * ty;
  }

  /// s = w00·v00 + w01·v01 + w10·v10 + w11·v11, summed in that order.
  FF_HOST_DEVICE FF_FORCE_INLINE T sample(T v00, T v01, T v10, T v11) const {
    T w[4];
    weights(w);
    return w[0] * v00 + w[1] * v01 + w[2] * v10 + w[3] * v11;
  }

  /// ∂s/∂ix = (1−ty)(v01−v00) + ty(v11−v10), the slope along x in index units.
  FF_HOST_DEVICE FF_FORCE_INLINE T d_dix(T v00, T v01, T v10, T v11) const {
    return (T(1) - ty) * (v01 - v00) + ty * (v11 - v10);
  }

  /// ∂s/∂iy = (1−tx)(v10−v00) + tx(v11−v01), the slope along y in index units.
  FF_HOST_DEVICE FF_FORCE_INLINE T d_diy(T v00, T v01, T v10, T v11) const {
    return (T(1) - tx) * (v10 - v00) + tx * (v11 - v01);
  }

  /// The backward's share of an upstream gradient ∂L/∂s for each corner: grad·w_k, in the corner
  /// order of `weights`. Where corners coincide (the border, a size-1 axis) the driver adds several
  /// shares into one cell, which is what makes the scatter the exact adjoint of `sample`.
  FF_HOST_DEVICE FF_FORCE_INLINE void scatter(T grad, T (&share)[4]) const {
    T w[4];
    weights(w);
    share[0] = grad * w[0];
    share[1] = grad * w[1];
    share[2] = grad * w[2];
    share[3] = grad * w[3];
  }
};

/// The tap of grid point (gx, gy) on a plane of `height` × `width` (both ≥ 1).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE BilinearTap<T> bilinear_tap(T gx, T gy, int64_t height,
                                                           int64_t width) {
  const AxisCoordinate<T> cx = map_coordinate(gx, width), cy = map_coordinate(gy, height);
  const AxisCorners<T> x = split_index(cx.index, width), y = split_index(cy.index, height);
  return {x.i0, x.i1, y.i0, y.i1, x.t, y.t, cx.scale, cy.scale};
}

// ---- plane coordinate pairs --------------------------------------------------------------------

/// The two K-Planes variants; they differ in plane 1's pair, so an identity rotation does not turn
/// one into the other.
enum class Variant { kTilted, kAxisAligned };

/// Which components of the (rotated) point feed a plane's (gx, gy).
struct PlaneAxes {
  int gx, gy;
};

/// Tilted: p=0 "XY" (x, y), p=1 "ZX" (z, x), p=2 "YZ" (y, z). Axis-aligned: (0,1), (0,2), (1,2).
template <Variant V>
FF_HOST_DEVICE FF_FORCE_INLINE constexpr PlaneAxes plane_axes(int p) {
  if (V == Variant::kTilted)
    return p == 0 ? PlaneAxes{0, 1} : (p == 1 ? PlaneAxes{2, 0} : PlaneAxes{1, 2});
  return p == 0 ? PlaneAxes{0, 1} : (p == 1 ? PlaneAxes{0, 2} : PlaneAxes{1, 2});
}

/// v[i] through selects, so a runtime i keeps a register array out of local memory on the device.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T component(const T (&v)[3], int i) {
  return i == 0 ? v[0] : (i == 1 ? v[1] : v[2]);
}

/// (gx, gy) of plane p for point r (the rotated point for the tilted variant, p itself otherwise).
template <Variant V, class T>
FF_HOST_DEVICE FF_FORCE_INLINE void plane_coordinates(const T (&r)[3], int p, T& gx, T& gy) {
  const PlaneAxes a = plane_axes<V>(p);
  gx = component(r, a.gx);
  gy = component(r, a.gy);
}

/// dr from the per-plane coordinate gradients (each already multiplied by its index scale), the
/// transpose of `plane_coordinates`:
///   tilted:       dr_x = dgx0 + dgy1,  dr_y = dgy0 + dgx2,  dr_z = dgx1 + dgy2;
///   axis-aligned: dr_x = dgx0 + dgx1,  dr_y = dgy0 + dgx2,  dr_z = dgy1 + dgy2.
template <Variant V, class T>
FF_HOST_DEVICE FF_FORCE_INLINE void assemble_point_gradient(const T (&dgx)[3], const T (&dgy)[3],
                                                            T (&dr)[3]) {
  if (V == Variant::kTilted) {
    dr[0] = dgx[0] + dgy[1];
    dr[1] = dgy[0] + dgx[2];
    dr[2] = dgx[1] + dgy[2];
  } else {
    dr[0] = dgx[0] + dgx[1];
    dr[1] = dgy[0] + dgx[2];
    dr[2] = dgy[1] + dgy[2];
  }
}

// ---- rotations: r = R·p with R row-major 3×3, not assumed orthogonal ----------------------------

/// r_i = R[i][0]·p_0 + R[i][1]·p_1 + R[i][2]·p_2.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void rotate(const T (&R)[9], const T (&p)[3], T (&r)[3]) {
  r[0] = R[0] * p[0] + R[1] * p[1] + R[2] * p[2];
  r[1] = R[3] * p[0] + R[4] * p[1] + R[5] * p[2];
  r[2] = R[6] * p[0] + R[7] * p[1] + R[8] * p[2];
}

/// A finite-difference tap: R(p + h·e_axis) = R·p + h·R[:, axis], from the already rotated r.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void shift_along_axis(const T (&R)[9], const T (&r)[3], T h,
                                                     int axis, T (&shifted)[3]) {
  const T c0[3] = {R[0], R[1], R[2]}, c1[3] = {R[3], R[4], R[5]}, c2[3] = {R[6], R[7], R[8]};
  shifted[0] = r[0] + h * component(c0, axis);
  shifted[1] = r[1] + h * component(c1, axis);
  shifted[2] = r[2] + h * component(c2, axis);
}

/// dL/dR[i][j] += dr_i·p_j.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void accumulate_rotation_gradient(const T (&dr)[3], const T (&p)[3],
                                                                 T (&dR)[9]) {
  dR[0] += dr[0] * p[0];
  dR[1] += dr[0] * p[1];
  dR[2] += dr[0] * p[2];
  dR[3] += dr[1] * p[0];
  dR[4] += dr[1] * p[1];
  dR[5] += dr[1] * p[2];
  dR[6] += dr[2] * p[0];
  dR[7] += dr[2] * p[1];
  dR[8] += dr[2] * p[2];
}

/// The same for a tap at p + h·e_axis: dL/dR[i][j] += dr_i·p_j, then dL/dR[i][axis] += dr_i·h (the
/// h·R[:, axis] term of `shift_along_axis`).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void accumulate_shifted_rotation_gradient(const T (&dr)[3],
                                                                         const T (&p)[3], T h,
                                                                         int axis, T (&dR)[9]) {
  accumulate_rotation_gradient(dr, p, dR);
  // Selects rather than dR[3·i + axis]: a runtime index would put dR in local memory on the device.
  const T c0 = dr[0] * h, c1 = dr[1] * h, c2 = dr[2] * h;
  dR[0] = axis == 0 ? dR[0] + c0 : dR[0];
  dR[1] = axis == 1 ? dR[1] + c0 : dR[1];
  dR[2] = axis == 2 ? dR[2] + c0 : dR[2];
  dR[3] = axis == 0 ? dR[3] + c1 : dR[3];
  dR[4] = axis == 1 ? dR[4] + c1 : dR[4];
  dR[5] = axis == 2 ? dR[5] + c1 : dR[5];
  dR[6] = axis == 0 ? dR[6] + c2 : dR[6];
  dR[7] = axis == 1 ? dR[7] + c2 : dR[7];
  dR[8] = axis == 2 ? dR[8] + c2 : dR[8];
}

/// dL/dp += Rᵀ·dr (the same for a shifted tap: h is a constant).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void accumulate_point_gradient(const T (&R)[9], const T (&dr)[3],
                                                              T (&dp)[3]) {
  dp[0] += R[0] * dr[0] + R[3] * dr[1] + R[6] * dr[2];
  dp[1] += R[1] * dr[0] + R[4] * dr[1] + R[7] * dr[2];
  dp[2] += R[2] * dr[0] + R[5] * dr[1] + R[8] * dr[2];
}

// ---- the product over the three planes ---------------------------------------------------------

/// f = s_0·s_1·s_2, multiplied in plane order.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T plane_product(const T (&s)[3]) {
  return s[0] * s[1] * s[2];
}

/// ∂f/∂s_p = Π_{q≠p} s_q, formed from the other factors rather than f/s_p, so a zero sample still
/// gets the gradient of the other two.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void plane_product_partials(const T (&s)[3], T (&partial)[3]) {
  partial[0] = s[1] * s[2];
  partial[1] = s[0] * s[2];
  partial[2] = s[0] * s[1];
}

// ---- one channel of one (point, tilt, level) ---------------------------------------------------

/// The four corner values of a tap's plane, in the corner order of BilinearTap::weights.
template <class T>
struct Corners {
  T v[4];
};

/// A channel's feature: Π_p sample_p (Note [bilinear term order]).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T channel_feature(const BilinearTap<T> (&taps)[3],
                                                 const Corners<T> (&corners)[3]) {
  const T s[3] = {
      taps[0].sample(corners[0].v[0], corners[0].v[1], corners[0].v[2], corners[0].v[3]),
      taps[1].sample(corners[1].v[0], corners[1].v[1], corners[1].v[2], corners[1].v[3]),
      taps[2].sample(corners[2].v[0], corners[2].v[1], corners[2].v[2], corners[2].v[3])};
  return plane_product(s);
}

/// A channel's backward for the upstream gradient `g` of its feature: `d_sample[p] = ∂L/∂s_p`
/// (what the driver scatters into plane p's corners), and the index-space slopes added to
/// `d_index_x[p]`, `d_index_y[p]` (∂L/∂ix_p, ∂L/∂iy_p, summed over channels by the caller and
/// turned into dr by `rotated_point_gradient`).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void channel_backward(const BilinearTap<T> (&taps)[3],
                                                     const Corners<T> (&corners)[3], T g,
                                                     T (&d_sample)[3], T (&d_index_x)[3],
                                                     T (&d_index_y)[3]) {
  T s[3];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int p = 0; p < 3; ++p) {
    const T(&v)[4] = corners[p].v;
    s[p] = taps[p].sample(v[0], v[1], v[2], v[3]);
  }
  T partial[3];
  plane_product_partials(s, partial);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int p = 0; p < 3; ++p) {
    const T(&v)[4] = corners[p].v;
    d_sample[p] = g * partial[p];
    d_index_x[p] += d_sample[p] * taps[p].d_dix(v[0], v[1], v[2], v[3]);
    d_index_y[p] += d_sample[p] * taps[p].d_diy(v[0], v[1], v[2], v[3]);
  }
}

/// dr of one (point, tilt, level) from its channel-summed index slopes: each times its axis's
/// ∂index/∂g (Note [border clip]), then assembled from the plane pairs.
template <Variant V, class T>
FF_HOST_DEVICE FF_FORCE_INLINE void rotated_point_gradient(const BilinearTap<T> (&taps)[3],
                                                           const T (&d_index_x)[3],
                                                           const T (&d_index_y)[3], T (&dr)[3]) {
  const T dgx[3] = {d_index_x[0] * taps[0].sx, d_index_x[1] * taps[1].sx,
                    d_index_x[2] * taps[2].sx};
  const T dgy[3] = {d_index_y[0] * taps[0].sy, d_index_y[1] * taps[1].sy,
                    d_index_y[2] * taps[2].sy};
  assemble_point_gradient<V>(dgx, dgy, dr);
}

// ---- sample positions --------------------------------------------------------------------------

/// The number of positions a sample slot evaluates: 1 for a point, 4 for a volume-TV tap point
/// (the point itself, then p + h·e_x, p + h·e_y, p + h·e_z).
constexpr int kTapsPerTapPoint = 4;

/// The rotated position of tap `tap` ∈ [0, 4) of point p: r = R·p for tap 0 (so tap 0 is bit for
/// bit the plain evaluation), R·p + h·R[:, tap − 1] otherwise. The axis-aligned variant has no
/// rotation: r = p (+ h along the axis).
template <Variant V, class T>
FF_HOST_DEVICE FF_FORCE_INLINE void tap_position(const T (&R)[9], const T (&p)[3], int tap, T h,
                                                 T (&r)[3]) {
  if (V == Variant::kTilted) {
    T base[3];
    rotate(R, p, base);
    if (tap == 0) {
      r[0] = base[0], r[1] = base[1], r[2] = base[2];
    } else {
      shift_along_axis(R, base, h, tap - 1, r);
    }
  } else {
    r[0] = p[0] + (tap == 1 ? h : T(0));
    r[1] = p[1] + (tap == 2 ? h : T(0));
    r[2] = p[2] + (tap == 3 ? h : T(0));
  }
}

/// The rotation and point gradients of one tap's dr (the transpose of `tap_position`).
template <Variant V, class T>
FF_HOST_DEVICE FF_FORCE_INLINE void accumulate_tap_gradient(const T (&R)[9], const T (&p)[3],
                                                            int tap, T h, const T (&dr)[3],
                                                            T (&dR)[9], T (&dp)[3]) {
  if (V == Variant::kTilted) {
    if (tap == 0) {
      accumulate_rotation_gradient(dr, p, dR);
    } else {
      accumulate_shifted_rotation_gradient(dr, p, h, tap - 1, dR);
    }
    accumulate_point_gradient(R, dr, dp);
  } else {
    dp[0] += dr[0], dp[1] += dr[1], dp[2] += dr[2];
  }
}

/// The three taps (one per plane) of position r on an H×W level.
template <Variant V, class T>
FF_HOST_DEVICE FF_FORCE_INLINE void plane_taps(const T (&r)[3], int64_t height, int64_t width,
                                               BilinearTap<T> (&taps)[3]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int p = 0; p < 3; ++p) {
    T gx, gy;
    plane_coordinates<V>(r, p, gx, gy);
    taps[p] = bilinear_tap(gx, gy, height, width);
  }
}

}  // namespace fieldfuse::detail::kplanes
