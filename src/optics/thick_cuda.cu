// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the thick transfer function: the shared pipeline as kernels and cuFFT, enqueued on
// the caller's stream.
#include "core/cuda_launch.cuh"
#include "core/dispatch.h"
#include "optics/exec_cuda.cuh"
#include "optics/thick_drivers.h"
#include "optics/thick_pipeline.h"

namespace fieldfuse::detail::optics {

void thick_transfer_cuda(const ThickCall& call) {
  cuda::DeviceGuard guard(call.device, call.op);
  dispatch_float_types(call.op, call.real_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CudaExec exec(call.op, call.stream);
    run_thick_transfer<CudaExec, T>(exec, call);
  });
}

}  // namespace fieldfuse::detail::optics
