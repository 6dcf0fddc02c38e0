// SPDX-License-Identifier: Apache-2.0
// The `kplanes` method of `fieldfuse tomo`: trains the library's KPlanesReconstruction on the tilt
// series, with progress, checkpoints and the volume export.
#include "tomo_kplanes.h"

#include <chrono>

namespace fieldfuse::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

}  // namespace

MethodResult run_kplanes(Backend& backend, const TiltSeries& series,
                         const std::array<std::int64_t, 3>& shape, const MethodSettings& settings,
                         const MethodProgress& progress) {
  const Clock::time_point start = Clock::now();
  const Volume& s = series.stack;
  // The class copies the (host) stack to the training device itself.
  const TensorRef stack = host_view(s);
  fieldfuse::KPlanesReconstruction recon(stack, series.angles.data(),
                                         static_cast<std::int64_t>(series.angles.size()),
                                         settings.kplanes, backend.device(), backend.stream());
  if (!settings.resume.empty()) recon.load_checkpoint(settings.resume);

  const std::int64_t voxels = shape[0] * shape[1] * shape[2];
  Buffer volume = backend.allocate_floats(voxels);
  const TensorRef volume_ref = backend.volume_ref(volume.floats(), shape[0], shape[1], shape[2]);
  // The field's density is in the units of the stack it normalised (by its own 95th
  // percentile): times that divisor it is in the projector's units, as SIRT's volume is.
  const double scale = recon.normalisation();
  const auto download = [&] {
    recon.export_volume(volume_ref);
    Volume out(shape[0], shape[1], shape[2]);
    backend.download(out.voxels.data(), volume.data(), volume.bytes());
    for (float& v : out.voxels) v = static_cast<float>(v * scale);
    return out;
  };

  MethodResult result;
  KPlanesOutcome& outcome = result.kplanes;
  outcome.first_step = recon.steps_done();
  outcome.iterations = recon.iterations();
  const std::int64_t record_every =
      settings.progress_every > 0 ? settings.progress_every : kplanes_record_every();
  // Training time excludes progress exports and checkpoints.
  Clock::time_point last = Clock::now();
  double paused = 0.0;
  std::int64_t last_step = outcome.first_step;
  for (std::int64_t step = outcome.first_step + 1; step <= outcome.iterations; ++step) {
    recon.step();
    const bool record = step % record_every == 0 || step == outcome.iterations;
    if (record) {
      const double loss = recon.loss();  // synchronises: the steps' time is complete
      const Clock::time_point now = Clock::now();
      const double seconds = seconds_between(last, now) - paused;
      outcome.train_seconds += seconds;
      result.iterations.push_back({step, loss, seconds / static_cast<double>(step - last_step)});
      last_step = step;
      paused = 0.0;
      if (progress && settings.progress_every > 0) {
        progress(result.iterations.back(),
                 settings.progress_needs_estimate ? download() : Volume());
      }
    }
    if (!settings.checkpoint.empty() && settings.checkpoint_every > 0 &&
        step % settings.checkpoint_every == 0 && step != outcome.iterations) {
      const Clock::time_point saving = Clock::now();
      recon.save_checkpoint(settings.checkpoint);
      outcome.checkpoint_steps.push_back(step);
      paused += seconds_between(saving, Clock::now());
    }
    if (record) last = Clock::now();
  }
  outcome.steps_run = outcome.iterations - outcome.first_step;
  result.volume = download();
  if (!settings.checkpoint.empty()) {
    recon.save_checkpoint(settings.checkpoint);
    outcome.checkpoint_steps.push_back(outcome.iterations);
  }
  outcome.options = fieldfuse::describe(recon.options());
  outcome.normalisation = recon.normalisation();
  outcome.reference_projection = recon.reference_projection();
  outcome.poses = recon.poses();
  result.seconds = seconds_between(start, Clock::now());
  return result;
}

}  // namespace fieldfuse::cli
