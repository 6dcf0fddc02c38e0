// SPDX-License-Identifier: Apache-2.0
// Tests of the MLP family: σ′ and σ″ of every activation (mlp_math.h) against finite differences,
// the C++ forward and backward against naive loops, and the front's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fieldfuse/mlp.h"
#include "mlp/mlp_math.h"

namespace fftest {
namespace {

namespace m = fieldfuse::detail::mlp;
using fieldfuse::DType;
using fieldfuse::TensorRef;

constexpr uint32_t kSeed = 20261124u;  // fixed, so a failure reproduces

TEST(MlpMath, DerivativesMatchFiniteDifferences) {
  const m::ActivationParams params{2.0, 1.5, 0.1};
  const m::Activation kinds[] = {
      m::Activation::None,     m::Activation::ReLU, m::Activation::LeakyReLU,
      m::Activation::Softplus, m::Activation::Sine, m::Activation::Tanh,
      m::Activation::Sigmoid,  m::Activation::SiLU, m::Activation::Exp};
  const double h = 1e-5;
  for (const m::Activation kind : kinds) {
    for (const double p : {-2.3, -0.7, 0.4, 1.9}) {  // away from the ReLU kink
      const auto d = m::activation_derivs<double>(kind, params, p);
      const auto lo = m::activation_derivs<double>(kind, params, p - h);
      const auto hi = m::activation_derivs<double>(kind, params, p + h);
      EXPECT_NEAR(d.d1, (hi.value - lo.value) / (2 * h), 1e-6) << int(kind) << " at " << p;
      EXPECT_NEAR(d.d2, (hi.d1 - lo.d1) / (2 * h), 1e-6) << int(kind) << " at " << p;
      // The compile-time policies agree with the runtime switch.
      m::visit_activation<double>(kind, params, [&](auto act) {
        EXPECT_EQ(act.value(p), d.value);
        EXPECT_EQ(act.d1(p), d.d1);
      });
    }
  }
}

TEST(MlpMath, SoftplusFollowsPyTorchThreshold) {
  const m::Softplus<double> sp{2.0};
  EXPECT_EQ(sp.value(10.5), 10.5);  // βp = 21 > 20: exactly p
  EXPECT_EQ(sp.all(10.5).d2, 0.0);
  EXPECT_NEAR(sp.value(0.0), std::log(2.0) / 2.0, 1e-15);
}

TensorRef ref(std::vector<double>& data, std::initializer_list<int64_t> sizes) {
  return TensorRef::contiguous(data.data(), DType::Float64, {}, sizes);
}

/// y = W2 tanh(W1 x + b1) + b2 and its input and weight gradients, naively.
TEST(MlpApi, ForwardAndBackwardMatchNaiveLoops) {
  std::mt19937 rng(kSeed);
  std::normal_distribution<double> normal;
  const int64_t B = 5, I = 3, H = 16, O = 2;
  std::vector<double> x(B * I), w1(H * I), b1(H), w2(O * H), b2(O), out(B * O), g(B * O);
  for (auto* v : {&x, &w1, &b1, &w2, &b2, &g})
    for (double& e : *v) e = 0.5 * normal(rng);
  TensorRef weights[2] = {ref(w1, {H, I}), ref(w2, {O, H})};
  TensorRef biases[2] = {ref(b1, {H}), ref(b2, {O})};
  fieldfuse::MLPOptions options;
  options.activation = "tanh";
  const TensorRef xr = ref(x, {B, I});
  std::vector<char> ws(fieldfuse::mlp_forward_workspace_size(xr, weights, biases, 2, options));
  fieldfuse::mlp_forward(xr, weights, biases, 2, options, ref(out, {B, O}), ws.data(), ws.size());
  std::vector<double> gx(B * I), gw1(H * I), gb1(H), gw2(O * H), gb2(O);
  TensorRef grad_x = ref(gx, {B, I});
  TensorRef grad_w[2] = {ref(gw1, {H, I}), ref(gw2, {O, H})};
  TensorRef grad_b[2] = {ref(gb1, {H}), ref(gb2, {O})};
  ws.resize(fieldfuse::mlp_backward_workspace_size(xr, weights, biases, 2, options));
  fieldfuse::mlp_backward(xr, weights, biases, 2, options, ref(g, {B, O}), &grad_x, grad_w, grad_b,
                          ws.data(), ws.size());
  std::vector<double> nw1(H * I, 0), nw2(O * H, 0);
  for (int64_t r = 0; r < B; ++r) {
    double a[H], d[H];
    for (int64_t j = 0; j < H; ++j) {
      double p = b1[j];
      for (int64_t i = 0; i < I; ++i) p += w1[j * I + i] * x[r * I + i];
      a[j] = std::tanh(p);
    }
    for (int64_t o = 0; o < O; ++o) {
      double y = b2[o];
      for (int64_t j = 0; j < H; ++j) y += w2[o * H + j] * a[j];
      EXPECT_NEAR(out[r * O + o], y, 1e-13);
      for (int64_t j = 0; j < H; ++j) nw2[o * H + j] += g[r * O + o] * a[j];
    }
    for (int64_t j = 0; j < H; ++j) {
      double s = 0;
      for (int64_t o = 0; o < O; ++o) s += g[r * O + o] * w2[o * H + j];
      d[j] = s * (1 - a[j] * a[j]);
      for (int64_t i = 0; i < I; ++i) nw1[j * I + i] += d[j] * x[r * I + i];
    }
    for (int64_t i = 0; i < I; ++i) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j) s += d[j] * w1[j * I + i];
      EXPECT_NEAR(gx[r * I + i], s, 1e-13);
    }
  }
  for (int64_t e = 0; e < H * I; ++e) EXPECT_NEAR(gw1[e], nw1[e], 1e-13);
  for (int64_t e = 0; e < O * H; ++e) EXPECT_NEAR(gw2[e], nw2[e], 1e-13);
}

TEST(MlpApi, RejectsHiddenWidthNotMultipleOf16) {
  std::vector<double> x(6), w1(15 * 3), w2(2 * 15);
  TensorRef weights[2] = {ref(w1, {15, 3}), ref(w2, {2, 15})};
  try {
    fieldfuse::mlp_forward_workspace_size(ref(x, {2, 3}), weights, nullptr, 2, {});
    FAIL() << "expected an error";
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(e.kind(), fieldfuse::ErrorKind::Value);
    EXPECT_EQ(std::string(e.what()).rfind("mlp(): expected weights[0] to have a hidden width", 0),
              0u)
        << e.what();
  }
}

}  // namespace
}  // namespace fftest
