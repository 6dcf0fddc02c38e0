// SPDX-License-Identifier: Apache-2.0
// CPU driver of the TV family: one OpenMP task per (slice, depth) plane, the per-voxel math from
// tv_math.h, and partial sums combined in plane order so results do not depend on the thread count.
#include "core/dispatch.h"
#include "core/neighborhood.h"
#include "core/parallel.h"
#include "tv/tv_drivers.h"

namespace fieldfuse::detail::tv {
namespace {

// Note [CPU interior rows]
// Voxels at the faces of a plane need clamped neighbours, but in a row with unit w stride every
// voxel from c = 1 to W − 2 has both w neighbours at ±1. Those interior runs go through
// InteriorNeighborhood, whose w offsets are compile-time constants, so the compiler vectorises the
// same tv_math.h policies (four IEEE sqrts or divisions per instruction for iso instead of one).
// The forward sums every row's interior [1, W − 1) into kLanes float64 lanes (lane j takes the
// voxels c − 1 ≡ j mod kLanes) and adds the lanes in order, strided rows included: the summation
// order depends only on the shape, as tv.h promises, and needs no reassociation to vectorise.
constexpr int kLanes = 8;

/// ClampedNeighborhood for a voxel whose w neighbours are both inside the row (unit w stride).
template <class T>
struct InteriorNeighborhood {
  const T* center;
  const int64_t* off_d;
  const int64_t* off_h;
  T operator()(int dd, int dh, int dw) const { return center[off_d[dd + 1] + off_h[dh + 1] + dw]; }
};

/// One row (a, b) of a plane: what every voxel of it shares.
template <class T>
struct Row {
  const T* data;  ///< voxel (a, b, 0)
  int64_t b;
  int64_t off_d[3], off_h[3];
  VoxelBounds interior;                  ///< bounds of a voxel with both w neighbours
  int64_t interior_begin, interior_end;  ///< [1, W − 1), or empty when W < 3
  bool unit_stride;                      ///< interior voxels may use interior_neighborhood

  /// The clamped neighbourhood and bounds of voxel c (any stride, any position).
  ClampedNeighborhood<T, T> neighborhood(const VolumeView& v, int64_t c, VoxelBounds& at) const {
    ClampedNeighborhood<T, T> nb;
    for (int i = 0; i < 3; ++i) {
      nb.off_d[i] = off_d[i];
      nb.off_h[i] = off_h[i];
    }
    clamped_offsets(c, v.width, v.stride_w, nb.off_w);
    nb.center = data + c * v.stride_w;
    at = interior;
    at.has_prev_w = c > 0;
    at.has_next_w = c + 1 < v.width;
    return nb;
  }
  InteriorNeighborhood<T> interior_neighborhood(int64_t c) const {
    return {data + c, off_d, off_h};
  }
};

/// Calls `visit(row)` for every row of depth plane `a` of one slice, whose voxel (a, 0, 0) is at
/// `plane_data`.
template <class T, class Visit>
void for_each_row(const VolumeView& v, const T* plane_data, int64_t a, const Visit& visit) {
  Row<T> row;
  clamped_offsets(a, v.depth, v.stride_d, row.off_d);
  row.interior.has_prev_d = a > 0;
  row.interior.has_next_d = a + 1 < v.depth;
  row.interior.has_prev_w = row.interior.has_next_w = true;
  row.unit_stride = v.stride_w == 1;
  row.interior_begin = v.width >= 3 ? 1 : v.width;
  row.interior_end = v.width >= 3 ? v.width - 1 : v.width;
  for (int64_t b = 0; b < v.height; ++b) {
    clamped_offsets(b, v.height, v.stride_h, row.off_h);
    row.interior.has_prev_h = b > 0;
    row.interior.has_next_h = b + 1 < v.height;
    row.b = b;
    row.data = plane_data + b * v.stride_h;
    visit(row);
  }
}

/// Calls `f(c)` for the columns of a row outside its interior run (the two faces, or all if W < 3).
template <class T, class F>
void for_each_edge_voxel(const VolumeView& v, const Row<T>& row, const F& f) {
  for (int64_t c = 0; c < row.interior_begin; ++c) f(c);
  for (int64_t c = row.interior_end; c < v.width; ++c) f(c);
}

template <class T, class Policy>
void reduce(const ForwardArgs& args, const Policy& policy) {
  constexpr int K = Policy::kSums;
  const VolumeView& v = args.vol;
  const T* data = static_cast<const T*>(args.vol_data);
  const int64_t planes = v.batch * v.depth;
  double* partials = static_cast<double*>(args.workspace);  // forward_workspace_cpu doubles
  parallel_for(0, planes, v.height * v.width, [&](int64_t plane) {
    const int64_t n = plane / v.depth, a = plane % v.depth;
    double acc[K] = {};
    for_each_row(v, data + v.slice_offset(n) + a * v.stride_d, a, [&](const Row<T>& row) {
      for_each_edge_voxel(v, row, [&](int64_t c) {
        VoxelBounds at;
        const auto nb = row.neighborhood(v, c, at);
        T terms[K];
        policy.template accumulate<T>(nb, at, terms);
        for (int k = 0; k < K; ++k) acc[k] += static_cast<double>(terms[k]);
      });
      double lanes[K][kLanes] = {};
      const auto add = [&](int j, const T(&terms)[K]) {
        for (int k = 0; k < K; ++k) lanes[k][j] += static_cast<double>(terms[k]);
      };
      int64_t c = row.interior_begin;
      if (row.unit_stride) {
        for (; c + kLanes <= row.interior_end; c += kLanes) {
#pragma omp simd
          for (int j = 0; j < kLanes; ++j) {
            T terms[K];
            policy.template accumulate<T>(row.interior_neighborhood(c + j), row.interior, terms);
            add(j, terms);
          }
        }
      }
      for (; c < row.interior_end; ++c) {  // strided rows and the tail of unit-stride rows
        VoxelBounds at;
        T terms[K];
        policy.template accumulate<T>(row.neighborhood(v, c, at), at, terms);
        add(static_cast<int>((c - row.interior_begin) % kLanes), terms);
      }
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < kLanes; ++j) acc[k] += lanes[k][j];
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
  const bool accumulate = args.accumulate;
  T coef[3];
  args.plan.coefficients(static_cast<const T*>(args.grad_out), args.grad_out_stride, coef);
  parallel_for(0, v.batch * v.depth, v.height * v.width, [&](int64_t plane) {
    const int64_t n = plane / v.depth, a = plane % v.depth;
    T* grad_plane = grad + g.slice_offset(n) + a * g.stride_d;
    for_each_row(v, data + v.slice_offset(n) + a * v.stride_d, a, [&](const Row<T>& row) {
      T* grad_row = grad_plane + row.b * g.stride_h;
      for_each_edge_voxel(v, row, [&](int64_t c) {
        VoxelBounds at;
        const auto nb = row.neighborhood(v, c, at);
        write_gradient(grad_row + c * g.stride_w, policy.template gradient<T>(nb, at, coef),
                       accumulate);
      });
      const int64_t gsw = g.stride_w;
      if (row.unit_stride) {
#pragma omp simd
        for (int64_t c = row.interior_begin; c < row.interior_end; ++c)
          write_gradient(
              grad_row + c * gsw,
              policy.template gradient<T>(row.interior_neighborhood(c), row.interior, coef),
              accumulate);
      } else {
        for (int64_t c = row.interior_begin; c < row.interior_end; ++c) {
          VoxelBounds at;
          write_gradient(grad_row + c * gsw,
                         policy.template gradient<T>(row.neighborhood(v, c, at), at, coef),
                         accumulate);
        }
      }
    });
  });
}

}  // namespace

std::size_t forward_workspace_cpu(const VolumeView& vol, Functional functional) {
  const std::size_t bytes =
      static_cast<std::size_t>(vol.batch * vol.depth) * num_sums(functional) * sizeof(double);
  return bytes > 0 ? bytes : 1;
}

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
