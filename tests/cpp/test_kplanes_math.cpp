// SPDX-License-Identifier: Apache-2.0
// Tests of the K-Planes per-sample math (kplanes_math.h) against naive formulas and finite
// differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "kplanes/kplanes_math.h"

namespace fftest {
namespace {

namespace kp = fieldfuse::detail::kplanes;
using kp::Variant;

constexpr uint32_t kSeed = 20240611u;  // fixed, so a failure reproduces

/// Absolute tolerance (relative to O(1) values) of a T computation against a float64 reference.
template <class T>
double tolerance() {
  return std::is_same<T, float>::value ? 2e-5 : 1e-9;
}

/// One plane of one channel, row-major [height, width], in float64 (cast to T where sampled).
struct Plane {
  int64_t height, width;
  std::vector<double> values;
  double at(int64_t y, int64_t x) const { return values[y * width + x]; }
};

Plane random_plane(std::mt19937& rng, int64_t height, int64_t width) {
  std::uniform_real_distribution<double> value(0.1, 0.5);  // the spec's test range
  Plane g{height, width, std::vector<double>(height * width)};
  for (double& v : g.values) v = value(rng);
  return g;
}

double uniform(std::mt19937& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

int64_t uniform_int(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// ---- the tap applied to a Plane ---------------------------------------------------------------

template <class T>
struct Corners {
  T v00, v01, v10, v11;
};

template <class T>
Corners<T> corners(const kp::BilinearTap<T>& t, const Plane& g) {
  return {T(g.at(t.y0, t.x0)), T(g.at(t.y0, t.x1)), T(g.at(t.y1, t.x0)), T(g.at(t.y1, t.x1))};
}

template <class T>
T sample(const kp::BilinearTap<T>& t, const Plane& g) {
  const Corners<T> c = corners(t, g);
  return t.sample(c.v00, c.v01, c.v10, c.v11);
}

/// Adds the tap's scatter of `grad` into `out` (same shape as the plane), as a driver would.
template <class T>
void scatter_into(const kp::BilinearTap<T>& t, T grad, int64_t width, std::vector<double>& out) {
  T share[4];
  t.scatter(grad, share);
  out[t.y0 * width + t.x0] += share[0];
  out[t.y0 * width + t.x1] += share[1];
  out[t.y1 * width + t.x0] += share[2];
  out[t.y1 * width + t.x1] += share[3];
}

// ---- naive float64 references, written straight from the spec --------------------------------

/// Bilinear interpolation at a continuous (already clamped) index.
double naive_at_index(const Plane& g, double ix, double iy) {
  const int64_t x0 = static_cast<int64_t>(std::floor(ix)),
                y0 = static_cast<int64_t>(std::floor(iy));
  const int64_t x1 = std::min(x0 + 1, g.width - 1), y1 = std::min(y0 + 1, g.height - 1);
  const double tx = ix - x0, ty = iy - y0;
  return g.at(y0, x0) * (1 - tx) * (1 - ty) + g.at(y0, x1) * tx * (1 - ty) +
         g.at(y1, x0) * (1 - tx) * ty + g.at(y1, x1) * tx * ty;
}

/// The spec's index: (g + 1)/2·(size − 1) clamped to [0, size − 1], in T.
template <class T>
T naive_index(T g, int64_t size) {
  const T u = (g + T(1)) / T(2) * static_cast<T>(size - 1);
  return std::min(std::max(u, T(0)), static_cast<T>(size - 1));
}

double naive_sample(const Plane& g, double gx, double gy) {
  return naive_at_index(g, naive_index(gx, g.width), naive_index(gy, g.height));
}

/// A grid coordinate whose index lies at least `margin` away from every integer, inside the axis.
double interior_coordinate(std::mt19937& rng, int64_t size, double margin) {
  const double index =
      static_cast<double>(uniform_int(rng, 0, size - 2)) + uniform(rng, margin, 1 - margin);
  return index / static_cast<double>(size - 1) * 2 - 1;
}

template <class T>
class KPlanesMath : public testing::Test {};
using Scalars = testing::Types<float, double>;
TYPED_TEST_SUITE(KPlanesMath, Scalars);

// ---- coordinate map ---------------------------------------------------------------------------

TYPED_TEST(KPlanesMath, CoordinateInterior) {
  using T = TypeParam;
  for (int64_t size : {2, 5, 200})
    for (double g : {-0.75, -0.1, 0.0, 0.3, 0.999}) {
      const kp::AxisCoordinate<T> c = kp::map_coordinate(T(g), size);
      EXPECT_EQ(c.index, naive_index(T(g), size)) << "g=" << g << " size=" << size;
      EXPECT_NEAR(c.index, (g + 1) / 2 * (size - 1), tolerance<T>() * size);
      EXPECT_EQ(c.scale, T(size - 1) / T(2));
    }
  EXPECT_EQ(kp::map_coordinate(T(0), 7).index, T(3));  // the centre of an odd axis is exact
}

TYPED_TEST(KPlanesMath, CoordinateOnAndOutsideBorderHasZeroGradient) {
  using T = TypeParam;
  const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
  for (int64_t size : {2, 9}) {
    const T last = T(size - 1);
    for (T g : {T(-1), T(-1.5), T(-2), -inf, -big}) {
      const kp::AxisCoordinate<T> c = kp::map_coordinate(g, size);
      EXPECT_EQ(c.index, T(0)) << "g=" << g;
      EXPECT_EQ(c.scale, T(0)) << "g=" << g;
    }
    for (T g : {T(1), T(1.1), T(3), inf, big}) {
      const kp::AxisCoordinate<T> c = kp::map_coordinate(g, size);
      EXPECT_EQ(c.index, last) << "g=" << g;
      EXPECT_EQ(c.scale, T(0)) << "g=" << g;
    }
  }
}

TYPED_TEST(KPlanesMath, SizeOneAxisHasIndexZeroAndNoGradient) {
  using T = TypeParam;
  const T inf = std::numeric_limits<T>::infinity();
  for (T g : {T(-2), T(-1), T(0), T(0.5), T(1), T(3), inf, -inf}) {
    const kp::AxisCoordinate<T> c = kp::map_coordinate(g, 1);
    EXPECT_EQ(c.index, T(0)) << "g=" << g;
    EXPECT_EQ(c.scale, T(0)) << "g=" << g;
  }
  // A 1×W plane samples its only row: a 1-D interpolation along x.
  std::mt19937 rng(kSeed);
  const Plane g = random_plane(rng, 1, 6);
  const kp::BilinearTap<T> t = kp::bilinear_tap(T(0.3), T(0.8), 1, 6);
  EXPECT_EQ(t.y0, 0);
  EXPECT_EQ(t.y1, 0);
  EXPECT_EQ(t.ty, T(0));
  EXPECT_EQ(t.sy, T(0));
  const double ix = 1.3 / 2 * 5;
  EXPECT_NEAR(sample(t, g), g.at(0, 3) * (4 - ix) + g.at(0, 4) * (ix - 3), tolerance<T>());
}

// NaN keeps its NaN through the value, but every index stays inside the plane.
TYPED_TEST(KPlanesMath, NaNCoordinatePropagatesWithValidIndices) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (int64_t size : {1, 2, 7}) {
    const kp::AxisCoordinate<T> c = kp::map_coordinate(nan, size);
    EXPECT_TRUE(std::isnan(c.index));
    EXPECT_EQ(c.scale, T(0));
    const kp::AxisCorners<T> k = kp::split_index(c.index, size);
    EXPECT_EQ(k.i0, 0);
    EXPECT_EQ(k.i1, std::min<int64_t>(1, size - 1));
    EXPECT_TRUE(std::isnan(k.t));
  }
  std::mt19937 rng(kSeed);
  const Plane g = random_plane(rng, 5, 7);
  const kp::BilinearTap<T> t = kp::bilinear_tap(nan, T(0.2), 5, 7);
  EXPECT_EQ(t.x0, 0);
  EXPECT_EQ(t.x1, 1);
  EXPECT_GE(t.y0, 0);
  EXPECT_LT(t.y1, 5);
  EXPECT_TRUE(std::isnan(sample(t, g)));
  const Corners<T> c = corners(t, g);
  // ∂s/∂ix does not involve tx, so the NaN axis's own coordinate gradient is 0·finite = 0; the
  // other axis's slope carries tx, so the point gradient still comes out NaN.
  EXPECT_EQ(t.d_dix(c.v00, c.v01, c.v10, c.v11) * t.sx, T(0));
  EXPECT_TRUE(std::isnan(t.d_diy(c.v00, c.v01, c.v10, c.v11) * t.sy));
  T share[4];
  t.scatter(T(1), share);
  for (T s : share) EXPECT_TRUE(std::isnan(s));
}

// ---- sampling ---------------------------------------------------------------------------------

TYPED_TEST(KPlanesMath, SampleMatchesNaive) {
  using T = TypeParam;
  std::mt19937 rng(kSeed);
  for (int trial = 0; trial < 400; ++trial) {
    const Plane g = random_plane(rng, uniform_int(rng, 1, 9), uniform_int(rng, 1, 9));
    const bool on_border = trial % 10 == 0;  // every tenth point exactly on ±1
    const T gx = on_border ? T(trial % 20 == 0 ? 1 : -1) : T(uniform(rng, -1.1, 1.1));
    const T gy = T(uniform(rng, -1.1, 1.1));
    const kp::BilinearTap<T> t = kp::bilinear_tap(gx, gy, g.height, g.width);

    const T ix = naive_index(gx, g.width), iy = naive_index(gy, g.height);
    EXPECT_EQ(t.x0, static_cast<int64_t>(std::floor(ix)));
    EXPECT_EQ(t.y0, static_cast<int64_t>(std::floor(iy)));
    EXPECT_EQ(t.tx, ix - std::floor(ix));
    EXPECT_EQ(t.ty, iy - std::floor(iy));
    EXPECT_EQ(t.x1, std::min<int64_t>(t.x0 + 1, g.width - 1));
    EXPECT_EQ(t.y1, std::min<int64_t>(t.y0 + 1, g.height - 1));
    EXPECT_NEAR(sample(t, g), naive_at_index(g, ix, iy), tolerance<T>()) << "trial " << trial;
  }
}

// Same weights, same term order: sample() is Σ w_k·v_k bit for bit (Note [bilinear term order]).
TYPED_TEST(KPlanesMath, SampleIsTheWeightedSumInSpecOrder) {
  using T = TypeParam;
  std::mt19937 rng(kSeed + 1);
  for (int trial = 0; trial < 100; ++trial) {
    const kp::BilinearTap<T> t =
        kp::bilinear_tap(T(uniform(rng, -1, 1)), T(uniform(rng, -1, 1)), 8, 11);
    const T v[4] = {T(uniform(rng, -1, 1)), T(uniform(rng, -1, 1)), T(uniform(rng, -1, 1)),
                    T(uniform(rng, -1, 1))};
    const T want = (1 - t.tx) * (1 - t.ty) * v[0] + t.tx * (1 - t.ty) * v[1] +
                   (1 - t.tx) * t.ty * v[2] + t.tx * t.ty * v[3];
    EXPECT_EQ(t.sample(v[0], v[1], v[2], v[3]), want);
  }
}

TYPED_TEST(KPlanesMath, WeightsSumToOneAndScatterIsTheAdjoint) {
  using T = TypeParam;
  std::mt19937 rng(kSeed + 2);
  for (int trial = 0; trial < 300; ++trial) {
    const Plane g = random_plane(rng, uniform_int(rng, 1, 6), uniform_int(rng, 1, 6));
    const T gx = T(trial % 7 == 0 ? 1.0 : uniform(rng, -1.2, 1.2));
    const T gy = T(trial % 5 == 0 ? -1.0 : uniform(rng, -1.2, 1.2));
    const kp::BilinearTap<T> t = kp::bilinear_tap(gx, gy, g.height, g.width);
    T w[4];
    t.weights(w);
    for (T wk : w) {
      EXPECT_GE(wk, T(0));
      EXPECT_LE(wk, T(1));
    }
    EXPECT_NEAR(w[0] + w[1] + w[2] + w[3], 1.0, 4 * std::numeric_limits<T>::epsilon());

    // ⟨scatter(u), G⟩ = u·sample(G), also where corners coincide (border, size-1 axes).
    const T upstream = T(uniform(rng, -2, 2));
    std::vector<double> grad(g.values.size(), 0.0);
    scatter_into(t, upstream, g.width, grad);
    double inner = 0;
    for (size_t e = 0; e < grad.size(); ++e) inner += grad[e] * g.values[e];
    EXPECT_NEAR(inner, double(upstream) * double(sample(t, g)), 2 * tolerance<T>());
  }
}

// ---- derivatives ------------------------------------------------------------------------------

TYPED_TEST(KPlanesMath, DerivativesMatchFiniteDifferences) {
  using T = TypeParam;
  std::mt19937 rng(kSeed + 3);
  const double step = 1e-6;
  for (int trial = 0; trial < 200; ++trial) {
    const Plane g = random_plane(rng, uniform_int(rng, 2, 9), uniform_int(rng, 2, 9));
    const double gx = interior_coordinate(rng, g.width, 0.05);
    const double gy = interior_coordinate(rng, g.height, 0.05);
    const kp::BilinearTap<T> t = kp::bilinear_tap(T(gx), T(gy), g.height, g.width);
    const Corners<T> c = corners(t, g);
    const T ds_dix = t.d_dix(c.v00, c.v01, c.v10, c.v11);
    const T ds_diy = t.d_diy(c.v00, c.v01, c.v10, c.v11);

    // In index units, against the naive interpolation at the tap's own (float64) index.
    const double ix = naive_index(gx, g.width), iy = naive_index(gy, g.height);
    const double fd_ix =
        (naive_at_index(g, ix + step, iy) - naive_at_index(g, ix - step, iy)) / (2 * step);
    const double fd_iy =
        (naive_at_index(g, ix, iy + step) - naive_at_index(g, ix, iy - step)) / (2 * step);
    EXPECT_NEAR(ds_dix, fd_ix, tolerance<T>()) << "trial " << trial;
    EXPECT_NEAR(ds_diy, fd_iy, tolerance<T>()) << "trial " << trial;

    // Composed with the coordinate map: ∂s/∂g = ∂s/∂index · scale.
    const double fd_gx =
        (naive_sample(g, gx + step, gy) - naive_sample(g, gx - step, gy)) / (2 * step);
    const double fd_gy =
        (naive_sample(g, gx, gy + step) - naive_sample(g, gx, gy - step)) / (2 * step);
    EXPECT_NEAR(ds_dix * t.sx, fd_gx, tolerance<T>() * g.width) << "trial " << trial;
    EXPECT_NEAR(ds_diy * t.sy, fd_gy, tolerance<T>() * g.height) << "trial " << trial;
  }
}

TYPED_TEST(KPlanesMath, CoordinateGradientIsExactlyZeroOnAndOutsideBorder) {
  using T = TypeParam;
  std::mt19937 rng(kSeed + 4);
  const Plane g = random_plane(rng, 6, 8);
  for (T gx : {T(-1), T(1), T(-1.2), T(1.4)})
    for (T gy : {T(-1), T(1), T(-1.01), T(2)}) {
      const kp::BilinearTap<T> t = kp::bilinear_tap(gx, gy, g.height, g.width);
      const Corners<T> c = corners(t, g);
      EXPECT_EQ(t.d_dix(c.v00, c.v01, c.v10, c.v11) * t.sx, T(0));
      EXPECT_EQ(t.d_diy(c.v00, c.v01, c.v10, c.v11) * t.sy, T(0));
    }
}

// ---- plane pairs, rotations, product ----------------------------------------------------------

TYPED_TEST(KPlanesMath, PlanePairsOfBothVariants) {
  using T = TypeParam;
  const T r[3] = {T(0.1), T(0.2), T(0.3)};
  const T tilted[3][2] = {{r[0], r[1]}, {r[2], r[0]}, {r[1], r[2]}};
  const T aligned[3][2] = {{r[0], r[1]}, {r[0], r[2]}, {r[1], r[2]}};
  for (int p = 0; p < 3; ++p) {
    T gx, gy;
    kp::plane_coordinates<Variant::kTilted>(r, p, gx, gy);
    EXPECT_EQ(gx, tilted[p][0]);
    EXPECT_EQ(gy, tilted[p][1]);
    kp::plane_coordinates<Variant::kAxisAligned>(r, p, gx, gy);
    EXPECT_EQ(gx, aligned[p][0]);
    EXPECT_EQ(gy, aligned[p][1]);
  }
}

/// The assembly is the transpose of the pair selection: Σ_p dgx_p·gx_p + dgy_p·gy_p = dr·r.
template <Variant V, class T>
void expect_assembly_is_transpose(std::mt19937& rng) {
  for (int trial = 0; trial < 50; ++trial) {
    T r[3], dgx[3], dgy[3], dr[3];
    for (int i = 0; i < 3; ++i) {
      r[i] = T(uniform(rng, -1, 1));
      dgx[i] = T(uniform(rng, -1, 1));
      dgy[i] = T(uniform(rng, -1, 1));
    }
    double lhs = 0;
    for (int p = 0; p < 3; ++p) {
      T gx, gy;
      kp::plane_coordinates<V>(r, p, gx, gy);
      lhs += double(dgx[p]) * gx + double(dgy[p]) * gy;
    }
    kp::assemble_point_gradient<V>(dgx, dgy, dr);
    const double rhs = double(dr[0]) * r[0] + double(dr[1]) * r[1] + double(dr[2]) * r[2];
    EXPECT_NEAR(lhs, rhs, tolerance<T>());
  }
}

TYPED_TEST(KPlanesMath, PointGradientAssemblyIsTheTranspose) {
  std::mt19937 rng(kSeed + 5);
  expect_assembly_is_transpose<Variant::kTilted, TypeParam>(rng);
  expect_assembly_is_transpose<Variant::kAxisAligned, TypeParam>(rng);
}

TYPED_TEST(KPlanesMath, RotationHelpers) {
  using T = TypeParam;
  std::mt19937 rng(kSeed + 6);
  for (int trial = 0; trial < 50; ++trial) {
    T R[9], p[3], q[3], dr[3], r[3];
    for (T& x : R) x = T(uniform(rng, -1, 1));  // not orthogonal
    for (int i = 0; i < 3; ++i) {
      p[i] = T(uniform(rng, -1, 1));
      q[i] = T(uniform(rng, -1, 1));
      dr[i] = T(uniform(rng, -1, 1));
    }
    kp::rotate(R, p, r);
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(
          r[i], double(R[3 * i]) * p[0] + double(R[3 * i + 1]) * p[1] + double(R[3 * i + 2]) * p[2],
          tolerance<T>());

    // Tap shift: R p + h R[:, axis] = R (p + h e_axis).
    const T h = T(0.125);
    for (int axis = 0; axis < 3; ++axis) {
      T shifted[3], moved[3] = {p[0], p[1], p[2]}, want[3];
      kp::shift_along_axis(R, r, h, axis, shifted);
      moved[axis] += h;
      kp::rotate(R, moved, want);
      for (int i = 0; i < 3; ++i) EXPECT_NEAR(shifted[i], want[i], tolerance<T>());
    }

    // dL/dp = Rᵀ dr: ⟨dp, q⟩ = ⟨dr, R q⟩; accumulating adds to what is there.
    T dp[3] = {T(1), T(2), T(3)}, Rq[3];
    kp::accumulate_point_gradient(R, dr, dp);
    kp::rotate(R, q, Rq);
    double lhs = 0, rhs = 0;
    for (int i = 0; i < 3; ++i) {
      lhs += (double(dp[i]) - (i + 1)) * q[i];
      rhs += double(dr[i]) * Rq[i];
    }
    EXPECT_NEAR(lhs, rhs, 4 * tolerance<T>());

    // dL/dR = dr ⊗ p, plus dr·h in column `axis` for a shifted tap.
    T dR[9] = {}, dRs[9] = {};
    kp::accumulate_rotation_gradient(dr, p, dR);
    kp::accumulate_shifted_rotation_gradient(dr, p, h, 1, dRs);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(dR[3 * i + j], dr[i] * p[j]);
        EXPECT_NEAR(dRs[3 * i + j], double(dr[i]) * (p[j] + (j == 1 ? h : T(0))), tolerance<T>());
      }
  }
}

TYPED_TEST(KPlanesMath, ProductRuleHandlesZeros) {
  using T = TypeParam;
  T partial[3];
  const T one_zero[3] = {T(2), T(0), T(3)};
  EXPECT_EQ(kp::plane_product(one_zero), T(0));
  kp::plane_product_partials(one_zero, partial);
  EXPECT_EQ(partial[0], T(0));
  EXPECT_EQ(partial[1], T(6));
  EXPECT_EQ(partial[2], T(0));

  const T two_zeros[3] = {T(0), T(-0.5), T(0)};
  kp::plane_product_partials(two_zeros, partial);
  for (T d : partial) EXPECT_EQ(d, T(0));

  const T s[3] = {T(0.25), T(-0.375), T(1.5)};  // exact in float: products compare exactly
  EXPECT_EQ(kp::plane_product(s), T(0.25 * -0.375 * 1.5));
  kp::plane_product_partials(s, partial);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(partial[p], kp::plane_product(s) / s[p]);
}

// ---- one full per-point K-Planes feature (one tilt, one channel) vs finite differences ------

/// Three planes of one tilt and one channel, a rotation, a point, and an optional tap shift.
struct PointCase {
  Plane planes[3];
  double R[9], p[3];
  int tap_axis;  ///< −1: the point itself; 0..2: the tap at p + h·e_axis
  double h;
};

template <class T, size_t N>
void cast(const double (&in)[N], T (&out)[N]) {
  for (size_t i = 0; i < N; ++i) out[i] = static_cast<T>(in[i]);
}

/// The point each plane is sampled at: R p, shifted by h·R[:, axis] for a tap.
template <class T>
void sample_point(const T (&R)[9], const T (&p)[3], int tap_axis, T h, T (&r)[3]) {
  T base[3];
  kp::rotate(R, p, base);
  if (tap_axis < 0)
    for (int i = 0; i < 3; ++i) r[i] = base[i];
  else
    kp::shift_along_axis(R, base, h, tap_axis, r);
}

/// f = Π_p sample_p, built only from the header's helpers.
template <Variant V, class T>
T feature(const PointCase& pc) {
  T R[9], p[3], r[3], s[3];
  cast(pc.R, R);
  cast(pc.p, p);
  sample_point(R, p, pc.tap_axis, T(pc.h), r);
  for (int k = 0; k < 3; ++k) {
    T gx, gy;
    kp::plane_coordinates<V>(r, k, gx, gy);
    s[k] = sample(kp::bilinear_tap(gx, gy, pc.planes[k].height, pc.planes[k].width), pc.planes[k]);
  }
  return kp::plane_product(s);
}

struct PointGradient {
  double dR[9], dp[3];
  std::vector<double> dplanes[3];
};

/// The analytic chain a driver runs for upstream gradient `upstream`: product rule, per-plane
/// scatter and coordinate gradients, dr assembly, then rotation and point gradients.
template <Variant V, class T>
PointGradient feature_gradient(const PointCase& pc, T upstream) {
  T R[9], p[3], r[3], s[3], partial[3], dgx[3], dgy[3], dr[3];
  cast(pc.R, R);
  cast(pc.p, p);
  sample_point(R, p, pc.tap_axis, T(pc.h), r);
  kp::BilinearTap<T> taps[3];
  for (int k = 0; k < 3; ++k) {
    T gx, gy;
    kp::plane_coordinates<V>(r, k, gx, gy);
    taps[k] = kp::bilinear_tap(gx, gy, pc.planes[k].height, pc.planes[k].width);
    s[k] = sample(taps[k], pc.planes[k]);
  }
  kp::plane_product_partials(s, partial);
  PointGradient out{};
  for (int k = 0; k < 3; ++k) {
    const T ds = upstream * partial[k];
    const Corners<T> c = corners(taps[k], pc.planes[k]);
    dgx[k] = ds * taps[k].d_dix(c.v00, c.v01, c.v10, c.v11) * taps[k].sx;
    dgy[k] = ds * taps[k].d_diy(c.v00, c.v01, c.v10, c.v11) * taps[k].sy;
    out.dplanes[k].assign(pc.planes[k].values.size(), 0.0);
    scatter_into(taps[k], ds, pc.planes[k].width, out.dplanes[k]);
  }
  kp::assemble_point_gradient<V>(dgx, dgy, dr);
  T dR[9] = {}, dp[3] = {};
  if (pc.tap_axis < 0)
    kp::accumulate_rotation_gradient(dr, p, dR);
  else
    kp::accumulate_shifted_rotation_gradient(dr, p, T(pc.h), pc.tap_axis, dR);
  kp::accumulate_point_gradient(R, dr, dp);
  for (int i = 0; i < 9; ++i) out.dR[i] = dR[i];
  for (int i = 0; i < 3; ++i) out.dp[i] = dp[i];
  return out;
}

/// Whether every sample index of the case lies `margin` away from cell edges and the border, so a
/// central difference of step ≪ margin stays on one smooth piece.
template <Variant V>
bool well_inside_cells(const PointCase& pc, double margin) {
  double r[3];
  sample_point(pc.R, pc.p, pc.tap_axis, pc.h, r);
  for (int k = 0; k < 3; ++k) {
    double g[2];
    kp::plane_coordinates<V>(r, k, g[0], g[1]);
    const int64_t sizes[2] = {pc.planes[k].width, pc.planes[k].height};
    for (int a = 0; a < 2; ++a) {
      const double u = (g[a] + 1) / 2 * double(sizes[a] - 1);
      if (u < margin || u > double(sizes[a] - 1) - margin) return false;
      if (std::fabs(u - std::round(u)) < margin) return false;
    }
  }
  return true;
}

template <Variant V, class T>
void expect_chain_matches_finite_differences() {
  std::mt19937 rng(kSeed + (V == Variant::kTilted ? 7 : 8));
  const double step = 1e-6, tol = 4 * tolerance<T>();
  int checked = 0;
  for (int attempt = 0; checked < 24 && attempt < 1000; ++attempt) {
    PointCase pc;
    for (Plane& plane : pc.planes)
      plane = random_plane(rng, uniform_int(rng, 2, 9), uniform_int(rng, 2, 9));
    for (double& x : pc.R) x = uniform(rng, -0.5, 0.5);  // |R p| ≤ 0.9: inside, not orthogonal
    for (double& x : pc.p) x = uniform(rng, -0.6, 0.6);
    pc.tap_axis = checked % 4 - 1;  // the point itself and all three taps
    pc.h = 0.05;
    if (!well_inside_cells<V>(pc, 0.01)) continue;
    ++checked;

    const double upstream = 0.7;
    const PointGradient got = feature_gradient<V, T>(pc, T(upstream));
    auto central = [&](double& x) {
      const double saved = x;
      x = saved + step;
      const double plus = feature<V, double>(pc);
      x = saved - step;
      const double minus = feature<V, double>(pc);
      x = saved;
      return upstream * (plus - minus) / (2 * step);
    };
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(got.dp[i], central(pc.p[i]), tol) << "dp[" << i << "], case " << checked;
    for (int i = 0; i < 9; ++i)
      EXPECT_NEAR(got.dR[i], central(pc.R[i]), tol) << "dR[" << i << "], case " << checked;
    for (int k = 0; k < 3; ++k)
      for (size_t e = 0; e < pc.planes[k].values.size(); ++e)
        EXPECT_NEAR(got.dplanes[k][e], central(pc.planes[k].values[e]), tol)
            << "plane " << k << " cell " << e << ", case " << checked;
  }
  EXPECT_EQ(checked, 24) << "too few random cases landed inside cells";
}

TYPED_TEST(KPlanesMath, TiltedChainMatchesFiniteDifferences) {
  expect_chain_matches_finite_differences<Variant::kTilted, TypeParam>();
}

TYPED_TEST(KPlanesMath, AxisAlignedChainMatchesFiniteDifferences) {
  expect_chain_matches_finite_differences<Variant::kAxisAligned, TypeParam>();
}

// The two variants differ (plane 1 is (z, x) vs (x, z)): an identity rotation does not map one
// onto the other.
TEST(KPlanesMathVariants, IdentityRotationDoesNotMakeThemInterchangeable) {
  std::mt19937 rng(kSeed + 9);
  PointCase pc;
  for (Plane& plane : pc.planes) plane = random_plane(rng, 5, 5);
  const double identity[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::copy(identity, identity + 9, pc.R);
  pc.p[0] = 0.3;
  pc.p[1] = -0.2;
  pc.p[2] = 0.7;
  pc.tap_axis = -1;
  pc.h = 0;
  const double tilted = feature<Variant::kTilted, double>(pc);
  const double aligned = feature<Variant::kAxisAligned, double>(pc);
  EXPECT_NE(tilted, aligned);
}

TEST(KPlanesMath, CornersStayInsideLongFloatAxes) {
  // Past 2^24 cells, (size − 1) rounds to size in float32; the corners must still be in range.
  const int64_t size = (int64_t{1} << 24) + 4;
  for (const float g : {1.0f, 0.9999999f, 2.0f}) {
    const auto c = kp::map_coordinate(g, size);
    const auto corners = kp::split_index(c.index, size);
    EXPECT_LE(corners.i0, size - 1) << g;
    EXPECT_LE(corners.i1, size - 1) << g;
    EXPECT_GE(corners.i0, 0) << g;
  }
}

}  // namespace
}  // namespace fftest
