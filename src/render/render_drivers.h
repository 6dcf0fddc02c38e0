// SPDX-License-Identifier: Apache-2.0
// The interface between the render front (render.cpp), which validates, and the CPU and CUDA
// drivers, which run the per-ray routines of render_ray.h over the rays.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "fieldfuse/core.h"

namespace fieldfuse::detail::render {

/// Columns of the [R, 4] float64 ray state (Note [ray state] in render_ray.h).
constexpr int64_t kRayStateFields = 4;

/// A strided vector ([N] or [R]); `data == nullptr` means absent.
struct Vec {
  void* data = nullptr;
  int64_t stride = 0;
  FF_HOST_DEVICE bool present() const { return data != nullptr; }
};

/// A strided matrix ([N, C], [R, C], [R, 3] or a padded [R, S]); `data == nullptr` means absent.
struct Mat {
  void* data = nullptr;
  int64_t stride0 = 0, stride1 = 0;
  FF_HOST_DEVICE bool present() const { return data != nullptr; }
};

/// Packed-ray boundaries: ray r is [offsets[r], offsets[r+1]), clamped into [0, N].
struct Rays {
  const int64_t* offsets = nullptr;
  int64_t stride = 1;
  int64_t count = 0;    ///< R
  int64_t samples = 0;  ///< N

  FF_HOST_DEVICE void range(int64_t r, int64_t& begin, int64_t& end) const {
    begin = offsets[r * stride];
    end = offsets[(r + 1) * stride];
    begin = begin < 0 ? 0 : (begin > samples ? samples : begin);
    end = end < begin ? begin : (end > samples ? samples : end);
  }
};

struct VolumeRenderArgs {
  const char* op = "";
  DType dtype = DType::Float32;
  Device device{};
  Rays rays;
  int64_t channels = 1;
  bool alpha_input = false;
  double transmittance_thresh = 0.0;
  Vec sigmas, delta_ts, ts, prefix;
  Mat rgbs, background;  ///< background [R, C], or [C] seen as stride0 = 0
  // forward outputs
  Mat rgb;
  Vec opacity, depth, weights, total_samples, transmittance;
  Mat ray_state;  ///< forward: optional output; backward: optional input (Note [ray state])
  // backward: upstream gradients (absent = zero) and gradients to compute
  Mat grad_rgb;
  Vec grad_opacity, grad_depth, grad_weights, grad_transmittance;
  Vec grad_sigmas, grad_delta_ts, grad_ts, grad_prefix;
  Mat grad_rgbs, grad_background;
  /// grad_background is float32 while the inputs are 16-bit: a shared background sums the
  /// per-ray values afterwards, and rounding each to 16 bits first would compound.
  bool grad_background_float32 = false;
  Stream stream{};
};

struct LineIntegralArgs {
  const char* op = "";
  DType dtype = DType::Float32;
  Device device{};
  Rays rays;
  int64_t channels = 1;
  Mat values;  ///< [N, C] (a [N] input seen with stride1 = 0 and C = 1)
  Vec delta_ts;
  Mat out;  ///< forward: [R, C]; backward: grad_out
  Mat grad_values;
  Vec grad_delta_ts;
  Stream stream{};
};

struct RayBoxArgs {
  const char* op = "";
  DType dtype = DType::Float32;
  Device device{};
  int64_t num_rays = 0;
  double ds = 0.0;
  Mat origins, directions;
  Vec counts;                        ///< ray_box_samples_counts
  const int64_t* offsets = nullptr;  ///< packed layout (null for counts and for padded)
  int64_t offsets_stride = 1;
  bool padded = false;   ///< [R, S] layout (S holds every ray: Note [ray-box sample count])
  int64_t capacity = 0;  ///< padded: S
  Mat points;            ///< packed: [N, 3] (stride0 per sample); padded: [R·S, 3] view
  Vec delta_ts;          ///< packed: [N]; padded: [R·S] view
  Vec valid;             ///< padded: [R·S] bool view
  Mat grad_points;
  Vec grad_delta_ts;
  Mat grad_origins, grad_directions;
  Stream stream{};
};

void volume_render_forward_cpu(const VolumeRenderArgs& args);
void volume_render_backward_cpu(const VolumeRenderArgs& args);
void line_integral_forward_cpu(const LineIntegralArgs& args);
void line_integral_backward_cpu(const LineIntegralArgs& args);
void ray_box_counts_cpu(const RayBoxArgs& args);
void ray_box_forward_cpu(const RayBoxArgs& args);
void ray_box_backward_cpu(const RayBoxArgs& args);

#if FIELDFUSE_WITH_CUDA
void volume_render_forward_cuda(const VolumeRenderArgs& args);
void volume_render_backward_cuda(const VolumeRenderArgs& args);
void line_integral_forward_cuda(const LineIntegralArgs& args);
void line_integral_backward_cuda(const LineIntegralArgs& args);
void ray_box_counts_cuda(const RayBoxArgs& args);
void ray_box_forward_cuda(const RayBoxArgs& args);
void ray_box_backward_cuda(const RayBoxArgs& args);
#endif

}  // namespace fieldfuse::detail::render
