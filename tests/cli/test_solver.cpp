// SPDX-License-Identifier: Apache-2.0
// Tests of the denoising solvers on the CPU backend, against closed forms and certificates.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backend.h"
#include "cli_error.h"
#include "fieldfuse/core.h"
#include "solver.h"
#include "tv_term.h"

namespace fieldfuse::cli {
namespace {

Volume noisy_blocks(std::int64_t d, std::int64_t h, std::int64_t w, unsigned seed) {
  Volume volume(d, h, w);
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t j = 0; j < h; ++j)
      for (std::int64_t k = 0; k < w; ++k) {
        const float block = (i < d / 2 && j > h / 3) ? 1.0f : 0.2f;
        volume.voxels[static_cast<std::size_t>((i * h + j) * w + k)] = block + normal(engine);
      }
  return volume;
}

SolverSettings settings_for(TvKind kind, double lambda) {
  SolverSettings settings;
  settings.kind = kind;
  settings.lambda = lambda;
  settings.eps = 1e-4;
  settings.max_iterations = 5000;
  settings.tolerance = 1e-6;
  return settings;
}

// (DᵀD x)[v]: Σ over axes of 2x[v] − x[prev] − x[next], missing neighbours left out.
double laplacian_at(const Volume& x, std::int64_t i, std::int64_t j, std::int64_t k) {
  double sum = 0.0;
  const auto term = [&](std::int64_t a, std::int64_t b, std::int64_t c) {
    if (a < 0 || b < 0 || c < 0 || a >= x.depth || b >= x.height || c >= x.width) return;
    sum += static_cast<double>(x.at(i, j, k)) - x.at(a, b, c);
  };
  term(i - 1, j, k), term(i + 1, j, k), term(i, j - 1, k), term(i, j + 1, k), term(i, j, k - 1),
      term(i, j, k + 1);
  return sum;
}

TEST(Solver, SquaredTvSolvesTheNormalEquations) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  const Volume noisy = noisy_blocks(6, 7, 8, 1);
  const double lambda = 0.3;
  Volume x;
  const SolverOutcome outcome = solve_tv_denoising(backend, settings_for(TvKind::Squared, lambda),
                                                   noisy, nullptr, 1.0, {}, x);
  EXPECT_TRUE(outcome.converged);
  // The minimiser of 0.5‖x − y‖² + λ‖Dx‖² satisfies x + 2λ·DᵀD·x = y.
  double worst = 0.0;
  for (std::int64_t i = 0; i < x.depth; ++i)
    for (std::int64_t j = 0; j < x.height; ++j)
      for (std::int64_t k = 0; k < x.width; ++k) {
        const double residual =
            x.at(i, j, k) + 2.0 * lambda * laplacian_at(x, i, j, k) - noisy.at(i, j, k);
        worst = std::max(worst, std::abs(residual));
      }
  EXPECT_LT(worst, 1e-4);
}

TEST(Solver, IsotropicTvConvergesBelowTheNoisyObjective) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  const Volume noisy = noisy_blocks(10, 9, 8, 2);
  Volume x;
  SolverSettings settings = settings_for(TvKind::Isotropic, 0.1);
  const SolverOutcome outcome = solve_tv_denoising(backend, settings, noisy, nullptr, 1.0, {}, x);
  EXPECT_TRUE(outcome.converged);
  EXPECT_LE(outcome.distance_bound, settings.tolerance);
  // F(y) = λ·TV(y): starting from the data, the minimum must be lower.
  settings.max_iterations = 1;
  settings.lambda = 0.0;  // one step with λ = 0 returns y itself, so its objective is 0
  Volume same;
  EXPECT_NEAR(solve_tv_denoising(backend, settings, noisy, nullptr, 1.0, {}, same).objective, 0.0,
              1e-9);
  EXPECT_EQ(same.voxels, noisy.voxels);
  EXPECT_GT(outcome.objective, 0.0);
}

TEST(Solver, FrankWolfeGapCertifiesTheObjectiveAndProgressIsReported) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  const Volume noisy = noisy_blocks(8, 8, 8, 3);
  SolverSettings settings = settings_for(TvKind::L1, 0.05);
  settings.max_iterations = 300;
  settings.tolerance = 0.0;
  settings.progress_every = 100;
  std::vector<ProgressReport> reports;
  Volume x;
  const SolverOutcome outcome = solve_tv_denoising(
      backend, settings, noisy, &noisy, 1.0, [&](const ProgressReport& r) { reports.push_back(r); },
      x);
  EXPECT_EQ(outcome.iterations, 300);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports.back().iteration, 300);
  EXPECT_TRUE(std::isfinite(reports.back().psnr));
  EXPECT_GE(outcome.gap, 0.0);
  // A longer run gets closer to min F; the certificate must already bound that difference.
  settings.max_iterations = 3000;
  settings.progress_every = 0;
  Volume better;
  const SolverOutcome longer =
      solve_tv_denoising(backend, settings, noisy, nullptr, 1.0, {}, better);
  EXPECT_LE(longer.objective, outcome.objective + 1e-6);
  EXPECT_LE(outcome.objective - longer.objective, outcome.gap + 1e-6);
}

TEST(Solver, ConstantVolumeIsAFixedPointForEveryFunctional) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  Volume flat(5, 6, 7);
  std::fill(flat.voxels.begin(), flat.voxels.end(), 0.25f);
  for (const TvKind kind : {TvKind::Squared, TvKind::Isotropic, TvKind::L1}) {
    Volume x;
    const SolverOutcome outcome =
        solve_tv_denoising(backend, settings_for(kind, 0.5), flat, nullptr, 1.0, {}, x);
    EXPECT_TRUE(outcome.converged) << tv_kind_name(kind);
    for (const float v : x.voxels) ASSERT_NEAR(v, 0.25f, 1e-6) << tv_kind_name(kind);
  }
}

// The 2-D isotropic TV of a [1, H, W] or [H, W, 1] volume, Σ over corners of the two axes of
// size > 1 of sqrt(Δa² + Δb² + eps), and its gradient, in float64 on the host.
double iso_2d(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, double eps,
              std::vector<double>* gradient) {
  double value = 0.0;
  if (gradient != nullptr) gradient->assign(x.size(), 0.0);
  for (std::int64_t r = 0; r + 1 < rows; ++r) {
    for (std::int64_t c = 0; c + 1 < cols; ++c) {
      const std::int64_t at = r * cols + c;
      const double da = static_cast<double>(x[at + cols]) - x[at];
      const double db = static_cast<double>(x[at + 1]) - x[at];
      const double s = std::sqrt(da * da + db * db + eps);
      value += s;
      if (gradient != nullptr) {
        (*gradient)[at] -= (da + db) / s;
        (*gradient)[at + cols] += da / s;
        (*gradient)[at + 1] += db / s;
      }
    }
  }
  return value;
}

// Note [iso on size-1 axes]: a [1, H, W] image once "converged" after one iteration, unchanged,
// because tv_iso_3d has no corners there. The iso term is now the 2-D form over the axes of size
// > 1: its value and gradient match the formula, and the solver denoises the image.
TEST(TvTerm, IsoOnVolumesWithSize1AxesIsTheLowerDimensionalForm) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  const double lambda = 0.5, eps = 1e-3;
  const Volume image = noisy_blocks(1, 6, 7, 7);  // [1, 6, 7]
  for (const auto& shape :
       std::vector<std::vector<std::int64_t>>{{1, 6, 7}, {6, 7, 1}, {6, 1, 7}}) {
    Buffer x = backend.allocate_floats(42);
    backend.upload(x.data(), image.voxels.data(), x.bytes());
    TvTerm term(backend, TvKind::Isotropic, x.floats(), shape[0], shape[1], shape[2], lambda, eps);
    std::vector<double> expected_gradient;
    const double expected = lambda * iso_2d(image.voxels, 6, 7, eps, &expected_gradient);
    EXPECT_NEAR(term.value(x.floats()), expected, 1e-5 * expected) << shape[0] << shape[1];
    Buffer gradient = backend.allocate_floats(42);
    term.gradient(x.floats(), gradient.floats());
    for (std::size_t i = 0; i < 42; ++i) {
      ASSERT_NEAR(gradient.floats()[i], lambda * expected_gradient[i], 1e-4) << i;
    }
  }
  // A single row [1, 1, W]: Σ sqrt(Δw² + eps).
  const std::vector<float> row = {0.0f, 1.0f, 3.0f};
  Buffer x = backend.allocate_floats(3);
  backend.upload(x.data(), row.data(), x.bytes());
  TvTerm line(backend, TvKind::Isotropic, x.floats(), 1, 1, 3, 1.0, eps);
  EXPECT_NEAR(line.value(x.floats()), std::sqrt(1.0 + eps) + std::sqrt(4.0 + eps), 1e-5);
}

TEST(Solver, IsoDenoisesImagesWithASize1AxisLikeSqAndL1Do) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  Volume clean(1, 32, 32);
  for (std::int64_t h = 0; h < 32; ++h)
    for (std::int64_t w = 0; w < 32; ++w)
      clean.voxels[static_cast<std::size_t>(h * 32 + w)] = (h > 10 && w < 20) ? 1.0f : 0.2f;
  Volume noisy = clean;
  std::mt19937 engine(9);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (float& v : noisy.voxels) v += normal(engine);
  for (const TvKind kind : {TvKind::Isotropic, TvKind::Squared, TvKind::L1}) {
    SolverSettings settings = settings_for(kind, 0.05);
    settings.tolerance = 1e-4;
    Volume x;
    const SolverOutcome outcome = solve_tv_denoising(backend, settings, noisy, nullptr, 1.0, {}, x);
    EXPECT_GT(outcome.iterations, 5) << tv_kind_name(kind);
    double before = 0.0, after = 0.0;
    for (std::size_t i = 0; i < x.voxels.size(); ++i) {
      before += std::pow(noisy.voxels[i] - clean.voxels[i], 2);
      after += std::pow(x.voxels[i] - clean.voxels[i], 2);
    }
    EXPECT_LT(after, 0.7 * before) << tv_kind_name(kind);
  }
}

// Note [no silent NaN]: lambda = 1e38 overflows float32 inside the TV gradient. FISTA used to
// return an all-NaN volume as a success, and Frank-Wolfe an uninitialised buffer (its best iterate
// was never written when every gap was NaN). Both now stop with a runtime error.
TEST(Solver, OverflowingLambdaIsAnErrorNotANaNOrGarbageVolume) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  const Volume noisy = noisy_blocks(6, 7, 8, 4);
  for (const TvKind kind : {TvKind::L1, TvKind::Isotropic, TvKind::Squared}) {
    SolverSettings settings = settings_for(kind, 1e38);
    settings.max_iterations = 20;
    Volume x;
    try {
      solve_tv_denoising(backend, settings, noisy, nullptr, 1.0, {}, x);
      ADD_FAILURE() << tv_kind_name(kind) << ": expected an error";
    } catch (const CliError& error) {
      EXPECT_EQ(error.exit_code(), 1) << error.what();
      EXPECT_NE(std::string(error.what()).find("non-finite"), std::string::npos) << error.what();
    }
  }
}

TEST(Solver, NonFiniteInputIsAnInputError) {
  Backend backend = Backend::create(DeviceChoice::Cpu);
  Volume noisy = noisy_blocks(4, 4, 4, 5);
  noisy.voxels[9] = std::numeric_limits<float>::quiet_NaN();
  Volume x;
  try {
    solve_tv_denoising(backend, settings_for(TvKind::L1, 0.1), noisy, nullptr, 1.0, {}, x);
    FAIL() << "expected an error";
  } catch (const CliError& error) {
    EXPECT_EQ(error.exit_code(), 3);
    EXPECT_NE(std::string(error.what()).find("non-finite"), std::string::npos) << error.what();
  }
}

// The CUDA path runs the same formulas (vector_ops.h) and library kernels, so it must land on the
// same volume up to float32 rounding. Skipped where no GPU is visible.
TEST(Solver, CudaMatchesCpuForEveryFunctional) {
  if (!Backend::built_with_cuda() || fieldfuse::cuda_device_count() == 0) {
    GTEST_SKIP() << "needs a CUDA build and a visible GPU";
  }
  Backend cpu = Backend::create(DeviceChoice::Cpu);
  Backend gpu = Backend::create(DeviceChoice::Cuda);
  const Volume noisy = noisy_blocks(17, 19, 23, 5);
  for (const TvKind kind : {TvKind::Squared, TvKind::Isotropic, TvKind::L1}) {
    SolverSettings settings = settings_for(kind, 0.1);
    settings.max_iterations = 50;
    settings.tolerance = 0.0;
    settings.progress_every = 25;
    Volume on_cpu, on_gpu;
    std::vector<ProgressReport> cpu_reports, gpu_reports;
    const SolverOutcome a = solve_tv_denoising(
        cpu, settings, noisy, &noisy, 1.0,
        [&](const ProgressReport& r) { cpu_reports.push_back(r); }, on_cpu);
    const SolverOutcome b = solve_tv_denoising(
        gpu, settings, noisy, &noisy, 1.0,
        [&](const ProgressReport& r) { gpu_reports.push_back(r); }, on_gpu);
    EXPECT_EQ(a.iterations, b.iterations) << tv_kind_name(kind);
    EXPECT_NEAR(a.objective, b.objective, 1e-4 * std::abs(a.objective)) << tv_kind_name(kind);
    ASSERT_EQ(cpu_reports.size(), gpu_reports.size());
    EXPECT_NEAR(cpu_reports.back().psnr, gpu_reports.back().psnr, 1e-2) << tv_kind_name(kind);
    double worst = 0.0;
    for (std::size_t i = 0; i < on_cpu.voxels.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(on_cpu.voxels[i] - on_gpu.voxels[i])));
    }
    // 50 float32 iterations with sign decisions (l1) near zero differences: allow a little drift.
    EXPECT_LT(worst, kind == TvKind::L1 ? 5e-3 : 1e-4) << tv_kind_name(kind);
  }
}

}  // namespace
}  // namespace fieldfuse::cli
