// SPDX-License-Identifier: Apache-2.0
// Tests of the project C++ API on the CPU: the adjoint identity, the transpose built column by
// column in both directions, the geometry formulas against a direct evaluation of the ray, and
// argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fieldfuse/project.h"
#include "project/project_math.h"
#include "tv_test_util.h"

namespace fftest {
namespace {

using fieldfuse::ErrorKind;
using fieldfuse::TensorRef;

constexpr uint32_t kSeed = 14u;

/// A random rotation (uniform unit quaternion), row-major.
std::vector<double> random_rotation(std::mt19937& gen) {
  std::normal_distribution<double> normal;
  double q[4];
  double norm = 0.0;
  for (double& v : q) {
    v = normal(gen);
    norm += v * v;
  }
  norm = std::sqrt(norm);
  const double w = q[0] / norm, x = q[1] / norm, y = q[2] / norm, z = q[3] / norm;
  return {1 - 2 * (y * y + z * z), 2 * (x * y - w * z),     2 * (x * z + w * y),
          2 * (x * y + w * z),     1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
          2 * (x * z - w * y),     2 * (y * z + w * x),     1 - 2 * (x * x + y * y)};
}

/// One problem: n poses, a volume shape and a detector shape.
template <class T>
struct Problem {
  int64_t n, depth, height, width, det_height, det_width;
  std::vector<T> rotations, shifts;
  bool with_shifts = true;

  Problem(std::mt19937& gen, int64_t n_, int64_t d, int64_t h, int64_t w, int64_t hd, int64_t wd,
          double shift_scale = 0.3)
      : n(n_), depth(d), height(h), width(w), det_height(hd), det_width(wd) {
    std::uniform_real_distribution<double> uniform(-shift_scale, shift_scale);
    for (int64_t m = 0; m < n; ++m) {
      for (double v : random_rotation(gen)) rotations.push_back(static_cast<T>(v));
      shifts.push_back(static_cast<T>(uniform(gen)));
      shifts.push_back(static_cast<T>(uniform(gen)));
    }
  }

  int64_t voxels() const { return depth * height * width; }
  int64_t pixels() const { return n * det_height * det_width; }

  TensorRef rotations_ref() {
    return TensorRef::contiguous(rotations.data(), dtype_of<T>(), {}, {n, 3, 3});
  }
  TensorRef shifts_ref() {
    return with_shifts ? TensorRef::contiguous(shifts.data(), dtype_of<T>(), {}, {n, 2})
                       : TensorRef{};
  }

  std::vector<T> project(std::vector<T>& volume) {
    std::vector<T> out(static_cast<size_t>(pixels()), T(-7));
    fieldfuse::project_forward(
        TensorRef::contiguous(volume.data(), dtype_of<T>(), {}, {depth, height, width}),
        rotations_ref(), shifts_ref(),
        TensorRef::contiguous(out.data(), dtype_of<T>(), {}, {n, det_height, det_width}));
    return out;
  }

  std::vector<T> backproject(std::vector<T>& projections) {
    std::vector<T> out(static_cast<size_t>(voxels()), T(-7));
    fieldfuse::backproject_forward(
        TensorRef::contiguous(projections.data(), dtype_of<T>(), {}, {n, det_height, det_width}),
        rotations_ref(), shifts_ref(),
        TensorRef::contiguous(out.data(), dtype_of<T>(), {}, {depth, height, width}));
    return out;
  }
};

template <class T>
std::vector<T> random_values(std::mt19937& gen, int64_t count) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<T> v(static_cast<size_t>(count));
  for (T& x : v) x = static_cast<T>(uniform(gen));
  return v;
}

/// <a, b> in float64, and Σ|a·b| (the scale of its rounding).
template <class T>
void dot(const std::vector<T>& a, const std::vector<T>& b, double& value, double& scale) {
  value = scale = 0.0;
  for (size_t e = 0; e < a.size(); ++e) {
    value += static_cast<double>(a[e]) * static_cast<double>(b[e]);
    scale += std::fabs(static_cast<double>(a[e]) * static_cast<double>(b[e]));
  }
}

template <class T>
void check_adjoint(double rtol) {
  std::mt19937 gen(kSeed);
  // Non-cubic volumes, detectors of other sizes, 1 to 5 general rotations with shifts.
  const int64_t shapes[][5] = {
      {7, 11, 5, 9, 13}, {5, 6, 8, 6, 5}, {12, 3, 9, 16, 11}, {4, 9, 10, 3, 20}, {9, 9, 9, 9, 9}};
  for (int64_t n = 1; n <= 5; ++n) {
    const int64_t* s = shapes[n - 1];
    Problem<T> p(gen, n, s[0], s[1], s[2], s[3], s[4]);
    std::vector<T> x = random_values<T>(gen, p.voxels());
    std::vector<T> y = random_values<T>(gen, p.pixels());
    const std::vector<T> ax = p.project(x);
    const std::vector<T> aty = p.backproject(y);
    double left, left_scale, right, right_scale;
    dot(ax, y, left, left_scale);
    dot(x, aty, right, right_scale);
    ASSERT_GT(left_scale, 0.0) << "no ray met the volume";
    EXPECT_NEAR(left, right, rtol * (left_scale + right_scale)) << "n = " << n;
  }
}

TEST(Project, AdjointIdentityFloat64) { check_adjoint<double>(1e-13); }

// float32 sums of a few hundred terms per ray or voxel: a few ulps of the terms' magnitudes.
TEST(Project, AdjointIdentityFloat32) { check_adjoint<float>(2e-6); }

/// A column by column: project each unit volume; A^T row by row: back project each unit stack.
/// The back projection gathers with the forward's own weights, so the two are equal exactly.
template <class T>
void check_transpose(Problem<T>& p) {
  const int64_t voxels = p.voxels(), pixels = p.pixels();
  std::vector<T> a(static_cast<size_t>(voxels * pixels)), at(a.size());
  for (int64_t v = 0; v < voxels; ++v) {
    std::vector<T> unit(static_cast<size_t>(voxels), T(0));
    unit[static_cast<size_t>(v)] = T(1);
    const std::vector<T> column = p.project(unit);
    for (int64_t q = 0; q < pixels; ++q) a[q * voxels + v] = column[q];
  }
  for (int64_t q = 0; q < pixels; ++q) {
    std::vector<T> unit(static_cast<size_t>(pixels), T(0));
    unit[static_cast<size_t>(q)] = T(1);
    const std::vector<T> row = p.backproject(unit);
    for (int64_t v = 0; v < voxels; ++v) at[q * voxels + v] = row[v];
  }
  int64_t nonzero = 0;
  for (size_t e = 0; e < a.size(); ++e) {
    ASSERT_EQ(a[e], at[e]) << "pixel " << e / voxels << ", voxel " << e % voxels;
    nonzero += a[e] != T(0);
  }
  EXPECT_GT(nonzero, 0);
}

template <class T>
void check_transposes() {
  std::mt19937 gen(kSeed + 1);
  for (int trial = 0; trial < 4; ++trial) {
    Problem<T> p(gen, 2, 3 + trial, 4, 5 - trial / 2, 4 + trial % 2, 5, 0.6);
    p.with_shifts = trial % 2 == 0;
    check_transpose(p);
  }
  // Pixel-aligned rays (R = I, a detector of the volume's size): every index is an integer, on
  // the boundary between two voxels, where the zero-weight corner rule decides.
  Problem<T> aligned(gen, 1, 3, 4, 5, 4, 5);
  aligned.rotations = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  aligned.with_shifts = false;
  check_transpose(aligned);
  // Exactly 45° about x: |d_y| = |d_z| up to rounding, the dominant-axis tie.
  const T c = static_cast<T>(std::sqrt(0.5));
  aligned.rotations = {1, 0, 0, 0, c, -c, 0, c, c};
  check_transpose(aligned);
  // Tilts about x on an aligned detector, without and with shifts: the corner runs.
  const T cos = static_cast<T>(std::cos(0.4)), sin = static_cast<T>(std::sin(0.4));
  aligned.rotations = {1, 0, 0, 0, cos, -sin, 0, sin, cos};
  check_transpose(aligned);
  aligned.with_shifts = true;
  check_transpose(aligned);
}

TEST(Project, BackProjectionIsTheTransposeFloat64) { check_transposes<double>(); }
TEST(Project, BackProjectionIsTheTransposeFloat32) { check_transposes<float>(); }

TEST(Project, IdentityPoseSumsAlongZ) {
  // R = I and an H×W detector: the rays run through the voxel centres, P = Σ_k v·(2/D).
  std::mt19937 gen(kSeed + 2);
  Problem<double> p(gen, 1, 6, 4, 3, 4, 3);
  p.rotations = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  p.with_shifts = false;
  std::vector<double> x = random_values<double>(gen, p.voxels());
  const std::vector<double> ax = p.project(x);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < 6; ++k) sum += x[(k * 4 + i) * 3 + j];
      EXPECT_NEAR(ax[i * 3 + j], sum * 2.0 / 6.0, 1e-14);
    }
  }
}

TEST(Project, IndexMapsFollowTheRay) {
  // The affine index maps against the ray evaluated directly: p(t) = u'·e_u + v'·e_v + t·d at the
  // centre plane of each slice, converted to index units.
  std::mt19937 gen(kSeed + 3);
  namespace pm = fieldfuse::detail::project;
  const int64_t sizes[3] = {7, 11, 5};
  const int64_t hd = 9, wd = 13;
  for (int trial = 0; trial < 20; ++trial) {
    pm::Pose pose;
    const std::vector<double> r = random_rotation(gen);
    for (int e = 0; e < 9; ++e) pose.r[e] = r[e];
    pose.shift_u = 0.1 * trial - 1.0;
    pose.shift_v = 0.3 - 0.05 * trial;
    const pm::Geometry<double> g = pm::make_geometry<double>(pose, sizes, hd, wd);
    ASSERT_TRUE(g.valid);
    const int a = g.axis;
    int b, c;
    pm::in_slice_axes(a, b, c);
    const double d[3] = {r[2], r[5], r[8]};  // world x, y, z of R·e_z
    for (int q = 0; q < 3; ++q) EXPECT_LE(std::fabs(d[2 - q]), std::fabs(d[2 - a]));
    EXPECT_NEAR(g.delta, (2.0 / sizes[a]) / std::fabs(d[2 - a]), 1e-15);
    for (int64_t i : {int64_t{0}, int64_t{4}, hd - 1}) {
      for (int64_t j : {int64_t{0}, int64_t{7}, wd - 1}) {
        const double u = -1.0 + (2.0 * j + 1.0) / wd - pose.shift_u;
        const double v = -1.0 + (2.0 * i + 1.0) / hd - pose.shift_v;
        for (int64_t k = 0; k < sizes[a]; ++k) {
          double origin[3];
          for (int x = 0; x < 3; ++x) origin[x] = u * r[x * 3 + 0] + v * r[x * 3 + 1];
          const double plane = -1.0 + (2.0 * k + 1.0) / sizes[a];
          const double t = (plane - origin[2 - a]) / d[2 - a];
          const auto index = [&](int q) {
            const double world = origin[2 - q] + t * d[2 - q];
            return (world + 1.0) * sizes[q] / 2.0 - 0.5;
          };
          const double di = static_cast<double>(i), dj = static_cast<double>(j);
          const double dk = static_cast<double>(k);
          EXPECT_NEAR(pm::sample_index(g.b, dj, di, dk), index(b), 1e-12);
          EXPECT_NEAR(pm::sample_index(g.c, dj, di, dk), index(c), 1e-12);
        }
      }
    }
  }
}

/// The run that a scan of every pixel finds: those whose sample (the forward's full index chain)
/// takes voxel v as a corner, by axis_taps, with its weight.
template <class T>
void expect_run(const fieldfuse::detail::project::CornerRun<T, int64_t>& run, int64_t pixels, T v,
                int64_t size, const std::function<T(T)>& index_of, const char* what) {
  namespace pm = fieldfuse::detail::project;
  int64_t found = 0;
  for (int64_t p = 0; p < pixels; ++p) {
    const pm::AxisTaps<T, int64_t> taps = pm::axis_taps(index_of(static_cast<T>(p)), size);
    const int64_t voxel = static_cast<int64_t>(v);
    T weight = T(0);
    if (taps.lower && taps.i0 == voxel) {
      weight = taps.w0;
    } else if (taps.upper && taps.i0 + 1 == voxel) {
      weight = taps.w1;
    } else {
      continue;
    }
    ASSERT_LT(found, run.count) << what << " pixel " << p;
    EXPECT_EQ(run.first + found, p) << what;
    EXPECT_EQ(run.w[found], weight) << what << " pixel " << p;
    ++found;
  }
  EXPECT_EQ(found, run.count) << what;
}

template <class T>
void check_corner_runs() {
  // Tilts about x (Note [tilt path]) with shifts, on aligned, coarser and 1.2 times finer
  // detectors: every voxel's row and column runs against a scan of the whole detector.
  namespace pm = fieldfuse::detail::project;
  const int64_t sizes[3] = {9, 9, 9};
  const int64_t detectors[][2] = {{9, 9}, {7, 6}, {10, 10}};
  int runs = 0;
  for (const auto& detector : detectors) {
    const int64_t hd = detector[0], wd = detector[1];
    for (double angle : {0.0, 0.3, -0.7, 0.7853981633974483, 1.2, -1.5}) {
      for (double shift : {0.0, 0.137}) {
        pm::Pose pose{
            {1, 0, 0, 0, std::cos(angle), -std::sin(angle), 0, std::sin(angle), std::cos(angle)},
            shift,
            -shift};
        const pm::Geometry<T> g = pm::make_geometry<T>(pose, sizes, hd, wd);
        ASSERT_TRUE(g.valid && g.tilt) << angle;
        if (!g.runs) continue;  // the 1.2 times finer detector beyond 45° on this cube
        ++runs;
        int b, c;
        pm::in_slice_axes(g.axis, b, c);
        ASSERT_EQ(c, 2);
        for (int64_t k = 0; k < sizes[g.axis]; ++k) {
          for (int64_t ib = 0; ib < sizes[b]; ++ib) {
            const T tk = static_cast<T>(k), tb = static_cast<T>(ib);
            expect_run<T>(
                pm::row_run<T, int64_t>(g, tk, tb, hd), hd, tb, sizes[b],
                [&](T i) { return pm::sample_index(g.b, T(3), i, tk); }, "row");
          }
        }
        for (int64_t ic = 0; ic < sizes[c]; ++ic) {
          const T tc = static_cast<T>(ic);
          expect_run<T>(
              pm::column_run<T, int64_t>(g, tc, wd), wd, tc, sizes[c],
              [&](T j) { return pm::sample_index(g.c, j, T(5), T(2)); }, "column");
        }
      }
    }
  }
  EXPECT_GE(runs, 30);
  // A detector 2.5 times finer than the volume, and a general pose, take the general loop.
  pm::Pose tilt{{1, 0, 0, 0, 1, 0, 0, 0, 1}, 0.0, 0.0};
  EXPECT_FALSE((pm::make_geometry<T>(tilt, sizes, 23, 23).runs));
  pm::Pose general{{0.36, 0.48, -0.8, -0.8, 0.6, 0.0, 0.48, 0.64, 0.6}, 0.0, 0.0};
  EXPECT_FALSE((pm::make_geometry<T>(general, sizes, 9, 9).tilt));
}

TEST(Project, CornerRunsMatchAScanFloat64) { check_corner_runs<double>(); }
TEST(Project, CornerRunsMatchAScanFloat32) { check_corner_runs<float>(); }

TEST(Project, LinearWeightsAndCornerRule) {
  namespace pm = fieldfuse::detail::project;
  const pm::LinearWeights<double> w = pm::linear_weights(2.25);
  EXPECT_EQ(w.i0, 2.0);
  EXPECT_EQ(w.w0, 0.75);
  EXPECT_EQ(w.w1, 0.25);
  // An integer index takes its lower corner only; outside (−1, n) nothing; NaN nothing.
  pm::AxisTaps<double, int64_t> t = pm::axis_taps(3.0, int64_t{5});
  EXPECT_TRUE(t.lower && !t.upper);
  EXPECT_EQ(t.i0, 3);
  t = pm::axis_taps(-0.5, int64_t{5});
  EXPECT_TRUE(!t.lower && t.upper);
  EXPECT_EQ(t.w1, 0.5);
  t = pm::axis_taps(4.5, int64_t{5});
  EXPECT_TRUE(t.lower && !t.upper);
  for (double outside : {-1.0, 5.0, -3.0, 1e30, std::nan("")}) {
    t = pm::axis_taps(outside, int64_t{5});
    EXPECT_TRUE(!t.lower && !t.upper) << outside;
  }
  // interior_taps gives axis_taps' taps everywhere in [0, n − 1], the ends included.
  for (float index : {0.0f, 0.5f, 1.0f, std::nextafter(3.0f, 0.0f), 3.0f, 2.75f}) {
    const pm::AxisTaps<float, int64_t> want = pm::axis_taps(index, int64_t{4});
    const pm::AxisTaps<float, int64_t> got = pm::interior_taps<float, int64_t>(index);
    EXPECT_TRUE(got.i0 == want.i0 && got.w0 == want.w0 && got.w1 == want.w1 &&
                got.lower == want.lower && got.upper == want.upper)
        << index;
  }
  // The back projection's test agrees with the forward's corner rule on every index near a voxel,
  // integers and the floats just beside them included.
  for (int64_t n : {int64_t{1}, int64_t{4}}) {
    for (int64_t v = 0; v < n; ++v) {
      for (double base : {v - 1.0, v - 0.5, v + 0.0, v + 0.25, v + 1.0}) {
        for (float index :
             {std::nextafter(static_cast<float>(base), -10.0f), static_cast<float>(base),
              std::nextafter(static_cast<float>(base), 10.0f)}) {
          if (!(index > v - 1.0f && index < v + 1.0f)) continue;
          const pm::AxisTaps<float, int64_t> taps = pm::axis_taps(index, n);
          float want = 0.0f, got = -1.0f;
          const bool corner = (taps.lower && taps.i0 == v && ((want = taps.w0), true)) ||
                              (taps.upper && taps.i0 + 1 == v && ((want = taps.w1), true));
          EXPECT_EQ(pm::near_corner_weight(index, static_cast<float>(v), got), corner) << index;
          if (corner) EXPECT_EQ(got, want) << index;
        }
      }
    }
  }
}

TEST(Project, EmptySizes) {
  std::mt19937 gen(kSeed + 4);
  // A volume with a zero dim projects to zeros; a zero-projection stack back projects to zeros.
  Problem<double> empty_volume(gen, 2, 0, 4, 3, 2, 2);
  std::vector<double> nothing;
  const std::vector<double> zeros = empty_volume.project(nothing);
  for (double v : zeros) EXPECT_EQ(v, 0.0);
  Problem<double> no_pixels(gen, 2, 3, 4, 3, 0, 5);
  const std::vector<double> volume = no_pixels.backproject(nothing);
  for (double v : volume) EXPECT_EQ(v, 0.0);
  Problem<double> no_projections(gen, 0, 3, 4, 3, 2, 2);
  for (double v : no_projections.backproject(nothing)) EXPECT_EQ(v, 0.0);
}

TEST(Project, NonFinitePosePoisonsItsProjection) {
  std::mt19937 gen(kSeed + 5);
  Problem<double> p(gen, 2, 3, 4, 5, 4, 4);
  p.rotations[9 + 4] = std::nan("");
  std::vector<double> x = random_values<double>(gen, p.voxels());
  const std::vector<double> ax = p.project(x);
  for (int64_t q = 0; q < 16; ++q) EXPECT_TRUE(std::isfinite(ax[q]));
  for (int64_t q = 16; q < 32; ++q) EXPECT_TRUE(std::isnan(ax[q]));
}

TEST(Project, Validation) {
  std::vector<double> volume(60), rotations(18), shifts(4), projections(2 * 16), wide(80);
  std::vector<float> single(60);
  std::vector<int64_t> integers(60);
  const auto ref = [](auto& storage, fieldfuse::DType dtype, std::initializer_list<int64_t> s) {
    return TensorRef::contiguous(storage.data(), dtype, {}, s);
  };
  const auto f64 = fieldfuse::DType::Float64;
  const TensorRef vol = ref(volume, f64, {3, 4, 5}), rot = ref(rotations, f64, {2, 3, 3}),
                  shi = ref(shifts, f64, {2, 2}), pro = ref(projections, f64, {2, 4, 4});
  const auto project = [&](TensorRef v, TensorRef r, TensorRef s, TensorRef p) {
    return [=] { fieldfuse::project_forward(v, r, s, p); };
  };
  const auto backproject = [&](TensorRef p, TensorRef r, TensorRef s, TensorRef v) {
    return [=] { fieldfuse::backproject_forward(p, r, s, v); };
  };
  EXPECT_NO_THROW(project(vol, rot, shi, pro)());
  EXPECT_NO_THROW(backproject(pro, rot, TensorRef{}, vol)());
  expect_error(project(ref(volume, f64, {60}), rot, shi, pro), ErrorKind::Value,
               {"project(): ", "volume", "[D, H, W]", "[60]"});
  expect_error(project(ref(integers, fieldfuse::DType::Int64, {3, 4, 5}), rot, shi, pro),
               ErrorKind::Type, {"project(): ", "volume", "int64"});
  expect_error(project(vol, ref(rotations, f64, {3, 3, 2}), shi, pro), ErrorKind::Value,
               {"project(): ", "rotations", "[n, 3, 3]", "[3, 3, 2]"});
  expect_error(project(vol, rot, ref(shifts, f64, {1, 2}), pro), ErrorKind::Value,
               {"project(): ", "shifts", "[2, 2]", "[1, 2]"});
  expect_error(project(vol, rot, shi, ref(projections, f64, {1, 4, 8})), ErrorKind::Value,
               {"project(): ", "projections", "[2, Hd, Wd]", "[1, 4, 8]"});
  expect_error(project(vol, rot, shi, ref(single, fieldfuse::DType::Float32, {2, 2, 3})),
               ErrorKind::Type, {"project(): ", "projections", "float64", "float32"});
  expect_error(project(vol, rot, shi, ref(volume, f64, {2, 3, 5})), ErrorKind::Value,
               {"project(): ", "projections", "overlap", "volume"});
  expect_error(backproject(pro, ref(rotations, f64, {1, 3, 3}), TensorRef{}, vol), ErrorKind::Value,
               {"backproject(): ", "rotations", "[2, 3, 3]", "[1, 3, 3]"});
  expect_error(backproject(pro, rot, TensorRef{}, ref(wide, f64, {80})), ErrorKind::Value,
               {"backproject(): ", "volume", "[D, H, W]", "[80]"});
  expect_error(
      backproject(ref(single, fieldfuse::DType::Float32, {2, 5, 6}), rot, TensorRef{}, vol),
      ErrorKind::Type, {"backproject(): ", "rotations", "float32", "float64"});
}

}  // namespace
}  // namespace fftest
