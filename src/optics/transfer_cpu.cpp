// SPDX-License-Identifier: Apache-2.0
// CPU driver of the thin transfer functions: the shared pipeline over OpenMP loops and Eigen's FFT.
#include "core/dispatch.h"
#include "optics/exec_cpu.h"
#include "optics/transfer_drivers.h"
#include "optics/transfer_ops.h"

namespace fieldfuse::detail::optics {

void thin_transfer_cpu(const ThinCall& call) {
  dispatch_float_types(call.op, call.real_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CpuExec exec;
    run_thin_transfer<CpuExec, T>(exec, call);
  });
}

}  // namespace fieldfuse::detail::optics
