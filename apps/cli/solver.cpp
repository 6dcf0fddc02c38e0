// SPDX-License-Identifier: Apache-2.0
// Minimisers of F(x) = 0.5‖x − y‖² + λ·TV(x) on a Backend: restarted FISTA and dual Frank-Wolfe.
//
// Note [solver choice]
// The library offers TV values and (sub)gradients, not the difference operator D itself, so the
// solvers are built from those two calls plus element-wise steps.
// - sq and iso (eps > 0) are smooth, and F is 1-strongly convex with an L-Lipschitz gradient
//   (L = 1 + Lipschitz of λ∇TV). FISTA with step 1/L is the optimal first-order method for that
//   class; the adaptive gradient restart of O'Donoghue & Candès (2015) recovers the linear rate
//   that strong convexity allows without having to know the local curvature, and stops the
//   oscillations that plain momentum shows once it overshoots.
// - l1 is non-smooth, where plain subgradient steps crawl at O(1/sqrt(k)). Its dual, however, is
//   min_{|p| <= 1} 0.5‖y − λDᵀp‖² with x = y − λDᵀp, and Frank-Wolfe on that box needs exactly what
//   the library has: the linear minimiser is s = sign(Dx), and λDᵀs is tv_l1_3d_backward with
//   upstream gradients λ. Every iterate x stays the primal point of a feasible dual p, the exact
//   line search on the quadratic dual is closed-form, the step converges at O(1/k), and the
//   Frank-Wolfe gap −⟨x, t − x⟩ (t = y − λDᵀs) equals the primal-dual gap, a free certificate of
//   F(x) − min F.
#include "solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "cli_error.h"
#include "core/ordered_sum.h"
#include "fieldfuse/metrics.h"

namespace fieldfuse::cli {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ‖v‖, floored at the smallest normal double so an all-zero input gives bounds of 0, not 0/0.
double floored_norm(const std::vector<float>& values) {
  const double sum_of_squares = fieldfuse::detail::ordered_sum(
      static_cast<std::int64_t>(values.size()),
      [&](std::int64_t i) { return static_cast<double>(values[i]) * values[i]; });
  return std::max(std::sqrt(sum_of_squares), std::numeric_limits<double>::min());
}

// The device arrays and evaluations both solvers share.
class Problem {
 public:
  Problem(Backend& backend, const SolverSettings& settings, const Volume& noisy,
          const Volume* clean, double psnr_data_range)
      : backend_(backend),
        count_(noisy.numel()),
        psnr_data_range_(psnr_data_range),
        noisy_norm_(floored_norm(noisy.voxels)),
        noisy_(backend.allocate_floats(count_)),
        clean_(clean != nullptr ? backend.allocate_floats(count_) : Buffer()),
        tv_(backend, settings.kind, noisy_.floats(), noisy.depth, noisy.height, noisy.width,
            settings.lambda, settings.eps) {
    backend_.upload(noisy_.data(), noisy.voxels.data(), noisy_.bytes());
    if (clean != nullptr) backend_.upload(clean_.data(), clean->voxels.data(), clean_.bytes());
  }

  std::int64_t count() const { return count_; }
  float* noisy() const { return noisy_.floats(); }
  TvTerm& tv() { return tv_; }
  Backend& backend() { return backend_; }

  Buffer new_volume_copy_of_noisy() {
    Buffer volume = backend_.allocate_floats(count_);
    backend_.copy(volume.data(), noisy_.data(), volume.bytes());
    return volume;
  }

  double objective(float* x) {
    const double data = backend_.run(count_, SquaredDistanceArgs{x, noisy_.floats()}).first;
    return 0.5 * data + tv_.value(x);
  }

  double psnr(float* x) {
    if (clean_.data() == nullptr) return kNaN;
    const double squared_error =
        backend_.run(count_, SquaredDistanceArgs{x, clean_.floats()}).first;
    return psnr_from_mse(squared_error / static_cast<double>(count_), psnr_data_range_);
  }

  double noisy_norm() const { return noisy_norm_; }

  void download(float* x, Volume& out) {
    backend_.download(out.voxels.data(), x, static_cast<std::size_t>(count_) * sizeof(float));
  }

 private:
  Backend& backend_;
  std::int64_t count_;
  double psnr_data_range_;
  double noisy_norm_;
  Buffer noisy_;
  Buffer clean_;
  TvTerm tv_;
};

// Note [no silent NaN]
// Float32 arithmetic overflows for extreme inputs (lambda near 1e30, intensities spanning 1e38):
// λ·∇TV becomes infinite and the iterates NaN. Every reduction the solvers take anyway covers all
// voxels, so a non-finite sum is how such a run shows itself; it stops the solver with an error
// rather than handing back a NaN volume as a result.
void require_finite(double value, const char* what, std::int64_t iteration, const char* method) {
  if (std::isfinite(value)) return;
  throw runtime_error(std::string(method) + " produced a non-finite " + what + " at iteration " +
                      std::to_string(iteration) +
                      ": lambda or the input's intensities are too extreme for the float32 "
                      "solver (try a smaller --lambda, or rescale the input)");
}

// The volumes handed to the solver must be finite: a NaN would spread to every voxel it touches.
void require_finite_volume(const Volume& volume, const char* name) {
  std::int64_t count = 0;
  const std::int64_t first = find_non_finite(volume.voxels, &count);
  if (first < 0) return;
  throw input_error(std::string("solve_tv_denoising(): the ") + name + " volume has " +
                    std::to_string(count) + " non-finite value" + (count == 1 ? "" : "s") +
                    " (the first at flat index " + std::to_string(first) +
                    "); the solver needs finite values");
}

bool progress_due(const SolverSettings& settings, std::int64_t iteration, bool last) {
  return settings.progress_every > 0 && (last || iteration % settings.progress_every == 0);
}

SolverOutcome run_fista(Problem& problem, const SolverSettings& settings,
                        const ProgressFn& progress, Volume& denoised) {
  Backend& backend = problem.backend();
  const std::int64_t count = problem.count();
  SolverOutcome outcome;
  outcome.method = "FISTA with adaptive restart";
  outcome.gap = kNaN;
  outcome.step_size = 1.0 / (1.0 + problem.tv().gradient_lipschitz());

  Buffer current = problem.new_volume_copy_of_noisy();  // x_k
  Buffer next = backend.allocate_floats(count);         // x_(k+1)
  Buffer extrapolated = problem.new_volume_copy_of_noisy();
  Buffer tv_gradient = backend.allocate_floats(count);
  double t = 1.0;  // the FISTA momentum sequence
  for (std::int64_t k = 1; k <= settings.max_iterations; ++k) {
    problem.tv().gradient(extrapolated.floats(), tv_gradient.floats());
    const PairSum sums =
        backend.run(count, GradientStepArgs{extrapolated.floats(), problem.noisy(),
                                            tv_gradient.floats(), current.floats(), next.floats(),
                                            static_cast<float>(outcome.step_size)});
    require_finite(sums.first + sums.second, "gradient step", k, "FISTA");
    // Restart when the step goes against the gradient at the extrapolated point.
    double momentum = 0.0;
    if (sums.first > 0.0) {
      t = 1.0;
      ++outcome.restarts;
    } else {
      const double t_next = 0.5 * (1.0 + std::sqrt(1.0 + 4.0 * t * t));
      momentum = (t - 1.0) / t_next;
      t = t_next;
    }
    backend.run(count, ExtrapolateArgs{next.floats(), current.floats(), extrapolated.floats(),
                                       static_cast<float>(momentum)});
    std::swap(current, next);
    outcome.iterations = k;
    // ‖∇F(z)‖ = ‖z − next‖ / step.
    outcome.distance_bound = std::sqrt(sums.second) / outcome.step_size / problem.noisy_norm();
    outcome.converged = outcome.distance_bound <= settings.tolerance;
    const bool last = outcome.converged || k == settings.max_iterations;
    if (progress && progress_due(settings, k, last)) {
      progress({k, problem.objective(current.floats()), problem.psnr(current.floats()),
                outcome.distance_bound});
    }
    if (outcome.converged) break;
  }
  outcome.objective = problem.objective(current.floats());
  require_finite(outcome.objective, "objective", outcome.iterations, "FISTA");
  problem.download(current.floats(), denoised);
  return outcome;
}

SolverOutcome run_frank_wolfe(Problem& problem, const SolverSettings& settings,
                              const ProgressFn& progress, Volume& denoised) {
  Backend& backend = problem.backend();
  const std::int64_t count = problem.count();
  SolverOutcome outcome;
  outcome.method = "Frank-Wolfe on the dual, exact line search";
  outcome.step_size = kNaN;

  Buffer current = problem.new_volume_copy_of_noisy();  // x(p) for p = 0
  // Always holds a feasible iterate (the first one until a better certificate comes), so the
  // returned volume is never uninitialised memory.
  Buffer best = problem.new_volume_copy_of_noisy();
  Buffer tv_gradient = backend.allocate_floats(count);
  double best_gap = std::numeric_limits<double>::infinity();
  const char* const method = "Frank-Wolfe";
  for (std::int64_t k = 0;; ++k) {
    problem.tv().gradient(current.floats(), tv_gradient.floats());
    const PairSum sums = backend.run(
        count, FrankWolfeSumsArgs{current.floats(), problem.noisy(), tv_gradient.floats()});
    require_finite(sums.first + sums.second, "duality gap", k, method);
    const double gap = sums.first;
    // The gap is not monotone; keep the iterate with the best certificate.
    if (gap < best_gap) {
      best_gap = gap;
      backend.copy(best.data(), current.data(), best.bytes());
    }
    outcome.iterations = k;
    const double distance_bound = std::sqrt(2.0 * std::max(gap, 0.0)) / problem.noisy_norm();
    outcome.converged = distance_bound <= settings.tolerance;
    const bool last = outcome.converged || k == settings.max_iterations;
    if (k > 0 && progress && progress_due(settings, k, last)) {
      progress(
          {k, problem.objective(current.floats()), problem.psnr(current.floats()), distance_bound});
    }
    if (last) break;
    // Exact minimiser over γ ∈ [0, 1] of the dual 0.5‖x + γ(t − x)‖².
    const double gamma = sums.second > 0.0 ? std::clamp(gap / sums.second, 0.0, 1.0) : 0.0;
    backend.run(count, FrankWolfeMoveArgs{current.floats(), problem.noisy(), tv_gradient.floats(),
                                          static_cast<float>(gamma)});
  }
  outcome.gap = best_gap;
  outcome.distance_bound = std::sqrt(2.0 * std::max(best_gap, 0.0)) / problem.noisy_norm();
  outcome.objective = problem.objective(best.floats());
  require_finite(outcome.objective, "objective", outcome.iterations, method);
  problem.download(best.floats(), denoised);
  return outcome;
}

}  // namespace

SolverOutcome solve_tv_denoising(Backend& backend, const SolverSettings& settings,
                                 const Volume& noisy, const Volume* clean, double psnr_data_range,
                                 const ProgressFn& progress, Volume& denoised) {
  require_finite_volume(noisy, "noisy");
  if (clean != nullptr) require_finite_volume(*clean, "clean");
  denoised = Volume(noisy.depth, noisy.height, noisy.width);
  Problem problem(backend, settings, noisy, clean, psnr_data_range);
  if (settings.kind == TvKind::L1) return run_frank_wolfe(problem, settings, progress, denoised);
  return run_fista(problem, settings, progress, denoised);
}

}  // namespace fieldfuse::cli
