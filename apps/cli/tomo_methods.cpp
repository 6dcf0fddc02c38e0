// SPDX-License-Identifier: Apache-2.0
// One reconstruction of `fieldfuse tomo` on a backend: SIRT or FBP through the library's tomo API,
// and the plain back projection the methods are measured against.
#include "tomo_methods.h"

#include <chrono>

#include "fieldfuse/project.h"
#include "fieldfuse/tomo.h"
#include "tomo_kplanes.h"

namespace fieldfuse::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The stack, poses and a zeroed volume in the backend's memory, with their tensor views.
struct DeviceProblem {
  Buffer stack, rotations, volume;
  TensorRef stack_ref, rotations_ref, volume_ref;

  DeviceProblem(Backend& backend, const TiltSeries& series,
                const std::array<std::int64_t, 3>& shape) {
    const Volume& s = series.stack;
    const std::int64_t voxels = shape[0] * shape[1] * shape[2];
    stack = backend.allocate_floats(s.numel());
    rotations = backend.allocate_floats(9 * s.depth);
    volume = backend.allocate_floats(voxels);
    backend.upload(stack.data(), s.voxels.data(), stack.bytes());
    backend.upload(rotations.data(), series.rotations.data(), rotations.bytes());
    const std::vector<float> zeros(static_cast<std::size_t>(voxels), 0.0f);  // SIRT's cold start
    backend.upload(volume.data(), zeros.data(), volume.bytes());
    stack_ref = backend.volume_ref(stack.floats(), s.depth, s.height, s.width);
    rotations_ref =
        TensorRef::contiguous(rotations.data(), DType::Float32, backend.device(), {s.depth, 3, 3});
    volume_ref = backend.volume_ref(volume.floats(), shape[0], shape[1], shape[2]);
  }

  Volume download(Backend& backend, const std::array<std::int64_t, 3>& shape) const {
    Volume out(shape[0], shape[1], shape[2]);
    backend.download(out.voxels.data(), volume.data(), volume.bytes());
    return out;
  }
};

}  // namespace

std::vector<double> tilt_rotations(const std::vector<double>& angles) {
  std::vector<double> rotations(9 * angles.size());
  for (std::size_t m = 0; m < angles.size(); ++m) {
    fieldfuse::tilt_rotation(angles[m], 0.0, 0.0, rotations.data() + 9 * m);
  }
  return rotations;
}

void set_tilt_rotations(TiltSeries& series) {
  const std::vector<double> rotations = tilt_rotations(series.angles);
  series.rotations.assign(rotations.begin(), rotations.end());
}

MethodResult run_method(Backend& backend, const TiltSeries& series,
                        const std::array<std::int64_t, 3>& shape, const MethodSettings& settings,
                        const MethodProgress& progress) {
  if (settings.method == TomoMethod::KPlanes) {
    return run_kplanes(backend, series, shape, settings, progress);
  }
  const Clock::time_point start = Clock::now();
  DeviceProblem problem(backend, series, shape);
  MethodResult result;
  if (settings.method == TomoMethod::Fbp) {
    Buffer workspace =
        backend.allocate(fieldfuse::fbp_workspace_size(problem.stack_ref, problem.volume_ref));
    fieldfuse::fbp(problem.stack_ref, problem.rotations_ref, TensorRef{},
                   fieldfuse::fbp_filter_from_name(settings.filter), problem.volume_ref,
                   workspace.data(), workspace.bytes(), backend.stream());
  } else {
    Buffer workspace =
        backend.allocate(fieldfuse::sirt_workspace_size(problem.stack_ref, problem.volume_ref));
    fieldfuse::SirtOptions options;
    options.iterations = static_cast<int>(settings.iterations);
    options.relaxation = settings.relaxation;
    options.positivity = settings.positivity;
    Clock::time_point last = Clock::now();
    // The residual is always wanted for the report; it costs one synchronisation per iteration.
    const fieldfuse::SirtProgress on_iteration = [&](int iteration, double residual) {
      const Clock::time_point now = Clock::now();
      result.iterations.push_back(
          {iteration, residual, std::chrono::duration<double>(now - last).count()});
      last = now;
      if (progress && settings.progress_every > 0 && iteration % settings.progress_every == 0) {
        progress(result.iterations.back(),
                 settings.progress_needs_estimate ? problem.download(backend, shape) : Volume());
        last = Clock::now();  // the download is not the iteration's time
      }
      return true;
    };
    fieldfuse::sirt(problem.stack_ref, problem.rotations_ref, TensorRef{}, options,
                    problem.volume_ref, workspace.data(), workspace.bytes(), backend.stream(),
                    on_iteration);
  }
  result.volume = problem.download(backend, shape);
  result.seconds = seconds_since(start);
  return result;
}

Volume plain_backprojection(Backend& backend, const TiltSeries& series,
                            const std::array<std::int64_t, 3>& shape) {
  DeviceProblem problem(backend, series, shape);
  fieldfuse::backproject_forward(problem.stack_ref, problem.rotations_ref, TensorRef{},
                                 problem.volume_ref, backend.stream());
  return problem.download(backend, shape);
}

}  // namespace fieldfuse::cli
