// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the thin transfer functions: the shared pipeline as kernels and cuFFT, enqueued on
// the caller's stream.
#include "core/cuda_launch.cuh"
#include "core/dispatch.h"
#include "optics/exec_cuda.cuh"
#include "optics/transfer_drivers.h"
#include "optics/transfer_ops.h"

namespace fieldfuse::detail::optics {

void thin_transfer_cuda(const ThinCall& call) {
  cuda::DeviceGuard guard(call.device, call.op);
  dispatch_float_types(call.op, call.real_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CudaExec exec(call.op, call.stream);
    run_thin_transfer<CudaExec, T>(exec, call);
  });
}

}  // namespace fieldfuse::detail::optics
