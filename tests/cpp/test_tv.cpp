// SPDX-License-Identifier: Apache-2.0
// Numerical tests of the tv family's CPU path against naive loops and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "naive_tv.h"
#include "tv_test_util.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace fftest {
namespace {

constexpr uint32_t kSeed = 20240521u;  // fixed, so a failure reproduces

/// One numeric case: an op of the table, a dtype and a shape.
struct Case {
  std::string op;
  DType dtype;
  Shape shape;
};

/// "sq float64 [33, 57, 18]", so a failing case prints readably.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.op << " " << fieldfuse::dtype_name(c.dtype) << " [";
  for (size_t i = 0; i < c.shape.size(); ++i) *os << (i ? ", " : "") << c.shape[i];
  *os << "]";
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.op + (info.param.dtype == DType::Float64 ? "_f64" : "_f32");
  for (size_t i = 0; i < info.param.shape.size(); ++i)
    name += (i ? "x" : "_") + std::to_string(info.param.shape[i]);
  return name;
}

/// The spec's shapes plus small odd ones; size-1 axes only for ops that accept them.
std::vector<Case> cases(std::vector<DType> dtypes) {
  const std::vector<Shape> shapes = {{33, 57, 18}, {3, 32, 32, 32}, {2, 3, 16, 16, 16},
                                     {3, 5, 7},    {2, 2, 2},       {7, 3, 5, 2}};
  const std::vector<Shape> degenerate = {{1, 6, 7}, {5, 1, 7}, {5, 6, 1}, {2, 1, 1, 9}, {1, 1, 1}};
  std::vector<Case> out;
  for (const TvOp& op : all_ops())
    for (DType dt : dtypes) {
      for (const Shape& s : shapes) out.push_back({op.id, dt, s});
      if (op.size1_axes_ok)
        for (const Shape& s : degenerate) out.push_back({op.id, dt, s});
    }
  return out;
}

class TvNumeric : public testing::TestWithParam<Case> {
 protected:
  const TvOp& op() const { return op_by_id(GetParam().op); }
  const Shape& shape() const { return GetParam().shape; }
  DType dtype() const { return GetParam().dtype; }
  double rtol() const { return rtol_for(dtype()); }
  template <typename T>
  std::vector<double> values() const {
    return random_values<T>(naive::numel(shape()), kSeed);
  }
};

TEST_P(TvNumeric, ForwardMatchesNaive) {
  dispatch(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<double> v = values<T>();
    const HostTensor<T> in = make_tensor<T>(shape(), v);
    std::vector<double> want, scale;
    for (const naive::Sum& s : op().naive_forward(v, shape())) {
      want.push_back(s.value);
      scale.push_back(s.abs);
    }
    expect_close(run_forward<T>(op(), in.ref), want, scale, rtol(), "out");
  });
}

TEST_P(TvNumeric, BackwardMatchesNaive) {
  dispatch(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<double> v = values<T>();
    const HostTensor<T> in = make_tensor<T>(shape(), v);
    HostTensor<T> grad = make_tensor<T>(shape());
    run_backward<T>(op(), in.ref, upstream(op()), grad.ref);
    const naive::Grad want = op().naive_backward(v, shape(), upstream(op()));
    expect_close(grad.logical(), want.value, want.abs, rtol(), op().grad_name());
  });
}

// The gradient is linear in the upstream gradient: g = 2.5 gives 2.5× the g = 1 gradient, and
// tv_l1_3d's three upstream gradients each scale only their own axis.
TEST_P(TvNumeric, UpstreamGradientScales) {
  dispatch(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<double> v = values<T>();
    const HostTensor<T> in = make_tensor<T>(shape(), v);
    const std::vector<double> g = upstream(op());
    std::vector<double> want(v.size(), 0.0);
    for (size_t a = 0; a < g.size(); ++a) {
      std::vector<double> unit(g.size(), 0.0);
      unit[a] = 1.0;
      HostTensor<T> grad = make_tensor<T>(shape());
      run_backward<T>(op(), in.ref, unit, grad.ref);
      const std::vector<double> ga = grad.logical();
      for (size_t e = 0; e < v.size(); ++e) want[e] += g[a] * ga[e];
    }
    HostTensor<T> grad = make_tensor<T>(shape());
    run_backward<T>(op(), in.ref, g, grad.ref);
    std::vector<double> abs_g;
    for (double x : g) abs_g.push_back(std::fabs(x));
    const naive::Grad scale = op().naive_backward(v, shape(), abs_g);
    expect_close(grad.logical(), want, scale.abs, rtol(), "grad(g) vs linear combination");
  });
}

// Strided views (transposed and padded) of the input, of grad_out and of the gradient give the
// contiguous results bit for bit, and nothing outside the gradient's view is written.
TEST_P(TvNumeric, NonContiguousEqualsContiguous) {
  dispatch(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::vector<double> v = values<T>();
    const int nd = static_cast<int>(shape().size());
    Layout transposed{{}, 1}, rotated{{}, 2};
    for (int d = nd - 1; d >= 0; --d) transposed.order.push_back(d);
    for (int d = 1; d <= nd; ++d) rotated.order.push_back(d % nd);

    const HostTensor<T> contig = make_tensor<T>(shape(), v);
    const HostTensor<T> strided = make_tensor<T>(shape(), v, transposed);
    EXPECT_EQ(run_forward<T>(op(), strided.ref), run_forward<T>(op(), contig.ref));

    const T sentinel = T(-7.25);
    HostTensor<T> grad_c = make_tensor<T>(shape());
    HostTensor<T> grad_s = make_tensor<T>(shape(), rotated, sentinel);
    run_backward<T>(op(), contig.ref, upstream(op()), grad_c.ref);
    run_backward<T>(op(), strided.ref, upstream(op()), grad_s.ref, Layout{{}, 2});
    EXPECT_EQ(grad_s.logical(), grad_c.logical());
    EXPECT_TRUE(grad_s.padding_untouched(sentinel)) << "wrote outside the grad view";
  });
}

// Outputs are written, never accumulated into: whatever they held before (NaN, an earlier
// result, garbage), two calls give identical bits.
TEST_P(TvNumeric, OutputsOverwrittenAndDeterministic) {
  dispatch(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const HostTensor<T> in = make_tensor<T>(shape(), values<T>());
    const std::vector<double> first = run_forward<T>(op(), in.ref);
    EXPECT_TRUE(same_bits(run_forward<T>(op(), in.ref, T(1e3)), first));

    HostTensor<T> grad = make_tensor<T>(shape());
    run_backward<T>(op(), in.ref, upstream(op()), grad.ref);
    const std::vector<double> g1 = grad.logical();
    run_backward<T>(op(), in.ref, upstream(op()), grad.ref);
    EXPECT_TRUE(same_bits(grad.logical(), g1)) << "second backward accumulated";
  });
}

INSTANTIATE_TEST_SUITE_P(Tv, TvNumeric, testing::ValuesIn(cases({DType::Float64, DType::Float32})),
                         case_name);

#if defined(_OPENMP)
// Partial sums are combined in an order fixed by the shape: the thread count changes no bit of any
// output or gradient (float64, where a reordered sum would show in the last bits).
TEST(TvDeterminism, ThreadCountDoesNotChangeBits) {
  const Shape shape = {3, 32, 32, 32};
  const HostTensor<double> in =
      make_tensor<double>(shape, random_values<double>(naive::numel(shape), kSeed));
  auto run_all = [&] {
    std::vector<double> bits;
    for (const TvOp& op : all_ops()) {
      const std::vector<double> out = run_forward<double>(op, in.ref);
      HostTensor<double> grad = make_tensor<double>(shape);
      run_backward<double>(op, in.ref, upstream(op), grad.ref);
      const std::vector<double> g = grad.logical();
      bits.insert(bits.end(), out.begin(), out.end());
      bits.insert(bits.end(), g.begin(), g.end());
    }
    return bits;
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<double> one = run_all();
  omp_set_num_threads(5);
  const std::vector<double> five = run_all();
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bits(one, five));
}
#endif

// ---- gradient vs central finite differences of the forward (float64) --------------------------

class TvFiniteDiff : public TvNumeric {};

/// Every voxel of a small array; else the first, the last and a fixed random sample.
std::vector<int64_t> voxels_to_check(int64_t n) {
  constexpr int64_t kAllBelow = 512, kSample = 48;
  std::vector<int64_t> out;
  if (n <= kAllBelow) {
    for (int64_t e = 0; e < n; ++e) out.push_back(e);
    return out;
  }
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  out = {0, n - 1};
  for (int i = 0; i < kSample; ++i) out.push_back(pick(rng));
  return out;
}

/// Smallest |Δ| between voxel e and its neighbours on the differenced axes: a piecewise-linear
/// functional is linear on (v − gap, v + gap).
double nearest_kink(const std::vector<double>& v, const Shape& shape, int num_axes, int64_t e) {
  const int nd = static_cast<int>(shape.size());
  double gap = std::numeric_limits<double>::infinity();
  for (int dim = nd - num_axes; dim < nd; ++dim) {
    const naive::AxisPos p = naive::axis_pos(shape, dim, e);
    if (p.coord > 0) gap = std::min(gap, std::fabs(v[e] - v[e - p.stride]));
    if (p.coord + 1 < p.size) gap = std::min(gap, std::fabs(v[e + p.stride] - v[e]));
  }
  return gap;
}

/// Checks op's float64 gradient at `v` against central differences of its forward, on every voxel
/// of a small array or a sample of a large one.
void check_finite_differences(const TvOp& op, const Shape& shape, const std::vector<double>& v) {
  HostTensor<double> in = make_tensor<double>(shape, v);
  const std::vector<double> g = upstream(op);
  HostTensor<double> grad = make_tensor<double>(shape);
  run_backward<double>(op, in.ref, g, grad.ref);
  const std::vector<double> analytic = grad.logical();

  // F = Σ_a g_a·out_a, the scalar whose gradient backward returns.
  auto objective = [&] {
    const std::vector<double> out = run_forward<double>(op, in.ref);
    double f = 0.0;
    for (size_t a = 0; a < g.size(); ++a) f += g[a] * out[a];
    return f;
  };
  double f_abs = 0.0;  // scale of F's rounding error
  const std::vector<naive::Sum> terms = op.naive_forward(v, shape);
  for (size_t a = 0; a < g.size(); ++a) f_abs += std::fabs(g[a]) * terms[a].abs;
  const naive::Grad scale = op.naive_backward(v, shape, g);

  for (int64_t e : voxels_to_check(naive::numel(shape))) {
    double h = op.fd_step;
    if (op.piecewise_linear) h = std::min(h, 0.5 * nearest_kink(v, shape, op.num_axes, e));
    if (!(h > 1e-6)) continue;  // a near-tie at this voxel: no step stays on one linear piece
    in.storage[e] = v[e] + h;
    const double f_plus = objective();
    in.storage[e] = v[e] - h;
    const double f_minus = objective();
    in.storage[e] = v[e];
    const double fd = (f_plus - f_minus) / (2.0 * h);
    // Truncation (op-specific, see fd_rtol) plus the rounding of two forwards of magnitude
    // f_abs divided by 2h; 64 ulps covers the fixed-order float64 sums.
    const double tol =
        op.fd_rtol * scale.abs[e] + 64.0 * std::numeric_limits<double>::epsilon() * f_abs / h;
    EXPECT_NEAR(analytic[e], fd, tol) << op.id << " voxel " << e << ", step " << h;
  }
}

TEST_P(TvFiniteDiff, BackwardMatchesCentralDifferences) {
  check_finite_differences(op(), shape(), values<double>());
}

INSTANTIATE_TEST_SUITE_P(Tv, TvFiniteDiff, testing::ValuesIn(cases({DType::Float64})), case_name);

// ---- size-1 and empty axes ----------------------------------------------------------------------

template <typename T>
class TvEdge : public testing::Test {};
using Scalars = testing::Types<float, double>;
TYPED_TEST_SUITE(TvEdge, Scalars);

// Moving the size-1 axis elsewhere keeps the same differences: sq is unchanged, and l1's per-axis
// sums move with their axes while the size-1 axis's sum is exactly 0.
TYPED_TEST(TvEdge, SizeOneAxisContributesNothing) {
  using T = TypeParam;
  const double rtol = rtol_for(dtype_of<T>());
  const std::vector<double> v = random_values<T>(30, kSeed);
  const std::vector<Shape> shapes = {{1, 5, 6}, {5, 1, 6}, {5, 6, 1}};
  const std::vector<double> sq0 = run_forward<T>(make_sq_op(), make_tensor<T>(shapes[0], v).ref);
  const std::vector<naive::Sum> l1_terms = naive::l1_forward(v, {1, 5, 6});
  for (int axis = 0; axis < 3; ++axis) {
    const HostTensor<T> in = make_tensor<T>(shapes[axis], v);
    const std::vector<double> sq = run_forward<T>(make_sq_op(), in.ref);
    EXPECT_NEAR(sq[0], sq0[0], rtol * sq0[0]) << "size-1 axis " << axis;
    const std::vector<double> l1 = run_forward<T>(make_l1_op(), in.ref);
    EXPECT_EQ(l1[axis], 0.0) << "size-1 axis " << axis;
    // The two remaining sums, in order, are those of the (5, 6) plane.
    int other = 1;
    for (int a = 0; a < 3; ++a) {
      if (a == axis) continue;
      EXPECT_NEAR(l1[a], l1_terms[other].value, rtol * l1_terms[other].abs) << "axis " << a;
      ++other;
    }
  }
}

// Any of D, H, W < 2: iso gives exactly 0 and an exactly-zero gradient.
TYPED_TEST(TvEdge, IsoDegenerateIsZero) {
  using T = TypeParam;
  for (const Shape& shape : std::vector<Shape>{{1, 5, 6}, {4, 1, 6}, {4, 5, 1}, {3, 1, 1, 1}}) {
    const HostTensor<T> in = make_tensor<T>(shape, random_values<T>(naive::numel(shape), kSeed));
    const TvOp iso = make_iso_op(1e-6, "iso");
    EXPECT_EQ(run_forward<T>(iso, in.ref), std::vector<double>{0.0});
    HostTensor<T> grad = make_tensor<T>(shape);
    run_backward<T>(iso, in.ref, {2.5}, grad.ref);
    EXPECT_EQ(grad.logical(), std::vector<double>(grad.logical().size(), 0.0));
  }
}

// An empty leading dim (B = 0) gives 0 for sq, iso and l1, and backward writes nothing; empty
// tensors may have null data.
TYPED_TEST(TvEdge, EmptyLeadingDimGivesZero) {
  using T = TypeParam;
  for (const TvOp& op : {make_sq_op(), make_iso_op(1e-8, "iso"), make_l1_op()}) {
    HostTensor<T> in = make_tensor<T>({0, 4, 5, 6});
    in.ref.data = nullptr;
    EXPECT_EQ(run_forward<T>(op, in.ref), std::vector<double>(op.num_outputs, 0.0)) << op.api;
    HostTensor<T> grad = make_tensor<T>({0, 4, 5, 6});
    grad.ref.data = nullptr;
    EXPECT_NO_THROW(run_backward<T>(op, in.ref, upstream(op), grad.ref)) << op.api;
  }
}

// ---- sign(0) = 0
// ---------------------------------------------------------------------------------

// A constant volume has exactly zero gradient for every functional; sq is 0 and iso is sqrt(eps).
TYPED_TEST(TvEdge, ConstantVolumeHasZeroGradient) {
  using T = TypeParam;
  const Shape shape = {3, 4, 5};
  const HostTensor<T> in = make_tensor<T>(shape, std::vector<double>(60, 0.75));
  for (const TvOp& op : all_ops()) {
    HostTensor<T> grad = make_tensor<T>(shape);
    run_backward<T>(op, in.ref, upstream(op), grad.ref);
    EXPECT_EQ(grad.logical(), std::vector<double>(60, 0.0)) << op.id;
  }
  EXPECT_EQ(run_forward<T>(make_sq_op(), in.ref), std::vector<double>{0.0});
  EXPECT_EQ(run_forward<T>(make_l1_op(), in.ref), std::vector<double>(3, 0.0));
  const double iso = run_forward<T>(make_iso_op(1e-6, "iso"), in.ref)[0];
  EXPECT_NEAR(iso, 1e-3, rtol_for(dtype_of<T>()) * 1e-3);
}

// Along W the values 1, 1, 3 have differences 0 and 2: the tie contributes sign(0) = 0.
TYPED_TEST(TvEdge, TieHasZeroSubgradient) {
  using T = TypeParam;
  const HostTensor<T> vol = make_tensor<T>({1, 1, 3}, {1.0, 1.0, 3.0});
  HostTensor<T> grad = make_tensor<T>({1, 1, 3});
  run_backward<T>(make_l1_op(), vol.ref, {0.0, 0.0, 1.0}, grad.ref);
  EXPECT_EQ(grad.logical(), (std::vector<double>{0.0, -1.0, 1.0}));

  // Weighted, (y, x) = (1, 3) with weights (0, 1): L = mean(0, 2) = 1, gradient ±1/2 per end.
  const HostTensor<T> arr = make_tensor<T>({1, 3}, {1.0, 1.0, 3.0});
  const TvOp weighted = make_weighted_op({0.0, 1.0}, "wl1");
  EXPECT_EQ(run_forward<T>(weighted, arr.ref), std::vector<double>{1.0});
  HostTensor<T> grad_arr = make_tensor<T>({1, 3});
  run_backward<T>(weighted, arr.ref, {1.0}, grad_arr.ref);
  EXPECT_EQ(grad_arr.logical(), (std::vector<double>{0.0, -0.5, 0.5}));
}

// Integer volumes drawn from {0, 1, 2} are full of ties; every sum involved is exact, so l1's
// outputs and gradient must equal the oracle (which uses sign(0) = 0) exactly.
TYPED_TEST(TvEdge, ManyTiesMatchNaiveExactly) {
  using T = TypeParam;
  const Shape shape = {2, 5, 4, 6};
  std::vector<double> v = random_values<T>(naive::numel(shape), kSeed, 0.0, 3.0);
  for (double& x : v) x = std::floor(x);
  const HostTensor<T> in = make_tensor<T>(shape, v);
  std::vector<double> want;
  for (const naive::Sum& s : naive::l1_forward(v, shape)) want.push_back(s.value);
  EXPECT_EQ(run_forward<T>(make_l1_op(), in.ref), want);
  const std::vector<double> g = {1.0, -0.5, 2.0};
  HostTensor<T> grad = make_tensor<T>(shape);
  run_backward<T>(make_l1_op(), in.ref, g, grad.ref);
  EXPECT_EQ(grad.logical(), naive::l1_backward(v, shape, g).value);
}

// ---- tv_weighted_l1: the spec's ptychography cases ----------------------------------------------

struct WeightedCase {
  double w_z, w_xy;
  Shape shape;
};

void PrintTo(const WeightedCase& c, std::ostream* os) {
  *os << "w_z " << c.w_z << ", w_xy " << c.w_xy << ", " << c.shape.size() << "-D";
}

class TvWeightedSpec : public testing::TestWithParam<WeightedCase> {
 protected:
  /// (w_z, w_xy, w_xy) on a 3-D array, (w_xy, w_xy) on a 2-D one.
  TvOp op() const {
    const WeightedCase& c = GetParam();
    if (c.shape.size() == 3) return make_weighted_op({c.w_z, c.w_xy, c.w_xy}, "wl1");
    return make_weighted_op({c.w_xy, c.w_xy}, "wl1");
  }
};

TEST_P(TvWeightedSpec, MatchesPtychographyLoop) {
  const WeightedCase& c = GetParam();
  for (DType dt : {DType::Float64, DType::Float32}) {
    dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      const std::vector<double> v = random_values<T>(naive::numel(c.shape), kSeed);
      const HostTensor<T> in = make_tensor<T>(c.shape, v);
      const double want = naive::ptycho_tv_loss(v, c.shape, c.w_z, c.w_xy);
      // Every term is >= 0, so the loss is its own error scale.
      const double got = run_forward<T>(op(), in.ref)[0];
      EXPECT_NEAR(got, want, rtol_for(dt) * want) << fieldfuse::dtype_name(dt);
      if (want == 0.0) {
        EXPECT_EQ(got, 0.0) << "all weights 0";
      }

      HostTensor<T> grad = make_tensor<T>(c.shape);
      run_backward<T>(op(), in.ref, {1.0}, grad.ref);
      const naive::Grad g = op().naive_backward(v, c.shape, {1.0});
      expect_close(grad.logical(), g.value, g.abs, rtol_for(dt), "grad_array");
    });
  }
  check_finite_differences(op(), c.shape, random_values<double>(naive::numel(c.shape), kSeed));
}

std::vector<WeightedCase> weighted_cases() {
  std::vector<WeightedCase> out;
  for (const Shape& s : std::vector<Shape>{{8, 24, 20}, {24, 20}})
    for (auto w : std::vector<std::pair<double, double>>{{5, 0.1}, {5, 0}, {0, 0.3}, {0, 0}})
      out.push_back({w.first, w.second, s});
  out.push_back({0, 0.3, {1, 24, 20}});
  return out;
}

std::string weighted_name(const testing::TestParamInfo<WeightedCase>& info) {
  auto num = [](double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    for (char& ch : s)
      if (ch == '.') ch = 'p';
    return s;
  };
  std::string name = "w" + num(info.param.w_z) + "_" + num(info.param.w_xy);
  for (size_t i = 0; i < info.param.shape.size(); ++i)
    name += (i ? "x" : "_") + std::to_string(info.param.shape[i]);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Tv, TvWeightedSpec, testing::ValuesIn(weighted_cases()), weighted_name);

}  // namespace
}  // namespace fftest
