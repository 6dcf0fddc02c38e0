// SPDX-License-Identifier: Apache-2.0
// One reconstruction of `fieldfuse tomo` on a backend: SIRT, FBP or K-Planes through the library's
// tomo API, and the plain back projection the methods are measured against.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.h"
#include "fieldfuse/tomo_kplanes.h"
#include "tomo_options.h"
#include "volume.h"

namespace fieldfuse::cli {

/// A tilt series in the projector's frame (include/fieldfuse/project.h): projections [n, Hd, Wd]
/// with the tilt axis along the detector's u axis (the image width), and their poses.
struct TiltSeries {
  Volume stack;
  std::vector<double> angles;  ///< degrees
  /// Row-major 3×3 poses from fieldfuse::tilt_rotation(angle, 0, 0), as float32 (9·n values).
  std::vector<float> rotations;
};

/// Row-major 3×3 poses fieldfuse::tilt_rotation(angle, 0, 0) of `angles` (9 per angle), double.
std::vector<double> tilt_rotations(const std::vector<double>& angles);
/// Fills `series.rotations` from `series.angles`.
void set_tilt_rotations(TiltSeries& series);

struct MethodSettings {
  TomoMethod method = TomoMethod::Sirt;
  std::int64_t iterations = 0;
  double relaxation = 1.0;
  bool positivity = false;
  std::string filter;
  // K-Planes: the library's options and the checkpoint files (TomoOptions has their meaning).
  fieldfuse::KPlanesReconOptions kplanes;
  std::string checkpoint;
  std::int64_t checkpoint_every = 0;
  std::string resume;
  std::int64_t progress_every = 0;       ///< 0: no progress callbacks
  bool progress_needs_estimate = false;  ///< download the estimate for each callback (for PSNR)
};

/// What one SIRT iteration or one logged K-Planes step reports (none for FBP).
struct IterationRecord {
  std::int64_t iteration = 0;  ///< 1-based
  /// SIRT: ‖b − A·x‖/‖b‖ of the estimate before this iteration's update; K-Planes: the step's
  /// loss (before its update).
  double residual = 0.0;
  /// SIRT: wall time of this iteration; K-Planes: mean wall time per step since the last record.
  double seconds = 0.0;
};

/// What a K-Planes run reports beyond its records (tomo_kplanes.h).
struct KPlanesOutcome {
  std::vector<std::pair<std::string, std::string>> options;  ///< as trained (describe())
  std::int64_t iterations = 0;                               ///< the run's total steps
  std::int64_t first_step = 0;  ///< steps done before this run (a resumed checkpoint's)
  std::int64_t steps_run = 0;
  double train_seconds = 0.0;  ///< the steps alone: no progress exports, no checkpoints
  double normalisation = 1.0;  ///< the 95th percentile it divided the (normalised) stack by
  std::int64_t reference_projection = 0;
  std::vector<fieldfuse::KPlanesPose> poses;
  std::vector<std::int64_t> checkpoint_steps;  ///< steps at which --checkpoint was saved
};

struct MethodResult {
  Volume volume;  ///< [D, H, W] in the projector's frame and units (box lengths)
  std::vector<IterationRecord> iterations;
  double seconds = 0.0;    ///< the whole method, uploads and downloads included
  KPlanesOutcome kplanes;  ///< K-Planes only
};

/// Every `progress_every` iterations: the record and, when `progress_needs_estimate`, the current
/// estimate downloaded to the host (an empty volume otherwise, sparing the copy).
using MethodProgress = std::function<void(const IterationRecord&, const Volume& estimate)>;

/// Reconstructs `shape` [D, H, W] from `series` on `backend`.
MethodResult run_method(Backend& backend, const TiltSeries& series,
                        const std::array<std::int64_t, 3>& shape, const MethodSettings& settings,
                        const MethodProgress& progress);

/// Aᵀ·b: the unfiltered, unweighted back projection (the baseline the methods must beat).
Volume plain_backprojection(Backend& backend, const TiltSeries& series,
                            const std::array<std::int64_t, 3>& shape);

}  // namespace fieldfuse::cli
