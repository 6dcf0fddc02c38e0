// SPDX-License-Identifier: Apache-2.0
// The `kplanes` method of `fieldfuse tomo`: trains the library's KPlanesReconstruction on the tilt
// series, with progress, checkpoints and the volume export.
#pragma once

#include <array>
#include <cstdint>

#include "backend.h"
#include "tomo_methods.h"

namespace fieldfuse::cli {

/// Trains from step 0 (or settings.resume) to the run's total steps on `backend`, then exports the
/// density on the voxel centres of `shape` [D, H, W]. Every `settings.progress_every` steps (or
/// every kplanes_record_every() when that is 0) the loss is recorded; when progress is on it is
/// reported, with the exported volume only if `settings.progress_needs_estimate`. The checkpoint,
/// when asked for, is saved every `checkpoint_every` steps and at the end. The result's volume is
/// in the projector's units, like SIRT's (box lengths, the normalised stack's scale).
MethodResult run_kplanes(Backend& backend, const TiltSeries& series,
                         const std::array<std::int64_t, 3>& shape, const MethodSettings& settings,
                         const MethodProgress& progress);

/// How often the loss is recorded for the report when no progress lines are printed.
constexpr std::int64_t kplanes_record_every() { return 10; }

}  // namespace fieldfuse::cli
