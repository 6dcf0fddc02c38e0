// SPDX-License-Identifier: Apache-2.0
// CPU driver of the thick transfer function: the shared pipeline over OpenMP loops and Eigen's FFT.
#include "core/dispatch.h"
#include "optics/exec_cpu.h"
#include "optics/thick_drivers.h"
#include "optics/thick_pipeline.h"

namespace fieldfuse::detail::optics {

void thick_transfer_cpu(const ThickCall& call) {
  dispatch_float_types(call.op, call.real_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CpuExec exec;
    run_thick_transfer<CpuExec, T>(exec, call);
  });
}

}  // namespace fieldfuse::detail::optics
