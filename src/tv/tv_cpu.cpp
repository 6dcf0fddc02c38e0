// SPDX-License-Identifier: Apache-2.0
// CPU driver of the TV family: one OpenMP task per (slice, depth) plane, the per-voxel math from
// tv_math.h, and partial sums combined in plane order so results do not depend on the thread count.
#include <vector>

#include "core/dispatch.h"
#include "core/neighborhood.h"
#include "core/parallel.h"
#include "tv/tv_drivers.h"

namespace fieldfuse::detail::tv {
namespace {

/// Calls `visit(nb, bounds, b, c)` for every voxel (b, c) of depth plane `a` of one slice, whose
/// voxel (a, 0, 0) is at `plane_data`.
template <class T, class S, class Visit>
void visit_plane(const VolumeView& v, const S* plane_data, int64_t a, const Visit& visit) {
  ClampedNeighborhood<T, S> nb;
  VoxelBounds at;
  clamped_offsets(a, v.depth, v.stride_d, nb.off_d);
  at.has_prev_d = a > 0;
  at.has_next_d = a + 1 < v.depth;
  for (int64_t b = 0; b < v.height; ++b) {
    clamped_offsets(b, v.height, v.stride_h, nb.off_h);
    at.has_prev_h = b > 0;
    at.has_next_h = b + 1 < v.height;
    const S* row = plane_data + b * v.stride_h;
    for (int64_t c = 0; c < v.width; ++c) {
      clamped_offsets(c, v.width, v.stride_w, nb.off_w);
      at.has_prev_w = c > 0;
      at.has_next_w = c + 1 < v.width;
      nb.center = row + c * v.stride_w;
      visit(nb, at, b, c);
    }
  }
}

template <class T, class Policy>
void reduce(const ForwardArgs& args, const Policy& policy) {
  constexpr int K = Policy::kSums;
  const VolumeView& v = args.vol;
  const T* data = static_cast<const T*>(args.vol_data);
  const int64_t planes = v.batch * v.depth;
  std::vector<double> partials(static_cast<size_t>(planes) * K, 0.0);
  parallel_for(0, planes, v.height * v.width, [&](int64_t plane) {
    const int64_t n = plane / v.depth, a = plane % v.depth;
    double acc[K] = {};
    visit_plane<T>(v, data + v.slice_offset(n) + a * v.stride_d, a,
                   [&](const auto& nb, const VoxelBounds& at, int64_t, int64_t) {
                     T terms[K];
                     policy.template accumulate<T>(nb, at, terms);
                     for (int k = 0; k < K; ++k) acc[k] += static_cast<double>(terms[k]);
                   });
    for (int k = 0; k < K; ++k) partials[plane * K + k] = acc[k];
  });
  double sums[3] = {};
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int k = 0; k < K; ++k) sums[k] += partials[plane * K + k];
  T* out = static_cast<T*>(args.out);
  for (int k = 0; k < args.plan.num_outputs; ++k)
    out[k * args.out_stride] = static_cast<T>(args.plan.output(sums, k));
}

template <class T, class Policy>
void gradient(const BackwardArgs& args, const Policy& policy) {
  const VolumeView& v = args.vol;
  const VolumeView& g = args.grad;
  const T* data = static_cast<const T*>(args.vol_data);
  T* grad = static_cast<T*>(args.grad_data);
  T coef[3];
  args.plan.coefficients(static_cast<const T*>(args.grad_out), args.grad_out_stride, coef);
  parallel_for(0, v.batch * v.depth, v.height * v.width, [&](int64_t plane) {
    const int64_t n = plane / v.depth, a = plane % v.depth;
    T* grad_plane = grad + g.slice_offset(n) + a * g.stride_d;
    visit_plane<T>(v, data + v.slice_offset(n) + a * v.stride_d, a,
                   [&](const auto& nb, const VoxelBounds& at, int64_t b, int64_t c) {
                     grad_plane[b * g.stride_h + c * g.stride_w] =
                         policy.template gradient<T>(nb, at, coef);
                   });
  });
}

}  // namespace

void forward_cpu(const ForwardArgs& args) {
  dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    visit_functional(args.functional, args.eps, [&](const auto& policy) {
      reduce<typename decltype(tag)::type>(args, policy);
    });
  });
}

void backward_cpu(const BackwardArgs& args) {
  if (args.vol.numel() == 0) return;
  dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    visit_functional(args.functional, args.eps, [&](const auto& policy) {
      gradient<typename decltype(tag)::type>(args, policy);
    });
  });
}

}  // namespace fieldfuse::detail::tv
