// SPDX-License-Identifier: Apache-2.0
// Tests of the K-Planes C++ API (kplanes.h) on the CPU: features against naive float64 loops,
// gradients against central finite differences of those loops, strided views, null gradient
// requests, determinism, empty batches, argument validation, and plane_tv.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "fieldfuse/core.h"
#include "fieldfuse/kplanes.h"
#include "kplanes/kplanes_call.h"
#include "naive_kplanes.h"
#include "tv_test_util.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace fftest {
namespace {

namespace nk = naive_kplanes;
using fieldfuse::DeviceType;
using fieldfuse::ErrorKind;
// Most tests drive the one implementation behind the public entries (kplanes_call.h), which also
// covers combinations no public entry exposes (axis-aligned tap points); KPlanesPublicEntries
// tests the entries themselves.
using KPlanesGradients = fieldfuse::detail::kplanes::Gradients;
using KPlanesInputs = fieldfuse::detail::kplanes::Call;
using KPlanesVariant = fieldfuse::detail::kplanes::Variant;
using fieldfuse::PlaneTVNorm;

constexpr uint32_t kSeed = 20240612u;  // fixed, so a failure reproduces
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The public name of the variant's plain entry, which these tests' messages start with.
const char* forward_op(const KPlanesInputs& in) {
  return in.variant == KPlanesVariant::kTilted ? "kplanes_tilted" : "kplanes";
}
const char* backward_op(const KPlanesInputs& in) {
  return in.variant == KPlanesVariant::kTilted ? "kplanes_tilted_backward" : "kplanes_backward";
}

/// Host scratch for the forwards: on the CPU they stage nothing and need 1 byte.
std::vector<double>& forward_scratch() {
  static std::vector<double> scratch(8);
  return scratch;
}

void kp_forward_call(const KPlanesInputs& in, const TensorRef& features,
                     const TensorRef& tap_features) {
  std::vector<double>& w = forward_scratch();
  fieldfuse::detail::kplanes::forward(forward_op(in), in, features, tap_features, w.data(),
                                      w.size() * sizeof(double), {});
}
void kp_backward_call(const KPlanesInputs& in, const TensorRef& grad_features,
                      const TensorRef& grad_tap_features, const KPlanesGradients& grads,
                      bool deterministic, void* workspace, size_t workspace_bytes) {
  fieldfuse::detail::kplanes::backward(backward_op(in), in, grad_features, grad_tap_features, grads,
                                       deterministic, workspace, workspace_bytes, {});
}
size_t kp_workspace_size(const KPlanesInputs& in, const KPlanesGradients& grads,
                         bool deterministic) {
  return fieldfuse::detail::kplanes::backward_workspace_size(backward_op(in), in, grads,
                                                             deterministic);
}
int64_t kp_num_features(const KPlanesInputs& in) {
  return fieldfuse::detail::kplanes::num_features(forward_op(in), in);
}

// ---- problems
// ------------------------------------------------------------------------------------

struct LevelShape {
  int64_t channels, height, width;
};

/// A problem size: B points, N tap points with step h, T tilts (1 for axis-aligned), the levels
/// and their gates (empty: no gates, i.e. a null pointer).
struct Config {
  std::string name;
  int64_t points, tap_points;
  double h;
  int tilts;
  std::vector<LevelShape> levels;
  std::vector<double> gates;
};

/// The spec's reference configurations, small enough for naive loops.
const std::vector<Config>& configs() {
  static const std::vector<Config> all = {
      {"b37t1c1", 37, 5, 2.0, 1, {{1, 5, 5}}, {}},
      {"b257t3c5", 257, 9, 1e-4, 3, {{5, 7, 9}}, {}},
      {"multiscale", 37, 6, 0.05, 3, {{3, 5, 7}, {5, 11, 13}, {7, 19, 23}}, {0.25, 0.75, 1.0}},
      // Size-1 axes (no interpolation along them) and a negative gate.
      {"size1", 20, 4, 0.3, 2, {{2, 1, 6}, {1, 5, 1}, {1, 1, 1}, {2, 3, 4}}, {1.5, 2.0, 0.5, -0.5}},
  };
  return all;
}

const Config& config_named(const std::string& name) {
  for (const Config& c : configs())
    if (c.name == name) return c;
  throw std::invalid_argument("no config " + name);
}

/// A random field: rotations uniform in [−1, 1] (not orthogonal), planes uniform in [0.1, 0.5],
/// every value rounded to T so the oracle sees exactly what the library sees.
template <class T>
nk::Field random_field(bool tilted, const Config& cfg, uint32_t seed) {
  nk::Field f;
  f.tilted = tilted;
  f.num_tilts = tilted ? cfg.tilts : 1;
  if (tilted) f.rotations = random_values<T>(9 * cfg.tilts, seed, -1.0, 1.0);
  for (size_t l = 0; l < cfg.levels.size(); ++l) {
    nk::Level lv;
    lv.planes = 3 * f.num_tilts;
    lv.channels = cfg.levels[l].channels;
    lv.height = cfg.levels[l].height;
    lv.width = cfg.levels[l].width;
    lv.values = random_values<T>(lv.numel(), seed + 1 + static_cast<uint32_t>(l), 0.1, 0.5);
    f.levels.push_back(lv);
  }
  f.gates = cfg.gates.empty() ? std::vector<double>(cfg.levels.size(), 1.0) : cfg.gates;
  return f;
}

/// Where every tensor of a call lives in memory (see tv_test_util.h's Layout).
struct Layouts {
  std::string name = "contiguous";
  Layout pts, tap_pts, rotations, planes;
  Layout grad_pts, grad_tap_pts, grad_rotations, grad_planes, grad_features, grad_tap_features;
};

/// Channels-last planes, points every other row, rotations stored transposed; channels-last plane
/// gradients, column-major point gradients, padded rotation gradients, strided upstream gradients.
Layouts strided_layouts() {
  Layouts s;
  s.name = "strided";
  s.pts = {{}, 3};  // [B, 3] in rows of 6: every other row of a [2B, 3] buffer
  s.tap_pts = {{1, 0}, 0};
  s.rotations = {{0, 2, 1}, 0};
  s.planes = {{0, 2, 3, 1}, 0};  // [P, C, H, W] with strides (H·W·C, 1, W·C, C)
  s.grad_pts = {{1, 0}, 0};
  s.grad_tap_pts = {{}, 2};
  s.grad_rotations = {{2, 1, 0}, 1};
  s.grad_planes = {{0, 2, 3, 1}, 0};
  s.grad_features = {{1, 0}, 2};
  s.grad_tap_features = {{2, 0, 1}, 1};
  return s;
}

/// Column-major points, permuted and padded planes, a fully reversed dense plane gradient.
Layouts permuted_layouts() {
  Layouts s;
  s.name = "permuted";
  s.pts = {{1, 0}, 0};
  s.tap_pts = {{}, 1};
  s.rotations = {{1, 2, 0}, 1};
  s.planes = {{1, 0, 3, 2}, 1};
  s.grad_pts = {{}, 1};
  s.grad_tap_pts = {{1, 0}, 0};
  s.grad_rotations = {{0, 2, 1}, 0};
  s.grad_planes = {{3, 2, 1, 0}, 0};
  s.grad_features = {{}, 3};
  s.grad_tap_features = {{1, 2, 0}, 0};
  return s;
}

const Layouts& layouts(int i) {
  static const std::vector<Layouts> all = {Layouts{}, strided_layouts(), permuted_layouts()};
  return all[static_cast<size_t>(i)];
}

/// The library's view of a problem: host tensors holding a naive Field's values.
template <class T>
struct LibProblem {
  KPlanesVariant variant = KPlanesVariant::kTilted;
  HostTensor<T> pts, tap_pts, rotations;
  std::vector<HostTensor<T>> planes;
  std::vector<TensorRef> plane_refs;
  std::vector<double> gates;
  bool has_gates = false, has_taps = false;
  double h = 0.0;
  int tilts = 1;
  int64_t points = 0, tap_points = 0, features = 0;

  KPlanesInputs inputs() const {
    KPlanesInputs in;
    in.variant = variant;
    in.pts = pts.ref;
    if (has_taps) in.tap_pts = tap_pts.ref;
    in.h = h;
    if (variant == KPlanesVariant::kTilted) in.rotations = rotations.ref;
    in.planes = plane_refs.data();
    in.num_levels = static_cast<int>(plane_refs.size());
    in.gates = has_gates ? gates.data() : nullptr;
    return in;
  }
};

/// `taps_given` passes tap points (possibly zero of them); otherwise tap_pts is absent.
template <class T>
LibProblem<T> make_lib(const nk::Field& f, const std::vector<double>& pts,
                       const std::vector<double>& taps, double h, bool has_gates,
                       const Layouts& lay = {}, bool taps_given = true) {
  LibProblem<T> pb;
  pb.variant = f.tilted ? KPlanesVariant::kTilted : KPlanesVariant::kAxisAligned;
  pb.tilts = f.num_tilts;
  pb.points = static_cast<int64_t>(pts.size()) / 3;
  pb.tap_points = static_cast<int64_t>(taps.size()) / 3;
  pb.features = f.num_features();
  pb.pts = make_tensor<T>({pb.points, 3}, pts, lay.pts);
  pb.has_taps = taps_given;
  pb.tap_pts = make_tensor<T>({pb.tap_points, 3}, taps, lay.tap_pts);
  pb.h = h;
  if (f.tilted) pb.rotations = make_tensor<T>({f.num_tilts, 3, 3}, f.rotations, lay.rotations);
  for (const nk::Level& lv : f.levels)
    pb.planes.push_back(
        make_tensor<T>({lv.planes, lv.channels, lv.height, lv.width}, lv.values, lay.planes));
  for (const HostTensor<T>& t : pb.planes) pb.plane_refs.push_back(t.ref);
  pb.gates = f.gates;
  pb.has_gates = has_gates;
  return pb;
}

struct Outputs {
  std::vector<double> features, taps;
};

template <class T>
Outputs kp_forward(const LibProblem<T>& pb, T fill = std::numeric_limits<T>::quiet_NaN()) {
  HostTensor<T> features = make_tensor<T>({pb.points, pb.features}, {}, fill);
  HostTensor<T> taps = make_tensor<T>({4, pb.tap_points, pb.features}, {}, fill);
  kp_forward_call(pb.inputs(), features.ref, pb.has_taps ? taps.ref : TensorRef{});
  return {features.logical(), pb.has_taps ? taps.logical() : std::vector<double>{}};
}

/// Which gradients a backward call asks for.
struct Wants {
  bool pts = true, tap_pts = true, rotations = true, planes = true;
};

struct Grads {
  std::vector<double> pts, tap_pts, rotations;
  std::vector<std::vector<double>> planes;
  bool padding_untouched = true;  ///< nothing outside the gradient views was written

  /// Every gradient, concatenated, for bitwise comparisons.
  std::vector<double> all() const {
    std::vector<double> v = pts;
    v.insert(v.end(), tap_pts.begin(), tap_pts.end());
    v.insert(v.end(), rotations.begin(), rotations.end());
    for (const std::vector<double>& p : planes) v.insert(v.end(), p.begin(), p.end());
    return v;
  }
};

/// Runs kplanes_backward into gradients pre-filled with `fill` (NaN: uninitialised-looking).
template <class T>
Grads kp_backward(const LibProblem<T>& pb, const std::vector<double>& grad_features,
                  const std::vector<double>& grad_taps, const Layouts& lay = {}, Wants w = {},
                  bool deterministic = false, T fill = std::numeric_limits<T>::quiet_NaN()) {
  const HostTensor<T> gf =
      make_tensor<T>({pb.points, pb.features}, grad_features, lay.grad_features);
  const HostTensor<T> gt =
      make_tensor<T>({4, pb.tap_points, pb.features}, grad_taps, lay.grad_tap_features);
  HostTensor<T> gp = make_tensor<T>({pb.points, 3}, lay.grad_pts, fill);
  HostTensor<T> gtp = make_tensor<T>({pb.tap_points, 3}, lay.grad_tap_pts, fill);
  HostTensor<T> gr = make_tensor<T>({pb.tilts, 3, 3}, lay.grad_rotations, fill);
  std::vector<HostTensor<T>> gpl;
  std::vector<TensorRef> gpl_refs;
  for (const TensorRef& p : pb.plane_refs)
    gpl.push_back(
        make_tensor<T>({p.sizes[0], p.sizes[1], p.sizes[2], p.sizes[3]}, lay.grad_planes, fill));
  for (const HostTensor<T>& t : gpl) gpl_refs.push_back(t.ref);
  const bool tilted = pb.variant == KPlanesVariant::kTilted;
  KPlanesGradients g;
  g.pts = w.pts ? &gp.ref : nullptr;
  g.tap_pts = w.tap_pts && pb.has_taps ? &gtp.ref : nullptr;
  g.rotations = w.rotations && tilted ? &gr.ref : nullptr;
  g.planes = w.planes ? gpl_refs.data() : nullptr;
  const KPlanesInputs in = pb.inputs();
  const size_t bytes = kp_workspace_size(in, g, deterministic);
  EXPECT_GE(bytes, 1u);
  std::vector<double> workspace((bytes + sizeof(double) - 1) / sizeof(double));
  kp_backward_call(in, gf.ref, pb.has_taps ? gt.ref : TensorRef{}, g, deterministic,
                   workspace.data(), bytes);
  Grads out;
  if (g.pts) out.pts = gp.logical();
  if (g.tap_pts) out.tap_pts = gtp.logical();
  if (g.rotations) out.rotations = gr.logical();
  if (g.planes)
    for (const HostTensor<T>& t : gpl) out.planes.push_back(t.logical());
  out.padding_untouched =
      gp.padding_untouched(fill) && gtp.padding_untouched(fill) && gr.padding_untouched(fill);
  return out;
}

// ---- comparisons
// ---------------------------------------------------------------------------------

/// |got − want| <= tol elementwise, naming the first few failures.
void expect_close_abs(const std::vector<double>& got, const std::vector<double>& want, double tol,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (tolerance " << tol << ")";
}

/// |got − want| <= rtol·max(|want|, 1e-2·max|want|): relative, with a floor from the array's
/// scale for entries that are tiny or cancel (finite-difference noise is absolute).
void expect_close_rel(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0.0;
  for (double w : want) largest = std::max(largest, std::fabs(w));
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rtol * std::max(std::fabs(want[i]), 1e-2 * largest);
    if (!(std::fabs(got[i] - want[i]) <= tol) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (tolerance " << tol << ")";
  }
}

template <class T>
double feature_tolerance() {
  // Features are at most 0.125; float32 rounds r = R·p (|r| <= 3.3), which moves an index by
  // ~1e-5 cells on the finest level, and each product by a few ulps.
  return std::is_same<T, float>::value ? 1e-5 : 1e-13;
}

const char* variant_name(bool tilted) { return tilted ? "tilted" : "axis"; }

// ---- points
// ----------------------------------------------------------------------------------------

/// Points uniform in ±1.1 (the spec's range, beyond the border), with a few placed exactly on ±1
/// and just inside it.
template <class T>
std::vector<double> spec_points(int64_t n, uint32_t seed) {
  std::vector<double> p = random_values<T>(3 * n, seed, -1.1, 1.1);
  const double special[4][3] = {{1.0, -1.0, 0.5}, {-1.0, 1.0, 1.0}, {0.98, 0.98, 0.98}, {0, 0, 0}};
  for (int64_t r = 0; r < std::min<int64_t>(n, 4); ++r)
    for (int i = 0; i < 3; ++i) p[static_cast<size_t>(3 * r + i)] = special[r][i];
  return p;
}

/// Points uniform in ±limit whose coordinates (and, with h != 0, those of their three taps) keep
/// at least `margin` cells away from every kink, so central differences see one smooth piece.
template <class T>
std::vector<double> smooth_points(const nk::Field& f, int64_t n, double h, uint32_t seed,
                                  double limit = 0.6, double margin = 1e-3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-limit, limit);
  std::vector<double> out;
  for (int tries = 0; static_cast<int64_t>(out.size()) < 3 * n && tries < 100000; ++tries) {
    double p[3];
    for (double& x : p) x = static_cast<double>(static_cast<T>(dist(rng)));
    bool ok = true;
    for (int tap = 0; ok && tap < (h != 0.0 ? 4 : 1); ++tap) {
      double q[3];
      nk::tap_point(p, tap, h, q);
      ok = nk::kink_margin(f, q) >= margin;
    }
    if (ok) out.insert(out.end(), p, p + 3);
  }
  EXPECT_EQ(static_cast<int64_t>(out.size()), 3 * n) << "could not place smooth points";
  return out;
}

// ---- finite differences of the naive reference
// ----------------------------------------------------

/// The scalar whose gradient the backward computes: Σ grad_features·features +
/// Σ grad_tap_features·tap_features, evaluated by the naive loops in float64.
struct NaiveLoss {
  nk::Field field;
  std::vector<double> pts, taps;
  double h;
  std::vector<double> grad_features, grad_taps;

  int64_t cols() const { return field.num_features(); }
  int64_t num_taps() const { return static_cast<int64_t>(taps.size()) / 3; }

  /// Point b's share over the feature columns `keep(l, t, c)` accepts.
  template <class Keep>
  double point_loss(int64_t b, const Keep& keep) const {
    double p[3], sum = 0.0;
    nk::point(pts, b, p);
    nk::for_each_column(field, [&](int l, int t, int64_t c, int64_t col) {
      if (keep(l, t, c))
        sum += grad_features[static_cast<size_t>(b * cols() + col)] *
               nk::channel_feature(field, p, l, t, c);
    });
    return sum;
  }

  /// Tap point n's share (its four taps).
  template <class Keep>
  double tap_loss(int64_t n, const Keep& keep) const {
    double p[3], sum = 0.0;
    nk::point(taps, n, p);
    for (int tap = 0; tap < 4; ++tap) {
      double q[3];
      nk::tap_point(p, tap, h, q);
      nk::for_each_column(field, [&](int l, int t, int64_t c, int64_t col) {
        if (keep(l, t, c))
          sum += grad_taps[static_cast<size_t>((tap * num_taps() + n) * cols() + col)] *
                 nk::channel_feature(field, q, l, t, c);
      });
    }
    return sum;
  }

  /// The share of the one feature column (level, tilt, channel), over every point and tap point.
  double column_loss(int l, int t, int64_t c) const {
    const int64_t col = field.column(l) + t * field.levels[static_cast<size_t>(l)].channels + c;
    double sum = 0.0;
    for (int64_t b = 0; b < static_cast<int64_t>(pts.size()) / 3; ++b) {
      double p[3];
      nk::point(pts, b, p);
      sum += grad_features[static_cast<size_t>(b * cols() + col)] *
             nk::channel_feature(field, p, l, t, c);
    }
    for (int64_t n = 0; n < num_taps(); ++n)
      for (int tap = 0; tap < 4; ++tap) {
        double p[3], q[3];
        nk::point(taps, n, p);
        nk::tap_point(p, tap, h, q);
        sum += grad_taps[static_cast<size_t>((tap * num_taps() + n) * cols() + col)] *
               nk::channel_feature(field, q, l, t, c);
      }
    return sum;
  }

  template <class Keep>
  double loss(const Keep& keep) const {
    double sum = 0.0;
    for (int64_t b = 0; b < static_cast<int64_t>(pts.size()) / 3; ++b) sum += point_loss(b, keep);
    for (int64_t n = 0; n < num_taps(); ++n) sum += tap_loss(n, keep);
    return sum;
  }
};

/// (eval(x + step) − eval(x − step)) / (2·step), restoring x.
template <class Eval>
double central_difference(double& x, double step, const Eval& eval) {
  const double saved = x;
  x = saved + step;
  const double up = eval();
  x = saved - step;
  const double down = eval();
  x = saved;
  return (up - down) / (2.0 * step);
}

/// Every gradient of the loss by central differences. Plane entries enter the loss linearly (each
/// feature has one factor per plane), so their differences are exact at any step; points and
/// rotations use a step far below the points' kink margin.
Grads finite_differences(NaiveLoss L) {
  constexpr double kStep = 1e-6;
  const auto all = [](int, int, int64_t) { return true; };
  Grads g;
  for (int64_t b = 0; b < static_cast<int64_t>(L.pts.size()) / 3; ++b)
    for (int i = 0; i < 3; ++i)
      g.pts.push_back(central_difference(L.pts[static_cast<size_t>(3 * b + i)], kStep,
                                         [&] { return L.point_loss(b, all); }));
  for (int64_t n = 0; n < L.num_taps(); ++n)
    for (int i = 0; i < 3; ++i)
      g.tap_pts.push_back(central_difference(L.taps[static_cast<size_t>(3 * n + i)], kStep,
                                             [&] { return L.tap_loss(n, all); }));
  if (L.field.tilted)
    for (int t = 0; t < L.field.num_tilts; ++t) {
      const auto tilt_t = [t](int, int tt, int64_t) { return tt == t; };
      for (int e = 0; e < 9; ++e)
        g.rotations.push_back(central_difference(L.field.rotations[static_cast<size_t>(9 * t + e)],
                                                 kStep, [&] { return L.loss(tilt_t); }));
    }
  for (int l = 0; l < static_cast<int>(L.field.levels.size()); ++l) {
    nk::Level& lv = L.field.levels[static_cast<size_t>(l)];
    std::vector<double> grad;
    for (int64_t k = 0; k < lv.planes; ++k)
      for (int64_t c = 0; c < lv.channels; ++c)
        for (int64_t y = 0; y < lv.height; ++y)
          for (int64_t x = 0; x < lv.width; ++x)
            grad.push_back(
                central_difference(lv.values[static_cast<size_t>(lv.index(k, c, y, x))], 0.5,
                                   [&] { return L.column_loss(l, static_cast<int>(k / 3), c); }));
    g.planes.push_back(grad);
  }
  return g;
}

// =================================================================================================
// Forward vs the naive loops
// =================================================================================================

struct ForwardCase {
  bool tilted;
  DType dtype;
  std::string config;
  int layout;
};

void PrintTo(const ForwardCase& c, std::ostream* os) {
  *os << variant_name(c.tilted) << " " << fieldfuse::dtype_name(c.dtype) << " " << c.config << " "
      << layouts(c.layout).name;
}

std::vector<ForwardCase> forward_cases() {
  std::vector<ForwardCase> out;
  for (bool tilted : {true, false})
    for (DType dt : {DType::Float64, DType::Float32})
      for (const Config& c : configs())
        for (int layout = 0; layout < 3; ++layout) out.push_back({tilted, dt, c.name, layout});
  return out;
}

class KPlanesForward : public testing::TestWithParam<ForwardCase> {};

// Features and tap features equal the naive loops (points on and beyond ±1, taps crossing the
// border, gates, several levels, every layout), and tap 0 is bit for bit the tap points evaluated
// as points.
TEST_P(KPlanesForward, MatchesNaive) {
  const ForwardCase& fc = GetParam();
  const Config& cfg = config_named(fc.config);
  const Layouts& lay = layouts(fc.layout);
  dispatch(fc.dtype, [&](auto tag) {
    using T = decltype(tag);
    const nk::Field f = random_field<T>(fc.tilted, cfg, kSeed);
    const std::vector<double> pts = spec_points<T>(cfg.points, kSeed + 100);
    const std::vector<double> taps = spec_points<T>(cfg.tap_points, kSeed + 200);
    const double h = static_cast<double>(static_cast<T>(cfg.h));
    const LibProblem<T> pb = make_lib<T>(f, pts, taps, h, !cfg.gates.empty(), lay);
    EXPECT_EQ(kp_num_features(pb.inputs()), f.num_features());
    const Outputs out = kp_forward(pb);
    expect_close_abs(out.features, nk::features(f, pts), feature_tolerance<T>(), "features");
    expect_close_abs(out.taps, nk::tap_features(f, taps, h), feature_tolerance<T>(),
                     "tap_features");

    const LibProblem<T> as_points = make_lib<T>(f, taps, {}, 0.0, !cfg.gates.empty(), lay, false);
    const std::vector<double> tap0(out.taps.begin(),
                                   out.taps.begin() + cfg.tap_points * f.num_features());
    EXPECT_TRUE(same_bits(tap0, kp_forward(as_points).features)) << "tap 0 differs from a point";
  });
}

INSTANTIATE_TEST_SUITE_P(KPlanes, KPlanesForward, testing::ValuesIn(forward_cases()),
                         [](const testing::TestParamInfo<ForwardCase>& i) {
                           return std::string(variant_name(i.param.tilted)) +
                                  (i.param.dtype == DType::Float64 ? "_f64_" : "_f32_") +
                                  i.param.config + "_" + layouts(i.param.layout).name;
                         });

// Two of the spec's larger test shapes, (B, T, C, H, W) = (4096, 4, 8, 200, 200) and
// (2000, 8, 32, 50, 33), float32 with channels-last planes.
TEST(KPlanesForwardLarge, SpecShapesMatchNaive) {
  const std::vector<Config> large = {{"b4096t4c8", 4096, 16, 1e-4, 4, {{8, 200, 200}}, {}},
                                     {"b2000t8c32", 2000, 16, 2.0, 8, {{32, 50, 33}}, {}}};
  for (const Config& cfg : large)
    for (bool tilted : {true, false}) {
      SCOPED_TRACE(cfg.name + " " + variant_name(tilted));
      const nk::Field f = random_field<float>(tilted, cfg, kSeed + 5);
      const std::vector<double> pts = spec_points<float>(cfg.points, kSeed + 6);
      const std::vector<double> taps = spec_points<float>(cfg.tap_points, kSeed + 7);
      const double h = static_cast<double>(static_cast<float>(cfg.h));
      const Outputs out = kp_forward(make_lib<float>(f, pts, taps, h, false, strided_layouts()));
      expect_close_abs(out.features, nk::features(f, pts), feature_tolerance<float>(), "features");
      expect_close_abs(out.taps, nk::tap_features(f, taps, h), feature_tolerance<float>(),
                       "tap_features");
    }
}

// The two variants differ in plane 1's pair, (z, x) against (x, z): an identity rotation does not
// turn the tilted variant into the axis-aligned one.
TEST(KPlanesVariants, IdentityRotationIsNotAxisAligned) {
  const Config cfg{"one", 8, 0, 0.0, 1, {{2, 6, 7}}, {}};
  nk::Field tilted = random_field<double>(true, cfg, kSeed + 7);
  tilted.rotations = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  nk::Field axis = tilted;
  axis.tilted = false;
  axis.rotations.clear();
  const std::vector<double> pts = random_values<double>(24, kSeed + 8, -0.9, 0.9);
  const Outputs t = kp_forward(make_lib<double>(tilted, pts, {}, 0.0, false, {}, false));
  const Outputs a = kp_forward(make_lib<double>(axis, pts, {}, 0.0, false, {}, false));
  expect_close_abs(t.features, nk::features(tilted, pts), 1e-13, "tilted");
  expect_close_abs(a.features, nk::features(axis, pts), 1e-13, "axis-aligned");
  double largest_difference = 0.0;
  for (size_t i = 0; i < t.features.size(); ++i)
    largest_difference = std::max(largest_difference, std::fabs(t.features[i] - a.features[i]));
  EXPECT_GT(largest_difference, 1e-3);
}

// With dyadic rotations, points and step every product and sum is exact, so the library's
// R·p + h·R[:, i] and a point placed at p + h·e_i give the same bits: a row/column mix-up in the
// tap shift, or a wrong tap order, shows as a mismatch.
TEST(KPlanesTaps, ShiftedTapsEqualShiftedPoints) {
  for (bool tilted : {true, false})
    for (DType dt : {DType::Float64, DType::Float32}) {
      SCOPED_TRACE(std::string(variant_name(tilted)) + " " + fieldfuse::dtype_name(dt));
      dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const Config cfg{"exact", 0, 0, 0.0, 2, {{2, 5, 7}, {3, 9, 6}}, {0.5, 1.5}};
        nk::Field f = random_field<T>(tilted, cfg, kSeed + 11);
        std::mt19937 rng(kSeed + 12);
        std::uniform_int_distribution<int> eighths(-8, 8), sixty_fourths(-64, 64);
        for (double& r : f.rotations) r = eighths(rng) / 8.0;
        const int64_t n = 16;
        std::vector<double> taps(3 * n);
        for (double& x : taps) x = sixty_fourths(rng) / 64.0;
        const double h = 0.25;
        const Outputs out = kp_forward(make_lib<T>(f, {}, taps, h, true));
        const int64_t cols = f.num_features();
        for (int tap = 0; tap < 4; ++tap) {
          std::vector<double> shifted = taps;
          for (int64_t r = 0; tap > 0 && r < n; ++r) shifted[3 * r + (tap - 1)] += h;
          const Outputs points = kp_forward(make_lib<T>(f, shifted, {}, 0.0, true, {}, false));
          const std::vector<double> got(out.taps.begin() + tap * n * cols,
                                        out.taps.begin() + (tap + 1) * n * cols);
          EXPECT_TRUE(same_bits(got, points.features)) << "tap " << tap;
        }
      });
    }
}

// =================================================================================================
// Backward vs central finite differences of the naive loops
// =================================================================================================

struct BackwardCase {
  bool tilted;
  DType dtype;
  std::string config;
};

void PrintTo(const BackwardCase& c, std::ostream* os) {
  *os << variant_name(c.tilted) << " " << fieldfuse::dtype_name(c.dtype) << " " << c.config;
}

class KPlanesBackward : public testing::TestWithParam<BackwardCase> {};

// Every gradient (points, tap points, rotations with the tap shift's h·R[:, i] term, planes, gates
// applied) against central differences of the float64 loops, at points away from the kinks. The
// upstream gradients are random, and tap points use a step that moves them across cells.
TEST_P(KPlanesBackward, MatchesFiniteDifferences) {
  const BackwardCase& bc = GetParam();
  Config cfg = config_named(bc.config);
  cfg.points = std::min<int64_t>(cfg.points, 40);  // the differences cost a loss per entry
  cfg.h = 0.05;
  dispatch(bc.dtype, [&](auto tag) {
    using T = decltype(tag);
    NaiveLoss L;
    L.field = random_field<T>(bc.tilted, cfg, kSeed + 20);
    L.h = static_cast<double>(static_cast<T>(cfg.h));
    L.pts = smooth_points<T>(L.field, cfg.points, 0.0, kSeed + 21);
    L.taps = smooth_points<T>(L.field, cfg.tap_points, L.h, kSeed + 22);
    const int64_t cols = L.field.num_features();
    L.grad_features = random_values<T>(cfg.points * cols, kSeed + 23);
    L.grad_taps = random_values<T>(4 * cfg.tap_points * cols, kSeed + 24);
    const LibProblem<T> pb = make_lib<T>(L.field, L.pts, L.taps, L.h, !cfg.gates.empty());
    const Grads got = kp_backward(pb, L.grad_features, L.grad_taps);
    const Grads want = finite_differences(L);
    const double rtol = std::is_same<T, double>::value ? 1e-6 : 2e-4;
    expect_close_rel(got.pts, want.pts, rtol, "grad_pts");
    expect_close_rel(got.tap_pts, want.tap_pts, rtol, "grad_tap_pts");
    expect_close_rel(got.rotations, want.rotations, rtol, "grad_rotations");
    ASSERT_EQ(got.planes.size(), want.planes.size());
    for (size_t l = 0; l < want.planes.size(); ++l)
      expect_close_rel(got.planes[l], want.planes[l], rtol,
                       "grad_planes[" + std::to_string(l) + "]");
  });
}

std::vector<BackwardCase> backward_cases() {
  std::vector<BackwardCase> out;
  for (bool tilted : {true, false})
    for (DType dt : {DType::Float64, DType::Float32})
      for (const Config& c : configs()) out.push_back({tilted, dt, c.name});
  return out;
}

INSTANTIATE_TEST_SUITE_P(KPlanes, KPlanesBackward, testing::ValuesIn(backward_cases()),
                         [](const testing::TestParamInfo<BackwardCase>& i) {
                           return std::string(variant_name(i.param.tilted)) +
                                  (i.param.dtype == DType::Float64 ? "_f64_" : "_f32_") +
                                  i.param.config;
                         });

// A coordinate exactly on ±1 or beyond gets a zero coordinate gradient (PyTorch's clip), while the
// other coordinates of the same point keep theirs.
TEST(KPlanesBorder, CoordinatesOnOrBeyondTheBorderGetZeroGradient) {
  const std::vector<double> pts = {1.0,  0.3,  -0.2,  // x on +1
                                   0.1,  -1.0, 0.45,  // y on −1
                                   0.2,  0.35, 1.0,   // z on +1
                                   1.5,  -0.2, 0.1,   // x beyond
                                   -1.0, 1.0,  -1.0};
  const std::vector<std::vector<bool>> zero = {{true, false, false},
                                               {false, true, false},
                                               {false, false, true},
                                               {true, false, false},
                                               {true, true, true}};
  for (bool tilted : {true, false}) {
    SCOPED_TRACE(variant_name(tilted));
    const Config cfg{"border", 5, 0, 0.0, 1, {{2, 5, 6}, {1, 4, 9}}, {}};
    nk::Field f = random_field<double>(tilted, cfg, kSeed + 30);
    if (tilted) f.rotations = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    const Grads g = kp_backward(make_lib<double>(f, pts, {}, 0.0, false, {}, false),
                                random_values<double>(5 * f.num_features(), kSeed + 31), {});
    for (size_t b = 0; b < zero.size(); ++b)
      for (int i = 0; i < 3; ++i) {
        const double v = g.pts[3 * b + static_cast<size_t>(i)];
        if (zero[b][i])
          EXPECT_EQ(v, 0.0) << "point " << b << " coordinate " << i;
        else
          EXPECT_TRUE(std::isfinite(v) && v != 0.0) << "point " << b << " coordinate " << i;
      }
  }
}

// =================================================================================================
// Layouts, null gradients, overwriting, determinism
// =================================================================================================

// Strided points, transposed rotations, channels-last and permuted planes, and strided gradient
// outputs and upstream gradients give the contiguous results bit for bit, and nothing outside a
// gradient view is written.
TEST(KPlanesLayouts, StridedViewsGiveContiguousBits) {
  const Config& cfg = config_named("multiscale");
  for (bool tilted : {true, false})
    for (DType dt : {DType::Float64, DType::Float32}) {
      SCOPED_TRACE(std::string(variant_name(tilted)) + " " + fieldfuse::dtype_name(dt));
      dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const nk::Field f = random_field<T>(tilted, cfg, kSeed + 40);
        const std::vector<double> pts = spec_points<T>(cfg.points, kSeed + 41);
        const std::vector<double> taps = spec_points<T>(cfg.tap_points, kSeed + 42);
        const std::vector<double> gf = random_values<T>(cfg.points * f.num_features(), kSeed + 43);
        const std::vector<double> gt =
            random_values<T>(4 * cfg.tap_points * f.num_features(), kSeed + 44);
        const Outputs fwd = kp_forward(make_lib<T>(f, pts, taps, cfg.h, true));
        const Grads bwd = kp_backward(make_lib<T>(f, pts, taps, cfg.h, true), gf, gt);
        for (int i = 1; i < 3; ++i) {
          SCOPED_TRACE(layouts(i).name);
          const LibProblem<T> pb = make_lib<T>(f, pts, taps, cfg.h, true, layouts(i));
          const Outputs o = kp_forward(pb);
          EXPECT_TRUE(same_bits(o.features, fwd.features));
          EXPECT_TRUE(same_bits(o.taps, fwd.taps));
          const Grads g = kp_backward(pb, gf, gt, layouts(i));
          EXPECT_TRUE(same_bits(g.all(), bwd.all()));
          EXPECT_TRUE(g.padding_untouched) << "wrote outside a gradient view";
        }
      });
    }
}

// A null gradient pointer skips that gradient; the ones requested come out bit for bit as when
// every gradient is requested. All outputs start as NaN, so a gradient that is not fully written
// shows.
TEST(KPlanesGradients, NullPointersSkipOnlyThatGradient) {
  const Config& cfg = config_named("multiscale");
  for (bool tilted : {true, false})
    for (DType dt : {DType::Float64, DType::Float32}) {
      SCOPED_TRACE(std::string(variant_name(tilted)) + " " + fieldfuse::dtype_name(dt));
      dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const nk::Field f = random_field<T>(tilted, cfg, kSeed + 50);
        const LibProblem<T> pb =
            make_lib<T>(f, spec_points<T>(cfg.points, kSeed + 51),
                        spec_points<T>(cfg.tap_points, kSeed + 52), cfg.h, true);
        const std::vector<double> gf = random_values<T>(cfg.points * f.num_features(), kSeed + 53);
        const std::vector<double> gt =
            random_values<T>(4 * cfg.tap_points * f.num_features(), kSeed + 54);
        const Grads full = kp_backward(pb, gf, gt);
        for (const double v : full.all())
          ASSERT_FALSE(std::isnan(v)) << "an output was not written";
        const std::vector<Wants> subsets = {
            {false, false, false, true}, {true, false, false, false}, {false, true, false, false},
            {false, false, true, false}, {true, false, true, false},  {false, false, false, false}};
        for (const Wants& w : subsets) {
          SCOPED_TRACE(testing::Message()
                       << "pts " << w.pts << " tap_pts " << w.tap_pts << " rotations "
                       << w.rotations << " planes " << w.planes);
          const Grads g = kp_backward(pb, gf, gt, {}, w);
          EXPECT_EQ(g.pts.empty(), !w.pts);
          EXPECT_EQ(g.planes.empty(), !w.planes);
          if (w.pts) {
            EXPECT_TRUE(same_bits(g.pts, full.pts)) << "grad_pts";
          }
          if (w.tap_pts) {
            EXPECT_TRUE(same_bits(g.tap_pts, full.tap_pts)) << "grad_tap_pts";
          }
          if (w.rotations && tilted) {
            EXPECT_TRUE(same_bits(g.rotations, full.rotations)) << "grad_rotations";
          }
          for (size_t l = 0; w.planes && l < full.planes.size(); ++l)
            EXPECT_TRUE(same_bits(g.planes[l], full.planes[l])) << "grad_planes[" << l << "]";
        }
      });
    }
}

// Outputs are written, never accumulated into: garbage, NaN or an earlier result in the buffers
// change no bit. The same holds for the forward.
TEST(KPlanesGradients, OutputsAreOverwritten) {
  const Config& cfg = config_named("multiscale");
  for (bool tilted : {true, false}) {
    SCOPED_TRACE(variant_name(tilted));
    const nk::Field f = random_field<double>(tilted, cfg, kSeed + 60);
    const LibProblem<double> pb =
        make_lib<double>(f, spec_points<double>(cfg.points, kSeed + 61),
                         spec_points<double>(cfg.tap_points, kSeed + 62), cfg.h, true);
    const std::vector<double> gf = random_values<double>(cfg.points * f.num_features(), kSeed + 63);
    const std::vector<double> gt =
        random_values<double>(4 * cfg.tap_points * f.num_features(), kSeed + 64);
    const Grads nan_filled = kp_backward(pb, gf, gt);
    const Grads garbage = kp_backward(pb, gf, gt, {}, {}, false, 1e30);
    const Grads inf_filled = kp_backward(pb, gf, gt, {}, {}, false, -kInf);
    EXPECT_TRUE(same_bits(garbage.all(), nan_filled.all()));
    EXPECT_TRUE(same_bits(inf_filled.all(), nan_filled.all()));
    const Outputs a = kp_forward(pb), b = kp_forward(pb, 1e30);
    EXPECT_TRUE(same_bits(a.features, b.features));
    EXPECT_TRUE(same_bits(a.taps, b.taps));
  }
}

// The CPU driver is deterministic whatever the thread count, and `deterministic` changes nothing
// on the CPU. Large enough that every loop runs in parallel (several 64-slot chunks, several plane
// owners).
TEST(KPlanesDeterminism, ThreadCountAndFlagDoNotChangeBits) {
  Config cfg = config_named("multiscale");
  cfg.points = 300;
  cfg.tap_points = 40;
  for (bool tilted : {true, false})
    for (DType dt : {DType::Float64, DType::Float32}) {
      SCOPED_TRACE(std::string(variant_name(tilted)) + " " + fieldfuse::dtype_name(dt));
      dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const nk::Field f = random_field<T>(tilted, cfg, kSeed + 70);
        const LibProblem<T> pb =
            make_lib<T>(f, spec_points<T>(cfg.points, kSeed + 71),
                        spec_points<T>(cfg.tap_points, kSeed + 72), cfg.h, true);
        const std::vector<double> gf = random_values<T>(cfg.points * f.num_features(), kSeed + 73);
        const std::vector<double> gt =
            random_values<T>(4 * cfg.tap_points * f.num_features(), kSeed + 74);
        auto run = [&](bool deterministic) {
          const Outputs o = kp_forward(pb);
          std::vector<double> bits = kp_backward(pb, gf, gt, {}, {}, deterministic).all();
          bits.insert(bits.end(), o.features.begin(), o.features.end());
          bits.insert(bits.end(), o.taps.begin(), o.taps.end());
          return bits;
        };
        const std::vector<double> reference = run(false);
        EXPECT_TRUE(same_bits(run(true), reference)) << "deterministic flag";
#if defined(_OPENMP)
        const int saved = omp_get_max_threads();
        for (int threads : {1, 2, 3}) {
          omp_set_num_threads(threads);
          EXPECT_TRUE(same_bits(run(false), reference)) << threads << " threads";
        }
        omp_set_num_threads(saved);
#endif
      });
    }
}

// =================================================================================================
// Empty batches
// =================================================================================================

// B = 0: the forward writes nothing and succeeds; the backward writes zero rotation and plane
// gradients (nothing contributes to them), with or without tap points.
TEST(KPlanesEmpty, EmptyBatch) {
  const Config cfg{"empty", 0, 0, 0.1, 2, {{2, 4, 5}, {3, 3, 4}}, {0.5, 2.0}};
  for (bool tilted : {true, false})
    for (bool with_taps : {false, true}) {
      SCOPED_TRACE(std::string(variant_name(tilted)) + (with_taps ? " with taps" : ""));
      const nk::Field f = random_field<double>(tilted, cfg, kSeed + 80);
      const std::vector<double> taps =
          with_taps ? spec_points<double>(3, kSeed + 81) : std::vector<double>{};
      const LibProblem<double> pb = make_lib<double>(f, {}, taps, cfg.h, true, {}, with_taps);
      // A features tensor with no elements around a sentinel: nothing may land on it.
      HostTensor<double> features = make_tensor<double>({0, f.num_features()}, {}, -7.25);
      HostTensor<double> tap_features = make_tensor<double>({4, 3, f.num_features()});
      EXPECT_NO_THROW(
          kp_forward_call(pb.inputs(), features.ref, with_taps ? tap_features.ref : TensorRef{}));
      EXPECT_EQ(features.storage[0], -7.25);
      if (with_taps)
        expect_close_abs(tap_features.logical(), nk::tap_features(f, taps, cfg.h), 1e-13,
                         "tap_features");
      // A null features pointer is fine when there are no elements.
      TensorRef null_features = features.ref;
      null_features.data = nullptr;
      EXPECT_NO_THROW(
          kp_forward_call(pb.inputs(), null_features, with_taps ? tap_features.ref : TensorRef{}));

      const Grads g = kp_backward(pb, {}, random_values<double>(12 * f.num_features(), kSeed + 82));
      EXPECT_TRUE(g.pts.empty());
      if (tilted) {
        ASSERT_EQ(g.rotations.size(), 18u);
        for (double v : g.rotations) {
          if (!with_taps) {
            EXPECT_EQ(v, 0.0);
          }
        }
      }
      for (const std::vector<double>& plane : g.planes)
        for (double v : plane) {
          ASSERT_FALSE(std::isnan(v)) << "plane gradient not written";
          if (!with_taps) {
            ASSERT_EQ(v, 0.0);
          }
        }
    }
}

// =================================================================================================
// Validation
// =================================================================================================

/// Valid float32 arguments of a tilted (T = 2) or axis-aligned problem with two levels, gates,
/// B = 5 points and N = 3 tap points; each validation test breaks exactly one.
struct ValidArgs {
  static constexpr int64_t kPoints = 5, kTaps = 3;
  bool tilted;
  int tilts;
  int64_t features_count;
  HostTensor<float> pts, tap_pts, rotations;
  std::vector<HostTensor<float>> planes;
  std::vector<TensorRef> plane_refs;
  std::vector<double> gates = {0.5, 1.0};
  HostTensor<float> features, tap_features, grad_features, grad_tap_features;
  HostTensor<float> grad_pts, grad_tap_pts, grad_rotations;
  std::vector<HostTensor<float>> grad_planes;
  std::vector<TensorRef> grad_plane_refs;
  KPlanesInputs in;
  KPlanesGradients grads;
  std::vector<double> workspace = std::vector<double>(1 << 12);
  size_t workspace_bytes = (1 << 12) * sizeof(double);
  void* workspace_ptr = nullptr;

  explicit ValidArgs(bool tilted_variant = true) : tilted(tilted_variant) {
    tilts = tilted ? 2 : 1;
    const std::vector<LevelShape> shapes = {{2, 4, 5}, {3, 3, 4}};
    features_count = tilts * 5;
    pts = make_tensor<float>({kPoints, 3}, random_values<float>(3 * kPoints, 1u, -1.1, 1.1));
    tap_pts = make_tensor<float>({kTaps, 3}, random_values<float>(3 * kTaps, 2u, -1.1, 1.1));
    if (tilted) rotations = make_tensor<float>({tilts, 3, 3}, random_values<float>(9 * tilts, 3u));
    for (const LevelShape& s : shapes) {
      const Shape shape = {3 * tilts, s.channels, s.height, s.width};
      planes.push_back(make_tensor<float>(shape, random_values<float>(naive::numel(shape), 4u)));
      grad_planes.push_back(make_tensor<float>(shape));
    }
    for (const HostTensor<float>& t : planes) plane_refs.push_back(t.ref);
    for (const HostTensor<float>& t : grad_planes) grad_plane_refs.push_back(t.ref);
    features = make_tensor<float>({kPoints, features_count});
    tap_features = make_tensor<float>({4, kTaps, features_count});
    grad_features = make_tensor<float>({kPoints, features_count},
                                       random_values<float>(kPoints * features_count, 5u));
    grad_tap_features = make_tensor<float>({4, kTaps, features_count},
                                           random_values<float>(4 * kTaps * features_count, 6u));
    grad_pts = make_tensor<float>({kPoints, 3});
    grad_tap_pts = make_tensor<float>({kTaps, 3});
    grad_rotations = make_tensor<float>({tilts, 3, 3});
    in.variant = tilted ? KPlanesVariant::kTilted : KPlanesVariant::kAxisAligned;
    in.pts = pts.ref;
    in.tap_pts = tap_pts.ref;
    in.h = 0.1;
    if (tilted) in.rotations = rotations.ref;
    in.planes = plane_refs.data();
    in.num_levels = 2;
    in.gates = gates.data();
    grads.pts = &grad_pts.ref;
    grads.tap_pts = &grad_tap_pts.ref;
    grads.rotations = tilted ? &grad_rotations.ref : nullptr;
    grads.planes = grad_plane_refs.data();
    workspace_ptr = workspace.data();
  }
  ValidArgs(const ValidArgs&) = delete;
  ValidArgs& operator=(const ValidArgs&) = delete;

  void forward() const { kp_forward_call(in, features.ref, tap_features.ref); }
  void backward() const {
    kp_backward_call(in, grad_features.ref, grad_tap_features.ref, grads, false, workspace_ptr,
                     workspace_bytes);
  }
};

/// The op name errors start with: the variant's public name.
std::string forward_prefix(const ValidArgs& a) {
  return a.in.variant == KPlanesVariant::kTilted ? "kplanes_tilted(): " : "kplanes(): ";
}
std::string backward_prefix(const ValidArgs& a) {
  return a.in.variant == KPlanesVariant::kTilted ? "kplanes_tilted_backward(): "
                                                 : "kplanes_backward(): ";
}

/// Expects `parts` (plus the op name) in the error of the forward and of the backward.
void expect_error_both(const ValidArgs& a, ErrorKind kind, const std::vector<std::string>& parts) {
  {
    SCOPED_TRACE("forward");
    std::vector<std::string> p = parts;
    p.push_back(forward_prefix(a));
    expect_error([&] { a.forward(); }, kind, p);
  }
  {
    SCOPED_TRACE("backward");
    std::vector<std::string> p = parts;
    p.push_back(backward_prefix(a));
    expect_error([&] { a.backward(); }, kind, p);
  }
}

void expect_backward_error(const ValidArgs& a, ErrorKind kind, std::vector<std::string> parts) {
  parts.push_back(backward_prefix(a));
  expect_error([&] { a.backward(); }, kind, parts);
}

void expect_forward_error(const ValidArgs& a, ErrorKind kind, std::vector<std::string> parts) {
  parts.push_back(forward_prefix(a));
  expect_error([&] { a.forward(); }, kind, parts);
}

/// Expects `fn` to throw a fieldfuse::Error whose message starts with exactly `prefix`.
template <class F>
void expect_prefix(F&& fn, const std::string& prefix) {
  try {
    fn();
    ADD_FAILURE() << "expected an error starting with '" << prefix << "', nothing thrown";
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
  }
}

TEST(KPlanesPublicEntries, TiltedEntriesMatchTheSharedImplementation) {
  ValidArgs a;
  const TensorRef* planes = a.plane_refs.data();
  const double* gates = a.gates.data();
  a.forward();  // the shared implementation, points and tap points together
  const std::vector<double> features = a.features.logical(), taps = a.tap_features.logical();

  HostTensor<float> out = make_tensor<float>({ValidArgs::kPoints, a.features_count});
  // Each forward runs in the workspace its own query reports (1 byte on the CPU: no staging).
  const size_t forward_bytes =
      fieldfuse::kplanes_tilted_forward_workspace_size(a.pts.ref, a.rotations.ref, planes, 2);
  EXPECT_EQ(forward_bytes, 1u);
  EXPECT_EQ(fieldfuse::kplanes_tilted_taps_forward_workspace_size(a.tap_pts.ref, a.rotations.ref,
                                                                  planes, 2),
            1u);
  EXPECT_EQ(fieldfuse::kplanes_tilted_with_taps_forward_workspace_size(a.pts.ref, a.tap_pts.ref,
                                                                       a.rotations.ref, planes, 2),
            1u);
  char fw[8];
  fieldfuse::kplanes_tilted_forward(a.pts.ref, a.rotations.ref, planes, 2, gates, out.ref, fw,
                                    forward_bytes);
  EXPECT_TRUE(same_bits(out.logical(), features));
  HostTensor<float> tap_out = make_tensor<float>({4, ValidArgs::kTaps, a.features_count});
  fieldfuse::kplanes_tilted_taps_forward(a.tap_pts.ref, a.rotations.ref, planes, 2, 0.1, gates,
                                         tap_out.ref, fw, forward_bytes);
  EXPECT_TRUE(same_bits(tap_out.logical(), taps));
  fieldfuse::kplanes_tilted_with_taps_forward(a.pts.ref, a.tap_pts.ref, a.rotations.ref, planes, 2,
                                              0.1, gates, nullptr, out.ref, tap_out.ref, fw,
                                              forward_bytes);
  EXPECT_TRUE(same_bits(out.logical(), features));
  EXPECT_TRUE(same_bits(tap_out.logical(), taps));
  EXPECT_EQ(fieldfuse::kplanes_num_features(planes, 2, a.tilts), a.features_count);

  // Each backward runs in the workspace its own query reports.
  const auto run = [&](size_t bytes, const auto& call) {
    std::vector<double> workspace((bytes + sizeof(double) - 1) / sizeof(double));
    EXPECT_NO_THROW(call(workspace.data(), bytes));
  };
  run(fieldfuse::kplanes_tilted_backward_workspace_size(a.pts.ref, a.rotations.ref, planes, 2, true,
                                                        false),
      [&](void* w, size_t n) {
        fieldfuse::kplanes_tilted_backward(
            a.pts.ref, a.rotations.ref, planes, 2, gates, a.grad_features.ref, &a.grad_pts.ref,
            &a.grad_rotations.ref, a.grad_plane_refs.data(), false, w, n);
      });
  run(fieldfuse::kplanes_tilted_taps_backward_workspace_size(a.tap_pts.ref, a.rotations.ref, planes,
                                                             2, true, true),
      [&](void* w, size_t n) {
        fieldfuse::kplanes_tilted_taps_backward(a.tap_pts.ref, a.rotations.ref, planes, 2, 0.1,
                                                gates, a.grad_tap_features.ref, &a.grad_tap_pts.ref,
                                                nullptr, a.grad_plane_refs.data(), true, w, n);
      });
  run(fieldfuse::kplanes_tilted_with_taps_backward_workspace_size(
          a.pts.ref, a.tap_pts.ref, a.rotations.ref, planes, 2, false, false),
      [&](void* w, size_t n) {
        fieldfuse::kplanes_tilted_with_taps_backward(
            a.pts.ref, a.tap_pts.ref, a.rotations.ref, planes, 2, 0.1, gates, nullptr,
            a.grad_features.ref, a.grad_tap_features.ref, &a.grad_pts.ref, &a.grad_tap_pts.ref,
            &a.grad_rotations.ref, nullptr, false, w, n);
      });
}

TEST(KPlanesPublicEntries, EveryEntryNamesItselfFirst) {
  ValidArgs a;
  ValidArgs axis(false);
  a.pts.ref.sizes[1] = 4;  // [5, 4]: the first argument every entry checks
  axis.pts.ref.sizes[1] = 4;
  const TensorRef* planes = a.plane_refs.data();
  const TensorRef* axis_planes = axis.plane_refs.data();
  void* w = a.workspace_ptr;
  const size_t n = a.workspace_bytes;
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_forward(a.pts.ref, a.rotations.ref, planes, 2, nullptr,
                                          a.features.ref, w, n);
      },
      "kplanes_tilted(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_forward_workspace_size(a.pts.ref, a.rotations.ref, planes, 2);
      },
      "kplanes_tilted(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_backward_workspace_size(a.pts.ref, a.rotations.ref, planes, 2,
                                                          true, false);
      },
      "kplanes_tilted_backward(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_backward(a.pts.ref, a.rotations.ref, planes, 2, nullptr,
                                           a.grad_features.ref, nullptr, nullptr, nullptr, false, w,
                                           n);
      },
      "kplanes_tilted_backward(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_forward(axis.pts.ref, axis_planes, 2, nullptr, axis.features.ref, w, n);
      },
      "kplanes(): expected pts");
  expect_prefix([&] { fieldfuse::kplanes_forward_workspace_size(axis.pts.ref, axis_planes, 2); },
                "kplanes(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_backward_workspace_size(axis.pts.ref, axis_planes, 2, true, false);
      },
      "kplanes_backward(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_backward(axis.pts.ref, axis_planes, 2, nullptr, axis.grad_features.ref,
                                    nullptr, nullptr, false, w, n);
      },
      "kplanes_backward(): expected pts");
  // kplanes_tilted_taps calls its tap points pts, with their public layout.
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_taps_forward(a.pts.ref, a.rotations.ref, planes, 2, 0.1, nullptr,
                                               a.tap_features.ref, w, n);
      },
      "kplanes_tilted_taps(): expected pts to have shape [B, 3]");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_taps_forward_workspace_size(a.pts.ref, a.rotations.ref, planes,
                                                              2);
      },
      "kplanes_tilted_taps(): expected pts to have shape [B, 3]");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_taps_backward_workspace_size(a.pts.ref, a.rotations.ref, planes,
                                                               2, true, false);
      },
      "kplanes_tilted_taps_backward(): expected pts to have shape [B, 3]");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_taps_backward(a.pts.ref, a.rotations.ref, planes, 2, 0.1, nullptr,
                                                a.grad_tap_features.ref, nullptr, nullptr, nullptr,
                                                false, w, n);
      },
      "kplanes_tilted_taps_backward(): expected pts to have shape [B, 3]");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_with_taps_forward(a.pts.ref, a.tap_pts.ref, a.rotations.ref,
                                                    planes, 2, 0.1, nullptr, nullptr,
                                                    a.features.ref, a.tap_features.ref, w, n);
      },
      "kplanes_tilted_with_taps(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_with_taps_forward_workspace_size(a.pts.ref, a.tap_pts.ref,
                                                                   a.rotations.ref, planes, 2);
      },
      "kplanes_tilted_with_taps(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_with_taps_backward_workspace_size(
            a.pts.ref, a.tap_pts.ref, a.rotations.ref, planes, 2, true, false);
      },
      "kplanes_tilted_with_taps_backward(): expected pts");
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_with_taps_backward(
            a.pts.ref, a.tap_pts.ref, a.rotations.ref, planes, 2, 0.1, nullptr, nullptr,
            a.grad_features.ref, a.grad_tap_features.ref, nullptr, nullptr, nullptr, nullptr, false,
            w, n);
      },
      "kplanes_tilted_with_taps_backward(): expected pts");
  expect_prefix([&] { fieldfuse::kplanes_num_features(planes, 0, 2); },
                "kplanes_num_features(): expected at least one level");
}

TEST(KPlanesValidation, ForwardsNeedTheirWorkspace) {
  ValidArgs a;
  const TensorRef* planes = a.plane_refs.data();
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_forward(a.pts.ref, a.rotations.ref, planes, 2, nullptr,
                                          a.features.ref, nullptr, 0);
      },
      "kplanes_tilted(): expected a workspace of at least 1 bytes, but got a null pointer");
  char w[8];
  expect_prefix(
      [&] {
        fieldfuse::kplanes_tilted_taps_forward(a.tap_pts.ref, a.rotations.ref, planes, 2, 0.1,
                                               nullptr, a.tap_features.ref, w, 0);
      },
      "kplanes_tilted_taps(): expected a workspace of at least 1 bytes");
  // The query reads metadata only, like the backward's.
  std::vector<TensorRef> meta_planes = a.plane_refs;
  for (TensorRef& r : meta_planes) r.data = nullptr;
  TensorRef pts = a.pts.ref, rotations = a.rotations.ref;
  pts.data = rotations.data = nullptr;
  EXPECT_EQ(fieldfuse::kplanes_tilted_forward_workspace_size(pts, rotations, meta_planes.data(), 2),
            1u);
}

TEST(KPlanesValidation, ValidArgumentsAreAccepted) {
  for (bool tilted : {true, false}) {
    ValidArgs a(tilted);
    EXPECT_EQ(kp_num_features(a.in), a.features_count);
    const size_t bytes = kp_workspace_size(a.in, a.grads, false);
    EXPECT_GE(bytes, 1u);
    EXPECT_LE(bytes, a.workspace_bytes);
    EXPECT_NO_THROW(a.forward());
    EXPECT_NO_THROW(a.backward());
    // The size queries read only metadata: null data pointers are fine there.
    KPlanesInputs meta = a.in;
    std::vector<TensorRef> meta_planes = a.plane_refs;
    for (TensorRef& r : meta_planes) r.data = nullptr;
    meta.pts.data = meta.tap_pts.data = meta.rotations.data = nullptr;
    meta.planes = meta_planes.data();
    EXPECT_EQ(kp_num_features(meta), a.features_count);
    EXPECT_EQ(kp_workspace_size(meta, a.grads, false), bytes);
    EXPECT_GE(fieldfuse::plane_tv_workspace_size(meta_planes.data(), 2), 1u);
  }
}

TEST(KPlanesValidation, InvalidVariant) {
  ValidArgs a;
  a.in.variant = static_cast<KPlanesVariant>(7);
  expect_error_both(a, ErrorKind::Value, {"variant"});
}

TEST(KPlanesValidation, PtsWrongShape) {
  for (int variant = 0; variant < 3; ++variant) {
    ValidArgs a;
    if (variant == 0) a.in.pts.sizes[1] = 4;  // [5, 4]
    if (variant == 1) a.in.pts.ndim = 1;      // [5]
    if (variant == 2) a.in.pts.ndim = 3;      // [5, 3, 0]
    expect_error_both(a, ErrorKind::Value, {"pts", "[B, 3]"});
  }
}

TEST(KPlanesValidation, PtsDtype) {
  for (DType dt : {DType::Int32, DType::Float16, DType::BFloat16}) {
    ValidArgs a;
    a.in.pts.dtype = dt;
    expect_error_both(a, ErrorKind::Type, {"pts", fieldfuse::dtype_name(dt)});
  }
}

TEST(KPlanesValidation, PtsNullData) {
  ValidArgs a;
  a.in.pts.data = nullptr;
  expect_error_both(a, ErrorKind::Value, {"pts", "null"});
}

TEST(KPlanesValidation, TapPtsWrongShape) {
  ValidArgs a;
  a.in.tap_pts.sizes[1] = 2;
  expect_error_both(a, ErrorKind::Value, {"tap_pts", "[N, 3]"});
}

TEST(KPlanesValidation, TapPtsDtypeMustMatchPts) {
  ValidArgs a;
  a.in.tap_pts.dtype = DType::Float64;
  expect_error_both(a, ErrorKind::Type, {"tap_pts", "float64", "pts"});
}

TEST(KPlanesValidation, TapPtsOnAnotherDevice) {
  ValidArgs a;
  a.in.tap_pts.device = {DeviceType::CUDA, 0};
  if (fieldfuse::build_info().cuda)
    expect_error_both(a, ErrorKind::Value, {"tap_pts", "cuda"});
  else
    expect_error_both(a, ErrorKind::NotImplemented, {"tap_pts", "cuda"});
}

TEST(KPlanesValidation, NonFiniteH) {
  for (double h : {kNaN, kInf, -kInf}) {
    ValidArgs a;
    a.in.h = h;
    expect_error_both(a, ErrorKind::Value, {"h", "finite"});
  }
  // Without tap points h is unused.
  ValidArgs a;
  a.in.h = kNaN;
  a.in.tap_pts = TensorRef{};
  EXPECT_NO_THROW(kp_forward_call(a.in, a.features.ref, TensorRef{}));
  a.grads.tap_pts = nullptr;
  EXPECT_NO_THROW(kp_backward_call(a.in, a.grad_features.ref, TensorRef{}, a.grads, false,
                                   a.workspace_ptr, a.workspace_bytes));
  // Nor with zero tap points.
  a.in.tap_pts = a.tap_pts.ref;
  a.in.tap_pts.sizes[0] = 0;
  EXPECT_NO_THROW(kp_forward_call(a.in, a.features.ref, TensorRef{}));
}

TEST(KPlanesValidation, RotationsMissingOrWrongShape) {
  {
    ValidArgs a;
    a.in.rotations = TensorRef{};  // absent: reported as a missing tensor
    expect_error_both(a, ErrorKind::Value, {"rotations"});
  }
  {
    ValidArgs a;
    a.in.rotations.sizes[2] = 4;
    expect_error_both(a, ErrorKind::Value, {"rotations", "[T, 3, 3]", "[2, 3, 4]"});
  }
  {
    ValidArgs a;
    a.in.rotations.sizes[0] = 0;
    expect_error_both(a, ErrorKind::Value, {"rotations", "at least one tilt"});
  }
}

TEST(KPlanesValidation, RotationsDtype) {
  ValidArgs a;
  a.in.rotations.dtype = DType::Float64;
  expect_error_both(a, ErrorKind::Type, {"rotations", "float64"});
}

// T comes from the rotations; every level must hold 3T planes.
TEST(KPlanesValidation, TiltCountMismatchBetweenRotationsAndPlanes) {
  {
    ValidArgs a;
    a.in.rotations.sizes[0] = 1;  // T = 1, planes hold 6
    expect_error_both(a, ErrorKind::Value, {"planes[0]", "T = 1", "[6, 2, 4, 5]"});
  }
  {
    ValidArgs a;
    a.plane_refs[1].sizes[0] = 3;
    expect_error_both(a, ErrorKind::Value, {"planes[1]", "3T", "T = 2", "[3, 3, 3, 4]"});
  }
  {
    ValidArgs a(false);
    a.plane_refs[1].sizes[0] = 6;
    expect_error_both(a, ErrorKind::Value, {"planes[1]", "[3, C, H, W]"});
  }
}

TEST(KPlanesValidation, AxisAlignedTakesNoRotations) {
  ValidArgs a(false);
  a.in.rotations = a.grad_rotations.ref;
  expect_error_both(a, ErrorKind::Value, {"rotations", "axis-aligned"});
  ValidArgs b(false);
  b.grads.rotations = &b.grad_rotations.ref;
  expect_backward_error(b, ErrorKind::Value, {"rotations", "axis-aligned"});
  expect_error([&] { kp_workspace_size(b.in, b.grads, false); }, ErrorKind::Value,
               {"rotations", "axis-aligned"});
}

TEST(KPlanesValidation, EmptyLevelList) {
  {
    ValidArgs a;
    a.in.num_levels = 0;
    expect_error_both(a, ErrorKind::Value, {"at least one level", "got 0"});
    expect_error([&] { kp_num_features(a.in); }, ErrorKind::Value, {"at least one level"});
  }
  {
    ValidArgs a;
    a.in.planes = nullptr;
    expect_error_both(a, ErrorKind::Value, {"at least one level"});
  }
}

TEST(KPlanesValidation, PlanesWrongRankOrEmptyDims) {
  {
    ValidArgs a;
    a.plane_refs[1].ndim = 3;
    expect_error_both(a, ErrorKind::Value, {"planes[1]", "[3T, C, H, W]"});
  }
  for (int dim : {1, 2, 3}) {
    ValidArgs a;
    a.plane_refs[1].sizes[dim] = 0;
    expect_error_both(a, ErrorKind::Value, {"planes[1]", "C, H, W >= 1"});
  }
}

// Corners are 32-bit: a plane side of 2^31 cells or more is refused (metadata only, never read).
TEST(KPlanesValidation, PlaneSidesOf2To31AreNotImplemented) {
  for (int dim : {2, 3}) {
    ValidArgs a;
    a.plane_refs[1].sizes[dim] = int64_t{1} << 31;
    expect_error_both(a, ErrorKind::NotImplemented, {"planes[1]", "2^31"});
  }
  ValidArgs a;  // one cell less is fine as far as the size checks go
  a.plane_refs[1].sizes[3] = (int64_t{1} << 31) - 1;
  a.plane_refs[1].data = nullptr;
  EXPECT_NO_THROW(kp_num_features(a.in));
}

TEST(KPlanesValidation, PlanesDtype) {
  {
    ValidArgs a;  // every level float64 while pts are float32
    for (TensorRef& r : a.plane_refs) r.dtype = DType::Float64;
    expect_error_both(a, ErrorKind::Type, {"planes", "float64", "float32"});
  }
  {
    ValidArgs a;  // levels disagree
    a.plane_refs[1].dtype = DType::Float64;
    expect_error_both(a, ErrorKind::Type, {"planes[1]", "float64", "planes[0]"});
  }
  {
    ValidArgs a;
    a.plane_refs[1].dtype = DType::Int64;
    expect_error_both(a, ErrorKind::Type, {"planes[1]", "int64"});
  }
}

// 16-bit planes are a CUDA feature; on the CPU they are NotImplemented, not a dtype error.
TEST(KPlanesValidation, SixteenBitPlanesOnCpuAreNotImplemented) {
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (int level : {0, 1}) {
      ValidArgs a;
      for (int l = level; l < 2; ++l) a.plane_refs[static_cast<size_t>(l)].dtype = dt;
      expect_error_both(
          a, ErrorKind::NotImplemented,
          {"planes[" + std::to_string(level) + "]", fieldfuse::dtype_name(dt), "cpu"});
    }
}

TEST(KPlanesValidation, PlanesNullData) {
  ValidArgs a;
  a.plane_refs[1].data = nullptr;
  expect_error_both(a, ErrorKind::Value, {"planes[1]", "null"});
}

TEST(KPlanesValidation, NonFiniteGates) {
  for (double bad : {kNaN, kInf, -kInf}) {
    ValidArgs a;
    a.gates[1] = bad;
    expect_error_both(a, ErrorKind::Value, {"gates[1]", "finite"});
  }
}

TEST(KPlanesValidation, FeaturesWrongShapeOrDtype) {
  {
    ValidArgs a;
    a.features.ref.sizes[1] += 1;
    expect_forward_error(a, ErrorKind::Value, {"features", "[5, 10]", "[5, 11]"});
  }
  {
    ValidArgs a;
    a.features.ref.sizes[0] -= 1;
    expect_forward_error(a, ErrorKind::Value, {"features", "[5, 10]"});
  }
  {
    ValidArgs a;
    a.features.ref.dtype = DType::Float64;
    expect_forward_error(a, ErrorKind::Type, {"features", "float64", "float32"});
  }
  {
    ValidArgs a;
    a.features.ref.data = nullptr;
    expect_forward_error(a, ErrorKind::Value, {"features", "null"});
  }
}

TEST(KPlanesValidation, FeaturesMustBeContiguous) {
  ValidArgs a;
  a.features = make_tensor<float>({ValidArgs::kPoints, a.features_count}, Layout{{1, 0}, 0});
  expect_forward_error(a, ErrorKind::Value, {"features", "contiguous"});
  ValidArgs b;
  b.tap_features = make_tensor<float>({4, ValidArgs::kTaps, b.features_count}, Layout{{}, 1});
  expect_forward_error(b, ErrorKind::Value, {"tap_features", "contiguous"});
}

// Outputs are written while the inputs are read.
TEST(KPlanesValidation, FeaturesMustNotAliasInputs) {
  {
    ValidArgs a;  // pts inside the features' span
    HostTensor<float> big = make_tensor<float>({ValidArgs::kPoints, a.features_count});
    a.features.ref.data = big.ref.data;
    a.in.pts = TensorRef::contiguous(static_cast<float*>(big.ref.data) + 3, DType::Float32, {},
                                     {ValidArgs::kPoints, 3});
    expect_forward_error(a, ErrorKind::Value, {"features", "pts", "overlap"});
  }
  {
    ValidArgs a;  // the features' span inside planes[1]
    a.features.ref.data = a.plane_refs[1].data;
    expect_forward_error(a, ErrorKind::Value, {"features", "planes[1]", "overlap"});
  }
  {
    ValidArgs a;  // rotations inside the tap features' span
    HostTensor<float> big = make_tensor<float>({4, ValidArgs::kTaps, a.features_count});
    a.tap_features.ref.data = big.ref.data;
    a.in.rotations =
        TensorRef::contiguous(static_cast<float*>(big.ref.data) + 5, DType::Float32, {}, {2, 3, 3});
    expect_forward_error(a, ErrorKind::Value, {"tap_features", "rotations", "overlap"});
  }
  {
    ValidArgs a;  // the two outputs share the tail of the features
    std::vector<float> big(200);
    a.features.ref.data = big.data();
    a.tap_features.ref.data = big.data() + 40;
    expect_forward_error(a, ErrorKind::Value, {"tap_features", "features", "overlap"});
  }
}

TEST(KPlanesValidation, TapFeatures) {
  {
    ValidArgs a;  // tap points without somewhere to put their features
    expect_error([&] { kp_forward_call(a.in, a.features.ref, TensorRef{}); }, ErrorKind::Value,
                 {forward_prefix(a), "tap_features"});
  }
  {
    ValidArgs a;
    a.tap_features.ref.sizes[1] = 4;
    expect_forward_error(a, ErrorKind::Value, {"tap_features", "[4, 3, 10]", "[4, 4, 10]"});
  }
  {
    ValidArgs a;  // float64 storage of its own, so only the dtype is wrong
    HostTensor<double> taps64 = make_tensor<double>({4, ValidArgs::kTaps, a.features_count});
    a.tap_features.ref = taps64.ref;
    expect_forward_error(a, ErrorKind::Type, {"tap_features", "float64", "features"});
  }
}

TEST(KPlanesValidation, GradientRequestsWithoutTheirInput) {
  ValidArgs a;
  a.in.tap_pts = TensorRef{};
  expect_error(
      [&] {
        kp_backward_call(a.in, a.grad_features.ref, TensorRef{}, a.grads, false, a.workspace_ptr,
                         a.workspace_bytes);
      },
      ErrorKind::Value, {backward_prefix(a), "grad_tap_pts"});
}

TEST(KPlanesValidation, UpstreamGradients) {
  {
    ValidArgs a;
    a.grad_features.ref.sizes[1] = 9;
    expect_backward_error(a, ErrorKind::Value, {"grad_features", "[5, 10]"});
  }
  {
    ValidArgs a;
    a.grad_features.ref.dtype = DType::Float64;
    expect_backward_error(a, ErrorKind::Type, {"grad_features", "float64"});
  }
  {
    ValidArgs a;
    a.grad_features.ref.data = nullptr;
    expect_backward_error(a, ErrorKind::Value, {"grad_features", "null"});
  }
  {
    ValidArgs a;
    a.grad_tap_features.ref.sizes[0] = 3;
    expect_backward_error(a, ErrorKind::Value, {"grad_tap_features", "[4, 3, 10]"});
  }
  {
    ValidArgs a;
    a.grad_tap_features.ref = TensorRef{};
    expect_backward_error(a, ErrorKind::Value, {"grad_tap_features"});
  }
  {
    ValidArgs a;
    a.grad_tap_features.ref.dtype = DType::Float64;
    expect_backward_error(a, ErrorKind::Type, {"grad_tap_features", "float64", "grad_features"});
  }
}

TEST(KPlanesValidation, PointAndRotationGradients) {
  {
    ValidArgs a;
    a.grad_pts.ref.sizes[0] = 4;
    expect_backward_error(a, ErrorKind::Value, {"grad_pts", "pts", "[5, 3]"});
  }
  {
    ValidArgs a;
    a.grad_pts.ref.dtype = DType::Float64;
    expect_backward_error(a, ErrorKind::Type, {"grad_pts", "float64"});
  }
  {
    ValidArgs a;
    a.grad_pts.ref.strides[0] = 0;
    expect_backward_error(a, ErrorKind::Value, {"grad_pts", "stride 0"});
  }
  {
    ValidArgs a;
    a.grad_pts.ref.data = a.pts.ref.data;
    expect_backward_error(a, ErrorKind::Value, {"grad_pts", "pts", "overlap"});
  }
  {
    ValidArgs a;
    a.grad_pts.ref.data = a.grad_features.ref.data;
    expect_backward_error(a, ErrorKind::Value, {"grad_pts", "grad_features", "overlap"});
  }
  {
    ValidArgs a;
    a.grad_tap_pts.ref.data = a.grad_tap_features.ref.data;
    expect_backward_error(a, ErrorKind::Value, {"grad_tap_pts", "grad_tap_features", "overlap"});
  }
  {
    ValidArgs a;
    a.grad_tap_pts.ref.sizes[1] = 2;
    expect_backward_error(a, ErrorKind::Value, {"grad_tap_pts", "tap_pts"});
  }
  {
    ValidArgs a;
    a.grad_rotations.ref.sizes[0] = 1;
    expect_backward_error(a, ErrorKind::Value, {"grad_rotations", "rotations"});
  }
  {
    ValidArgs a;
    a.grad_rotations.ref.dtype = DType::Float64;
    expect_backward_error(a, ErrorKind::Type, {"grad_rotations", "float64"});
  }
  {
    ValidArgs a;
    a.grad_rotations.ref.data = a.plane_refs[0].data;
    expect_backward_error(a, ErrorKind::Value, {"grad_rotations", "planes[0]", "overlap"});
  }
}

TEST(KPlanesValidation, PlaneGradients) {
  {
    ValidArgs a;
    a.grad_plane_refs[1].sizes[3] = 5;
    expect_backward_error(a, ErrorKind::Value, {"grad_planes[1]", "planes[1]"});
  }
  {
    ValidArgs a;
    a.grad_plane_refs[1].dtype = DType::Float64;
    expect_backward_error(a, ErrorKind::Type, {"grad_planes[1]", "float64"});
  }
  {
    ValidArgs a;  // padded: gaps between rows
    a.grad_planes[1] = make_tensor<float>({6, 3, 3, 4}, Layout{{}, 1});
    a.grad_plane_refs[1] = a.grad_planes[1].ref;
    expect_backward_error(a, ErrorKind::Value, {"grad_planes[1]", "dense"});
  }
  {
    ValidArgs a;  // overlapping rows
    a.grad_plane_refs[1].strides[2] = 1;
    expect_backward_error(a, ErrorKind::Value, {"grad_planes[1]", "dense"});
  }
  {
    ValidArgs a;
    a.grad_plane_refs[1].data = a.grad_plane_refs[0].data;
    expect_backward_error(a, ErrorKind::Value, {"grad_planes[1]", "grad_planes[0]", "overlap"});
  }
  {
    ValidArgs a;
    a.grad_plane_refs[1].data = a.plane_refs[0].data;  // inside planes[0]
    expect_backward_error(a, ErrorKind::Value, {"grad_planes[1]", "planes[0]", "overlap"});
  }
  {
    ValidArgs a;
    a.grad_plane_refs[0].data = nullptr;
    expect_backward_error(a, ErrorKind::Value, {"grad_planes[0]", "null"});
  }
  {
    ValidArgs a;  // a dense permutation that is not NCHW is fine
    a.grad_planes[1] = make_tensor<float>({6, 3, 3, 4}, Layout{{3, 1, 0, 2}, 0});
    a.grad_plane_refs[1] = a.grad_planes[1].ref;
    EXPECT_NO_THROW(a.backward());
  }
}

TEST(KPlanesValidation, Workspace) {
  {
    ValidArgs a;
    a.workspace_bytes = kp_workspace_size(a.in, a.grads, false) - 1;
    expect_backward_error(a, ErrorKind::Value, {"workspace"});
  }
  {
    ValidArgs a;
    a.workspace_ptr = nullptr;
    expect_backward_error(a, ErrorKind::Value, {"workspace", "null"});
  }
  {
    ValidArgs a;
    a.workspace_ptr = reinterpret_cast<char*>(a.workspace.data()) + 4;
    a.workspace_bytes -= 8;
    expect_backward_error(a, ErrorKind::Value, {"workspace", "aligned"});
  }
}

// =================================================================================================
// plane_tv
// =================================================================================================

/// Host tensors for a list of plane_tv levels.
template <class T>
struct TvLevels {
  std::vector<HostTensor<T>> tensors;
  std::vector<TensorRef> refs;
};

template <class T>
TvLevels<T> make_tv_levels(const std::vector<nk::Level>& levels, const Layout& layout,
                           bool values = true) {
  TvLevels<T> out;
  for (const nk::Level& lv : levels) {
    const Shape shape = {lv.planes, lv.channels, lv.height, lv.width};
    out.tensors.push_back(values ? make_tensor<T>(shape, lv.values, layout)
                                 : make_tensor<T>(shape, layout));
  }
  for (const HostTensor<T>& t : out.tensors) out.refs.push_back(t.ref);
  return out;
}

/// Level shapes (C, H, W) with a size-1 H, a size-1 W and a 1×1 level among ordinary ones.
std::vector<nk::Level> tv_levels(int tilts, uint32_t seed, bool round_to_float) {
  const std::vector<LevelShape> shapes = {{2, 5, 7}, {3, 1, 6}, {2, 4, 1}, {2, 1, 1}, {4, 9, 8}};
  std::vector<nk::Level> out;
  for (size_t l = 0; l < shapes.size(); ++l) {
    nk::Level lv{3 * tilts, shapes[l].channels, shapes[l].height, shapes[l].width, {}};
    const uint32_t s = seed + static_cast<uint32_t>(l);
    lv.values =
        round_to_float ? random_values<float>(lv.numel(), s) : random_values<double>(lv.numel(), s);
    out.push_back(lv);
  }
  return out;
}

/// Runs plane_tv_forward into a strided (stride 3) out vector; returns the L terms and checks the
/// elements between them are untouched.
template <class T>
std::vector<double> tv_forward(const std::vector<TensorRef>& planes, int tilts, PlaneTVNorm norm) {
  const int levels = static_cast<int>(planes.size());
  std::vector<T> storage(static_cast<size_t>(3 * levels), T(-7.25));
  TensorRef out = TensorRef::contiguous(storage.data(), dtype_of<T>(), {}, {levels});
  out.strides[0] = 3;
  const size_t bytes = fieldfuse::plane_tv_workspace_size(planes.data(), levels);
  EXPECT_GE(bytes, 1u);
  std::vector<double> workspace((bytes + 7) / 8);
  fieldfuse::plane_tv_forward(planes.data(), levels, tilts, norm, out, workspace.data(), bytes);
  std::vector<double> terms;
  for (int l = 0; l < levels; ++l) {
    terms.push_back(static_cast<double>(storage[static_cast<size_t>(3 * l)]));
    EXPECT_EQ(storage[static_cast<size_t>(3 * l + 1)], T(-7.25)) << "wrote between out elements";
  }
  return terms;
}

struct TvCase {
  int tilts;
  bool per_cell;
  DType dtype;
  int layout;  // 0 NCHW, 1 channels-last, 2 permuted and padded
};

const Layout& tv_layout(int i) {
  static const std::vector<Layout> all = {Layout{}, Layout{{0, 2, 3, 1}, 0},
                                          Layout{{1, 0, 3, 2}, 1}};
  return all[static_cast<size_t>(i)];
}

class PlaneTVNumeric : public testing::TestWithParam<TvCase> {};

// Forward and backward against the naive loops, both norms, axis-aligned (T = 1) and tilted
// (T = 3), levels with size-1 axes (which contribute 0), several layouts of the planes and of
// their gradients; gradients start as NaN.
TEST_P(PlaneTVNumeric, MatchesNaive) {
  const TvCase& tc = GetParam();
  const PlaneTVNorm norm = tc.per_cell ? PlaneTVNorm::PerCell : PlaneTVNorm::Mean;
  dispatch(tc.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::vector<nk::Level> levels =
        tv_levels(tc.tilts, kSeed + 90, std::is_same<T, float>::value);
    const TvLevels<T> planes = make_tv_levels<T>(levels, tv_layout(tc.layout));
    const double rtol = rtol_for(tc.dtype);

    const std::vector<double> got = tv_forward<T>(planes.refs, tc.tilts, norm);
    const std::vector<nk::Sum> want = nk::plane_tv(levels, tc.tilts, tc.per_cell);
    ASSERT_EQ(got.size(), want.size());
    for (size_t l = 0; l < want.size(); ++l)
      EXPECT_NEAR(got[l], want[l].value, rtol * want[l].abs) << "level " << l;
    EXPECT_EQ(got[3], 0.0) << "a 1×1 level has no differences";
    EXPECT_GT(got[1], 0.0);
    EXPECT_GT(got[2], 0.0);

    const std::vector<double> grad_out = {0.7, -1.3, 2.0, 0.4, -0.9};
    const TvLevels<T> grads = make_tv_levels<T>(levels, tv_layout((tc.layout + 1) % 3), false);
    const HostTensor<T> go = make_tensor<T>({5}, grad_out);
    fieldfuse::plane_tv_backward(planes.refs.data(), 5, tc.tilts, norm, go.ref, grads.refs.data());
    const std::vector<nk::LevelGrad> want_grad =
        nk::plane_tv_backward(levels, tc.tilts, tc.per_cell, grad_out);
    for (size_t l = 0; l < want_grad.size(); ++l) {
      const std::vector<double> g = grads.tensors[l].logical();
      ASSERT_EQ(g.size(), want_grad[l].value.size());
      int reported = 0;
      for (size_t e = 0; e < g.size(); ++e)
        if (!(std::fabs(g[e] - want_grad[l].value[e]) <= rtol * want_grad[l].abs[e]) &&
            reported++ < 5)
          ADD_FAILURE() << "grad_planes[" << l << "][" << e << "]: got " << g[e] << ", want "
                        << want_grad[l].value[e];
    }
  });
}

std::vector<TvCase> tv_cases() {
  std::vector<TvCase> out;
  for (int tilts : {1, 3})
    for (bool per_cell : {false, true})
      for (DType dt : {DType::Float64, DType::Float32})
        for (int layout = 0; layout < 3; ++layout) out.push_back({tilts, per_cell, dt, layout});
  return out;
}

INSTANTIATE_TEST_SUITE_P(PlaneTV, PlaneTVNumeric, testing::ValuesIn(tv_cases()),
                         [](const testing::TestParamInfo<TvCase>& i) {
                           return "t" + std::to_string(i.param.tilts) +
                                  (i.param.per_cell ? "_percell" : "_mean") +
                                  (i.param.dtype == DType::Float64 ? "_f64_" : "_f32_") +
                                  std::to_string(i.param.layout);
                         });

// The backward against central differences of the library's own forward (float64). The terms are
// quadratic in the planes, so central differences are exact at any step.
TEST(PlaneTV, BackwardMatchesFiniteDifferences) {
  for (PlaneTVNorm norm : {PlaneTVNorm::Mean, PlaneTVNorm::PerCell}) {
    SCOPED_TRACE(norm == PlaneTVNorm::Mean ? "mean" : "percell");
    const int tilts = 2;
    const std::vector<nk::Level> levels = tv_levels(tilts, kSeed + 95, false);
    TvLevels<double> planes = make_tv_levels<double>(levels, Layout{{0, 2, 3, 1}, 0});
    const std::vector<double> grad_out = {1.5, -0.5, 0.8, 2.0, -1.1};
    auto loss = [&] {
      const std::vector<double> terms = tv_forward<double>(planes.refs, tilts, norm);
      double sum = 0.0;
      for (size_t l = 0; l < terms.size(); ++l) sum += grad_out[l] * terms[l];
      return sum;
    };
    const TvLevels<double> grads = make_tv_levels<double>(levels, Layout{}, false);
    const HostTensor<double> go = make_tensor<double>({5}, grad_out);
    fieldfuse::plane_tv_backward(planes.refs.data(), 5, tilts, norm, go.ref, grads.refs.data());
    for (size_t l = 0; l < levels.size(); ++l) {
      HostTensor<double>& p = planes.tensors[l];
      const std::vector<int64_t> offsets = p.offsets();
      std::vector<double> fd;
      for (int64_t off : offsets)
        fd.push_back(central_difference(p.storage[static_cast<size_t>(off)], 0.5, loss));
      expect_close_rel(grads.tensors[l].logical(), fd, 1e-9,
                       "grad_planes[" + std::to_string(l) + "]");
    }
  }
}

// With accumulate the gradient is added to what grad_planes holds: the result is the old content
// plus the overwriting backward's gradient, to the bit (one addition in the planes' dtype), for
// every layout of the planes and of the gradients and both float dtypes.
TEST(PlaneTV, BackwardAccumulateAddsToOldGradient) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    dispatch(dtype, [&](auto tag) {
      using T = decltype(tag);
      for (int layout = 0; layout < 3; ++layout) {
        SCOPED_TRACE("dtype " + std::to_string(static_cast<int>(dtype)) + ", layout " +
                     std::to_string(layout));
        const int tilts = 2;
        const std::vector<nk::Level> levels =
            tv_levels(tilts, kSeed + 99, std::is_same<T, float>::value);
        const TvLevels<T> planes = make_tv_levels<T>(levels, tv_layout(layout));
        const HostTensor<T> go =
            make_tensor<T>({5}, std::vector<double>{0.7, -1.3, 2.0, 0.4, -0.9});
        const Layout& grad_layout = tv_layout((layout + 2) % 3);
        const TvLevels<T> fresh = make_tv_levels<T>(levels, grad_layout, false);
        fieldfuse::plane_tv_backward(planes.refs.data(), 5, tilts, PlaneTVNorm::PerCell, go.ref,
                                     fresh.refs.data());
        std::vector<nk::Level> old_levels = levels;
        for (size_t l = 0; l < old_levels.size(); ++l)
          old_levels[l].values = random_values<T>(levels[l].numel(), kSeed + 200 + uint32_t(l));
        const TvLevels<T> acc = make_tv_levels<T>(old_levels, grad_layout);
        fieldfuse::plane_tv_backward(planes.refs.data(), 5, tilts, PlaneTVNorm::PerCell, go.ref,
                                     acc.refs.data(), {}, /*accumulate=*/true);
        for (size_t l = 0; l < levels.size(); ++l) {
          const std::vector<double> got = acc.tensors[l].logical();
          const std::vector<double> gradient = fresh.tensors[l].logical();
          ASSERT_EQ(got.size(), gradient.size());
          int reported = 0;
          for (size_t e = 0; e < got.size(); ++e) {
            const T want = static_cast<T>(old_levels[l].values[e]) + static_cast<T>(gradient[e]);
            if (static_cast<T>(got[e]) != want && reported++ < 5)
              ADD_FAILURE() << "grad_planes[" << l << "][" << e << "]: got " << got[e] << ", want "
                            << want;
          }
        }
      }
    });
  }
}

// A single-level list: PerCell's factor is 1 (the level is its own largest), so both norms agree.
TEST(PlaneTV, PerCellOfOneLevelEqualsMean) {
  const std::vector<nk::Level> levels = {tv_levels(2, kSeed + 97, false)[4]};
  const TvLevels<double> planes = make_tv_levels<double>(levels, Layout{});
  EXPECT_TRUE(same_bits(tv_forward<double>(planes.refs, 2, PlaneTVNorm::PerCell),
                        tv_forward<double>(planes.refs, 2, PlaneTVNorm::Mean)));
}

// ---- plane_tv validation -----------------------------------------------------------------------

struct TvArgs {
  TvLevels<float> planes, grads;
  HostTensor<float> out, grad_out;
  std::vector<double> workspace = std::vector<double>(1 << 12);
  size_t workspace_bytes = (1 << 12) * sizeof(double);
  int num_levels = 2, tilts = 2;
  PlaneTVNorm norm = PlaneTVNorm::Mean;
  const TensorRef* grad_planes = nullptr;

  TvArgs() {
    std::vector<nk::Level> levels = tv_levels(2, 3u, true);
    levels.resize(2);
    planes = make_tv_levels<float>(levels, Layout{});
    grads = make_tv_levels<float>(levels, Layout{}, false);
    out = make_tensor<float>({2});
    grad_out = make_tensor<float>({2}, std::vector<double>{1.0, 0.5});
    grad_planes = grads.refs.data();
  }
  void forward() {
    fieldfuse::plane_tv_forward(planes.refs.data(), num_levels, tilts, norm, out.ref,
                                workspace.data(), workspace_bytes);
  }
  void backward() {
    fieldfuse::plane_tv_backward(planes.refs.data(), num_levels, tilts, norm, grad_out.ref,
                                 grad_planes);
  }
};

void expect_tv_both(TvArgs& a, ErrorKind kind, const std::vector<std::string>& parts) {
  std::vector<std::string> f = parts, b = parts;
  f.push_back("plane_tv(): ");
  b.push_back("plane_tv_backward(): ");
  expect_error([&] { a.forward(); }, kind, f);
  expect_error([&] { a.backward(); }, kind, b);
}

TEST(PlaneTVValidation, ValidArgumentsAreAccepted) {
  TvArgs a;
  EXPECT_NO_THROW(a.forward());
  EXPECT_NO_THROW(a.backward());
}

TEST(PlaneTVValidation, LevelsAndTilts) {
  {
    TvArgs a;
    a.num_levels = 0;
    expect_tv_both(a, ErrorKind::Value, {"at least one level"});
    expect_error([&] { fieldfuse::plane_tv_workspace_size(a.planes.refs.data(), 0); },
                 ErrorKind::Value, {"plane_tv(): ", "at least one level"});
    expect_error([&] { fieldfuse::plane_tv_workspace_size(nullptr, 2); }, ErrorKind::Value,
                 {"at least one level"});
  }
  {
    TvArgs a;
    a.tilts = 0;
    expect_tv_both(a, ErrorKind::Value, {"num_tilts", "got 0"});
  }
  {
    TvArgs a;
    a.tilts = 1;  // planes hold 6 = 3·2
    expect_tv_both(a, ErrorKind::Value, {"planes[0]", "num_tilts = 1", "[6, 2, 5, 7]"});
  }
  {
    TvArgs a;
    a.planes.refs[1].sizes[0] = 3;
    expect_tv_both(a, ErrorKind::Value, {"planes[1]", "[3, 3, 1, 6]"});
  }
  {
    TvArgs a;
    a.planes.refs[1].ndim = 3;
    expect_tv_both(a, ErrorKind::Value, {"planes[1]", "[3T, C, H, W]"});
  }
  {
    TvArgs a;
    a.planes.refs[0].ndim = 1;
    expect_error([&] { fieldfuse::plane_tv_workspace_size(a.planes.refs.data(), 2); },
                 ErrorKind::Value, {"plane_tv(): ", "planes[0]"});
  }
}

TEST(PlaneTVValidation, Norm) {
  TvArgs a;
  a.norm = static_cast<PlaneTVNorm>(9);
  expect_tv_both(a, ErrorKind::Value, {"norm"});
}

TEST(PlaneTVValidation, PlaneDtypes) {
  {
    TvArgs a;
    a.planes.refs[1].dtype = DType::Float64;
    expect_tv_both(a, ErrorKind::Type, {"planes[1]", "float64", "planes[0]"});
  }
  {
    TvArgs a;
    a.planes.refs[0].dtype = DType::Int32;
    expect_tv_both(a, ErrorKind::Type, {"planes[0]", "int32"});
  }
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    TvArgs a;
    for (TensorRef& r : a.planes.refs) r.dtype = dt;
    expect_tv_both(a, ErrorKind::NotImplemented, {"planes[0]", fieldfuse::dtype_name(dt)});
  }
}

TEST(PlaneTVValidation, Out) {
  {
    TvArgs a;
    a.out = make_tensor<float>({3});
    expect_error([&] { a.forward(); }, ErrorKind::Value, {"plane_tv(): ", "out", "[2]"});
  }
  {
    TvArgs a;
    a.out.ref.dtype = DType::Float64;
    expect_error([&] { a.forward(); }, ErrorKind::Type, {"plane_tv(): ", "out", "float64"});
  }
  {
    TvArgs a;
    a.out.ref.data = a.planes.refs[1].data;
    expect_error([&] { a.forward(); }, ErrorKind::Value,
                 {"plane_tv(): ", "out", "planes[1]", "overlap"});
  }
  {
    TvArgs a;
    a.out.ref.data = nullptr;
    expect_error([&] { a.forward(); }, ErrorKind::Value, {"plane_tv(): ", "out", "null"});
  }
  {
    TvArgs a;
    a.workspace_bytes = fieldfuse::plane_tv_workspace_size(a.planes.refs.data(), 2) - 1;
    expect_error([&] { a.forward(); }, ErrorKind::Value, {"plane_tv(): ", "workspace"});
  }
}

TEST(PlaneTVValidation, Gradients) {
  {
    TvArgs a;
    a.grad_out = make_tensor<float>({1}, std::vector<double>{1.0});
    expect_error([&] { a.backward(); }, ErrorKind::Value, {"plane_tv_backward(): ", "grad_out"});
  }
  {
    TvArgs a;
    a.grad_out.ref.dtype = DType::Float64;
    expect_error([&] { a.backward(); }, ErrorKind::Type, {"plane_tv_backward(): ", "grad_out"});
  }
  {
    TvArgs a;
    a.grad_planes = nullptr;
    expect_error([&] { a.backward(); }, ErrorKind::Value, {"plane_tv_backward(): ", "grad_planes"});
  }
  {
    TvArgs a;
    a.grads.refs[1].sizes[2] = 2;
    expect_error([&] { a.backward(); }, ErrorKind::Value,
                 {"plane_tv_backward(): ", "grad_planes[1]", "planes[1]"});
  }
  {
    TvArgs a;
    a.grads.refs[1].dtype = DType::Float64;
    expect_error([&] { a.backward(); }, ErrorKind::Type,
                 {"plane_tv_backward(): ", "grad_planes[1]", "float64"});
  }
  {
    TvArgs a;
    a.grads.refs[0].strides[1] = 0;
    expect_error([&] { a.backward(); }, ErrorKind::Value,
                 {"plane_tv_backward(): ", "grad_planes[0]", "stride 0"});
  }
  {
    TvArgs a;
    a.grads.refs[1].data = a.planes.refs[0].data;  // inside planes[0]
    expect_error([&] { a.backward(); }, ErrorKind::Value,
                 {"plane_tv_backward(): ", "grad_planes[1]", "planes[0]", "overlap"});
  }
  {
    TvArgs a;
    a.grads.refs[1].data = a.grad_out.ref.data;
    expect_error([&] { a.backward(); }, ErrorKind::Value,
                 {"plane_tv_backward(): ", "grad_planes[1]", "grad_out", "overlap"});
  }
}

}  // namespace
}  // namespace fftest
