// SPDX-License-Identifier: Apache-2.0
// Tests of the optim C++ API on the CPU: adam_step against a naive float64 loop over several
// steps (clipping, cosine decay, weight decay, empty tensors, the device counter), the shared
// math, and every argument check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fieldfuse/optim.h"
#include "optim/optim_math.h"
#include "tv_test_util.h"

namespace fftest {
namespace {

using fieldfuse::AdamOptions;
using fieldfuse::AdamParam;
using fieldfuse::ErrorKind;
using fieldfuse::TensorRef;

constexpr uint32_t kSeed = 14u;

/// The naive optimiser: the formulas of torch.optim.Adam, clip_grad_norm_ and CosineAnnealingLR
/// as their documentation states them, in float64, one element at a time.
struct NaiveAdam {
  std::vector<std::vector<double>> param, exp_avg, exp_avg_sq;
  std::vector<double> lr;
  int64_t t = 0;

  /// One step; returns the pre-clipping global norm.
  double step(const std::vector<std::vector<double>>& grad, const AdamOptions& o) {
    double sum = 0.0;
    for (const auto& g : grad)
      for (double x : g) sum += x * x;
    const double norm = std::sqrt(sum);
    double scale = 1.0;
    if (o.max_grad_norm > 0.0) scale = std::min(1.0, o.max_grad_norm / (norm + 1e-6));
    double factor = 1.0;
    if (o.total_steps > 0) {
      const double progress = static_cast<double>(std::min(t, o.total_steps)) / o.total_steps;
      factor = 0.5 * (1.0 + std::cos(M_PI * progress));
    }
    const double n = static_cast<double>(t + 1);
    const double bc1 = 1.0 - std::pow(o.beta1, n), bc2 = 1.0 - std::pow(o.beta2, n);
    for (std::size_t k = 0; k < param.size(); ++k) {
      for (std::size_t i = 0; i < param[k].size(); ++i) {
        double& p = param[k][i];
        double& m = exp_avg[k][i];
        double& v = exp_avg_sq[k][i];
        const double g = grad[k][i] * scale + o.weight_decay * p;
        m = o.beta1 * m + (1.0 - o.beta1) * g;
        v = o.beta2 * v + (1.0 - o.beta2) * g * g;
        const double m_hat = m / bc1, v_hat = v / bc2;
        p -= lr[k] * factor * m_hat / (std::sqrt(v_hat) + o.eps);
      }
    }
    ++t;
    return norm;
  }
};

/// Host tensors of one adam_step call in dtype T, mirrored by a NaiveAdam.
template <class T>
struct Problem {
  std::vector<std::vector<T>> param, grad, exp_avg, exp_avg_sq;
  std::vector<AdamParam> entries;
  std::vector<double> workspace;
  int64_t step = 0;
  NaiveAdam naive;
  std::mt19937 gen{kSeed};

  explicit Problem(const std::vector<int64_t>& sizes) {
    std::normal_distribution<double> normal;
    const std::size_t n = sizes.size();
    param.resize(n);
    grad.resize(n);
    exp_avg.resize(n);
    exp_avg_sq.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      const auto size = static_cast<std::size_t>(sizes[k]);
      param[k].resize(size);
      for (T& x : param[k]) x = static_cast<T>(normal(gen));
      grad[k].assign(size, T(0));
      exp_avg[k].assign(size, T(0));
      exp_avg_sq[k].assign(size, T(0));
      naive.param.emplace_back(param[k].begin(), param[k].end());
      naive.exp_avg.emplace_back(size, 0.0);
      naive.exp_avg_sq.emplace_back(size, 0.0);
      naive.lr.push_back(1e-2 / static_cast<double>(k + 1));
    }
    entries.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      const auto view = [&](std::vector<T>& v) {
        return TensorRef::contiguous(v.data(), dtype_of<T>(), {}, {sizes[k]});
      };
      entries[k] = {view(param[k]), view(grad[k]), view(exp_avg[k]), view(exp_avg_sq[k]),
                    naive.lr[k]};
    }
    workspace.resize(fieldfuse::adam_workspace_size(entries.data(), count()) / sizeof(double));
  }

  int count() const { return static_cast<int>(entries.size()); }
  TensorRef step_ref() { return TensorRef::contiguous(&step, fieldfuse::DType::Int64, {}, {1}); }

  /// Fresh random gradients of scale `scale`, in both copies.
  void new_gradients(double scale) {
    std::normal_distribution<double> normal(0.0, scale);
    for (auto& g : grad)
      for (T& x : g) x = static_cast<T>(normal(gen));
  }

  /// One step of both; returns {fieldfuse's norm, the naive norm}.
  std::pair<double, double> run(const AdamOptions& o) {
    double norm = -1.0;
    const TensorRef norm_ref = TensorRef::contiguous(&norm, fieldfuse::DType::Float64, {}, {1});
    fieldfuse::adam_step(entries.data(), count(), o, step_ref(), norm_ref, workspace.data(),
                         workspace.size() * sizeof(double));
    std::vector<std::vector<double>> g;
    for (const auto& x : grad) g.emplace_back(x.begin(), x.end());
    return {norm, naive.step(g, o)};
  }

  /// Every element of param and both moments within rtol (relative to the element's magnitude,
  /// plus `atol`) of the naive values.
  void expect_close(double rtol, double atol) const {
    for (std::size_t k = 0; k < param.size(); ++k) {
      for (std::size_t i = 0; i < param[k].size(); ++i) {
        const auto close = [&](double got, double want, const char* what) {
          EXPECT_NEAR(got, want, rtol * std::abs(want) + atol)
              << what << " of tensor " << k << " element " << i << " at step " << naive.t;
        };
        close(param[k][i], naive.param[k][i], "param");
        close(exp_avg[k][i], naive.exp_avg[k][i], "exp_avg");
        close(exp_avg_sq[k][i], naive.exp_avg_sq[k][i], "exp_avg_sq");
      }
    }
  }
};

// Sizes that exercise the chunking (Note [adam chunks]): empty tensors first, between and last,
// a single element, a tensor of exactly one chunk and ones that end mid-chunk.
const std::vector<int64_t> kSizes = {0, 3, 40000, 0, 1, 8192, 20001, 0};

/// Runs `steps` steps of both optimisers with gradients of scale `grad_scale`, checking after
/// each the state, the reported norm and the counter.
template <class T>
void check_trajectory(const AdamOptions& o, int steps, double grad_scale, double rtol,
                      double atol) {
  Problem<T> p(kSizes);
  for (int s = 0; s < steps; ++s) {
    p.new_gradients(grad_scale);
    const auto [norm, naive_norm] = p.run(o);
    EXPECT_NEAR(norm, naive_norm, 1e-12 * naive_norm) << "step " << s;
    EXPECT_EQ(p.step, s + 1);
    p.expect_close(rtol, atol);
  }
}

AdamOptions options(double max_grad_norm, int64_t total_steps, double weight_decay) {
  AdamOptions o;
  o.max_grad_norm = max_grad_norm;
  o.total_steps = total_steps;
  o.weight_decay = weight_decay;
  return o;
}

// Float64 follows the naive loop to rounding: torch's evaluation order (lerp, addcdiv) differs
// from the textbook one by a few ulps per step, and Adam's normalisation does not amplify that.
constexpr double kRtol64 = 1e-12, kAtol64 = 1e-15;
// Float32 rounds every operation of the update (about 1e-7 each) and the moments feed the next
// step, so after several steps each value is within ~1e-5 of the float64 trajectory; the
// absolute term covers parameters that pass through zero.
constexpr double kRtol32 = 2e-5, kAtol32 = 1e-6;

TEST(Optim, PlainAdamFloat64) {
  check_trajectory<double>(options(0, 0, 0), 6, 1.0, kRtol64, kAtol64);
}
TEST(Optim, PlainAdamFloat32) {
  check_trajectory<float>(options(0, 0, 0), 6, 1.0, kRtol32, kAtol32);
}

// The gradient norm of ~77000 unit normals is ~280, so max_grad_norm = 1 clips every step.
TEST(Optim, ClippingFloat64) {
  check_trajectory<double>(options(1.0, 0, 0), 6, 1.0, kRtol64, kAtol64);
}
TEST(Optim, ClippingFloat32) {
  check_trajectory<float>(options(1.0, 0, 0), 6, 1.0, kRtol32, kAtol32);
}

// A bound above the norm leaves the gradients as they are (the scale clamps at 1).
TEST(Optim, ClippingAboveTheNormIsInactive) {
  check_trajectory<double>(options(1e6, 0, 0), 3, 1.0, kRtol64, kAtol64);
}

// Six steps with T = 4: the rate decays to 0 at t = 4 and stays there (steps 5 and 6 leave the
// parameters unchanged while the moments keep updating).
TEST(Optim, CosineDecayFloat64) {
  check_trajectory<double>(options(0, 4, 0), 6, 1.0, kRtol64, kAtol64);
}
TEST(Optim, CosineDecayFloat32) {
  check_trajectory<float>(options(0, 4, 0), 6, 1.0, kRtol32, kAtol32);
}

TEST(Optim, WeightDecayClippingAndCosineFloat64) {
  check_trajectory<double>(options(1.0, 5, 0.1), 6, 1e-3, kRtol64, kAtol64);
}
TEST(Optim, WeightDecayClippingAndCosineFloat32) {
  check_trajectory<float>(options(1.0, 5, 0.1), 6, 1e-3, kRtol32, kAtol32);
}

TEST(Optim, CosineDecayHoldsTheParametersAfterTotalSteps) {
  Problem<double> p({5});
  const AdamOptions o = options(0, 2, 0);
  for (int s = 0; s < 2; ++s) {
    p.new_gradients(1.0);
    p.run(o);
  }
  const std::vector<double> before = p.param[0];
  p.new_gradients(1.0);
  p.run(o);
  EXPECT_EQ(p.param[0], before);
  EXPECT_EQ(p.step, 3);
}

// The step counter is the only state: resuming from a stored counter and moments continues the
// same trajectory.
TEST(Optim, CounterResumesTheBiasCorrection) {
  Problem<double> p({7});
  p.step = 41;
  p.naive.t = 41;
  for (int s = 0; s < 2; ++s) {
    p.new_gradients(1.0);
    p.run(options(0, 100, 0));
    p.expect_close(kRtol64, kAtol64);
  }
  EXPECT_EQ(p.step, 43);
}

// Two calls on the same inputs give the same bits (the norm's order is fixed by the sizes).
TEST(Optim, Deterministic) {
  Problem<float> a(kSizes), b(kSizes);
  a.new_gradients(1.0);
  b.new_gradients(1.0);
  const auto [norm_a, unused_a] = a.run(options(1.0, 10, 0.01));
  const auto [norm_b, unused_b] = b.run(options(1.0, 10, 0.01));
  EXPECT_EQ(norm_a, norm_b);
  EXPECT_EQ(a.param, b.param);
  EXPECT_EQ(a.exp_avg_sq, b.exp_avg_sq);
}

TEST(Optim, NoTensorsStillAdvancesTheCounter) {
  int64_t step = 5;
  double workspace[4];
  ASSERT_EQ(fieldfuse::adam_workspace_size(nullptr, 0), sizeof(workspace));
  fieldfuse::adam_step(nullptr, 0, AdamOptions{},
                       TensorRef::contiguous(&step, fieldfuse::DType::Int64, {}, {1}), TensorRef{},
                       workspace, sizeof(workspace));
  EXPECT_EQ(step, 6);
}

TEST(Optim, WorkspaceHoldsOnePartialPerChunk) {
  Problem<float> p(kSizes);
  // 0 + 1 + 5 + 0 + 1 + 1 + 3 + 0 chunks of 8192 elements, after 4 scalar slots.
  EXPECT_EQ(fieldfuse::adam_workspace_size(p.entries.data(), p.count()), 8u * (4 + 11));
}

// A NaN gradient makes the norm NaN and, as in PyTorch, the clip scale NaN: every parameter
// becomes NaN instead of the NaN being silently clamped away.
TEST(Optim, NonFiniteNormPropagates) {
  Problem<double> p({3, 2});
  p.new_gradients(1.0);
  p.grad[0][1] = std::numeric_limits<double>::quiet_NaN();
  const auto [norm, unused] = p.run(options(1.0, 0, 0));
  EXPECT_TRUE(std::isnan(norm));
  for (const auto& t : p.param)
    for (double x : t) EXPECT_TRUE(std::isnan(x));
}

TEST(OptimMath, CosineFactor) {
  using fieldfuse::detail::optim::cosine_factor;
  EXPECT_EQ(cosine_factor(0, 0), 1.0);
  EXPECT_EQ(cosine_factor(7, 0), 1.0);
  EXPECT_EQ(cosine_factor(0, 10), 1.0);
  EXPECT_NEAR(cosine_factor(5, 10), 0.5, 1e-16);
  EXPECT_NEAR(cosine_factor(10, 10), 0.0, 1e-16);
  EXPECT_EQ(cosine_factor(12, 10), cosine_factor(10, 10));
}

TEST(OptimMath, ClipScale) {
  using fieldfuse::detail::optim::clip_scale;
  EXPECT_EQ(clip_scale(5.0, 0.0), 1.0);
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_scale(0.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(4.0, 2.0), 2.0 / (4.0 + 1e-6));
  EXPECT_TRUE(std::isnan(clip_scale(std::numeric_limits<double>::quiet_NaN(), 1.0)));
  EXPECT_EQ(clip_scale(std::numeric_limits<double>::infinity(), 1.0), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Argument checks: each names adam_step, the argument, the expectation and what was given.
// ---------------------------------------------------------------------------------------------

struct ValidationCase {
  Problem<double> p{{4, 3}};
  AdamOptions o{};
  TensorRef step;
  TensorRef norm;
  double norm_value = 0.0;
  std::size_t workspace_bytes;

  ValidationCase() {
    step = p.step_ref();
    workspace_bytes = p.workspace.size() * sizeof(double);
  }
  void call() {
    fieldfuse::adam_step(p.entries.data(), p.count(), o, step, norm, p.workspace.data(),
                         workspace_bytes);
  }
};

template <class Edit>
void expect_rejected(Edit edit, ErrorKind kind, const std::vector<std::string>& parts) {
  ValidationCase c;
  edit(c);
  std::vector<std::string> all = {"adam_step(): "};
  all.insert(all.end(), parts.begin(), parts.end());
  expect_error([&] { c.call(); }, kind, all);
}

TEST(OptimValidation, AcceptsTheBaseCase) {
  ValidationCase c;
  EXPECT_NO_THROW(c.call());
  EXPECT_EQ(c.p.step, 1);
}

TEST(OptimValidation, Options) {
  using C = ValidationCase;
  expect_rejected([](C& c) { c.o.beta1 = 1.0; }, ErrorKind::Value, {"beta1", "[0, 1)", "1"});
  expect_rejected([](C& c) { c.o.beta2 = -0.1; }, ErrorKind::Value, {"beta2", "[0, 1)", "-0.1"});
  expect_rejected([](C& c) { c.o.eps = -1.0; }, ErrorKind::Value, {"eps", ">= 0", "-1"});
  expect_rejected([](C& c) { c.o.weight_decay = NAN; }, ErrorKind::Value,
                  {"weight_decay", "finite", "nan"});
  expect_rejected([](C& c) { c.o.max_grad_norm = INFINITY; }, ErrorKind::Value,
                  {"max_grad_norm", "finite", "inf"});
  expect_rejected([](C& c) { c.o.total_steps = -3; }, ErrorKind::Value,
                  {"total_steps", ">= 0", "-3"});
  expect_rejected([](C& c) { c.p.entries[1].lr = -1e-3; }, ErrorKind::Value,
                  {"params[1].lr", ">= 0", "-0.001"});
}

TEST(OptimValidation, CountAndParams) {
  int64_t step = 0;
  double workspace[4];
  const TensorRef s = TensorRef::contiguous(&step, fieldfuse::DType::Int64, {}, {1});
  expect_error([&] { fieldfuse::adam_step(nullptr, -1, {}, s, {}, workspace, 32); },
               ErrorKind::Value, {"adam_step(): ", "count >= 0", "-1"});
  expect_error([&] { fieldfuse::adam_step(nullptr, 2, {}, s, {}, workspace, 32); },
               ErrorKind::Value, {"adam_step(): ", "params", "2 AdamParam", "null"});
  expect_error([&] { fieldfuse::adam_workspace_size(nullptr, -2); }, ErrorKind::Value,
               {"adam_step(): ", "count >= 0", "-2"});
}

TEST(OptimValidation, Step) {
  using C = ValidationCase;
  expect_rejected([](C& c) { c.step.sizes[0] = 2; }, ErrorKind::Value,
                  {"step", "1 element", "[2]"});
  expect_rejected([](C& c) { c.step.dtype = fieldfuse::DType::Int32; }, ErrorKind::Type,
                  {"step", "int64", "int32"});
  expect_rejected([](C& c) { c.step.data = nullptr; }, ErrorKind::Value, {"step", "null pointer"});
  expect_rejected(
      [](C& c) {
        c.step.device = {fieldfuse::DeviceType::CUDA, 0};
      },
      fieldfuse::build_info().cuda ? ErrorKind::Value : ErrorKind::NotImplemented,
      {"step", "cuda:0"});
}

TEST(OptimValidation, GradNormOut) {
  using C = ValidationCase;
  const auto with_norm = [](C& c) {
    c.norm = TensorRef::contiguous(&c.norm_value, fieldfuse::DType::Float64, {}, {1});
  };
  expect_rejected(
      [&](C& c) {
        with_norm(c);
        c.norm.sizes[0] = 0;
      },
      ErrorKind::Value, {"grad_norm_out", "1 element", "[0]"});
  expect_rejected(
      [&](C& c) {
        with_norm(c);
        c.norm.dtype = fieldfuse::DType::Int64;
      },
      ErrorKind::Type, {"grad_norm_out", "float32 or float64", "int64"});
  if (fieldfuse::build_info().cuda) {
    expect_rejected(
        [&](C& c) {
          with_norm(c);
          c.norm.device = {fieldfuse::DeviceType::CUDA, 0};
        },
        ErrorKind::Value, {"grad_norm_out", "step", "same device", "cuda:0", "cpu"});
  }
  ValidationCase ok;
  with_norm(ok);
  ok.norm.dtype = fieldfuse::DType::Float32;  // either float type is accepted
  EXPECT_NO_THROW(ok.call());
}

TEST(OptimValidation, Tensors) {
  using C = ValidationCase;
  using fieldfuse::DType;
  expect_rejected([](C& c) { c.p.entries[0].param.dtype = DType::Int32; }, ErrorKind::Type,
                  {"params[0].param", "float32 or float64", "int32"});
  expect_rejected([](C& c) { c.p.entries[0].param.dtype = DType::Float16; },
                  ErrorKind::NotImplemented, {"params[0].param", "float16"});
  expect_rejected([](C& c) { c.p.entries[1].exp_avg.dtype = DType::Float32; }, ErrorKind::Type,
                  {"params[1].exp_avg", "float64", "params[0].param", "float32"});
  expect_rejected([](C& c) { c.p.entries[1].grad.sizes[0] = 2; }, ErrorKind::Value,
                  {"params[1].grad", "shape of params[1].param", "[3]", "[2]"});
  expect_rejected([](C& c) { c.p.entries[0].exp_avg_sq.data = nullptr; }, ErrorKind::Value,
                  {"params[0].exp_avg_sq", "null pointer"});
  expect_rejected([](C& c) { c.p.entries[1].param.sizes[0] = -1; }, ErrorKind::Value,
                  {"params[1].param", "non-negative"});
  expect_rejected(
      [](C& c) {
        c.p.entries[0].grad.sizes[0] = 2;
        c.p.entries[0].grad.strides[0] = 2;
        c.p.entries[0].param.sizes[0] = 2;
        c.p.entries[0].exp_avg.sizes[0] = 2;
        c.p.entries[0].exp_avg_sq.sizes[0] = 2;
      },
      ErrorKind::Value, {"params[0].grad", "contiguous", "[2]"});
  expect_rejected(
      [](C& c) {
        c.p.entries[1].param.device = {fieldfuse::DeviceType::CUDA, 0};
      },
      fieldfuse::build_info().cuda ? ErrorKind::Value : ErrorKind::NotImplemented,
      {"params[1].param", "cuda:0"});
}

TEST(OptimValidation, Overlaps) {
  using C = ValidationCase;
  expect_rejected([](C& c) { c.p.entries[0].grad = c.p.entries[0].param; }, ErrorKind::Value,
                  {"params[0].param", "not to share memory with params[0].grad", "overlap"});
  expect_rejected([](C& c) { c.p.entries[1].exp_avg.data = c.p.entries[0].exp_avg_sq.data; },
                  ErrorKind::Value, {"params[", "exp_avg", "share memory", "overlap"});
  expect_rejected(
      [](C& c) {
        c.step = TensorRef::contiguous(c.p.entries[1].grad.data, fieldfuse::DType::Int64, {}, {1});
      },
      ErrorKind::Value, {"step", "params[1].grad", "share memory"});
  expect_rejected(
      [](C& c) {
        c.norm = TensorRef::contiguous(static_cast<double*>(c.p.entries[0].param.data) + 2,
                                       fieldfuse::DType::Float64, {}, {1});
      },
      ErrorKind::Value, {"grad_norm_out", "params[0].param", "share memory"});
  // Gradients are only read, so two entries may share one.
  ValidationCase shared;
  shared.p.entries[1].grad.data = shared.p.entries[0].grad.data;
  EXPECT_NO_THROW(shared.call());
}

TEST(OptimValidation, Workspace) {
  using C = ValidationCase;
  expect_rejected([](C& c) { c.workspace_bytes -= 8; }, ErrorKind::Value,
                  {"workspace of at least", "bytes"});
  expect_error(
      [] {
        ValidationCase c;
        fieldfuse::adam_step(c.p.entries.data(), c.p.count(), c.o, c.step, c.norm, nullptr, 0);
      },
      ErrorKind::Value, {"adam_step(): ", "workspace", "null pointer"});
}

}  // namespace
}  // namespace fftest
