// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the render family: one thread per ray runs the per-ray routine of render_ray.h
// (the same code the CPU driver runs), so both devices march every ray in sample order with
// float64 accumulators and no atomics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda_launch.cuh"
#include "render/render_drivers.h"
#include "render/render_ray.h"

namespace fieldfuse::detail::render {

// The 16-bit types convert through float (their several conversion operators make a direct cast
// to double ambiguous).
template <>
struct Widen<__half> {
  FF_HOST_DEVICE FF_FORCE_INLINE static double of(__half x) {
    return static_cast<double>(__half2float(x));
  }
};
template <>
struct Widen<__nv_bfloat16> {
  FF_HOST_DEVICE FF_FORCE_INLINE static double of(__nv_bfloat16 x) {
    return static_cast<double>(__bfloat162float(x));
  }
};

namespace {

constexpr int kThreads = 128;

/// A per-ray routine as a functor type, so one kernel template launches each.
#define FIELDFUSE_RAY_FUNCTOR(name, routine, Args)                         \
  struct name {                                                            \
    template <class S>                                                     \
    __device__ FF_FORCE_INLINE static void run(const Args& a, int64_t r) { \
      routine<S>(a, r);                                                    \
    }                                                                      \
  };

FIELDFUSE_RAY_FUNCTOR(RenderForward, render_ray_forward, VolumeRenderArgs)
FIELDFUSE_RAY_FUNCTOR(RenderBackward, render_ray_backward, VolumeRenderArgs)
FIELDFUSE_RAY_FUNCTOR(LineForward, line_integral_ray_forward, LineIntegralArgs)
FIELDFUSE_RAY_FUNCTOR(LineBackward, line_integral_ray_backward, LineIntegralArgs)
FIELDFUSE_RAY_FUNCTOR(BoxCount, ray_box_count, RayBoxArgs)
FIELDFUSE_RAY_FUNCTOR(BoxFill, ray_box_fill, RayBoxArgs)
FIELDFUSE_RAY_FUNCTOR(BoxGradient, ray_box_gradient, RayBoxArgs)
#undef FIELDFUSE_RAY_FUNCTOR

template <class Routine, class S, class Args>
__global__ void __launch_bounds__(kThreads) ray_kernel(const Args a, int64_t rays) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; r < rays;
       r += static_cast<int64_t>(gridDim.x) * kThreads) {
    Routine::template run<S>(a, r);
  }
}

/// Launches `Routine` over `rays` rays on the args' stream, dispatching the storage dtype.
template <class Routine, class Args>
void launch(const Args& a, int64_t rays, const char* kernel) {
  if (rays == 0) return;
  cuda::ProfileRange range(a.op);
  cuda::DeviceGuard guard(a.device.index, a.op);
  const auto stream = static_cast<cudaStream_t>(a.stream.handle);
  const auto blocks = static_cast<unsigned>(
      cuda::ceil_div(rays, kThreads) < 65536 * 8 ? cuda::ceil_div(rays, kThreads) : 65536 * 8);
  cuda::dispatch_float_types(a.op, a.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    ray_kernel<Routine, S><<<blocks, kThreads, 0, stream>>>(a, rays);
    cuda::check_launch(a.op, kernel, stream);
  });
}

}  // namespace

void volume_render_forward_cuda(const VolumeRenderArgs& a) {
  launch<RenderForward>(a, a.rays.count, "render_forward");
}
void volume_render_backward_cuda(const VolumeRenderArgs& a) {
  launch<RenderBackward>(a, a.rays.count, "render_backward");
}
void line_integral_forward_cuda(const LineIntegralArgs& a) {
  launch<LineForward>(a, a.rays.count, "line_integral_forward");
}
void line_integral_backward_cuda(const LineIntegralArgs& a) {
  launch<LineBackward>(a, a.rays.count, "line_integral_backward");
}
void ray_box_counts_cuda(const RayBoxArgs& a) { launch<BoxCount>(a, a.num_rays, "ray_box_counts"); }
void ray_box_forward_cuda(const RayBoxArgs& a) { launch<BoxFill>(a, a.num_rays, "ray_box_fill"); }
void ray_box_backward_cuda(const RayBoxArgs& a) {
  launch<BoxGradient>(a, a.num_rays, "ray_box_gradient");
}

}  // namespace fieldfuse::detail::render
