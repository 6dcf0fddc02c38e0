// SPDX-License-Identifier: Apache-2.0
// Tests of the render family's per-sample math (render_math.h) against a naive front-to-back
// composite in long double and its finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "render/render_math.h"

namespace fftest {
namespace {

namespace rd = fieldfuse::detail::render;

constexpr uint32_t kSeed = 20261122u;  // fixed, so a failure reproduces

/// A ray with C = 1 and every output's upstream gradient, composited naively in long double:
/// L = g_rgb·rgb + g_depth·depth + g_opacity·opacity + Σ g_w·w + g_T·T_final (+ bg·T_final·g_rgb).
struct Ray {
  std::vector<long double> sigma, delta, colour, t, g_w;
  long double g_rgb = 0, g_depth = 0, g_opacity = 0, g_trans = 0, background = 0, prefix = 1;
  long double threshold = 0;

  /// The loss, and through `count` the number of composited samples.
  long double loss(int64_t* count = nullptr) const {
    long double trans = prefix, rgb = 0, depth = 0, opacity = 0, weights = 0;
    int64_t n = 0;
    for (size_t s = 0; s < sigma.size(); ++s) {
      // exp and expm1 rather than 1 − exp(·): at depth 40 that subtraction would lose 2% even in
      // long double.
      const long double a = -std::expm1(-sigma[s] * delta[s]);
      const long double w = a * trans;
      rgb += w * colour[s];
      depth += w * t[s];
      opacity += w;
      weights += g_w[s] * w;
      trans *= std::exp(-sigma[s] * delta[s]);
      ++n;
      if (trans <= threshold) break;
    }
    if (count != nullptr) *count = n;
    rgb += trans * background;
    return g_rgb * rgb + g_depth * depth + g_opacity * opacity + weights + g_trans * trans;
  }
};

Ray random_ray(std::mt19937& rng, int samples, double max_sigma) {
  std::uniform_real_distribution<double> unit(0.0, 1.0), signed_unit(-1.0, 1.0);
  Ray r;
  for (int s = 0; s < samples; ++s) {
    r.sigma.push_back(max_sigma * unit(rng));
    r.delta.push_back(0.05 + 0.1 * unit(rng));
    r.colour.push_back(unit(rng));
    r.t.push_back(0.1 * s);
    r.g_w.push_back(signed_unit(rng));
  }
  r.g_rgb = signed_unit(rng), r.g_depth = signed_unit(rng), r.g_opacity = signed_unit(rng);
  r.g_trans = signed_unit(rng), r.background = unit(rng), r.prefix = 0.5 + 0.5 * unit(rng);
  return r;
}

/// ∂L/∂σ_i of every composited sample by Note [stable backward], in double.
std::vector<double> stable_sigma_gradient(const Ray& r) {
  int64_t n = 0;
  r.loss(&n);
  std::vector<double> rel(n + 1);  // T' = T/T_0 from summed optical depths
  std::vector<rd::Absorption<double>> a(n);
  rel[0] = 1.0;
  double depth = 0;
  for (int64_t s = 0; s < n; ++s) {
    a[s] = rd::absorption_from_density<double>(r.sigma[s], r.delta[s]);
    depth += static_cast<double>(r.sigma[s] * r.delta[s]);
    rel[s + 1] = std::exp(-depth);
  }
  const auto q = [&](int64_t s) {
    return rd::sample_value<double>(r.g_rgb * r.colour[s], r.g_depth, r.t[s], r.g_opacity,
                                    r.g_w[s]);
  };
  std::vector<double> grad(n);
  const auto t0 = static_cast<double>(r.prefix);
  double behind = static_cast<double>(r.g_rgb * r.background + r.g_trans) * rel[n];  // V_last
  for (int64_t s = n - 1; s >= 0; --s) {
    grad[s] = t0 * static_cast<double>(r.delta[s]) *
              rd::optical_depth_gradient<double>(rel[s + 1], q(s), behind);
    behind += q(s) * a[s].alpha * rel[s];
  }
  return grad;
}

TEST(RenderMath, AbsorptionIsAccurateForSmallAndLargeDepths) {
  for (double depth : {1e-12, 1e-6, 1e-3, 0.5, 3.0, 40.0}) {
    const auto a = rd::absorption_from_density(depth, 1.0);
    EXPECT_NEAR(a.alpha, -std::expm1(-depth), 1e-17 + 1e-15 * a.alpha) << depth;
    EXPECT_DOUBLE_EQ(a.factor, std::exp(-depth)) << depth;
    EXPECT_NEAR(a.alpha + a.factor, 1.0, 2e-16) << depth;
  }
  // A tiny depth keeps its digits in a (1 − exp(−x) would round to 0 in float).
  EXPECT_GT(rd::absorption_from_density(1e-9f, 1.0f).alpha, 0.0f);
  const auto opaque = rd::absorption_from_density(std::numeric_limits<double>::infinity(), 0.1);
  EXPECT_EQ(opaque.alpha, 1.0);
  EXPECT_EQ(opaque.factor, 0.0);
  EXPECT_EQ(rd::absorption_from_alpha(1.0).factor, 0.0);
}

TEST(RenderMath, SigmaGradientMatchesFiniteDifferences) {
  std::mt19937 rng(kSeed);
  for (int trial = 0; trial < 20; ++trial) {
    Ray r = random_ray(rng, 1 + trial % 9, trial % 2 ? 3.0 : 30.0);
    const std::vector<double> grad = stable_sigma_gradient(r);
    int64_t n = 0;
    r.loss(&n);
    for (int64_t s = 0; s < n; ++s) {
      const long double h = 1e-6L * (1 + r.sigma[s]);
      Ray up = r, down = r;
      up.sigma[s] += h;
      down.sigma[s] -= h;
      const long double fd = (up.loss() - down.loss()) / (2 * h);
      EXPECT_NEAR(grad[s], static_cast<double>(fd), 1e-7 * (1 + std::fabs(grad[s])))
          << "trial " << trial << " sample " << s;
    }
  }
}

TEST(RenderMath, StableBackwardKeepsDigitsBehindAnOpaqueSurface) {
  // Behind a dense sample (optical depth 40) the gradients are ~e^-40 of the front's. The oracle
  // sums each suffix Σ_{j>i} q_j·w_j explicitly in long double; the recursion must match it to
  // double precision, where "total − prefix" would leave only noise.
  Ray r;
  for (int s = 0; s < 6; ++s) {
    r.sigma.push_back(s == 1 ? 400.0 : 0.7);
    r.delta.push_back(0.1);
    r.colour.push_back(0.2 + 0.1 * s);
    r.t.push_back(s);
    r.g_w.push_back(0.0);
  }
  r.g_rgb = 1.0;
  const std::vector<double> grad = stable_sigma_gradient(r);
  const size_t n = r.sigma.size();
  std::vector<long double> trans(n + 1), w(n);
  trans[0] = r.prefix;
  for (size_t s = 0; s < n; ++s) {
    w[s] = -std::expm1(-r.sigma[s] * r.delta[s]) * trans[s];
    trans[s + 1] = trans[s] * std::exp(-r.sigma[s] * r.delta[s]);
  }
  const long double q_bg = r.g_rgb * r.background + r.g_trans;
  for (size_t i = 2; i < n; ++i) {
    long double suffix = q_bg * trans[n];
    for (size_t j = i + 1; j < n; ++j) suffix += r.g_rgb * r.colour[j] * w[j];
    const long double expected = r.delta[i] * (r.g_rgb * r.colour[i] * trans[i + 1] - suffix);
    ASSERT_NE(expected, 0.0L);
    EXPECT_NEAR(grad[i] / static_cast<double>(expected), 1.0, 1e-12) << "sample " << i;
  }
}

TEST(RenderMath, AlphaGradientIsFiniteAndCorrectAtOne) {
  // Two samples in front of a background, the second fully opaque (so it is the last composited):
  // L = g·(a0·c0 + (1 − a0)·(a1·c1 + (1 − a1)·bg)) with T_0 = 1. At a1 = 1,
  // ∂L/∂a0 = g·(c0 − c1) and ∂L/∂a1 = g·(1 − a0)·(c1 − bg), without dividing by 1 − a1 = 0.
  const double a0 = 0.4, a1 = 1.0, c0 = 0.8, c1 = 0.5, bg = 0.3, g = 2.0;
  const auto s0 = rd::absorption_from_alpha(a0), s1 = rd::absorption_from_alpha(a1);
  const double q_bg = g * bg, rel1 = s0.factor, rel_final = rel1 * s1.factor;
  const double behind1 = q_bg * rel_final;                    // V_1
  const double behind0 = behind1 + g * c1 * s1.alpha * rel1;  // V_0
  EXPECT_DOUBLE_EQ(rd::alpha_gradient(rel1, g * c1, behind1, s1.factor, true, q_bg),
                   g * (1 - a0) * (c1 - bg));
  EXPECT_DOUBLE_EQ(rd::alpha_gradient(1.0, g * c0, behind0, s0.factor, false, q_bg), g * (c0 - c1));
  EXPECT_EQ(rd::optical_depth_gradient(rel_final, g * c1, behind1), 0.0);
}

// The per-input gradient forms both drivers call: sigma_gradient picks the density or the alpha
// form of Note [stable backward], and delta_gradient is exactly 0 behind σ = ∞ (not ∞·0 = NaN).
TEST(RenderMath, SigmaAndDeltaGradientForms) {
  const double inf = std::numeric_limits<double>::infinity();
  const double delta = 0.25, before = 0.6, after = 0.3, q = 1.5, behind = 0.2, factor = 0.5;
  EXPECT_DOUBLE_EQ(rd::sigma_gradient(false, delta, before, after, q, behind, factor, false, 0.7),
                   delta * (after * q - behind));
  EXPECT_DOUBLE_EQ(rd::sigma_gradient(true, 0.0, before, after, q, behind, factor, true, 0.7),
                   rd::alpha_gradient(before, q, behind, factor, true, 0.7));
  EXPECT_DOUBLE_EQ(rd::delta_gradient(false, 0.8, 2.0, after, q, behind),
                   0.8 * 2.0 * (after * q - behind));
  EXPECT_EQ(rd::delta_gradient(false, 0.8, inf, 0.0, q, 0.0), 0.0);      // T'_{i+1} = 0, V_i = 0
  EXPECT_EQ(rd::delta_gradient(true, 0.8, 2.0, after, q, behind), 0.0);  // alpha input: no δ
}

// The line-integral products round in the caller's compute type (float for float32 storage).
TEST(RenderMath, LineIntegralProducts) {
  static_assert(std::is_same_v<decltype(rd::line_integral_term(1.0f, 1.0f)), float>);
  EXPECT_EQ(rd::line_integral_term(3.0, 0.5), 1.5);
  EXPECT_EQ(rd::line_integral_value_gradient(0.5, -4.0), -2.0);
  EXPECT_EQ(rd::line_integral_delta_term(3.0, -4.0), -12.0);
}

TEST(RenderMath, TerminationCountsTheTerminatingSample) {
  // The spec's example: σ = [20, 0.1, 0, 20] on rays of 10, 4, 0, 6 samples, δ = 0.1, 0.01.
  const double sigmas[4] = {20, 0.1, 0, 20};
  const int lengths[4] = {10, 4, 0, 6};
  const int64_t expected[4] = {3, 4, 0, 3};
  for (int ray = 0; ray < 4; ++ray) {
    double trans = 1;
    int64_t n = 0;
    for (int s = 0; s < lengths[ray]; ++s) {
      trans *= rd::absorption_from_density(sigmas[ray], 0.1).factor;
      ++n;
      if (rd::terminates(trans, 0.01)) break;
    }
    EXPECT_EQ(n, expected[ray]) << "ray " << ray;
  }
}

TEST(RenderMath, BoxIntersection) {
  const auto span = [](double ox, double oy, double oz, double dx, double dy, double dz) {
    const double o[3] = {ox, oy, oz}, d[3] = {dx, dy, dz};
    return rd::intersect_box(o, d);
  };
  auto s = span(0, 0, -5, 0, 0, 1);  // through the centre along z
  EXPECT_TRUE(s.hit);
  EXPECT_DOUBLE_EQ(s.enter, 4.0);
  EXPECT_DOUBLE_EQ(s.exit, 6.0);
  s = span(0.3, -0.2, 0, 0, 0, -1);  // starting inside, going backwards
  EXPECT_TRUE(s.hit);
  EXPECT_DOUBLE_EQ(s.enter, -1.0);
  EXPECT_DOUBLE_EQ(s.exit, 1.0);
  EXPECT_FALSE(span(1.5, 0, -5, 0, 0, 1).hit);  // parallel to z, outside in x
  EXPECT_TRUE(span(1.0, 0, -5, 0, 0, 1).hit);   // on the x = 1 face: |o| <= 1 keeps it
  const double r = 1 / std::sqrt(3.0);
  s = span(-2, -2, -2, r, r, r);  // the main diagonal: length 2√3
  EXPECT_TRUE(s.hit);
  EXPECT_NEAR(s.exit - s.enter, 2 * std::sqrt(3.0), 1e-12);
  EXPECT_FALSE(span(-2, 0, 1.0, 1, 0, 0.5).hit);  // misses above the box
  EXPECT_FALSE(span(0, 2, 0, 1, -1, 0).hit);      // touches only the edge x = y = 1: a miss
  s = span(-1, 2, 0, 1, -1, 0);                   // crosses the corner region: x ∈ [0, 1]
  EXPECT_TRUE(s.hit);
  EXPECT_DOUBLE_EQ(s.enter, 1.0);
  EXPECT_DOUBLE_EQ(s.exit, 2.0);
}

TEST(RenderMath, SampleCountAndStep) {
  const double steps = rd::max_box_steps(0.5);  // ceil(2√3/0.5) = ceil(6.93)
  EXPECT_EQ(steps, 7.0);
  EXPECT_EQ(rd::sample_count(2.0, 0.5, steps), 5);
  EXPECT_EQ(rd::sample_count(2.0, 0.3, rd::max_box_steps(0.3)), 8);  // ceil(6.67) + 1
  EXPECT_EQ(rd::sample_count(1e-9, 0.5, steps), 2);                  // at least 2
  // A diagonal a few ulps past 2√3 (rounding) is capped at the padded capacity.
  EXPECT_EQ(rd::sample_count(2.0 * std::sqrt(3.0) * (1 + 1e-15), 2.0 * std::sqrt(3.0) / 7, steps),
            8);
  const double unit[3] = {0.0, 0.6, -0.8}, huge[3] = {3e200, 4e200, 0.0};
  EXPECT_DOUBLE_EQ(rd::direction_length(unit), 1.0);
  EXPECT_DOUBLE_EQ(rd::direction_length(huge), 5e200);  // the squares would overflow
  EXPECT_DOUBLE_EQ(rd::sample_step(2.0, int64_t{5}), 0.5);
}

}  // namespace
}  // namespace fftest
