// SPDX-License-Identifier: Apache-2.0
// CPU driver of optimize_tiles: the shared pipeline over OpenMP loops and Eigen's FFT, scratch in a
// host vector.
#include <vector>

#include "core/dispatch.h"
#include "optics/exec_cpu.h"
#include "optics/tiles_drivers.h"
#include "optics/tiles_pipeline.h"

namespace fieldfuse::detail::optics {

void optimize_tiles_cpu(const TilesCall& call) {
  dispatch_float_types(call.op, call.real_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CpuExec exec;
    std::vector<double> scratch;  // double elements: aligned for every scalar the buffers hold
    run_optimize_tiles<CpuExec, T>(exec, call, [&](std::size_t bytes) -> void* {
      scratch.assign(bytes / sizeof(double) + 1, 0.0);
      return scratch.data();
    });
  });
}

}  // namespace fieldfuse::detail::optics
