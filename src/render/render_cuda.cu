// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the render family. Volume rendering, line integrals and the ray-box fill and
// gradient run one warp per ray (render_warp.cuh, Note [warp march], Note [ray-box warp]); the
// ray-box counts, one span per ray and a single store, run the per-ray routine of render_ray.h on
// one thread per ray, as the CPU does. Nothing uses atomics, so every result is deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda_launch.cuh"
#include "render/render_drivers.h"
#include "render/render_ray.h"
#include "render/render_warp.cuh"

namespace fieldfuse::detail::render {

// The 16-bit types convert through float (their several conversion operators make a direct cast
// to double ambiguous).
template <>
struct Widen<__half> {
  template <class T = double>
  FF_HOST_DEVICE FF_FORCE_INLINE static T of(__half x) {
    return static_cast<T>(__half2float(x));
  }
};
template <>
struct Widen<__nv_bfloat16> {
  template <class T = double>
  FF_HOST_DEVICE FF_FORCE_INLINE static T of(__nv_bfloat16 x) {
    return static_cast<T>(__bfloat162float(x));
  }
};

namespace {

constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / cuda::kWarpSize;

/// A per-ray routine as a functor type, so one kernel template launches each; `call` names the
/// routine's instance for storage type S. kMinBlocks is the resident blocks of 128 threads per SM
/// the register allocation must allow: 8 (64 registers) for the streaming routines, which gain
/// from more warps in flight; 6 (80 registers) for the render backward's fixed-channel instances
/// (Note [channel instances]; 4% faster than 5 on the H100) and 5 (96) for its generic one, which
/// spills under 80 (under 64 it ran 1.5× slower); 8 for the ray-box fill and 6 for its gradient,
/// whose float64 instance spills at 64 (sm_90, ptxas -v); 1 (no cap) for the ray-box counts.
#define FIELDFUSE_RAY_FUNCTOR(name, min_blocks, Args, ...)                 \
  struct name {                                                            \
    static constexpr int kMinBlocks = min_blocks;                          \
    template <class S>                                                     \
    __device__ FF_FORCE_INLINE static void run(const Args& a, int64_t r) { \
      __VA_ARGS__(a, r);                                                   \
    }                                                                      \
  };

/// The same for the warp routines, which also take the layout policy L (Note [dense layout]).
#define FIELDFUSE_LAYOUT_FUNCTOR(name, min_blocks, Args, ...) \
  template <class L>                                          \
  FIELDFUSE_RAY_FUNCTOR(name, min_blocks, Args, __VA_ARGS__)

/// The render routines for layout L and kChannels channels (Note [channel instances]).
#define FIELDFUSE_RENDER_FUNCTOR(name, min_blocks, ...) \
  template <class L, int kChannels>                     \
  FIELDFUSE_RAY_FUNCTOR(name, min_blocks, VolumeRenderArgs, __VA_ARGS__)

FIELDFUSE_RENDER_FUNCTOR(RenderForward, 8, render_ray_forward_warp<S, L, kChannels, false>)
FIELDFUSE_RENDER_FUNCTOR(RenderForwardKeepingState, 8,
                         render_ray_forward_warp<S, L, kChannels, true>)
FIELDFUSE_RENDER_FUNCTOR(RenderBackward, kChannels > 0 ? 6 : 5,
                         render_ray_backward_warp<S, L, kChannels>)
FIELDFUSE_LAYOUT_FUNCTOR(LineForwardScalar, 8, LineIntegralArgs,
                         line_integral_ray_forward_warp<S, L, 1>)
FIELDFUSE_LAYOUT_FUNCTOR(LineForward, 8, LineIntegralArgs,
                         line_integral_ray_forward_warp<S, L, kChannelBlock>)
FIELDFUSE_LAYOUT_FUNCTOR(LineBackward, 8, LineIntegralArgs, line_integral_ray_backward_warp<S, L>)
FIELDFUSE_RAY_FUNCTOR(BoxCount, 1, RayBoxArgs, ray_box_count<S>)
FIELDFUSE_RAY_FUNCTOR(BoxFill, 8, RayBoxArgs, ray_box_fill_warp<S>)
FIELDFUSE_RAY_FUNCTOR(BoxGradient, 6, RayBoxArgs, ray_box_gradient_warp<S>)
#undef FIELDFUSE_RENDER_FUNCTOR
#undef FIELDFUSE_LAYOUT_FUNCTOR
#undef FIELDFUSE_RAY_FUNCTOR

/// Who runs a ray: one thread, or a whole warp (every lane of it calls the routine together).
enum class Mapping { kThreadPerRay, kWarpPerRay };

template <class Routine, Mapping M, class S, class Args>
__global__ void __launch_bounds__(kThreads, Routine::kMinBlocks)
    ray_kernel(const Args a, int64_t rays) {
  constexpr int kPerBlock = M == Mapping::kWarpPerRay ? kWarpsPerBlock : kThreads;
  const int worker = M == Mapping::kWarpPerRay ? static_cast<int>(threadIdx.x) / cuda::kWarpSize
                                               : static_cast<int>(threadIdx.x);
  // r is the same in every lane of a warp-per-ray worker, so whole warps enter and leave the loop.
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kPerBlock + worker; r < rays;
       r += static_cast<int64_t>(gridDim.x) * kPerBlock) {
    Routine::template run<S>(a, r);
  }
}

/// Launches `Routine` over `rays` rays on the args' stream, dispatching the storage dtype.
template <class Routine, Mapping M, class Args>
void launch(const Args& a, int64_t rays, const char* kernel) {
  if (rays == 0) return;
  cuda::ProfileRange range(a.op);
  cuda::DeviceGuard guard(a.device.index, a.op);
  const auto stream = static_cast<cudaStream_t>(a.stream.handle);
  const int64_t per_block = M == Mapping::kWarpPerRay ? kWarpsPerBlock : kThreads;
  // Past a few hundred thousand blocks the grid-stride loop covers the rest.
  const int64_t needed = cuda::ceil_div(rays, per_block);
  const auto blocks = static_cast<unsigned>(needed < 65536 * 8 ? needed : 65536 * 8);
  cuda::dispatch_float_types(a.op, a.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    ray_kernel<Routine, M, S><<<blocks, kThreads, 0, stream>>>(a, rays);
    cuda::check_launch(a.op, kernel, stream);
  });
}

bool dense(const Vec& v) { return !v.present() || v.stride == 1; }
bool dense(const Mat& m, int64_t channels) {
  return !m.present() || (m.stride0 == channels && (channels == 1 || m.stride1 == 1));
}

/// Whether every per-sample tensor of a render call is dense (Note [dense layout]).
bool dense(const VolumeRenderArgs& a) {
  return dense(a.sigmas) && dense(a.delta_ts) && dense(a.ts) && dense(a.weights) &&
         dense(a.grad_weights) && dense(a.grad_sigmas) && dense(a.grad_delta_ts) &&
         dense(a.grad_ts) && dense(a.rgbs, a.channels) && dense(a.grad_rgbs, a.channels);
}

bool dense(const LineIntegralArgs& a) {
  return dense(a.delta_ts) && dense(a.grad_delta_ts) && dense(a.values, a.channels) &&
         dense(a.grad_values, a.channels);
}

/// Launches Routine<Dense> or Routine<Strided> by the layout of the call's per-sample tensors.
template <template <class> class Routine, class Args>
void launch_warps(const Args& a, const char* kernel) {
  if (dense(a)) {
    launch<Routine<Dense>, Mapping::kWarpPerRay>(a, a.rays.count, kernel);
  } else {
    launch<Routine<Strided>, Mapping::kWarpPerRay>(a, a.rays.count, kernel);
  }
}

/// Launches a render routine's instance for the call's layout and channel count (Note [dense
/// layout], Note [channel instances]).
template <template <class, int> class Routine>
void launch_render(const VolumeRenderArgs& a, const char* kernel) {
  constexpr Mapping kWarp = Mapping::kWarpPerRay;
  if (!dense(a)) return launch<Routine<Strided, 0>, kWarp>(a, a.rays.count, kernel);
  switch (a.channels) {
    case 1:
      return launch<Routine<Dense, 1>, kWarp>(a, a.rays.count, kernel);
    case 3:
      return launch<Routine<Dense, 3>, kWarp>(a, a.rays.count, kernel);
    default:
      return launch<Routine<Dense, 0>, kWarp>(a, a.rays.count, kernel);
  }
}

}  // namespace

void volume_render_forward_cuda(const VolumeRenderArgs& a) {
  if (a.ray_state.present()) {
    launch_render<RenderForwardKeepingState>(a, "render_forward");
  } else {
    launch_render<RenderForward>(a, "render_forward");
  }
}
void volume_render_backward_cuda(const VolumeRenderArgs& a) {
  launch_render<RenderBackward>(a, "render_backward");
}
void line_integral_forward_cuda(const LineIntegralArgs& a) {
  // Scalar values (the tomography case) get a kernel without the channel block's registers.
  if (a.channels == 1) {
    launch_warps<LineForwardScalar>(a, "line_integral_forward");
  } else {
    launch_warps<LineForward>(a, "line_integral_forward");
  }
}
void line_integral_backward_cuda(const LineIntegralArgs& a) {
  launch_warps<LineBackward>(a, "line_integral_backward");
}
void ray_box_counts_cuda(const RayBoxArgs& a) {
  launch<BoxCount, Mapping::kThreadPerRay>(a, a.num_rays, "ray_box_counts");
}
void ray_box_forward_cuda(const RayBoxArgs& a) {
  launch<BoxFill, Mapping::kWarpPerRay>(a, a.num_rays, "ray_box_fill");
}
void ray_box_backward_cuda(const RayBoxArgs& a) {
  launch<BoxGradient, Mapping::kWarpPerRay>(a, a.num_rays, "ray_box_gradient");
}

}  // namespace fieldfuse::detail::render
