// SPDX-License-Identifier: Apache-2.0
// shared_optics_3d on CUDA: one elementwise kernel writing pupil, propagation kernel and Green's
// function.
#include "core/cuda_launch.cuh"
#include "core/dispatch.h"
#include "optics/exec_cuda.cuh"
#include "optics/shared_optics_drivers.h"

namespace fieldfuse::detail::optics {

void shared_optics_3d_cuda(const MicroscopeSettings& s, const ThickGeometry& g,
                           const TensorRef& pupil, const TensorRef& propagation,
                           const TensorRef& greens, Stream stream) {
  cuda::DeviceGuard guard(pupil.device.index, "shared_optics_3d");
  dispatch_float_types("shared_optics_3d", pupil.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SharedOptics3d<T> f = shared_optics_functor<T>(s, g, pupil, propagation, greens);
    CudaExec("shared_optics_3d", stream).for_each(f.Y * f.X, f);
  });
}

}  // namespace fieldfuse::detail::optics
