// SPDX-License-Identifier: Apache-2.0
// Minimisers of F(x) = 0.5‖x − y‖² + λ·TV(x) on a Backend: restarted FISTA and dual Frank-Wolfe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "backend.h"
#include "tv_term.h"
#include "volume.h"

namespace fieldfuse::cli {

struct SolverSettings {
  TvKind kind = TvKind::Isotropic;
  double lambda = 0.0;
  double eps = 0.0;  ///< smoothing inside the isotropic square root
  std::int64_t max_iterations = 0;
  /// Stop once the iterate is certified to lie within tolerance·‖y‖ of the minimiser (see
  /// ProgressReport::distance_bound); 0 runs every iteration.
  double tolerance = 0.0;
  std::int64_t progress_every = 0;  ///< 0: no progress reports
};

/// What a progress line shows; NaN marks what is not known.
struct ProgressReport {
  std::int64_t iteration = 0;
  double objective = 0.0;
  double psnr = 0.0;  ///< against the clean volume, when one is known
  /// A bound on ‖x − x*‖ / ‖y‖, from the 1-strong convexity of F: ‖x − x*‖ <= ‖∇F(x)‖ (FISTA,
  /// at the extrapolated point) and ‖x − x*‖² <= 2·(F(x) − F*) <= 2·gap (Frank-Wolfe).
  double distance_bound = 0.0;
};
using ProgressFn = std::function<void(const ProgressReport&)>;

struct SolverOutcome {
  std::string method;
  std::int64_t iterations = 0;
  double objective = 0.0;       ///< F at the returned volume
  bool converged = false;       ///< stopped by the tolerance rather than the iteration limit
  std::int64_t restarts = 0;    ///< FISTA momentum restarts
  double distance_bound = 0.0;  ///< the last ProgressReport::distance_bound
  double gap = 0.0;        ///< Frank-Wolfe: certified bound on F(result) − min F; NaN otherwise
  double step_size = 0.0;  ///< FISTA: 1/L; NaN otherwise
};

/// Denoises `noisy` into `denoised` (resized to match, always written on success). `clean`, when
/// not null, is used only for the PSNR in progress reports, with `psnr_data_range` as the peak.
/// A non-finite voxel in `noisy` or `clean` is an input CliError (exit 3); a run whose float32
/// arithmetic overflows (extreme lambda or intensities) is a runtime CliError (exit 1), never a
/// NaN result (Note [no silent NaN] in solver.cpp).
SolverOutcome solve_tv_denoising(Backend& backend, const SolverSettings& settings,
                                 const Volume& noisy, const Volume* clean, double psnr_data_range,
                                 const ProgressFn& progress, Volume& denoised);

}  // namespace fieldfuse::cli
