// SPDX-License-Identifier: Apache-2.0
// K-Planes backward on CUDA: the point and rotation gradients (per-group partials reduced in a
// fixed order) and the default plane gradient, scattered with atomics (exact sums, order-dependent
// rounding); for the deterministic plane gradient it stores each entry's share, which
// kplanes_cuda_gather.cu sums per cell.
#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "core/cuda_launch.cuh"
#include "core/layout_copy.h"
#include "core/warp.cuh"
#include "kplanes/kplanes_cuda.cuh"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse::detail::kplanes {
namespace {

using cuda::group_sum;

/// Four consecutive channels' shares into an accumulator (float or double).
__device__ FF_FORCE_INLINE void atomic_add4(float* p, const float (&v)[4]) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
#else
  for (int j = 0; j < 4; ++j) atomicAdd(p + j, v[j]);
#endif
}
__device__ FF_FORCE_INLINE void atomic_add4(double* p, const double (&v)[4]) {
  for (int j = 0; j < 4; ++j) atomicAdd(p + j, v[j]);
}

// ---- backward: point and rotation gradients, and the default atomic scatter --------------------

// Note [zero upstream]
// Padded sample layouts (the tomography step: 521 slots a ray for about 300 samples) give the
// padding rows an upstream gradient of exactly 0. Such a chunk's plane shares, point and rotation
// terms are all products with 0, so the scatter skips its corner loads and atomics: on an H100 the
// step's K-Planes backward went from 1.04 ms to 0.77 ms. The one
// difference from multiplying out is where a plane holds Inf or NaN: 0·Inf would add NaN, the skip
// adds nothing (the derivative's true value). The deterministic path stores every share, zeros
// included, because its gather reads them all.

/// Whether all kLanes upstream values are zero (either sign).
template <class T>
__device__ FF_FORCE_INLINE bool all_zero(const T (&g)[kLanes]) {
  bool zero = true;
#pragma unroll
  for (int j = 0; j < kLanes; ++j) zero = zero && g[j] == T(0);
  return zero;
}

/// The accumulator type of a plane gradient: the plane dtype, or float32 for 16-bit planes.
template <class S>
using accumulator_t = compute_t<S>;

template <Variant V, class S, class G, PlaneGradient kPlanes>
__global__ void __launch_bounds__(kThreads, backward_min_blocks<compute_t<S>>())
    backward_kernel(Geometry geo, const __grid_constant__ LevelTable table,
                    MatrixView grad_features, MatrixView grad_tap_features,
                    compute_t<S>* __restrict__ point_partials,
                    double* __restrict__ rotation_partials, int64_t num_slots, int lanes_log2) {
  using T = compute_t<S>;
  using A = accumulator_t<S>;
  // A fixed grid walks the (slot, lane) range, so each block reduces its rotation gradient once
  // for many slots; dead groups (past the last slot) still run the shuffles and the reduction.
  const int64_t stride = int64_t{kLanes} << lanes_log2;
  const int t = blockIdx.y;
  T R[9];
  rotation_of<V>(geo, t, R);
  const T h = static_cast<T>(geo.h);
  T dR[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t total = num_slots << lanes_log2;
  const int64_t grid_stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads; first < total;
       first += grid_stride) {
    const LaneGroup group = lane_group(first + threadIdx.x, lanes_log2, num_slots);
    const Slot slot = slot_of(group.live ? group.slot : 0, geo.pts.rows);
    // An unevaluated point takes a zero upstream gradient (so the scatter skips it and the
    // deterministic path stores zero shares).
    const bool evaluated_slot = evaluated(slot, geo.valid, geo.valid_stride);
    T p[3] = {0, 0, 0}, dp[3] = {0, 0, 0};
    if (group.live) slot_point(geo, slot, p);
    // The shuffles of group_sum need every lane of the warp, so the whole warp runs as many tap
    // rounds as its busiest group (a warp can hold point slots, tap slots and dead groups).
    const int positions = group.live ? slot.num_positions : 0;
    const int warp_positions = __reduce_max_sync(0xffffffffu, positions);
    for (int tap = 0; tap < warp_positions; ++tap) {
      const bool active = tap < positions;
      T r[3], dr[3] = {0, 0, 0};
      tap_position<V>(R, p, tap, h, r);
      for (int l = 0; l < (active ? table.count : 0); ++l) {
        const Level& level = table.levels[l];
        const PlaneView& v = level.view;
        const S* plane = static_cast<const S*>(level.data);
        BilinearTap<T> taps[3];
        plane_taps<V>(r, v.height, v.width, taps);
        const T gate = static_cast<T>(level.gate);
        const int64_t first_col = level.column + t * v.channels;
        T d_index_x[3] = {0, 0, 0}, d_index_y[3] = {0, 0, 0};
        for (int64_t c0 = group.lane * kLanes; c0 < v.channels; c0 += stride) {
          T g[kLanes] = {};
          if (evaluated_slot) {
            upstream_chunk<T, G>(pick(slot.is_tap_point, grad_tap_features, grad_features),
                                 slot.is_tap_point ? tap : 0, slot.row, first_col, c0, v.channels,
                                 table.features_vector[l], g);
          }
          if constexpr (kPlanes == PlaneGradient::kScatter) {
            // Note [zero upstream]: a chunk with no upstream gradient adds nothing anywhere.
            if (all_zero(g)) continue;
          }
          Corners<T> corners[kLanes][3];
          load_chunk(plane, v, table.read_vector[l], t, c0, taps, corners);
          T d_sample[kLanes][3];
#pragma unroll
          for (int j = 0; j < kLanes; ++j) {
            channel_backward(taps, corners[j], g[j] * gate, d_sample[j], d_index_x, d_index_y);
          }
          if constexpr (kPlanes == PlaneGradient::kShares) {
            // Each plane's ∂L/∂sample of this position, for the deterministic gather to weight
            // and sum per cell (Note [deterministic gather]).
            const int64_t position =
                slot.is_tap_point ? geo.pts.rows + slot.row * kTapsPerTapPoint + tap : slot.row;
#pragma unroll
            for (int q = 0; q < 3; ++q) {
              T share[kLanes];
#pragma unroll
              for (int j = 0; j < kLanes; ++j) share[j] = d_sample[j][q];
              store_share_chunk(static_cast<T*>(level.grad), v, num_positions(geo), 3 * t + q,
                                position, c0, share);
            }
          }
          if constexpr (kPlanes == PlaneGradient::kScatter) {
            A* grad = static_cast<A*>(level.grad);
            const PlaneView& gv = level.grad_view;
#pragma unroll
            for (int q = 0; q < 3; ++q) {
              const BilinearTap<T>& tap_q = taps[q];
              T share[kLanes][4];
#pragma unroll
              for (int j = 0; j < kLanes; ++j) tap_q.scatter(d_sample[j][q], share[j]);
              A* base = grad + (3 * t + q) * gv.stride_k + c0 * gv.stride_c;
              int32_t at[4];
              corner_offsets(gv, tap_q, at);
#pragma unroll
              for (int corner = 0; corner < 4; ++corner) {
                A* cell = base + at[corner];
                if (table.accumulate_vector[l]) {
                  const A v4[4] = {
                      static_cast<A>(share[0][corner]), static_cast<A>(share[1][corner]),
                      static_cast<A>(share[2][corner]), static_cast<A>(share[3][corner])};
                  atomic_add4(cell, v4);
                } else {
#pragma unroll
                  for (int j = 0; j < kLanes; ++j) {
                    if (c0 + j < v.channels) {
                      atomicAdd(cell + static_cast<int32_t>(j * gv.stride_c),
                                static_cast<A>(share[j][corner]));
                    }
                  }
                }
              }
            }
          }
        }
        T dr_level[3];
        rotated_point_gradient<V>(taps, d_index_x, d_index_y, dr_level);
        dr[0] += dr_level[0], dr[1] += dr_level[1], dr[2] += dr_level[2];
      }
      dr[0] = group_sum(dr[0], lanes_log2);
      dr[1] = group_sum(dr[1], lanes_log2);
      dr[2] = group_sum(dr[2], lanes_log2);
      // Every lane holds the group's dr; lane 0 alone accumulates it.
      if (active && group.lane == 0) accumulate_tap_gradient<V>(R, p, tap, h, dr, dR, dp);
    }
    if (point_partials != nullptr && group.live && group.lane == 0) {
      T* out = point_partials + (static_cast<int64_t>(t) * num_slots + group.slot) * 3;
      out[0] = dp[0], out[1] = dp[1], out[2] = dp[2];
    }
  }
  if (rotation_partials == nullptr) return;  // uniform across the grid
  using BlockReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduce::TempStorage scratch;
  double* out = rotation_partials + (static_cast<int64_t>(t) * gridDim.x + blockIdx.x) * 9;
#pragma unroll
  for (int i = 0; i < 9; ++i) {
    const double sum = BlockReduce(scratch).Sum(static_cast<double>(dR[i]));
    if (threadIdx.x == 0) out[i] = sum;
    __syncthreads();  // scratch is reused by the next reduction
  }
}

/// grad_pts[s] = Σ_launches Σ_t point_partials[launch][t][s], in that fixed order.
template <class T>
__global__ void point_gradient_kernel(const T* __restrict__ partials, int64_t partial_sets,
                                      int64_t num_slots, int64_t num_points, T* grad_pts,
                                      int64_t pts_row, int64_t pts_col, T* grad_tap_pts,
                                      int64_t tap_row, int64_t tap_col) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= num_slots) return;
  T dp[3] = {0, 0, 0};
  for (int64_t set = 0; set < partial_sets; ++set) {
    const T* in = partials + (set * num_slots + s) * 3;
    dp[0] += in[0], dp[1] += in[1], dp[2] += in[2];
  }
  const bool is_tap = s >= num_points;
  T* grad = is_tap ? grad_tap_pts : grad_pts;
  if (grad == nullptr) return;
  const int64_t row = is_tap ? s - num_points : s;
  T* out = grad + row * (is_tap ? tap_row : pts_row);
  const int64_t col = is_tap ? tap_col : pts_col;
  out[0] = dp[0], out[col] = dp[1], out[2 * col] = dp[2];
}

constexpr int kFinalThreads = 256;

/// One block per (tilt, entry): grad_rotations[t][i] = Σ over launches and blocks, in a fixed
/// order.
template <class T>
__global__ void __launch_bounds__(kFinalThreads)
    rotation_gradient_kernel(const double* __restrict__ partials, int64_t launches,
                             int64_t num_tilts, int64_t blocks_per_tilt, T* grad, int64_t s0,
                             int64_t s1, int64_t s2) {
  const int64_t t = blockIdx.x / 9, i = blockIdx.x % 9;
  double sum = 0.0;
  for (int64_t g = 0; g < launches; ++g) {
    const double* base = partials + ((g * num_tilts + t) * blocks_per_tilt) * 9 + i;
    for (int64_t b = threadIdx.x; b < blocks_per_tilt; b += kFinalThreads) sum += base[b * 9];
  }
  using BlockReduce = cub::BlockReduce<double, kFinalThreads>;
  __shared__ typename BlockReduce::TempStorage scratch;
  const double total = BlockReduce(scratch).Sum(sum);
  if (threadIdx.x == 0) grad[t * s0 + (i / 3) * s1 + (i % 3) * s2] = static_cast<T>(total);
}

// ---- host side ---------------------------------------------------------------------------------

/// Blocks per tilt of the backward's fixed grid: enough to fill any current GPU several times
/// over, few enough that the per-block rotation reductions are a small part of the work. Fixed,
/// not derived from the device, so the reduction order (and the bits) do not depend on the GPU.
constexpr int64_t kBackwardBlocks = 1024;

int64_t backward_blocks(const Problem& pb) { return std::min(slot_blocks(pb), kBackwardBlocks); }

bool is_16_bit(DType dtype) { return dtype == DType::Float16 || dtype == DType::BFloat16; }

PlaneGradient plane_gradient(bool wants_planes, bool deterministic) {
  return !wants_planes   ? PlaneGradient::kSkip
         : deterministic ? PlaneGradient::kShares
                         : PlaneGradient::kScatter;
}

/// backward_kernel launches: one per group of kMaxLevelsPerLaunch levels, or one per level when it
/// stores shares, so the share buffer holds one level at a time (Note [deterministic gather]).
int64_t launch_count(const Problem& pb, PlaneGradient planes) {
  return planes == PlaneGradient::kShares ? static_cast<int64_t>(pb.levels.size())
                                          : level_groups(pb);
}

/// What one backward call computes, and the shape of its launches.
struct BackwardPlan {
  bool wants_points, wants_rotations;
  PlaneGradient planes;  ///< what backward_kernel does for the plane gradients
  bool half;             ///< 16-bit planes: the scatter adds into float32 accumulators
  int64_t slots, launches, blocks;

  bool scatter() const { return planes == PlaneGradient::kScatter; }
};

BackwardPlan plan_of(const BackwardArgs& a) {
  const Problem& pb = a.problem;
  const PlaneGradient planes = plane_gradient(a.wants_planes, a.deterministic);
  return {a.grad_pts != nullptr || a.grad_tap_pts != nullptr,
          a.grad_rotations != nullptr,
          planes,
          is_16_bit(pb.plane_dtype),
          pb.num_slots(),
          launch_count(pb, planes),
          backward_blocks(pb)};
}

/// The workspace layout of the backward. `base == nullptr` only measures.
struct BackwardBuffers {
  void* point_partials = nullptr;       // [launches, T, slots, 3] compute type
  double* rotation_partials = nullptr;  // [launches, T, slot blocks, 9]
  float* accumulators = nullptr;        // 16-bit planes: Σ_l numel, channels-last per level
  GatherBuffers gather;                 // deterministic plane gradients
  std::size_t bytes = 0;
};

BackwardBuffers backward_buffers(const Problem& pb, bool wants_points, bool wants_rotations,
                                 bool wants_planes, bool deterministic, void* base) {
  BackwardBuffers b;
  Carver carve(base);
  const int64_t launches = launch_count(pb, plane_gradient(wants_planes, deterministic));
  const int64_t slots = pb.num_slots();
  const std::size_t compute_size = dtype_size(pb.dtype);
  if (wants_points) {
    b.point_partials = carve.take<char>(launches * pb.num_tilts * slots * 3 * compute_size);
  }
  if (wants_rotations) {
    b.rotation_partials = carve.take<double>(launches * pb.num_tilts * backward_blocks(pb) * 9);
  }
  if (wants_planes && !deterministic && is_16_bit(pb.plane_dtype)) {
    int64_t total = 0;
    for (const Level& level : pb.levels) total += level.view.numel();
    b.accumulators = carve.take<float>(total);
  }
  if (wants_planes && deterministic) b.gather = carve_gather_buffers(pb, carve);
  b.bytes = carve.bytes();
  return b;
}

/// The problem as the share-storing backward sees it: every level's "gradient" is the gather's
/// share buffer, which holds the level of the current launch (Note [deterministic gather]); every
/// element is written, none filled.
Problem shares_target(const Problem& pb, const GatherBuffers& gather) {
  Problem target = pb;
  for (Level& level : target.levels) level.grad = gather.shares;
  return target;
}

/// The problem as the scatter sees it: each level's gradient redirected to its float32
/// accumulator for 16-bit planes, and zero-filled, since the scatter adds into it (dense by
/// contract; Note [deterministic gather] describes the path that writes every cell instead).
template <class S>
Problem scatter_target(const Problem& pb, const BackwardBuffers& buf, bool half,
                       cudaStream_t stream) {
  Problem target = pb;
  float* next = buf.accumulators;
  for (Level& level : target.levels) {
    if (half) {
      level.grad = next;
      level.grad_view = channels_last(level.view);
      next += level.view.numel();
    }
    const std::size_t bytes = level.view.numel() * (half ? sizeof(float) : sizeof(S));
    cuda::check(cudaMemsetAsync(level.grad, 0, bytes, stream), pb.op, "cudaMemsetAsync");
  }
  return target;
}

/// The levels of backward launch `launch` (launch_count): a group, or one level for the shares.
template <class S>
LevelTable launch_table(const Problem& target, const BackwardPlan& plan, int64_t launch) {
  if (plan.planes != PlaneGradient::kShares) return level_table<S>(target, launch);
  return level_table<S>(target, launch, launch + 1);
}

/// backward_kernel launch `launch`: its point and rotation partials, and its levels' plane
/// gradients (scattered, or as shares).
template <Variant V, class S, class G>
void launch_backward_kernel(const BackwardArgs& a, const Problem& target,
                            const BackwardBuffers& buf, const BackwardPlan& plan, int64_t launch,
                            cudaStream_t stream) {
  using T = compute_t<S>;
  const Problem& pb = a.problem;
  const Geometry geo = geometry_of(pb);
  const dim3 grid(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(pb.num_tilts));
  LevelTable table = launch_table<S>(target, plan, launch);
  for (int i = 0; i < table.count; ++i) {
    table.accumulate_vector[i] =
        plan.scatter() &&
        aligned_channels_last<accumulator_t<S>>(table.levels[i].grad_view, table.levels[i].grad);
  }
  mark_feature_chunks(table, a.grad_features, a.grad_tap_features, sizeof(G));
  T* points = plan.wants_points
                  ? static_cast<T*>(buf.point_partials) + launch * pb.num_tilts * plan.slots * 3
                  : nullptr;
  double* rotations = plan.wants_rotations
                          ? buf.rotation_partials + launch * pb.num_tilts * plan.blocks * 9
                          : nullptr;
  const auto run = [&](auto planes) {
    backward_kernel<V, S, G, decltype(planes)::value>
        <<<grid, kThreads, 0, stream>>>(geo, table, a.grad_features, a.grad_tap_features, points,
                                        rotations, plan.slots, lanes_log2(pb));
  };
  switch (plan.planes) {
    case PlaneGradient::kSkip:
      run(std::integral_constant<PlaneGradient, PlaneGradient::kSkip>{});
      break;
    case PlaneGradient::kScatter:
      run(std::integral_constant<PlaneGradient, PlaneGradient::kScatter>{});
      break;
    case PlaneGradient::kShares:
      run(std::integral_constant<PlaneGradient, PlaneGradient::kShares>{});
      break;
  }
  cuda::check_launch(pb.op, "backward_kernel", stream);
}

/// grad_pts and grad_tap_pts from the point partials of every group and tilt.
template <class T>
void launch_point_gradient(const BackwardArgs& a, const BackwardBuffers& buf,
                           const BackwardPlan& plan, cudaStream_t stream) {
  const Problem& pb = a.problem;
  const auto st = a.grad_pts_strides, tst = a.grad_tap_pts_strides;
  point_gradient_kernel<T>
      <<<static_cast<unsigned>(cuda::ceil_div(plan.slots, 256)), 256, 0, stream>>>(
          static_cast<const T*>(buf.point_partials), plan.launches * pb.num_tilts, plan.slots,
          pb.pts.rows, static_cast<T*>(a.grad_pts), st[0], st[1], static_cast<T*>(a.grad_tap_pts),
          tst[0], tst[1]);
  cuda::check_launch(pb.op, "point_gradient_kernel", stream);
}

/// grad_rotations from the per-block rotation partials.
template <class T>
void launch_rotation_gradient(const BackwardArgs& a, const BackwardBuffers& buf,
                              const BackwardPlan& plan, cudaStream_t stream) {
  const Problem& pb = a.problem;
  const auto st = a.grad_rotation_strides;
  rotation_gradient_kernel<T>
      <<<static_cast<unsigned>(pb.num_tilts * 9), kFinalThreads, 0, stream>>>(
          buf.rotation_partials, plan.slots > 0 ? plan.launches : 0, pb.num_tilts, plan.blocks,
          static_cast<T*>(a.grad_rotations), st[0], st[1], st[2]);
  cuda::check_launch(pb.op, "rotation_gradient_kernel", stream);
}

/// The 16-bit plane gradients, rounded once from the scatter's float32 channels-last accumulators
/// while they are copied into the caller's layout (Note [plane staging]).
void round_gradients(const Problem& pb, const Problem& target, Stream stream) {
  for (std::size_t l = 0; l < pb.levels.size(); ++l) {
    const Level& level = pb.levels[l];
    copy_from_channels_last(target.levels[l].grad, DType::Float32,
                            plane_ref(level.grad, level.grad_view, pb.plane_dtype, pb.device),
                            stream, pb.op);
  }
}

}  // namespace

std::size_t backward_workspace_cuda(const Problem& pb, bool wants_planes, bool deterministic) {
  // Workspace queries do not know which geometry gradients will be asked for; size for all.
  cuda::DeviceGuard guard(pb.device.index, pb.op);
  return backward_buffers(pb, true, pb.variant == Variant::kTilted, wants_planes, deterministic,
                          nullptr)
      .bytes;
}

void backward_cuda(const BackwardArgs& a) {
  const Problem& pb = a.problem;
  check_grid(pb);
  cuda::ProfileRange range(pb.op);
  cuda::DeviceGuard guard(pb.device.index, pb.op);
  const auto stream = static_cast<cudaStream_t>(a.stream.handle);
  const BackwardPlan plan = plan_of(a);
  const BackwardBuffers buf = backward_buffers(pb, plan.wants_points, plan.wants_rotations,
                                               a.wants_planes, a.deterministic, a.workspace);
  dispatch_problem(pb, a.grad_dtype, [&](auto plane_tag, auto grad_tag, auto variant) {
    using S = typename decltype(plane_tag)::type;
    using T = compute_t<S>;
    using G = typename decltype(grad_tag)::type;
    constexpr Variant V = decltype(variant)::value;
    // Where the plane gradients go: the scatter adds into the gradients themselves (or float32
    // accumulators for 16-bit planes); the deterministic path stores shares for the gather.
    const Problem target = plan.scatter() ? scatter_target<S>(pb, buf, plan.half, stream)
                           : plan.planes == PlaneGradient::kShares ? shares_target(pb, buf.gather)
                                                                   : pb;
    const bool kernel =
        (plan.planes != PlaneGradient::kSkip || plan.wants_points || plan.wants_rotations) &&
        plan.slots > 0;
    for (int64_t launch = 0; launch < plan.launches; ++launch) {
      if (kernel) launch_backward_kernel<V, S, G>(a, target, buf, plan, launch, stream);
      // The shares of this level are complete: sum them before the next launch overwrites them.
      if (plan.planes == PlaneGradient::kShares) {
        gather_level_gradient(a, buf.gather, static_cast<std::size_t>(launch), stream);
      }
    }
    if (plan.wants_points && plan.slots > 0) launch_point_gradient<T>(a, buf, plan, stream);
    if (plan.wants_rotations) launch_rotation_gradient<T>(a, buf, plan, stream);
    if (plan.scatter() && plan.half) round_gradients(pb, target, a.stream);
  });
}

}  // namespace fieldfuse::detail::kplanes
