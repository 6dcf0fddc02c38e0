// SPDX-License-Identifier: Apache-2.0
// parallel_for: the CPU drivers' one parallel loop (OpenMP static schedule when available).
#pragma once

#include <cstdint>

namespace fieldfuse::detail {

/// Runs f(i) for i in [begin, end). The static schedule hands each thread a fixed contiguous range,
/// and drivers write per-index partial results, so outputs never depend on the thread count.
/// `f` must not throw.
template <class F>
void parallel_for(int64_t begin, int64_t end, const F& f) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (int64_t i = begin; i < end; ++i) f(i);
}

}  // namespace fieldfuse::detail
