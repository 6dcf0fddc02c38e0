// SPDX-License-Identifier: Apache-2.0
// parallel_for: the CPU drivers' one parallel loop (OpenMP static schedule when available).
#pragma once

#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace fieldfuse::detail {

/// Below this many units of work (about one voxel's stencil each) a loop runs on the calling
/// thread: waking a team costs tens of microseconds, and far more when the cores are busy.
constexpr int64_t kMinParallelWork = 32768;

/// Threads a parallel_for may use (1 without OpenMP).
inline int max_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// Runs f(i) for i in [begin, end), where each index costs about `work_per_index` units. The static
/// schedule gives each thread a fixed contiguous range and drivers write per-index partial results,
/// so outputs never depend on the thread count. `f` must not throw.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t work_per_index, const F& f) {
  const bool parallel = (end - begin) > 1 && (end - begin) * work_per_index >= kMinParallelWork;
  if (!parallel) {
    // A plain loop, not `omp parallel if (false)`: libgomp still forms a team of one for that and
    // ends it at a barrier with a futex syscall, about 0.5 µs a loop (three per small K-Planes
    // forward + backward, measured with strace and bench/host_time.py).
    for (int64_t i = begin; i < end; ++i) f(i);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (int64_t i = begin; i < end; ++i) f(i);
}

}  // namespace fieldfuse::detail
