// SPDX-License-Identifier: Apache-2.0
// Tests of the hash-grid encoding: level sizes against hand-computed values, vertex rows, the
// corner weights' derivatives against finite differences, and the CPU entries against a naive
// loop and finite differences of themselves (first and second order), plus argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "encoding/hash_grid_math.h"
#include "fieldfuse/hash_grid.h"

namespace fftest {
namespace {

using fieldfuse::DType;
using fieldfuse::HashGridConfig;
using fieldfuse::TensorRef;
namespace hg = fieldfuse::detail::hash_grid;

constexpr uint32_t kSeed = 20261125u;  // fixed, so a failure reproduces

HashGridConfig config(int levels, int features, int log2_size, int base, double scale,
                      const char* interpolation = "linear") {
  HashGridConfig c;
  c.n_levels = levels;
  c.n_features_per_level = features;
  c.log2_hashmap_size = log2_size;
  c.base_resolution = base;
  c.per_level_scale = scale;
  c.interpolation = interpolation;
  return c;
}

TEST(HashGrid, NumParamsMatchesHandComputedSizes) {
  // 3-D defaults: res_l = 16·2^l; levels 0-2 are dense (16^3, 32^3, 64^3), 3-15 hashed (2^19).
  EXPECT_EQ(fieldfuse::hash_grid_num_params(3, HashGridConfig{}),
            4096 + 32768 + 262144 + 13 * 524288);
  // 2-D defaults: 16^2 ... 512^2 dense (levels 0-5), 10 hashed levels.
  EXPECT_EQ(fieldfuse::hash_grid_num_params(2, HashGridConfig{}),
            256 + 1024 + 4096 + 16384 + 65536 + 262144 + 10 * 524288);
  // res 3 in 2-D: 9 rows rounded up to 16.
  EXPECT_EQ(fieldfuse::hash_grid_num_params(2, config(1, 2, 19, 3, 2.0)), 16);
  // T = 2: the 8-rounded dense size (8) is cut to 2^T = 4 = res^D, so the level stays dense.
  EXPECT_EQ(fieldfuse::hash_grid_num_params(2, config(1, 2, 2, 2, 2.0)), 4);
  EXPECT_TRUE(hg::level_info(2, 1.0f, 2).dense);
  // per_level_scale 1.5 from N = 16: res 16 (dense), then ~24, ~36, ~54 (hashed into 2^9).
  EXPECT_EQ(fieldfuse::hash_grid_num_params(2, config(4, 1, 9, 16, 1.5)), 256 + 3 * 512);
  // res^D beyond 2^31 − 1 caps the dense size at 2^31 rows, which a T = 31 table holds: the level
  // is still hashed (50000² = 2.5e9 vertices), as in tiny-cuda-nn; 46000² = 2.1e9 fits densely.
  const hg::LevelInfo big = hg::level_info(2, 49999.0f, 31);
  EXPECT_EQ(big.rows, uint32_t{1} << 31);
  EXPECT_FALSE(big.dense);
  EXPECT_TRUE(hg::level_info(2, 45999.0f, 31).dense);
}

TEST(HashGrid, VertexRowsAreDenseOrHashedModuloRows) {
  const uint32_t v[3] = {1, 2, 3};
  // Dense: 1 + 2·5 + 3·25 = 86, modulo 80 rows (the +0.5 offset can reach one past the grid).
  EXPECT_EQ((hg::vertex_row<3>(v, 5, 80, true)), 86u % 80u);
  const uint64_t hashed = (1ull * 1u) ^ ((2ull * 2654435761ull) & 0xFFFFFFFFull) ^
                          ((3ull * 805459861ull) & 0xFFFFFFFFull);
  EXPECT_EQ((hg::vertex_row<3>(v, 5, 1u << 19, false)), hashed % (1u << 19));
}

/// Σ_c W_c·value(row_c) and its derivatives, for the finite-difference checks of the weights.
template <int D>
double interpolate(const double (&x)[D], const hg::LevelInfo& level, bool smooth, int order, int i,
                   int j) {
  hg::Axis<double> axes[D];
  for (int k = 0; k < D; ++k) axes[k] = hg::make_axis(x[k], double(level.scale), smooth);
  double sum = 0;
  for (int c = 0; c < (1 << D); ++c) {
    const auto k = hg::corner<hg::Order::kHessian, double, D>(axes, c, level);
    const double value = std::sin(0.37 * k.row + 0.1);
    sum += value * (order == 0 ? k.w : order == 1 ? k.dw[i] : k.hw[i][j]);
  }
  return sum;
}

TEST(HashGrid, CornerDerivativesMatchFiniteDifferences) {
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<double> unit(0.05, 0.95);
  const hg::LevelInfo level = hg::level_info(3, 6.0f, 19);
  const double h = 1e-6;
  for (bool smooth : {false, true}) {
    for (int trial = 0; trial < 20; ++trial) {
      double x[3] = {unit(rng), unit(rng), unit(rng)};
      for (int i = 0; i < 3; ++i) {
        double xp[3] = {x[0], x[1], x[2]}, xm[3] = {x[0], x[1], x[2]};
        xp[i] += h;
        xm[i] -= h;
        // A step across a cell border changes the cell: skip those (the weights are piecewise).
        if (std::floor(xp[i] * 6 + 0.5) != std::floor(xm[i] * 6 + 0.5)) continue;
        const double fd = (interpolate<3>(xp, level, smooth, 0, 0, 0) -
                           interpolate<3>(xm, level, smooth, 0, 0, 0)) /
                          (2 * h);
        EXPECT_NEAR(interpolate<3>(x, level, smooth, 1, i, 0), fd, 1e-6);
        for (int j = 0; j < 3; ++j) {
          const double fd2 = (interpolate<3>(xp, level, smooth, 1, j, 0) -
                              interpolate<3>(xm, level, smooth, 1, j, 0)) /
                             (2 * h);
          EXPECT_NEAR(interpolate<3>(x, level, smooth, 2, j, i), fd2, 1e-5);
        }
      }
    }
  }
}

TEST(HashGrid, ClampedCoordinatesHaveZeroDerivative) {
  for (double x : {-0.5, 1.5}) {
    const hg::Axis<double> a = hg::make_axis(x, 15.0, true);
    EXPECT_EQ(a.dw, 0.0);
    EXPECT_EQ(a.d2w, 0.0);
  }
  const hg::Axis<double> nan = hg::make_axis(std::nan(""), 15.0, false);
  EXPECT_EQ(nan.cell, 0u);  // clamped to 0: no index depends on a NaN
}

TensorRef matrix(std::vector<double>& data, int64_t rows, int64_t cols) {
  data.resize(rows * cols);
  return TensorRef::contiguous(data.data(), DType::Float64, {}, {rows, cols});
}

/// A problem with dense and hashed levels (2^6-row tables: res 4 dense, res 8 and 16 hashed).
struct Case {
  HashGridConfig cfg = config(3, 2, 6, 4, 2.0, "smoothstep");
  int64_t batch = 5, rows = 0, cols = 6;
  std::vector<double> x, params, out;
  TensorRef xr, pr, outr;

  Case() {
    rows = fieldfuse::hash_grid_num_params(3, cfg);
    std::mt19937 rng(kSeed);
    std::uniform_real_distribution<double> unit(0.02, 0.98), value(-1, 1);
    xr = matrix(x, batch, 3);
    pr = matrix(params, rows, 2);
    outr = matrix(out, batch, cols);
    for (double& v : x) v = unit(rng);
    for (double& v : params) v = value(rng);
  }
  std::vector<double> forward() {
    fieldfuse::hash_grid_forward(xr, pr, cfg, outr);
    return out;
  }
};

TEST(HashGrid, ForwardMatchesNaiveLoop) {
  Case c;
  c.cfg.interpolation = "linear";
  const std::vector<double> out = c.forward();
  for (int64_t b = 0; b < c.batch; ++b) {
    int64_t offset = 0;
    for (int l = 0; l < 3; ++l) {
      const double scale = 4.0 * std::pow(2.0, l) - 1;
      const int64_t res = static_cast<int64_t>(std::ceil(scale)) + 1;
      const int64_t rows = std::min<int64_t>((res * res * res + 7) / 8 * 8, 64);
      for (int f = 0; f < 2; ++f) {
        double expected = 0;
        for (int corner = 0; corner < 8; ++corner) {
          double w = 1;
          uint64_t dense = 0, hashed = 0, stride = 1;
          const uint64_t primes[3] = {1, 2654435761ull, 805459861ull};
          for (int i = 0; i < 3; ++i) {
            const double pos = c.x[b * 3 + i] * scale + 0.5;
            const int upper = (corner >> i) & 1;
            const double t = pos - std::floor(pos);
            w *= upper ? t : 1 - t;
            const uint64_t v = static_cast<uint64_t>(std::floor(pos)) + upper;
            dense += v * stride;
            stride *= res;
            hashed ^= (v * primes[i]) & 0xFFFFFFFFull;
          }
          const int64_t row = static_cast<int64_t>((res * res * res <= rows ? dense : hashed) %
                                                   static_cast<uint64_t>(rows));
          expected += w * c.params[(offset + row) * 2 + f];
        }
        EXPECT_NEAR(out[b * 6 + l * 2 + f], expected, 1e-12) << "b=" << b << " l=" << l;
      }
      offset += rows;
    }
    EXPECT_EQ(offset, c.rows);
  }
}

TEST(HashGrid, BackwardMatchesFiniteDifferences) {
  Case c;
  std::vector<double> g, gx, gp;
  TensorRef gr = matrix(g, c.batch, c.cols), gxr = matrix(gx, c.batch, 3),
            gpr = matrix(gp, c.rows, 2);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] = std::cos(0.3 * k);
  char ws[8];
  fieldfuse::hash_grid_backward(c.xr, c.pr, c.cfg, gr, gxr, gpr, ws, sizeof ws);
  auto loss = [&] {
    const std::vector<double> out = c.forward();
    double s = 0;
    for (std::size_t k = 0; k < out.size(); ++k) s += out[k] * g[k];
    return s;
  };
  const double h = 1e-6;
  for (std::size_t k = 0; k < c.x.size(); ++k) {
    const double x0 = c.x[k];
    c.x[k] = x0 + h;
    const double lp = loss();
    c.x[k] = x0 - h;
    const double lm = loss();
    c.x[k] = x0;
    EXPECT_NEAR(gx[k], (lp - lm) / (2 * h), 1e-5 * (1 + std::abs(gx[k])));
  }
  for (std::size_t k = 0; k < c.params.size(); k += 7) {
    const double p0 = c.params[k];
    c.params[k] = p0 + 1;
    const double lp = loss();
    c.params[k] = p0;
    EXPECT_NEAR(gp[k], lp - loss(), 1e-10);  // linear in params: an exact difference
  }
}

TEST(HashGrid, DoubleBackwardMatchesFiniteDifferencesOfBackward) {
  Case c;
  std::vector<double> g, v, u, ggo, gx, gp, bx, bp;
  TensorRef gr = matrix(g, c.batch, c.cols), vr = matrix(v, c.batch, 3), ur = matrix(u, c.rows, 2),
            ggor = matrix(ggo, c.batch, c.cols), gxr = matrix(gx, c.batch, 3),
            gpr = matrix(gp, c.rows, 2), bxr = matrix(bx, c.batch, 3), bpr = matrix(bp, c.rows, 2);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] = std::cos(0.3 * k);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = std::sin(0.7 * k + 0.2);
  for (std::size_t k = 0; k < u.size(); ++k) u[k] = std::cos(0.11 * k);
  char ws[8];
  fieldfuse::hash_grid_double_backward(c.xr, c.pr, c.cfg, gr, vr, ur, ggor, gxr, gpr, ws,
                                       sizeof ws);
  // Φ = Σ v·grad_x + Σ u·grad_params as a function of (grad_out, x, params).
  auto phi = [&] {
    fieldfuse::hash_grid_backward(c.xr, c.pr, c.cfg, gr, bxr, bpr, ws, sizeof ws);
    double s = 0;
    for (std::size_t k = 0; k < v.size(); ++k) s += v[k] * bx[k];
    for (std::size_t k = 0; k < u.size(); ++k) s += u[k] * bp[k];
    return s;
  };
  const double h = 1e-6;
  auto check = [&](std::vector<double>& input, const std::vector<double>& grad, int step,
                   const char* name) {
    for (std::size_t k = 0; k < input.size(); k += step) {
      const double x0 = input[k];
      input[k] = x0 + h;
      const double lp = phi();
      input[k] = x0 - h;
      const double lm = phi();
      input[k] = x0;
      EXPECT_NEAR(grad[k], (lp - lm) / (2 * h), 1e-5 * (1 + std::abs(grad[k]))) << name << k;
    }
  };
  check(g, ggo, 1, "grad_grad_out ");
  check(c.x, gx, 1, "grad_x ");
  check(c.params, gp, 5, "grad_params ");
}

TEST(HashGrid, ErrorsNameTheOpAndArgument) {
  Case c;
  auto message = [&](HashGridConfig cfg) {
    try {
      fieldfuse::hash_grid_forward(c.xr, c.pr, cfg, c.outr);
    } catch (const fieldfuse::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  HashGridConfig bad = c.cfg;
  bad.n_levels = 0;
  EXPECT_EQ(message(bad).rfind("hash_grid(): expected n_levels to be in [1, 32], but got 0", 0),
            0u);
  bad = c.cfg;
  bad.interpolation = "cubic";
  EXPECT_NE(message(bad).find("hash_grid(): expected interpolation"), std::string::npos);
  bad = c.cfg;
  bad.log2_hashmap_size = 7;  // other row count than params has
  EXPECT_EQ(message(bad).rfind("hash_grid(): expected params to have shape", 0), 0u);
}

}  // namespace
}  // namespace fftest
