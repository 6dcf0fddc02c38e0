// SPDX-License-Identifier: Apache-2.0
// CPU driver of the render family: OpenMP over rays, each ray marched by render_ray.h. Rays own
// disjoint outputs, so there is nothing to reduce across threads.
#include "core/dispatch.h"
#include "core/parallel.h"
#include "render/render_drivers.h"
#include "render/render_ray.h"

namespace fieldfuse::detail::render {
namespace {

/// Runs `per_ray(TypeTag<S>, r)` for every ray; `work` is the work units of one ray.
template <class F>
void over_rays(const char* op, DType dtype, int64_t rays, int64_t work, const F& per_ray) {
  dispatch_float_types(op, dtype, [&](auto tag) {
    parallel_for(0, rays, work < 1 ? 1 : work, [&](int64_t r) { per_ray(tag, r); });
  });
}

int64_t samples_per_ray(const Rays& rays) {
  return rays.count > 0 ? rays.samples / rays.count + 1 : 1;
}

}  // namespace

void volume_render_forward_cpu(const VolumeRenderArgs& a) {
  over_rays(a.op, a.dtype, a.rays.count, samples_per_ray(a.rays) * a.channels,
            [&](auto tag, int64_t r) { render_ray_forward<typename decltype(tag)::type>(a, r); });
}

void volume_render_backward_cpu(const VolumeRenderArgs& a) {
  over_rays(a.op, a.dtype, a.rays.count, 2 * samples_per_ray(a.rays) * a.channels,
            [&](auto tag, int64_t r) { render_ray_backward<typename decltype(tag)::type>(a, r); });
}

void line_integral_forward_cpu(const LineIntegralArgs& a) {
  over_rays(
      a.op, a.dtype, a.rays.count, samples_per_ray(a.rays) * a.channels,
      [&](auto tag, int64_t r) { line_integral_ray_forward<typename decltype(tag)::type>(a, r); });
}

void line_integral_backward_cpu(const LineIntegralArgs& a) {
  over_rays(
      a.op, a.dtype, a.rays.count, samples_per_ray(a.rays) * a.channels,
      [&](auto tag, int64_t r) { line_integral_ray_backward<typename decltype(tag)::type>(a, r); });
}

void ray_box_counts_cpu(const RayBoxArgs& a) {
  over_rays(a.op, a.dtype, a.num_rays, 16,
            [&](auto tag, int64_t r) { ray_box_count<typename decltype(tag)::type>(a, r); });
}

void ray_box_forward_cpu(const RayBoxArgs& a) {
  over_rays(a.op, a.dtype, a.num_rays, a.capacity,
            [&](auto tag, int64_t r) { ray_box_fill<typename decltype(tag)::type>(a, r); });
}

void ray_box_backward_cpu(const RayBoxArgs& a) {
  over_rays(a.op, a.dtype, a.num_rays, a.capacity,
            [&](auto tag, int64_t r) { ray_box_gradient<typename decltype(tag)::type>(a, r); });
}

}  // namespace fieldfuse::detail::render
