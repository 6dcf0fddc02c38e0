// SPDX-License-Identifier: Apache-2.0
// The formulas of the project family, written once for the CPU and CUDA drivers: the per-projection
// geometry of Joseph's method, the index maps and bilinear weights, and the pixel box that the back
// projection's gather searches.
#pragma once

#include <cmath>
#include <cstdint>

// Relative, as in the other families' math headers, so the GoogleTest target can include it.
#include "core/macros.h"

namespace fieldfuse::detail::project {

// Note [Joseph projector]
// Volume axes are numbered as the dims of volume [D, H, W]: 0 = z (D), 1 = y (H), 2 = x (W); the
// world component of axis q is 2 − q (x is component 0). For projection m, d = R·e_z is the ray
// direction, e_u = R·e_x and e_v = R·e_y span the detector, and the ray of pixel (i, j) is
//   p(t) = u'·e_u + v'·e_v + t·d,  u' = −1 + (2j+1)/Wd − s_u,  v' = −1 + (2i+1)/Hd − s_v.
// The dominant axis a is the one with the largest |d_a| (a = z unless |d_y| or |d_x| is strictly
// larger; then y unless |d_x| is strictly larger than |d_y|), b and c are the two others in z, y, x
// order (so c = x unless a = x). The ray meets the centre plane of slice k of axis a, world
// coordinate w_a = −1 + (2k+1)/N_a, at t = (w_a − p_a(0))/d_a, where its coordinate along q ∈ {b,
// c} in index units (align_corners=False: index = (x + 1)·N/2 − 1/2) is affine in (j, i, k):
//   index_q = Q_j·j + Q_i·i + Q_k·k + Q_0,
//   Q_j = g_u·2/Wd,  Q_i = g_v·2/Hd,  Q_k = g_w·2/N_a,
//   Q_0 = g_u·(1/Wd − 1 − s_u) + g_v·(1/Hd − 1 − s_v) + g_w·(1/N_a − 1) + (N_q − 1)/2,
//   g_u = N_q/2·(e_u,q − e_u,a·r),  g_v = N_q/2·(e_v,q − e_v,a·r),  g_w = N_q/2·r,  r = d_q/d_a.
// The projection is P = Δ·Σ_k bilinear(slice k; index_b, index_c), zero outside the slice, with
// Δ = (2/N_a)/|d_a|, the ray parameter between two planes (|d_a| ≥ |d|/√3, so Δ stays bounded).
// As |d_q| ≤ |d_a|, the sample moves at most N_q/N_a voxels along b or c from slice to slice.
//
// Note [bit-identical weights]
// The back projection is the transpose only if it sees the very weights the forward used. Both
// evaluate one function per quantity, in one operation order:
// - the geometry in float64 (make_geometry) with the products and sums spelled as __dmul_rn /
//   __dadd_rn on the device, which nvcc never contracts into FMAs, so every kernel that builds it
//   from the same pose gets the same bits (the host TU builds with -ffp-contract=off);
// - the index of a sample in the drivers' dtype as madd(Q_j, j, madd(Q_i, i, madd(Q_k, k, Q_0))),
//   an explicit FMA on the device and a product then a sum on the host. The order puts k innermost:
//   the back projection fixes k per voxel and i per detector row, so a candidate pixel costs one
//   madd per axis there, and the forward pays the three per sample;
// - the weights with linear_weights (w0 = 1 − f, w1 = f, f = index − floor(index)), the corner
//   rule of axis_taps and the product wb·wc.
// Host and device differ only in the FMA rounding, so CPU and CUDA agree to rounding, not bits.
//
// Note [zero-weight corners]
// A sample whose index is an integer has f = 0: its upper corner has weight 0 and is not taken
// (axis_taps), in both directions. So a NaN voxel reaches only the rays that give it a non-zero
// weight, and the transpose keeps the same sparsity pattern. The lower weight 1 − f is never 0.
// An index outside (−1, N) has no corner in the slice (NaN included: every comparison is false),
// which is also what keeps NaN or huge indices away from the integer conversion.
//
// Note [back projection gather]
// Voxel (k, ib, ic) (its indices along a, b, c) is a corner of pixel p's sample on slice k exactly
// when the computed index_b ∈ (ib − 1, ib + 1) and index_c ∈ (ic − 1, ic + 1) (Note [zero-weight
// corners]). On slice k the map p = (j, i) ↦ (index_b, index_c) is affine with the 2×2 matrix
// M = [[b_j, b_i], [c_j, c_i]] (the Q_j, Q_i of b and c), so the pixels whose affine value is in
// the square [ib − 1 − ε, ib + 1 + ε] × [ic − 1 − ε, ic + 1 + ε] lie in the box centre ± reach,
// centre = M⁻¹·((ib, ic) − (b_k, c_k)), reach = (1 + ε)·(row sums of |M⁻¹|). ε is `margin`, a
// bound on how far a computed index strays from its affine value (8·u·Σ|terms|, u the unit
// roundoff: three madds, at most two roundings each, every partial sum below Σ|terms|). The centre
// itself is evaluated in the drivers' dtype, so reach also carries a bound on that evaluation's
// error. Every candidate in the box is then tested with the forward's own index and corner rule
// (two comparisons per axis turn most away; near_corner_weight decides the rest as axis_taps
// would), so the box only has to be conservative, and it stays tight: a tilt about x searches 2 to
// 3 rows by 3 columns per voxel and projection, where a fixed one-pixel margin would search 5 by 5.

// Note [separable gather]
// A tilt series about the detector's u or v axis (R = Rx(φ) or Ry(φ), with any shifts and sizes)
// has index_b independent of the pixel column and index_c independent of the row: b_j = c_i = 0
// exactly in T (R's zero entries make g_u of b and g_v of c exactly 0). Then the madd chains give
// the same value on every row (c) or column (b), since 0·x + y = y (up to the sign of a zero,
// which changes no weight), so the back
// projection tests each candidate column once and each row only for the columns that pass,
// instead of every (row, column) pair, and sums those terms columns first. The terms and weights
// are the ones the general loop would take (only their order differs), so the matrix is the same.

// Note [tilt path]
// A tilt series about the detector's u axis, R = Rx(φ) (the tomography case; any shifts, sizes
// and detector shape), has d = (0, −sin φ, cos φ), so its dominant axis is z or y and c = x, and
// the x index depends on the pixel column only: c.i = c.k = 0 and b.j = 0 exactly in T (R's zero
// entries make those g's exactly 0). make_geometry flags such a projection `tilt`. Because
// madd(±0, t, y) = y for finite t (up to the sign of a zero, which changes no weight or tap), the
// forward's chains then give index_c = madd(c.j, j, c.origin) on every slice and index_b =
// madd(b.i, i, madd(b.k, k, b.origin)) on every column, bit for bit; so the forward takes the x
// taps once per ray (ray_sum), and skips the loads of an upper x corner the ray does not take (an
// aligned detector, W = Wd and s_u = 0, samples x at integers: two loads a sample, not four).
// The poses live on the device, so the host cannot pick a kernel per pose without a copy back (a
// synchronisation that CUDA graphs forbid): each driver tests these flags per projection, which is
// uniform over a CUDA block, and ray_sum and voxel_sum are the one place that chooses.
//
// Note [corner runs]
// In a tilt projection the back projection separates completely: the rows whose sample has voxel
// (k, ib) as a corner depend on (k, ib) only, the columns that have ic as a corner on ic only. As
// the index is monotone in the pixel (an FMA of an exact product rounds monotonically), each set
// is one run of consecutive pixels. When the candidate boxes hold at most three pixels per axis
// (reach ≤ kRunReach: detectors at most about 1.25 times finer than the volume; `runs`), each run
// is found by testing the box's pixels with the forward's index and corner rule (corner_run), and
// the voxel's value is Σ_r wb_r·(Σ_q wc_q·P[i_r, j_q]): the general loop's pixels and weights,
// factored by rows (a unit pixel gives the same bits, so A and Aᵀ stay exact transposes; other
// sums differ from the general loop's order by rounding). The factoring is what makes the CUDA
// back projection cheap: the row values Σ_q wc_q·P[i, j_q] depend on (i, ic) only, so a block
// computes each once per projection for its 32 x voxels and the rows its 8 × 8 (z, y) voxels
// reach, and each voxel then spends a shared-memory read and an FMA per row of its run. Row runs
// are computed once per block and projection (shared by 32 x voxels), column runs once per block
// and projection (shared by the row values).
//
// Note [integer floors]
// floor_to gives floor(x) as T and as the index type. On the device with 32-bit indices it adds
// 1.5·2^23 (1.5·2^52 in float64) rounding down, which leaves floor(x) in the low mantissa bits:
// three full-rate instructions instead of a rounding and a float-to-int conversion, which run at
// an eighth of the FMA rate on sm_90 and bounded the forward's slice loop. The value is the same
// exact floor, so the weights are unchanged (CPU and CUDA, forward and back); it needs |x| below
// 2^22 in float32, which the CUDA driver guarantees by taking 32-bit indices only for volumes
// below 2^22 voxels per axis (every floored index lies in (−1, N)).

/// Float and double overloads, so nvcc and g++ both pick the type-exact function.
FF_HOST_DEVICE FF_FORCE_INLINE float round_down(float x) { return floorf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double round_down(double x) { return floor(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float round_up(float x) { return ceilf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double round_up(double x) { return ceil(x); }

/// floor(x) as T, and in `i` as the drivers' index type I (Note [integer floors]): the rounding
/// and a conversion, everywhere but on the device with 32-bit indices.
template <class T, class I>
FF_HOST_DEVICE FF_FORCE_INLINE T floor_to(T x, I& i) {
  const T f = round_down(x);
  i = static_cast<I>(f);
  return f;
}
/// The int32 path: |x| < kFastFloorLimit (float) or 2^31 (double), which the drivers guarantee
/// when they pick 32-bit indices.
constexpr int64_t kFastFloorLimit = int64_t{1} << 22;
FF_HOST_DEVICE FF_FORCE_INLINE float floor_to(float x, int32_t& i) {
#if defined(__CUDA_ARCH__)
  // 1.5·2^23 + x lies in [2^23, 2^24), where the spacing is 1, so rounding the sum down gives
  // 1.5·2^23 + floor(x) exactly, with floor(x) in the low mantissa bits; the difference is exact.
  const float magic = 12582912.0f;
  const float t = __fadd_rd(x, magic);
  i = __float_as_int(t) - __float_as_int(magic);
  return t - magic;
#else
  return floor_to<float, int32_t>(x, i);
#endif
}
FF_HOST_DEVICE FF_FORCE_INLINE double floor_to(double x, int32_t& i) {
#if defined(__CUDA_ARCH__)
  // As above with 1.5·2^52, whose low 32 mantissa bits are 0: they hold floor(x) mod 2^32.
  const double magic = 6755399441055744.0;
  const double t = __dadd_rd(x, magic);
  i = __double2loint(t);
  return t - magic;
#else
  return floor_to<double, int32_t>(x, i);
#endif
}

/// a·b + c as the index maps evaluate it (Note [bit-identical weights]).
FF_HOST_DEVICE FF_FORCE_INLINE float madd(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
FF_HOST_DEVICE FF_FORCE_INLINE double madd(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// The geometry's float64 products and sums, never contracted (Note [bit-identical weights]).
FF_HOST_DEVICE FF_FORCE_INLINE double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
FF_HOST_DEVICE FF_FORCE_INLINE double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

/// The unit roundoff u of the drivers' dtype (half an ulp of 1).
template <class T>
struct Roundoff;
template <>
struct Roundoff<float> {
  static constexpr double value = 5.9604644775390625e-8;  // 2^-24
};
template <>
struct Roundoff<double> {
  static constexpr double value = 1.1102230246251565e-16;  // 2^-53
};

/// The axes b, c of a slice of axis a, in z, y, x order (Note [Joseph projector]).
FF_HOST_DEVICE FF_FORCE_INLINE void in_slice_axes(int a, int& b, int& c) {
  b = a == 0 ? 1 : 0;
  c = a == 2 ? 1 : 2;
}

/// One in-slice axis of a projection: its index map (Note [Joseph projector]).
template <class T>
struct IndexMap {
  T j, i, k, origin;  ///< index = madd(j, pixel j, madd(i, pixel i, madd(k, slice k, origin)))
};

/// Everything a driver needs of one projection, built once per projection by make_geometry.
template <class T>
struct Geometry {
  IndexMap<T> b, c;  ///< index maps of the in-slice axes b and c
  T delta;           ///< Δ, the ray parameter between two slices (NaN for an unusable pose)
  T margin;          ///< ε of Note [back projection gather], in index units
  /// Back projection (Note [back projection gather]): the candidate box's centre, column and row,
  /// as maps of the voxel's (ib, ic, k): centre = madd(b, ib, madd(c, ic, madd(k, k, origin))).
  IndexMap<T> centre_j, centre_i;
  T reach_j, reach_i;  ///< half-sizes of the box, margins included (infinite: every pixel)
  int32_t axis;        ///< a, the dominant axis (0 = z, 1 = y, 2 = x)
  bool valid;          ///< false: a non-finite pose; no sample has a corner, Δ is NaN
  bool separable;      ///< b.j = 0 and c.i = 0 exactly (Note [separable gather])
  bool tilt;           ///< c = x, c.i = c.k = 0 and b.j = 0 exactly (Note [tilt path])
  bool runs;           ///< tilt, with boxes of at most 3 rows and columns (Note [corner runs])
};

/// The largest box half-size of the corner runs (Note [corner runs]): a box [⌈c − r⌉, ⌊c + r⌋]
/// holds at most ⌊2r⌋ + 1 pixels, so r ≤ 1.25 leaves three with room for the rounding of c ± r.
constexpr double kRunReach = 1.25;

/// One projection's pose, as read from rotations [n, 3, 3] (row-major R) and shifts [n, 2].
struct Pose {
  double r[9];
  double shift_u, shift_v;
};

FF_HOST_DEVICE FF_FORCE_INLINE bool finite(double x) { return x - x == 0.0; }

/// The index map of in-slice axis q for dominant axis a (Note [Joseph projector]).
template <class T>
FF_HOST_DEVICE IndexMap<T> make_index_map(const Pose& pose, int a, int q, const int64_t sizes[3],
                                          int64_t height, int64_t width) {
  // Component 2 − axis of R's columns e_u (0), e_v (1) and d (2).
  const int ca = 2 - a, cq = 2 - q;
  const double da = pose.r[ca * 3 + 2];
  const double r = pose.r[cq * 3 + 2] / da;
  const double half = 0.5 * static_cast<double>(sizes[q]);
  const double gu = mul(half, add(pose.r[cq * 3 + 0], -mul(pose.r[ca * 3 + 0], r)));
  const double gv = mul(half, add(pose.r[cq * 3 + 1], -mul(pose.r[ca * 3 + 1], r)));
  const double gw = mul(half, r);
  const double na = static_cast<double>(sizes[a]);
  const double wd = static_cast<double>(width), hd = static_cast<double>(height);
  const double base_u = add(add(1.0 / wd, -1.0), -pose.shift_u);
  const double base_v = add(add(1.0 / hd, -1.0), -pose.shift_v);
  const double base_w = add(1.0 / na, -1.0);
  double origin = add(mul(gu, base_u), mul(gv, base_v));
  origin = add(origin, mul(gw, base_w));
  origin = add(origin, 0.5 * (static_cast<double>(sizes[q]) - 1.0));
  return {static_cast<T>(mul(gu, 2.0 / wd)), static_cast<T>(mul(gv, 2.0 / hd)),
          static_cast<T>(mul(gw, 2.0 / na)), static_cast<T>(origin)};
}

/// Σ|terms| of an index map over the pixel and slice ranges: bounds every partial sum of madd.
template <class T>
FF_HOST_DEVICE double map_magnitude(const IndexMap<T>& m, double j_max, double i_max,
                                    double k_max) {
  double s =
      add(mul(fabs(static_cast<double>(m.j)), j_max), mul(fabs(static_cast<double>(m.i)), i_max));
  s = add(s, mul(fabs(static_cast<double>(m.k)), k_max));
  return add(s, fabs(static_cast<double>(m.origin)));
}

/// One row (p, q) of M⁻¹ as a candidate-box axis (Note [back projection gather]): the centre
/// p·(ib − b_k·k − b_0) + q·(ic − c_k·k − c_0) as a map of (ib, ic, k) (in the j, i, k slots), and
/// the reach with its error bounds. False when either is not finite.
template <class T>
FF_HOST_DEVICE bool box_row(const IndexMap<T>& mb, const IndexMap<T>& mc, double p, double q,
                            double margin, double largest, IndexMap<T>& centre, T& reach) {
  const double bk = static_cast<double>(mb.k), b0 = static_cast<double>(mb.origin);
  const double ck = static_cast<double>(mc.k), c0 = static_cast<double>(mc.origin);
  centre = {static_cast<T>(p), static_cast<T>(q), static_cast<T>(-add(mul(p, bk), mul(q, ck))),
            static_cast<T>(-add(mul(p, b0), mul(q, c0)))};
  const double exact = mul(add(1.0, margin), add(fabs(p), fabs(q)));
  // ib, ic and k are below the largest volume size.
  const double magnitude = map_magnitude(centre, largest, largest, largest);
  // The centre's evaluation (three madds), the rounding of its coefficients to T and of
  // centre ± reach: each below u·(magnitude + reach); 16 of them cover all with room.
  const double u = Roundoff<T>::value;
  const double slack = mul(16.0 * u, add(magnitude, exact));
  reach = static_cast<T>(add(mul(exact, add(1.0, 4.0 * u)), add(slack, 16.0 * u)));
  return finite(static_cast<double>(reach)) && finite(magnitude);
}

/// The geometry of one projection of a volume with sizes (D, H, W) onto a height × width detector
/// (all >= 1). Pure function of its arguments, evaluated in float64 without contraction, so every
/// caller gets the same bits (Note [bit-identical weights]).
template <class T>
FF_HOST_DEVICE Geometry<T> make_geometry(const Pose& pose, const int64_t sizes[3], int64_t height,
                                         int64_t width) {
  Geometry<T> g{};
  // The dominant axis; ties go to z, then y (comparisons with NaN are false: a = z).
  // d = R·e_z, the third column of R; world component x is row 0.
  const double dx = fabs(pose.r[0 * 3 + 2]), dy = fabs(pose.r[1 * 3 + 2]),
               dz = fabs(pose.r[2 * 3 + 2]);
  int a = 0;
  double da = dz;
  if (dy > da) {
    a = 1;
    da = dy;
  }
  if (dx > da) {
    a = 2;
    da = dx;
  }
  int b, c;
  in_slice_axes(a, b, c);
  g.axis = a;
  g.b = make_index_map<T>(pose, a, b, sizes, height, width);
  g.c = make_index_map<T>(pose, a, c, sizes, height, width);
  const double na = static_cast<double>(sizes[a]);
  const double delta = (2.0 / na) / da;
  const double u = Roundoff<T>::value;
  const double j_max = static_cast<double>(width - 1), i_max = static_cast<double>(height - 1);
  const double magnitude_b = map_magnitude(g.b, j_max, i_max, na - 1.0);
  const double magnitude_c = map_magnitude(g.c, j_max, i_max, na - 1.0);
  const double margin = mul(8.0 * u, magnitude_b > magnitude_c ? magnitude_b : magnitude_c);
  // An infinite entry can leave every coefficient finite (d_x = ∞ gives Δ = 0), so the pose
  // itself is checked: a non-finite pose poisons its projection.
  bool finite_pose = finite(pose.shift_u) && finite(pose.shift_v);
  for (int e = 0; e < 9; ++e) finite_pose = finite_pose && finite(pose.r[e]);
  g.valid =
      finite_pose && finite(delta) && finite(magnitude_b) && finite(magnitude_c) && finite(margin);
  if (!g.valid) {
    g.delta = static_cast<T>(NAN);
    return g;
  }
  g.delta = static_cast<T>(delta);
  g.margin = static_cast<T>(margin);
  g.separable = g.b.j == T(0) && g.c.i == T(0);
  g.tilt = a != 2 && g.separable && g.c.k == T(0);
  // The candidate box of the back projection (Note [back projection gather]), from the map's
  // coefficients as rounded to T (the ones the indices are computed with).
  const double mbj = static_cast<double>(g.b.j), mbi = static_cast<double>(g.b.i);
  const double mcj = static_cast<double>(g.c.j), mci = static_cast<double>(g.c.i);
  const double det = add(mul(mbj, mci), -mul(mbi, mcj));
  const T infinite = static_cast<T>(INFINITY);
  if (det == 0.0 || !finite(1.0 / det)) {  // not a rotation: search the whole detector
    g.centre_j = g.centre_i = IndexMap<T>{};
    g.reach_j = g.reach_i = infinite;
    return g;
  }
  // M⁻¹ = [[ci, −bi], [−cj, bj]]/det maps (index_b − b_k, index_c − c_k) to (j, i).
  const int64_t largest_size = sizes[0] > sizes[1] ? sizes[0] : sizes[1];
  const double largest = static_cast<double>(largest_size > sizes[2] ? largest_size : sizes[2]);
  const bool bounded =
      box_row(g.b, g.c, mci / det, -mbi / det, margin, largest, g.centre_j, g.reach_j) &&
      box_row(g.b, g.c, -mcj / det, mbj / det, margin, largest, g.centre_i, g.reach_i);
  if (!bounded) {
    g.centre_j = g.centre_i = IndexMap<T>{};
    g.reach_j = g.reach_i = infinite;
  }
  g.runs = g.tilt && g.reach_i <= kRunReach && g.reach_j <= kRunReach;
  return g;
}

/// The index of a sample along one in-slice axis (Note [bit-identical weights]); the drivers
/// call it whole, or in these three steps with the inner ones hoisted out of their loops.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T slice_term(const IndexMap<T>& m, T k) {
  return madd(m.k, k, m.origin);
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T row_term(const IndexMap<T>& m, T i, T slice) {
  return madd(m.i, i, slice);
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_index(const IndexMap<T>& m, T j, T row) {
  return madd(m.j, j, row);
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_index(const IndexMap<T>& m, T j, T i, T k) {
  return sample_index(m, j, row_term(m, i, slice_term(m, k)));
}

/// Linear interpolation weights at a continuous index: corners i0 = floor(index) and i0 + 1.
template <class T, class I = T>
struct LinearWeights {
  I i0;  ///< floor(index), as I (exact)
  T w0;  ///< 1 − f, the weight of i0
  T w1;  ///< f = index − floor(index), the weight of i0 + 1
};

/// The weights (1 − f, f) of an index whose floor is `lower` (a T holding floor(index)).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void weights_at(T index, T lower, T& w0, T& w1) {
  w1 = index - lower;  // f, exact: index and its floor share their leading bits
  w0 = T(1) - w1;
}

template <class T, class I = T>
FF_HOST_DEVICE FF_FORCE_INLINE LinearWeights<T, I> linear_weights(T index) {
  LinearWeights<T, I> w;
  weights_at(index, floor_to(index, w.i0), w.w0, w.w1);
  return w;
}

/// The corners of one sample along an axis of n voxels that the interpolation takes (Note
/// [zero-weight corners]): lower (i0, weight w0) when inside, upper (i0 + 1, w1) when inside with
/// w1 ≠ 0. I is the drivers' index type.
template <class T, class I>
struct AxisTaps {
  I i0;
  T w0, w1;
  bool lower, upper;
};

template <class T, class I>
FF_HOST_DEVICE FF_FORCE_INLINE AxisTaps<T, I> axis_taps(T index, I n) {
  // An index outside (−1, n) (NaN included: every comparison is false) is replaced by −1, which
  // takes neither corner (its lower one is outside, its upper one has weight 0) and converts
  // safely; a select rather than a branch, so the forward's slice loop stays branch-free.
  const bool inside = index > T(-1) && index < static_cast<T>(n);
  const LinearWeights<T, I> w = linear_weights<T, I>(inside ? index : T(-1));
  AxisTaps<T, I> taps;
  taps.i0 = w.i0;  // in [−1, n − 1]
  taps.w0 = w.w0;
  taps.w1 = w.w1;
  taps.lower = taps.i0 >= 0;
  taps.upper = taps.i0 + 1 < n && w.w1 != T(0);
  return taps;
}

/// axis_taps for an index known to lie in [0, n − 1] (a slice's interior, SliceRange): the lower
/// corner is always taken, the upper one when its weight is not 0 (at index n − 1 it is), the
/// same taps without the range tests.
template <class T, class I>
FF_HOST_DEVICE FF_FORCE_INLINE AxisTaps<T, I> interior_taps(T index) {
  const LinearWeights<T, I> w = linear_weights<T, I>(index);
  AxisTaps<T, I> taps;
  taps.i0 = w.i0;
  taps.w0 = w.w0;
  taps.w1 = w.w1;
  taps.lower = true;
  taps.upper = w.w1 != T(0);
  return taps;
}

/// Whether axis_taps takes voxel v as a corner of a sample at `index`, and its weight, for an
/// index already known to lie in (v − 1, v + 1) (so inside the axis): floor(index) is then v (the
/// lower corner, weight w0 = 1 − f, never 0) or v − 1 (the upper corner, taken when w1 = f ≠ 0).
/// The back projection's test of a candidate pixel, branch-free.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE bool near_corner_weight(T index, T v, T& weight) {
  // In (v − 1, v + 1) the floor is v exactly when index >= v, so no rounding instruction is
  // needed: the same weights_at as linear_weights, on the same floor.
  const bool lower = index >= v;
  T w0, w1;
  weights_at(index, lower ? v : v - T(1), w0, w1);
  weight = lower ? w0 : w1;
  return lower || w1 != T(0);
}

/// The bilinear interpolation of one slice at a sample: Σ (wb·wc)·value over the corners,
/// summed in the order (lower b, lower c), (lower b, upper c), (upper b, lower c), (upper b, upper
/// c), a corner not taken counting as 0 (it is never read, so a NaN there stays out). `load(o)`
/// reads the slice element at offset o, `corner` is the offset of (i0b, i0c) (−1 indices
/// included: it is only a base for the taken corners), `sb`, `sc` the strides along b and c.
template <bool kUpperC = true, class T, class I, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE T bilinear(const AxisTaps<T, I>& tb, const AxisTaps<T, I>& tc,
                                          I corner, I sb, I sc, const Load& load) {
  if constexpr (!kUpperC) {
    // tc.upper is false (the caller knows): the two terms of the upper c corner would add +0,
    // which changes nothing but the sign of a zero sum, so they are left out with their loads.
    const T u00 = tb.lower && tc.lower ? load(corner) : T(0);
    const T u10 = tb.upper && tc.lower ? load(corner + sb) : T(0);
    return (tb.w0 * tc.w0) * u00 + (tb.w1 * tc.w0) * u10;
  }
  const T v00 = tb.lower && tc.lower ? load(corner) : T(0);
  const T v01 = tb.lower && tc.upper ? load(corner + sc) : T(0);
  const T v10 = tb.upper && tc.lower ? load(corner + sb) : T(0);
  const T v11 = tb.upper && tc.upper ? load(corner + sb + sc) : T(0);
  return (tb.w0 * tc.w0) * v00 + (tb.w0 * tc.w1) * v01 + (tb.w1 * tc.w0) * v10 +
         (tb.w1 * tc.w1) * v11;
}

/// The slices of one ray: [first, last] may have a corner (a superset: axis_taps decides), and
/// the interior [inner_first, inner_last] ⊆ [first, last] has both indices in [0, N − 1], where
/// every corner the interpolation takes lies inside the slice (a subset: no test needed).
/// Empty ranges have first > last.
struct SliceRange {
  int64_t first, last;
  int64_t inner_first, inner_last;
};

/// Narrows the outer [lo, hi] to the slices k where the map's value at pixel (i, j) may lie in
/// (−1 − ε, N + ε), rounded outwards, and the inner [inner_lo, inner_hi] to those where it surely
/// lies in [2ε + kInnerSlack, N − 1 − 2ε − kInnerSlack], rounded inwards (the affine value is
/// evaluated here in float64, the computed index strays from it by at most ε). False when no
/// slice can have a corner.
constexpr double kInnerSlack = 1e-4;  // index units: far above float64's rounding of this sum
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE bool narrow_slices(const IndexMap<T>& m, double i, double j,
                                                  double size, double margin, double& lo,
                                                  double& hi, double& inner_lo, double& inner_hi) {
  const double base =
      static_cast<double>(m.j) * j + static_cast<double>(m.i) * i + static_cast<double>(m.origin);
  const double below = -1.0 - margin, above = size + margin;
  const double inner_below = 2.0 * margin + kInnerSlack;
  const double inner_above = size - 1.0 - inner_below;
  const double slope = static_cast<double>(m.k);
  if (slope == 0.0) {  // every slice or none
    if (!(base >= inner_below && base <= inner_above)) inner_hi = -1.0;
    return base > below && base < above;
  }
  const double inverse = 1.0 / slope;
  const double t0 = (below - base) * inverse, t1 = (above - base) * inverse;
  const double from = round_down(t0 < t1 ? t0 : t1), to = round_up(t0 < t1 ? t1 : t0);
  lo = from > lo ? from : lo;
  hi = to < hi ? to : hi;
  // One slice of slack inwards too: the products above round, and the interior must not grow.
  const double u0 = (inner_below - base) * inverse, u1 = (inner_above - base) * inverse;
  const double inner_from = round_up(u0 < u1 ? u0 : u1) + 1.0;
  const double inner_to = round_down(u0 < u1 ? u1 : u0) - 1.0;
  inner_lo = inner_from > inner_lo ? inner_from : inner_lo;
  inner_hi = inner_to < inner_hi ? inner_to : inner_hi;
  return true;
}

/// The SliceRange of pixel (i, j)'s ray, in float64 with the margin of Note [back projection
/// gather]; an unusable pose has no slices.
template <class T>
FF_HOST_DEVICE SliceRange slice_range(const Geometry<T>& g, int64_t i, int64_t j,
                                      const int64_t sizes[3]) {
  double lo = 0.0, hi = static_cast<double>(sizes[g.axis]) - 1.0;
  double inner_lo = lo, inner_hi = hi;
  int b, c;
  in_slice_axes(g.axis, b, c);
  const double row = static_cast<double>(i), column = static_cast<double>(j);
  const double margin = static_cast<double>(g.margin);
  const bool any = g.valid &&
                   narrow_slices(g.b, row, column, static_cast<double>(sizes[b]), margin, lo, hi,
                                 inner_lo, inner_hi) &&
                   narrow_slices(g.c, row, column, static_cast<double>(sizes[c]), margin, lo, hi,
                                 inner_lo, inner_hi);
  SliceRange r{0, -1, 0, -1};
  if (!any || !(lo <= hi)) return r;
  r.first = static_cast<int64_t>(lo);  // within [0, N_a − 1] here
  r.last = static_cast<int64_t>(hi);
  // The interior, clamped into [first, last]; empty: placed after last.
  if (inner_lo < lo) inner_lo = lo;
  if (inner_hi > hi) inner_hi = hi;
  if (inner_lo <= inner_hi) {
    r.inner_first = static_cast<int64_t>(inner_lo);
    r.inner_last = static_cast<int64_t>(inner_hi);
  } else {
    r.inner_first = r.last + 1;
    r.inner_last = r.last;
  }
  return r;
}

/// x clamped into [0, top + 1] (a first index; NaN gives 0) and into [−1, top] (a last index; NaN
/// gives top), as T, before any integer conversion.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T first_in(T x, T top) {
  return x > T(0) ? (x <= top ? x : top + T(1)) : T(0);
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T last_in(T x, T top) {
  return x < top ? (x >= T(0) ? x : T(-1)) : top;
}

/// The candidate pixels [first, last] along one detector axis of `size` pixels, for a box centre
/// and reach (Note [back projection gather]); empty when first > last.
template <class T, class I>
FF_HOST_DEVICE FF_FORCE_INLINE void box_range(T centre, T reach, int64_t size, I& first, I& last) {
  // Clamped in T before the conversion, which an infinite reach or a huge centre must not reach;
  // a NaN bound becomes the whole detector (a superset is always safe). The results lie in
  // [−1, size], which the drivers' index type I holds.
  const T top = static_cast<T>(size - 1);
  first = static_cast<I>(first_in(round_up(centre - reach), top));
  last = static_cast<I>(last_in(round_down(centre + reach), top));
}

/// The candidate pixels [i_first, i_last] × [j_first, j_last] of voxel (k, ib, ic) (indices along
/// a, b, c) in one projection (Note [back projection gather]); empty when first > last.
template <class T, class I>
FF_HOST_DEVICE FF_FORCE_INLINE void candidate_box(const Geometry<T>& g, T k, T ib, T ic,
                                                  int64_t height, int64_t width, I& i_first,
                                                  I& i_last, I& j_first, I& j_last) {
  const T cj =
      madd(g.centre_j.j, ib, madd(g.centre_j.i, ic, madd(g.centre_j.k, k, g.centre_j.origin)));
  const T ci =
      madd(g.centre_i.j, ib, madd(g.centre_i.i, ic, madd(g.centre_i.k, k, g.centre_i.origin)));
  box_range(cj, g.reach_j, width, j_first, j_last);
  box_range(ci, g.reach_i, height, i_first, i_last);
}

/// A voxel's indices (k, ib, ic) along the axes (a, b, c) of a projection whose dominant axis is
/// a, from its indices (z, y, x); the same permutation maps sizes and strides.
template <class I>
FF_HOST_DEVICE FF_FORCE_INLINE void along_axes(int a, I z, I y, I x, I& k, I& ib, I& ic) {
  k = a == 0 ? z : (a == 1 ? y : x);
  ib = a == 0 ? y : z;
  ic = a == 2 ? y : x;
}

/// Adds the slices [k_first, k_last] of pixel (row, column)'s ray to `sum`, in order, with the
/// taps `taps_of(index, n)` (axis_taps, or interior_taps where the range allows).
template <class T, class I, class Taps, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE void add_slices(const Geometry<T>& g, T row, T column, I k_first,
                                               I k_last, I nb, I nc, I sa, I sb, I sc,
                                               const Taps& taps_of, const Load& load, T& sum) {
  for (I k = k_first; k <= k_last; ++k) {
    const T slice = static_cast<T>(k);
    const AxisTaps<T, I> tb = taps_of(sample_index(g.b, column, row, slice), nb);
    const AxisTaps<T, I> tc = taps_of(sample_index(g.c, column, row, slice), nc);
    sum += bilinear(tb, tc, k * sa + tb.i0 * sb + tc.i0 * sc, sb, sc, load);
  }
}

/// add_slices for a tilt projection (Note [tilt path]): the x taps `tc` of the ray are the same on
/// every slice, index_b is row_term(b, row, slice_term(b, k)), and the slice counter is kept in T
/// (exact: below 2^24). kUpperC: whether tc.upper may be true.
template <bool kUpperC, class T, class I, class Taps, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE void add_tilt_slices(const Geometry<T>& g, T row,
                                                    const AxisTaps<T, I>& tc, I k_first, I k_last,
                                                    I nb, I sa, I sb, I sc, const Taps& taps_of,
                                                    const Load& load, T& sum) {
  T slice = static_cast<T>(k_first);
  I base = k_first * sa + tc.i0 * sc;  // only a base: −1·sc when the lower x corner is not taken
  for (I k = k_first; k <= k_last; ++k) {
    const AxisTaps<T, I> tb = taps_of(row_term(g.b, row, slice_term(g.b, slice)), nb);
    sum += bilinear<kUpperC>(tb, tc, base + tb.i0 * sb, sb, sc, load);
    slice += T(1);
    base += sa;
  }
}

/// Runs `slices(first, last, taps_of, sum)` over the slices of `range` in order: axis_taps before
/// and after the interior, interior_taps (the same taps without the range tests) inside it.
template <class T, class I, class Slices>
FF_HOST_DEVICE FF_FORCE_INLINE T range_sum(const SliceRange& range, const Slices& slices) {
  const auto outer = [](T index, I n) { return axis_taps<T, I>(index, n); };
  const auto inner = [](T index, I) { return interior_taps<T, I>(index); };
  const I first = static_cast<I>(range.first), last = static_cast<I>(range.last);
  const I inner_first = static_cast<I>(range.inner_first);
  const I inner_last = static_cast<I>(range.inner_last);
  T sum = T(0);
  slices(first, inner_first - 1, outer, sum);
  slices(inner_first, inner_last, inner, sum);
  slices(inner_last + 1, last, outer, sum);
  return sum;
}

/// ray_sum of a tilt projection (Note [tilt path]), kUpperC as in add_tilt_slices.
template <bool kUpperC, class T, class I, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE T tilt_ray_sum(const Geometry<T>& g, T row, const AxisTaps<T, I>& tc,
                                              const SliceRange& range, I nb, I sa, I sb, I sc,
                                              const Load& load) {
  return g.delta * range_sum<T, I>(range, [&](I first, I last, const auto& taps_of, T& sum) {
           add_tilt_slices<kUpperC>(g, row, tc, first, last, nb, sa, sb, sc, taps_of, load, sum);
         });
}

/// The forward projection of pixel (i, j): Δ·Σ_k bilinear over the slices of `range`, of a
/// volume with sizes nb, nc and strides sa, sb, sc along a, b, c, read through `load(offset)`;
/// I is the drivers' index type. The interior slices take interior_taps, which give the same
/// taps, so the sum is the same bits as with axis_taps throughout.
template <class T, class I, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE T ray_sum(const Geometry<T>& g, I i, I j, const SliceRange& range,
                                         I nb, I nc, I sa, I sb, I sc, const Load& load) {
  const T row = static_cast<T>(i), column = static_cast<T>(j);
  if (g.tilt) {  // Note [tilt path]: the same taps and terms, the x taps once per ray
    const AxisTaps<T, I> tc = axis_taps(sample_index(g.c, column, T(0), T(0)), nc);
    return tc.upper ? tilt_ray_sum<true>(g, row, tc, range, nb, sa, sb, sc, load)
                    : tilt_ray_sum<false>(g, row, tc, range, nb, sa, sb, sc, load);
  }
  // Δ is NaN for an unusable pose, whose rays have no slices.
  return g.delta * range_sum<T, I>(range, [&](I first, I last, const auto& taps_of, T& sum) {
           add_slices(g, row, column, first, last, nb, nc, sa, sb, sc, taps_of, load, sum);
         });
}

/// The pixels along one detector axis that have a voxel as a taken corner, in a tilt projection
/// (Note [corner runs]): `count` (0 to 3) consecutive pixels from `first`, with their weights.
template <class T, class I>
struct CornerRun {
  I first;
  int32_t count;
  T w[3];
};

/// The run of voxel v among the candidates [first, last] (at most three: Note [corner runs]),
/// each tested with the forward's index `index_of(pixel)` and corner rule. Taken candidates are
/// consecutive, so the run starts at the first one taken.
template <class T, class I, class Index>
FF_HOST_DEVICE FF_FORCE_INLINE CornerRun<T, I> corner_run(I first, I last, T v,
                                                          const Index& index_of) {
  bool taken[3];
  T w[3];
  for (int s = 0; s < 3; ++s) {
    const T index = index_of(static_cast<T>(first + s));
    w[s] = T(0);
    taken[s] = first + s <= last && index > v - T(1) && index < v + T(1) &&
               near_corner_weight(index, v, w[s]);
  }
  CornerRun<T, I> run;
  const int skip = taken[0] ? 0 : (taken[1] ? 1 : 2);
  run.first = first + skip;
  run.count = int32_t{taken[0]} + int32_t{taken[1]} + int32_t{taken[2]};
  run.w[0] = skip == 0 ? w[0] : (skip == 1 ? w[1] : w[2]);
  run.w[1] = skip == 0 ? w[1] : w[2];
  run.w[2] = w[2];
  return run;
}

/// The rows of voxel (k, ib) in a `runs` projection: its candidate box's rows (the box's centre
/// does not depend on ic there: its coefficient is 0), tested with index_b.
template <class T, class I>
FF_HOST_DEVICE FF_FORCE_INLINE CornerRun<T, I> row_run(const Geometry<T>& g, T k, T ib,
                                                       int64_t height) {
  const T ci =
      madd(g.centre_i.j, ib, madd(g.centre_i.i, T(0), madd(g.centre_i.k, k, g.centre_i.origin)));
  I first, last;
  box_range(ci, g.reach_i, height, first, last);
  const T slice = slice_term(g.b, k);
  return corner_run<T, I>(first, last, ib, [&](T i) { return row_term(g.b, i, slice); });
}

/// The columns of voxel ic in a `runs` projection (the box's centre depends on ic only).
template <class T, class I>
FF_HOST_DEVICE FF_FORCE_INLINE CornerRun<T, I> column_run(const Geometry<T>& g, T ic,
                                                          int64_t width) {
  const T cj =
      madd(g.centre_j.j, T(0), madd(g.centre_j.i, ic, madd(g.centre_j.k, T(0), g.centre_j.origin)));
  I first, last;
  box_range(cj, g.reach_j, width, first, last);
  return corner_run<T, I>(first, last, ic, [&](T j) { return sample_index(g.c, j, T(0), T(0)); });
}

/// Σ_q wc_q·load(i, j_q) over a column run: one detector row's pixels as voxel ic sees them
/// (Note [corner runs]). The CUDA back projection keeps these row values of a block's x voxels
/// in shared memory and reuses each for every (k, ib) voxel whose row run holds row i.
template <class T, class I, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE T column_sum(const CornerRun<T, I>& columns, I i, const Load& load) {
  T sum = T(0);
  for (int q = 0; q < 3; ++q) {
    if (q >= columns.count) break;
    sum += columns.w[q] * load(i, columns.first + q);
  }
  return sum;
}

/// Σ_r wb_r·row_value(i_r) over a row run, rows in order.
template <class T, class I, class RowValue>
FF_HOST_DEVICE FF_FORCE_INLINE T row_sum(const CornerRun<T, I>& rows, const RowValue& row_value) {
  T sum = T(0);
  for (int r = 0; r < 3; ++r) {
    if (r >= rows.count) break;
    sum += rows.w[r] * row_value(rows.first + r);
  }
  return sum;
}

/// Σ_r wb_r·(Σ_q wc_q·load(i_r, j_q)) over a row run and a column run (Note [corner runs]): the
/// general loop's terms, factored by rows.
template <class T, class I, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE T run_sum(const CornerRun<T, I>& rows,
                                         const CornerRun<T, I>& columns, const Load& load) {
  return row_sum(rows, [&](I i) { return column_sum(columns, i, load); });
}

/// The back projection of one projection onto voxel (k, ib, ic) (indices along a, b, c):
/// Δ·Σ (wb·wc)·P over the candidate pixels that have the voxel as a taken corner, in a fixed
/// order; `load(i, j)` reads the projection. Separable geometries take the loop of Note
/// [separable gather].
template <class T, class I, class Load>
FF_HOST_DEVICE FF_FORCE_INLINE T voxel_sum(const Geometry<T>& g, I k, I ib, I ic, int64_t height,
                                           int64_t width, const Load& load) {
  if (!g.valid) return g.delta;  // NaN: the pose poisons every voxel, as its forward every ray
  const T slice = static_cast<T>(k);
  if (g.runs) {
    return g.delta * run_sum(row_run<T, I>(g, slice, static_cast<T>(ib), height),
                             column_run<T, I>(g, static_cast<T>(ic), width), load);
  }
  I i_first, i_last, j_first, j_last;
  candidate_box(g, slice, static_cast<T>(ib), static_cast<T>(ic), height, width, i_first, i_last,
                j_first, j_last);
  const T slice_b = slice_term(g.b, slice), slice_c = slice_term(g.c, slice);
  // A corner's index lies in (v − 1, v + 1) (Note [back projection gather]): two comparisons
  // turn most candidates away, then near_corner_weight gives axis_taps' verdict and weight.
  const T c_voxel = static_cast<T>(ic), b_voxel = static_cast<T>(ib);
  const T c_low = c_voxel - T(1), c_high = c_voxel + T(1);
  const T b_low = b_voxel - T(1), b_high = b_voxel + T(1);
  T sum = T(0);
  if (g.separable) {
    // index_c is the same on every row, index_b on every column (Note [separable gather]): each
    // column is tested once, then the rows of the columns that pass.
    const T row_c = row_term(g.c, static_cast<T>(i_first), slice_c);
    const T column_b = static_cast<T>(j_first);
    for (I j = j_first; j <= j_last; ++j) {
      const T index_c = sample_index(g.c, static_cast<T>(j), row_c);
      T wc;
      if (!(index_c > c_low && index_c < c_high) || !near_corner_weight(index_c, c_voxel, wc)) {
        continue;
      }
      for (I i = i_first; i <= i_last; ++i) {
        const T index_b = sample_index(g.b, column_b, row_term(g.b, static_cast<T>(i), slice_b));
        T wb;
        if (!(index_b > b_low && index_b < b_high)) continue;
        const bool taken = near_corner_weight(index_b, b_voxel, wb);
        sum += taken ? (wb * wc) * load(i, j) : T(0);  // + 0 leaves the sum as it is
      }
    }
    return g.delta * sum;
  }
  for (I i = i_first; i <= i_last; ++i) {
    const T row = static_cast<T>(i);
    const T row_b = row_term(g.b, row, slice_b), row_c = row_term(g.c, row, slice_c);
    for (I j = j_first; j <= j_last; ++j) {
      const T column = static_cast<T>(j);
      const T index_c = sample_index(g.c, column, row_c);
      if (!(index_c > c_low && index_c < c_high)) continue;
      const T index_b = sample_index(g.b, column, row_b);
      if (!(index_b > b_low && index_b < b_high)) continue;
      T wb, wc;
      const bool taken =
          near_corner_weight(index_c, c_voxel, wc) & near_corner_weight(index_b, b_voxel, wb);
      sum += taken ? (wb * wc) * load(i, j) : T(0);  // + 0 leaves the sum as it is
    }
  }
  return g.delta * sum;
}

}  // namespace fieldfuse::detail::project
