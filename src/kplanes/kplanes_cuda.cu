// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the K-Planes family. One thread owns one (sample slot, tilt) and walks every level
// in the same launch; the plane gradient is either scattered with atomics (default: exact sums,
// order-dependent rounding) or gathered per cell in a fixed order (deterministic).
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <string>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "core/warp.cuh"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse::detail::kplanes {
namespace {

using cuda::compute_t;
using cuda::group_sum;

constexpr int kThreads = 128;
/// Channels a thread handles per step: one 16-byte load of float32 channels-last corners.
constexpr int kLanes = 4;
/// Blocks per SM the hot kernels are compiled for. Capping registers for 3 or 4 resident blocks
/// (H200, tomography config) made fwd+bwd 18% slower (spills, or more L2 contention), so the
/// compiler's choice stands.
constexpr int kMinBlocks = 1;
/// Levels whose descriptors fit in one launch's parameters; more levels run in groups.
constexpr int kMaxLevelsPerLaunch = 16;
/// Sub-buffers of the workspace start on this boundary (CUB and vector accesses need 16).
constexpr std::size_t kAlign = 256;

// Note [level table]
// Every level's descriptor travels in the kernel parameters (__grid_constant__, so indexing it with
// the runtime level number reads the constant bank instead of copying it to local memory). A
// thread computes its point's rotated position once and reuses it for every level, which is what
// makes one launch for all levels cheaper than one launch per level.
struct LevelTable {
  int count = 0;
  Level levels[kMaxLevelsPerLaunch];
  /// Dense channels-last corners with C % 4 == 0 and 16-byte alignment: one vector load (and one
  /// vector atomic, for `accumulate_vector`) per corner and 4 channels.
  bool read_vector[kMaxLevelsPerLaunch] = {};
  bool accumulate_vector[kMaxLevelsPerLaunch] = {};
};

/// Points, tap points and rotations: everything about a slot except the planes.
struct Geometry {
  PointsView pts, tap_pts;
  double h = 0.0;
  const void* rotations = nullptr;
  int64_t rotation_strides[3] = {0, 0, 0};
  int num_tilts = 1;
};

Geometry geometry_of(const Problem& pb) {
  Geometry g;
  g.pts = pb.pts;
  g.tap_pts = pb.tap_pts;
  g.h = pb.h;
  g.rotations = pb.rotations;
  for (int i = 0; i < 3; ++i) g.rotation_strides[i] = pb.rotation_strides[i];
  g.num_tilts = pb.num_tilts;
  return g;
}

template <Variant V, class T>
__device__ FF_FORCE_INLINE void rotation_of(const Geometry& geo, int t, T (&R)[9]) {
  rotation_or_identity<V>(geo.rotations, geo.rotation_strides, t, R);
}

template <class T>
__device__ FF_FORCE_INLINE void slot_point(const Geometry& geo, const Slot& slot, T (&p)[3]) {
  load_point(slot.is_tap_point ? geo.tap_pts : geo.pts, slot.row, p);
}

// ---- 4-channel vector loads, stores and atomics ------------------------------------------------

__device__ FF_FORCE_INLINE void load4(const float* p, float (&v)[4]) {
  const float4 q = __ldg(reinterpret_cast<const float4*>(p));
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ FF_FORCE_INLINE void load4(const double* p, double (&v)[4]) {
  const double2 a = __ldg(reinterpret_cast<const double2*>(p));
  const double2 b = __ldg(reinterpret_cast<const double2*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ FF_FORCE_INLINE void load4(const __half* p, float (&v)[4]) {
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&q.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&q.y));
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ FF_FORCE_INLINE void load4(const __nv_bfloat16* p, float (&v)[4]) {
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&q.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&q.y));
  v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

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

/// In-plane offset of cell (y, x) in 32 bits: the front guarantees every plane spans < 2^31
/// elements (Note [lanes]), which halves the index arithmetic of the hot loops.
__device__ FF_FORCE_INLINE int32_t cell_offset(const PlaneView& v, int64_t y, int64_t x) {
  return static_cast<int32_t>(y) * static_cast<int32_t>(v.stride_y) +
         static_cast<int32_t>(x) * static_cast<int32_t>(v.stride_x);
}

/// The four corner offsets of a tap within its plane, in BilinearTap::weights order.
template <class T>
__device__ FF_FORCE_INLINE void corner_offsets(const PlaneView& v, const BilinearTap<T>& tap,
                                               int32_t (&at)[4]) {
  at[0] = cell_offset(v, tap.y0, tap.x0);
  at[1] = cell_offset(v, tap.y0, tap.x1);
  at[2] = cell_offset(v, tap.y1, tap.x0);
  at[3] = cell_offset(v, tap.y1, tap.x1);
}

/// The corners of kLanes channels starting at c0 on the three planes of tilt t:
/// corners[j][p] for channel c0 + j (channels past C are left at 0 and never stored).
template <class S, class T>
__device__ FF_FORCE_INLINE void load_chunk(const S* plane, const PlaneView& v, bool vector, int t,
                                           int64_t c0, const BilinearTap<T> (&taps)[3],
                                           Corners<T> (&corners)[kLanes][3]) {
#pragma unroll
  for (int p = 0; p < 3; ++p) {
    const S* base = plane + (3 * t + p) * v.stride_k + c0 * v.stride_c;
    int32_t at[4];
    corner_offsets(v, taps[p], at);
#pragma unroll
    for (int corner = 0; corner < 4; ++corner) {
      if (vector) {
        T q[4];
        load4(base + at[corner], q);
#pragma unroll
        for (int j = 0; j < kLanes; ++j) corners[j][p].v[corner] = q[j];
      } else {
#pragma unroll
        for (int j = 0; j < kLanes; ++j) {
          corners[j][p].v[corner] =
              c0 + j < v.channels
                  ? static_cast<T>(base[at[corner] + static_cast<int32_t>(j * v.stride_c)])
                  : T(0);
        }
      }
    }
  }
}

/// Which tilt's slice of the level a thread owns, and the position it evaluates.
struct Position {
  Slot slot;
  int tap;
};

/// Position q of the flattened list: the B points, then 4 positions per tap point.
__device__ FF_FORCE_INLINE Position position_of(int64_t q, int64_t num_points) {
  if (q < num_points) return {{false, q, 1}, 0};
  const int64_t n = q - num_points;
  return {{true, n / kTapsPerTapPoint, kTapsPerTapPoint}, static_cast<int>(n % kTapsPerTapPoint)};
}

// ---- forward -----------------------------------------------------------------------------------

// Note [lanes]
// A (slot, tilt) is owned by a group of `lanes` consecutive threads (a power of two <= 32, about
// one per 4-channel chunk of the widest level): lane j handles chunks j, j + lanes, ... So a
// group's loads of one corner are consecutive 16-byte pieces of one channels-last row (coalesced),
// and its feature stores are consecutive. The backward sums the lanes' partial dr with a fixed
// xor-shuffle butterfly, so the geometry gradients stay deterministic.

struct LaneGroup {
  int64_t slot;
  int lane;
  bool live;
};

/// The group of thread `i` of the flattened (slot, lane) range.
__device__ FF_FORCE_INLINE LaneGroup lane_group(int64_t i, int lanes_log2, int64_t num_slots) {
  const int64_t slot = i >> lanes_log2;
  return {slot, static_cast<int>(i & ((int64_t{1} << lanes_log2) - 1)), slot < num_slots};
}

template <Variant V, class S, class O>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    forward_kernel(Geometry geo, const __grid_constant__ LevelTable table, O* __restrict__ features,
                   O* __restrict__ tap_features, int64_t num_slots, int64_t num_features,
                   int lanes_log2) {
  using T = compute_t<S>;
  const LaneGroup group =
      lane_group(static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x, lanes_log2, num_slots);
  if (!group.live) return;
  const int64_t stride = int64_t{kLanes} << lanes_log2;  // channels per round of the group
  const int t = blockIdx.y;
  const Slot slot = slot_of(group.slot, geo.pts.rows);
  T p[3], R[9];
  slot_point(geo, slot, p);
  rotation_of<V>(geo, t, R);
  const T h = static_cast<T>(geo.h);
  for (int tap = 0; tap < slot.num_positions; ++tap) {
    O* row = slot.is_tap_point ? tap_features + (tap * geo.tap_pts.rows + slot.row) * num_features
                               : features + slot.row * num_features;
    T r[3];
    tap_position<V>(R, p, tap, h, r);
    for (int l = 0; l < table.count; ++l) {
      const Level& level = table.levels[l];
      const PlaneView& v = level.view;
      const S* plane = static_cast<const S*>(level.data);
      BilinearTap<T> taps[3];
      plane_taps<V>(r, v.height, v.width, taps);
      const T gate = static_cast<T>(level.gate);
      O* out = row + level.column + t * v.channels;
      for (int64_t c0 = group.lane * kLanes; c0 < v.channels; c0 += stride) {
        Corners<T> corners[kLanes][3];
        load_chunk(plane, v, table.read_vector[l], t, c0, taps, corners);
#pragma unroll
        for (int j = 0; j < kLanes; ++j) {
          if (c0 + j < v.channels) {
            out[c0 + j] = static_cast<O>(channel_feature(taps, corners[j]) * gate);
          }
        }
      }
    }
  }
}

// ---- backward: point and rotation gradients, and the default atomic scatter --------------------

/// The accumulator type of a plane gradient: the plane dtype, or float32 for 16-bit planes.
template <class S>
using accumulator_t = compute_t<S>;

template <Variant V, class S, class G, bool kScatter>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
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
          Corners<T> corners[kLanes][3];
          load_chunk(plane, v, table.read_vector[l], t, c0, taps, corners);
          T d_sample[kLanes][3];
#pragma unroll
          for (int j = 0; j < kLanes; ++j) {
            const bool live = c0 + j < v.channels;
            const T g =
                live ? (slot.is_tap_point
                            ? matrix_at<T, G>(grad_tap_features, tap, slot.row, first_col + c0 + j)
                            : matrix_at<T, G>(grad_features, 0, slot.row, first_col + c0 + j)) *
                           gate
                     : T(0);
            channel_backward(taps, corners[j], g, d_sample[j], d_index_x, d_index_y);
          }
          if constexpr (kScatter) {
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

/// grad_pts[s] = Σ_groups Σ_t point_partials[group][t][s], in that fixed order.
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

/// One block per (tilt, entry): grad_rotations[t][i] = Σ over groups and blocks, in a fixed order.
template <class T>
__global__ void __launch_bounds__(kFinalThreads)
    rotation_gradient_kernel(const double* __restrict__ partials, int64_t groups, int64_t num_tilts,
                             int64_t blocks_per_tilt, T* grad, int64_t s0, int64_t s1, int64_t s2) {
  const int64_t t = blockIdx.x / 9, i = blockIdx.x % 9;
  double sum = 0.0;
  for (int64_t g = 0; g < groups; ++g) {
    const double* base = partials + ((g * num_tilts + t) * blocks_per_tilt) * 9 + i;
    for (int64_t b = threadIdx.x; b < blocks_per_tilt; b += kFinalThreads) sum += base[b * 9];
  }
  using BlockReduce = cub::BlockReduce<double, kFinalThreads>;
  __shared__ typename BlockReduce::TempStorage scratch;
  const double total = BlockReduce(scratch).Sum(sum);
  if (threadIdx.x == 0) grad[t * s0 + (i / 3) * s1 + (i % 3) * s2] = static_cast<T>(total);
}

/// A 16-bit plane gradient from its float32 channels-last accumulator.
template <class S>
__global__ void round_gradient_kernel(const float* __restrict__ acc, PlaneView av, S* grad,
                                      PlaneView gv) {
  const int64_t n = av.numel();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // i runs over the accumulator's [P, H, W, C] order.
    const int64_t c = i % av.channels;
    int64_t rest = i / av.channels;
    const int64_t x = rest % av.width;
    rest /= av.width;
    const int64_t y = rest % av.height;
    const int64_t k = rest / av.height;
    grad[gv.offset(k, c, y, x)] = static_cast<S>(acc[i]);
  }
}

// ---- deterministic plane gradients: sort entries by cell, gather per cell ----------------------

// Note [deterministic gather]
// An entry is one (position, plane) pair of a level: its bilinear tap has a base cell (y0, x0).
// Entries are sorted by (plane, base cell) with a stable radix sort of their index, so each base
// cell's entries form a run in position order. A thread then owns one run (and 4 channels): it
// recomputes each entry's samples once (storing C values per entry would cost more memory than the
// planes) and sums its four corner shares, in run order, into four partials — one per corner, each
// bound for a fixed neighbour of the base cell: (y0, x0), (y0, x0+1), (y0+1, x0), (y0+1, x0+1).
// Where the border makes corners coincide (x0 = W−1 or y0 = H−1) the shares fold into the corner
// that exists, in corner order. A second kernel gives each cell the sum of the four partials bound
// for it, in a fixed order. Every cell is written, so nothing is zero-filled, and the result has
// the same bits on every run.

/// The taps of position r on a level, compiled once: the key kernel and the run kernel must agree
/// to the bit on every tap's base cell, and one out-of-line copy rules out differing contractions.
template <Variant V, class T>
__device__ __noinline__ void deterministic_taps(const T (&R)[9], const T (&p)[3], int tap, T h,
                                                int64_t height, int64_t width,
                                                BilinearTap<T> (&taps)[3]) {
  T r[3];
  tap_position<V>(R, p, tap, h, r);
  plane_taps<V>(r, height, width, taps);
}

template <Variant V, class S>
__global__ void entry_keys_kernel(Geometry geo, const __grid_constant__ LevelTable table, int level,
                                  int64_t num_positions, uint32_t* __restrict__ keys,
                                  uint32_t* __restrict__ entries) {
  using T = compute_t<S>;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (q >= num_positions) return;
  const int t = blockIdx.y;
  const Position pos = position_of(q, geo.pts.rows);
  T p[3], R[9];
  slot_point(geo, pos.slot, p);
  rotation_of<V>(geo, t, R);
  const PlaneView& v = table.levels[level].view;
  BilinearTap<T> taps[3];
  deterministic_taps<V>(R, p, pos.tap, static_cast<T>(geo.h), v.height, v.width, taps);
  const int64_t planes = 3 * static_cast<int64_t>(geo.num_tilts);
#pragma unroll
  for (int p_ = 0; p_ < 3; ++p_) {
    const int64_t k = 3 * t + p_;
    const int64_t e = q * planes + k;
    keys[e] = static_cast<uint32_t>((k * v.height + taps[p_].y0) * v.width + taps[p_].x0);
    entries[e] = static_cast<uint32_t>(e);
  }
}

/// run_start[key] = the first sorted index whose key is >= key, for key in [0, num_keys] (a binary
/// search per key, so clustered or sparse entries cost no serial fill).
__global__ void run_starts_kernel(const uint32_t* __restrict__ sorted_keys, int64_t num_entries,
                                  int64_t num_keys, uint32_t* __restrict__ run_start) {
  const int64_t key = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (key > num_keys) return;
  int64_t low = 0, high = num_entries;
  while (low < high) {
    const int64_t mid = (low + high) / 2;
    if (static_cast<int64_t>(sorted_keys[mid]) < key) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  run_start[key] = static_cast<uint32_t>(low);
}

template <Variant V, class S, class G>
__global__ void __launch_bounds__(kThreads)
    run_partials_kernel(Geometry geo, const __grid_constant__ LevelTable table, int level,
                        MatrixView grad_features, MatrixView grad_tap_features,
                        const uint32_t* __restrict__ sorted_entries,
                        const uint32_t* __restrict__ run_start, int64_t chunks,
                        compute_t<S>* __restrict__ partials) {
  using T = compute_t<S>;
  const Level& lv = table.levels[level];
  const PlaneView& v = lv.view;
  const int64_t keys = v.planes * v.height * v.width;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= keys * chunks) return;
  const int64_t c0 = (item % chunks) * kLanes;
  const int64_t key = item / chunks;  // (k, y0, x0)
  const int64_t x0 = key % v.width, y0 = (key / v.width) % v.height;
  const int64_t k = key / (v.width * v.height);
  const int t = static_cast<int>(k / 3), own = static_cast<int>(k % 3);
  // Where each corner's share goes: its own partial, or (at the border) the coinciding corner's.
  const bool has_x1 = x0 + 1 < v.width, has_y1 = y0 + 1 < v.height;
  const int slot[4] = {0, has_x1 ? 1 : 0, has_y1 ? 2 : 0,
                       has_y1 ? (has_x1 ? 3 : 2) : (has_x1 ? 1 : 0)};
  const S* plane = static_cast<const S*>(lv.data);
  const T gate = static_cast<T>(lv.gate);
  const T h = static_cast<T>(geo.h);
  T R[9];
  rotation_of<V>(geo, t, R);
  T acc[4][kLanes] = {};
  const uint32_t end = run_start[key + 1];
  for (uint32_t i = run_start[key]; i < end; ++i) {
    const Position pos = position_of(sorted_entries[i] / v.planes, geo.pts.rows);
    T p[3];
    slot_point(geo, pos.slot, p);
    BilinearTap<T> taps[3];
    deterministic_taps<V>(R, p, pos.tap, h, v.height, v.width, taps);
    Corners<T> corners[kLanes][3];
    load_chunk(plane, v, table.read_vector[level], t, c0, taps, corners);
    const int64_t first_col = lv.column + t * v.channels + c0;
#pragma unroll
    for (int j = 0; j < kLanes; ++j) {
      if (c0 + j >= v.channels) continue;
      const T g = (pos.slot.is_tap_point
                       ? matrix_at<T, G>(grad_tap_features, pos.tap, pos.slot.row, first_col + j)
                       : matrix_at<T, G>(grad_features, 0, pos.slot.row, first_col + j)) *
                  gate;
      T d_sample[3], unused_x[3] = {0, 0, 0}, unused_y[3] = {0, 0, 0};
      channel_backward(taps, corners[j], g, d_sample, unused_x, unused_y);
      T share[4];
      taps[own].scatter(d_sample[own], share);
#pragma unroll
      for (int corner = 0; corner < 4; ++corner) {
        // Selects, not acc[slot[corner]][j]: a runtime index would put acc in local memory.
#pragma unroll
        for (int target = 0; target < 4; ++target) {
          if (slot[corner] == target) acc[target][j] += share[corner];
        }
      }
    }
  }
#pragma unroll
  for (int corner = 0; corner < 4; ++corner) {
#pragma unroll
    for (int j = 0; j < kLanes; ++j) {
      if (c0 + j < v.channels)
        partials[(corner * keys + key) * v.channels + c0 + j] = acc[corner][j];
    }
  }
}

/// grad(k, c, y, x) = the four partials bound for (y, x) (Note [deterministic gather]), added in
/// corner order.
template <class S>
__global__ void combine_partials_kernel(const compute_t<S>* __restrict__ partials, PlaneView v,
                                        S* __restrict__ grad, PlaneView gv) {
  const int64_t keys = v.planes * v.height * v.width;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= keys * v.channels) return;
  const int64_t c = item % v.channels, key = item / v.channels;
  const int64_t x = key % v.width, y = (key / v.width) % v.height, k = key / (v.width * v.height);
  const auto at = [&](int corner, int64_t base) {
    return partials[(corner * keys + base) * v.channels + c];
  };
  compute_t<S> sum = at(0, key);
  if (x > 0) sum += at(1, key - 1);
  if (y > 0) sum += at(2, key - v.width);
  if (x > 0 && y > 0) sum += at(3, key - v.width - 1);
  grad[gv.offset(k, c, y, x)] = static_cast<S>(sum);
}

// ---- host side ---------------------------------------------------------------------------------

template <class S>
bool aligned_channels_last(const PlaneView& v, const void* data) {
  const auto multiple = [](int64_t size, int64_t stride) { return size == 1 || stride % 4 == 0; };
  return v.stride_c == 1 && v.channels % 4 == 0 && multiple(v.planes, v.stride_k) &&
         multiple(v.height, v.stride_y) && multiple(v.width, v.stride_x) &&
         reinterpret_cast<std::uintptr_t>(data) % (4 * sizeof(S)) == 0;
}

/// The dense channels-last view of a [P, C, H, W] level.
PlaneView channels_last(const PlaneView& v) {
  PlaneView cl = v;
  cl.stride_c = 1;
  cl.stride_x = v.channels;
  cl.stride_y = v.channels * v.width;
  cl.stride_k = v.channels * v.width * v.height;
  return cl;
}

std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Carves aligned sub-buffers out of the caller's workspace, in a fixed order; sizing and use
/// share this code, so the two cannot disagree.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <class U>
  U* take(std::size_t count) {
    // Align the address itself: the workspace is only promised 8-byte alignment.
    const auto address = reinterpret_cast<std::uintptr_t>(base_) + used_;
    const std::size_t pad = (kAlign - address % kAlign) % kAlign;
    used_ += pad;
    U* p = base_ == nullptr ? nullptr : reinterpret_cast<U*>(base_ + used_);
    used_ += align_up(count * sizeof(U));
    return p;
  }
  /// Bytes needed when the base address is unknown (worst-case padding included).
  std::size_t bytes() const { return used_ + kAlign; }

 private:
  char* base_;
  std::size_t used_ = 0;
};

int64_t level_groups(const Problem& pb) {
  return (static_cast<int64_t>(pb.levels.size()) + kMaxLevelsPerLaunch - 1) / kMaxLevelsPerLaunch;
}

/// log2 of the lanes per (slot, tilt) group (Note [lanes]): one per 4-channel chunk of the widest
/// level, rounded up to a power of two, at most a warp.
int lanes_log2(const Problem& pb) {
  int64_t chunks = 1;
  for (const Level& level : pb.levels) {
    chunks = std::max(chunks, cuda::ceil_div(level.view.channels, kLanes));
  }
  int log2 = 0;
  while (log2 < 5 && (int64_t{1} << log2) < chunks) ++log2;
  return log2;
}

int64_t slot_blocks(const Problem& pb) {
  return cuda::ceil_div(pb.num_slots() << lanes_log2(pb), kThreads);
}

/// Blocks per tilt of the backward's fixed grid: enough to fill any current GPU several times
/// over, few enough that the per-block rotation reductions are a small part of the work. Fixed,
/// not derived from the device, so the reduction order (and the bits) do not depend on the GPU.
constexpr int64_t kBackwardBlocks = 1024;

int64_t backward_blocks(const Problem& pb) { return std::min(slot_blocks(pb), kBackwardBlocks); }

template <class S>
LevelTable level_table(const Problem& pb, int64_t group) {
  LevelTable table;
  const int64_t first = group * kMaxLevelsPerLaunch;
  const int64_t last = std::min<int64_t>(first + kMaxLevelsPerLaunch, pb.levels.size());
  table.count = static_cast<int>(last - first);
  for (int64_t l = first; l < last; ++l) {
    const int i = static_cast<int>(l - first);
    table.levels[i] = pb.levels[l];
    table.read_vector[i] = aligned_channels_last<S>(pb.levels[l].view, pb.levels[l].data);
  }
  return table;
}

/// The workspace layout of the backward. `base == nullptr` only measures.
struct BackwardBuffers {
  void* point_partials = nullptr;       // [groups, T, slots, 3] compute type
  double* rotation_partials = nullptr;  // [groups, T, slot blocks, 9]
  float* accumulators = nullptr;        // 16-bit planes: Σ_l numel, channels-last per level
  uint32_t *keys = nullptr, *sorted_keys = nullptr, *entries = nullptr, *sorted_entries = nullptr;
  uint32_t* run_start = nullptr;
  void* run_partials = nullptr;  // [4, keys, C] compute type (Note [deterministic gather])
  void* sort_scratch = nullptr;
  std::size_t sort_scratch_bytes = 0;
  std::size_t bytes = 0;
};

int end_bit_for(int64_t num_keys) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < num_keys) ++bits;
  return bits;
}

BackwardBuffers backward_buffers(const Problem& pb, bool wants_points, bool wants_rotations,
                                 bool wants_planes, bool deterministic, void* base) {
  BackwardBuffers b;
  Carver carve(base);
  const int64_t groups = level_groups(pb), slots = pb.num_slots();
  const std::size_t compute_size = dtype_size(pb.dtype);
  if (wants_points) {
    b.point_partials = carve.take<char>(groups * pb.num_tilts * slots * 3 * compute_size);
  }
  if (wants_rotations) {
    b.rotation_partials = carve.take<double>(groups * pb.num_tilts * backward_blocks(pb) * 9);
  }
  const bool half = pb.plane_dtype == DType::Float16 || pb.plane_dtype == DType::BFloat16;
  if (wants_planes && !deterministic && half) {
    int64_t total = 0;
    for (const Level& level : pb.levels) total += level.view.numel();
    b.accumulators = carve.take<float>(total);
  }
  if (wants_planes && deterministic) {
    int64_t max_entries = 0, max_keys = 0, max_cells = 0;
    for (const Level& level : pb.levels) {
      const PlaneView& v = level.view;
      max_entries = std::max(max_entries, pb.num_positions() * v.planes);
      max_keys = std::max(max_keys, v.planes * v.height * v.width);
      max_cells = std::max(max_cells, v.numel());
    }
    if (max_entries >= (int64_t{1} << 32) || max_keys >= (int64_t{1} << 32) - 1) {
      fail(ErrorKind::NotImplemented, pb.op,
           "deterministic=True supports up to 2^32 (position, plane) pairs and cells per level, "
           "but got " +
               std::to_string(max_entries) + " pairs and " + std::to_string(max_keys) +
               " cells; use the default backward");
    }
    b.keys = carve.take<uint32_t>(max_entries);
    b.sorted_keys = carve.take<uint32_t>(max_entries);
    b.entries = carve.take<uint32_t>(max_entries);
    b.sorted_entries = carve.take<uint32_t>(max_entries);
    b.run_start = carve.take<uint32_t>(max_keys + 1);
    const std::size_t compute_bytes =
        pb.plane_dtype == DType::Float64 ? sizeof(double) : sizeof(float);
    b.run_partials = carve.take<char>(4 * max_cells * compute_bytes);
    std::size_t scratch = 0;
    cuda::check(
        cub::DeviceRadixSort::SortPairs(nullptr, scratch, b.keys, b.sorted_keys, b.entries,
                                        b.sorted_entries, max_entries, 0, end_bit_for(max_keys)),
        pb.op, "cub::DeviceRadixSort::SortPairs (size query)");
    b.sort_scratch_bytes = scratch;
    b.sort_scratch = carve.take<char>(scratch);
  }
  b.bytes = carve.bytes();
  return b;
}

/// Calls f(TypeTag<O>) for an output (or upstream gradient) dtype: the compute type or S.
template <class S, class F>
void dispatch_feature_dtype(const char* op, DType dtype, const F& f) {
  using T = compute_t<S>;
  cuda::dispatch_float_types(op, dtype, [&](auto tag) {
    using O = typename decltype(tag)::type;
    if constexpr (std::is_same_v<O, T> || std::is_same_v<O, S>) {
      f(tag);
    } else {
      fail(ErrorKind::Runtime, op, "internal error: feature dtype is neither compute nor plane");
    }
  });
}

void check_grid(const Problem& pb) {
  if (pb.num_tilts > 65535) {
    fail(ErrorKind::NotImplemented, pb.op,
         "not implemented for more than 65535 tilts, but got " + std::to_string(pb.num_tilts));
  }
  // Note [lanes]: in-plane offsets are 32-bit (a level may still exceed 2^31 elements).
  const auto span = [](const PlaneView& v) {
    return (v.channels - 1) * v.stride_c + (v.height - 1) * v.stride_y +
           (v.width - 1) * v.stride_x + 1;
  };
  for (const Level& level : pb.levels) {
    const int64_t largest = std::max(span(level.view), level.grad ? span(level.grad_view) : 0);
    if (largest >= (int64_t{1} << 31)) {
      fail(ErrorKind::NotImplemented, pb.op,
           "not implemented on CUDA for a single plane spanning 2^31 or more elements (got " +
               std::to_string(largest) + ")");
    }
  }
  if (slot_blocks(pb) > cuda::kMaxGridX) {
    fail(ErrorKind::NotImplemented, pb.op, "not implemented for this many points");
  }
}

}  // namespace

void forward_cuda(const Problem& pb, const ForwardOutputs& out, Stream stream_handle) {
  if (pb.num_slots() == 0 || pb.num_features == 0) return;
  check_grid(pb);
  cuda::ProfileRange range(pb.op);
  cuda::DeviceGuard guard(pb.device.index, pb.op);
  const auto stream = static_cast<cudaStream_t>(stream_handle.handle);
  const Geometry geo = geometry_of(pb);
  const dim3 grid(static_cast<unsigned>(slot_blocks(pb)), static_cast<unsigned>(pb.num_tilts));
  cuda::dispatch_float_types(pb.op, pb.plane_dtype, [&](auto plane_tag) {
    using S = typename decltype(plane_tag)::type;
    dispatch_feature_dtype<S>(pb.op, out.dtype, [&](auto out_tag) {
      using O = typename decltype(out_tag)::type;
      visit_variant(pb.variant, [&](auto variant) {
        constexpr Variant V = decltype(variant)::value;
        for (int64_t group = 0; group < level_groups(pb); ++group) {
          const LevelTable table = level_table<S>(pb, group);
          forward_kernel<V, S, O><<<grid, kThreads, 0, stream>>>(
              geo, table, static_cast<O*>(out.features), static_cast<O*>(out.tap_features),
              pb.num_slots(), pb.num_features, lanes_log2(pb));
          cuda::check_launch(pb.op, "forward_kernel", stream);
        }
      });
    });
  });
}

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
  const bool wants_points = a.grad_pts != nullptr || a.grad_tap_pts != nullptr;
  const bool wants_rotations = a.grad_rotations != nullptr;
  const BackwardBuffers buf = backward_buffers(pb, wants_points, wants_rotations, a.wants_planes,
                                               a.deterministic, a.workspace);
  const Geometry geo = geometry_of(pb);
  const int64_t slots = pb.num_slots(), groups = level_groups(pb), blocks = backward_blocks(pb);
  const bool scatter = a.wants_planes && !a.deterministic;
  const bool half = pb.plane_dtype == DType::Float16 || pb.plane_dtype == DType::BFloat16;

  cuda::dispatch_float_types(pb.op, pb.plane_dtype, [&](auto plane_tag) {
    using S = typename decltype(plane_tag)::type;
    using T = compute_t<S>;
    // Where the scatter adds: the gradients themselves, or float32 accumulators for 16-bit planes.
    Problem target = pb;
    if (scatter) {
      float* next = buf.accumulators;
      for (Level& level : target.levels) {
        if (half) {
          level.grad = next;
          level.grad_view = channels_last(level.view);
          next += level.view.numel();
        }
        // Zero-fill the sums (dense by contract; see Note [deterministic gather] for the path
        // that writes every cell instead).
        const std::size_t bytes = level.view.numel() * (half ? sizeof(float) : sizeof(S));
        cuda::check(cudaMemsetAsync(level.grad, 0, bytes, stream), pb.op, "cudaMemsetAsync");
      }
    }
    dispatch_feature_dtype<S>(pb.op, a.grad_dtype, [&](auto grad_tag) {
      using G = typename decltype(grad_tag)::type;
      visit_variant(pb.variant, [&](auto variant) {
        constexpr Variant V = decltype(variant)::value;
        const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(pb.num_tilts));
        if ((scatter || wants_points || wants_rotations) && slots > 0) {
          for (int64_t group = 0; group < groups; ++group) {
            LevelTable table = level_table<S>(target, group);
            for (int i = 0; i < table.count; ++i) {
              table.accumulate_vector[i] =
                  scatter && aligned_channels_last<accumulator_t<S>>(table.levels[i].grad_view,
                                                                     table.levels[i].grad);
            }
            T* points = wants_points
                            ? static_cast<T*>(buf.point_partials) + group * pb.num_tilts * slots * 3
                            : nullptr;
            double* rotations = wants_rotations
                                    ? buf.rotation_partials + group * pb.num_tilts * blocks * 9
                                    : nullptr;
            if (scatter) {
              backward_kernel<V, S, G, true>
                  <<<grid, kThreads, 0, stream>>>(geo, table, a.grad_features, a.grad_tap_features,
                                                  points, rotations, slots, lanes_log2(pb));
            } else {
              backward_kernel<V, S, G, false>
                  <<<grid, kThreads, 0, stream>>>(geo, table, a.grad_features, a.grad_tap_features,
                                                  points, rotations, slots, lanes_log2(pb));
            }
            cuda::check_launch(pb.op, "backward_kernel", stream);
          }
        }
        if (wants_points && slots > 0) {
          const auto st = a.grad_pts_strides, tst = a.grad_tap_pts_strides;
          point_gradient_kernel<T>
              <<<static_cast<unsigned>(cuda::ceil_div(slots, 256)), 256, 0, stream>>>(
                  static_cast<const T*>(buf.point_partials), groups * pb.num_tilts, slots,
                  pb.pts.rows, static_cast<T*>(a.grad_pts), st[0], st[1],
                  static_cast<T*>(a.grad_tap_pts), tst[0], tst[1]);
          cuda::check_launch(pb.op, "point_gradient_kernel", stream);
        }
        if (wants_rotations) {
          const auto st = a.grad_rotation_strides;
          rotation_gradient_kernel<T>
              <<<static_cast<unsigned>(pb.num_tilts * 9), kFinalThreads, 0, stream>>>(
                  buf.rotation_partials, slots > 0 ? groups : 0, pb.num_tilts, blocks,
                  static_cast<T*>(a.grad_rotations), st[0], st[1], st[2]);
          cuda::check_launch(pb.op, "rotation_gradient_kernel", stream);
        }
        if (scatter && half) {
          for (std::size_t l = 0; l < pb.levels.size(); ++l) {
            const Level& level = pb.levels[l];
            const int64_t n = level.view.numel();
            const auto grid_size =
                static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(n, 256), 65536));
            round_gradient_kernel<S><<<grid_size, 256, 0, stream>>>(
                static_cast<const float*>(target.levels[l].grad), target.levels[l].grad_view,
                static_cast<S*>(level.grad), level.grad_view);
            cuda::check_launch(pb.op, "round_gradient_kernel", stream);
          }
        }
        if (a.wants_planes && a.deterministic) {
          const int64_t positions = pb.num_positions();
          for (std::size_t l = 0; l < pb.levels.size(); ++l) {
            const int64_t group = static_cast<int64_t>(l) / kMaxLevelsPerLaunch;
            const int level = static_cast<int>(l % kMaxLevelsPerLaunch);
            const LevelTable table = level_table<S>(pb, group);
            const PlaneView& v = pb.levels[l].view;
            const int64_t entries = positions * v.planes;
            const int64_t keys = v.planes * v.height * v.width;
            if (entries > 0) {
              const dim3 key_grid(static_cast<unsigned>(cuda::ceil_div(positions, kThreads)),
                                  static_cast<unsigned>(pb.num_tilts));
              entry_keys_kernel<V, S><<<key_grid, kThreads, 0, stream>>>(
                  geo, table, level, positions, buf.keys, buf.entries);
              cuda::check_launch(pb.op, "entry_keys_kernel", stream);
              std::size_t scratch = buf.sort_scratch_bytes;
              cuda::check(cub::DeviceRadixSort::SortPairs(
                              buf.sort_scratch, scratch, buf.keys, buf.sorted_keys, buf.entries,
                              buf.sorted_entries, entries, 0, end_bit_for(keys), stream),
                          pb.op, "cub::DeviceRadixSort::SortPairs");
            }
            run_starts_kernel<<<static_cast<unsigned>(cuda::ceil_div(keys + 1, 256)), 256, 0,
                                stream>>>(buf.sorted_keys, entries, keys, buf.run_start);
            cuda::check_launch(pb.op, "run_starts_kernel", stream);
            const int64_t chunks = cuda::ceil_div(v.channels, kLanes);
            auto* partials = static_cast<T*>(buf.run_partials);
            run_partials_kernel<V, S, G>
                <<<static_cast<unsigned>(cuda::ceil_div(keys * chunks, kThreads)), kThreads, 0,
                   stream>>>(geo, table, level, a.grad_features, a.grad_tap_features,
                             buf.sorted_entries, buf.run_start, chunks, partials);
            cuda::check_launch(pb.op, "run_partials_kernel", stream);
            combine_partials_kernel<S>
                <<<static_cast<unsigned>(cuda::ceil_div(keys * v.channels, 256)), 256, 0, stream>>>(
                    partials, v, static_cast<S*>(pb.levels[l].grad), pb.levels[l].grad_view);
            cuda::check_launch(pb.op, "combine_partials_kernel", stream);
          }
        }
      });
    });
  });
}

}  // namespace fieldfuse::detail::kplanes
