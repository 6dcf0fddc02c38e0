// SPDX-License-Identifier: Apache-2.0
// The deterministic K-Planes plane gradient on CUDA (Note [deterministic gather]): entries sorted
// by base cell, each cell's run summed in a fixed order, then each cell's four partials combined.
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <string>

#include "core/cuda_launch.cuh"
#include "core/warp.cuh"
#include "kplanes/kplanes_cuda.cuh"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse::detail::kplanes {
namespace {

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

// ---- deterministic plane gradients: sort entries by cell, gather per cell ----------------------

// Note [deterministic gather]
// An entry is one (position, plane) pair of a level: its bilinear tap has a base cell (y0, x0).
// Entries are sorted by (plane, base cell) with a stable radix sort of their index, so each base
// cell's entries form a run in position order. The key kernel also stores each entry's fractions
// (tx, ty) on its own plane: the run kernel takes the base cell from the key and the weights from
// these, so an entry can never land in one run and be weighted for a neighbouring cell (a
// recomputed tap may round differently where FMA contraction differs between the kernels). A
// warp then owns one run: its lanes take the entries and 4-channel chunks in a fixed pattern,
// recompute each entry's samples on the two other planes (storing C values per entry would cost
// more memory than the planes) and sum its four corner shares into four partials — one per
// corner, each bound for a fixed neighbour of the base cell: (y0, x0), (y0, x0+1), (y0+1, x0),
// (y0+1, x0+1) — each lane in run order, the lanes then by a fixed butterfly. Where the border
// makes corners coincide (x0 = W−1 or y0 = H−1) the shares fold into the corner that exists, in
// corner order. A second kernel gives each cell the sum of the four partials bound for it, in a
// fixed order. Every cell is written, so nothing is zero-filled, and the result has the same bits
// on every run.
// (The first version gave each run to one thread and recomputed the own plane's tap in both
// kernels through one out-of-line function, whose taps went through local memory: 7 GB of L2
// writes at the tomography config, and the run kernel took 4.1 ms of a 5.5 ms backward; one thread
// per run left it latency-bound at 11% occupancy, 3.0 ms.)

/// The taps of position `tap` of point p on a level.
template <Variant V, class T>
__device__ FF_FORCE_INLINE void position_taps(const T (&R)[9], const T (&p)[3], int tap, T h,
                                              int64_t height, int64_t width,
                                              BilinearTap<T> (&taps)[3]) {
  T r[3];
  tap_position<V>(R, p, tap, h, r);
  plane_taps<V>(r, height, width, taps);
}

template <Variant V, class S>
__global__ void entry_keys_kernel(Geometry geo, const __grid_constant__ LevelTable table, int level,
                                  int64_t num_positions, uint32_t* __restrict__ keys,
                                  uint32_t* __restrict__ entries,
                                  compute_t<S>* __restrict__ fractions) {
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
  position_taps<V>(R, p, pos.tap, static_cast<T>(geo.h), v.height, v.width, taps);
#pragma unroll
  for (int p_ = 0; p_ < 3; ++p_) {
    const int64_t k = 3 * t + p_;
    const int64_t e = k * num_positions + q;  // plane-major: a warp's writes are contiguous
    keys[e] = static_cast<uint32_t>((k * v.height + taps[p_].y0) * v.width + taps[p_].x0);
    entries[e] = static_cast<uint32_t>(e);
    fractions[2 * e] = taps[p_].tx;
    fractions[2 * e + 1] = taps[p_].ty;
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

/// Resident blocks per SM the float32 run kernel is compiled for: its ~150 registers allowed only
/// 3 (16% occupancy), too few warps to hide its gathers' latency (float64 keeps its registers).
constexpr int kRunBlocksPerSM = 4;

/// One warp per base cell (Note [deterministic gather]): the lanes split into `slots` groups of
/// 2^chunk_log2 lanes; group s takes run entries s, s + slots, ... and lane c of a group channel
/// chunks c, c + 2^chunk_log2, ... . Each lane sums its entries in run order, the groups are then
/// combined by a fixed xor butterfly, and group 0 writes the cell's four partials.
template <Variant V, class S, class G>
__global__ void __launch_bounds__(kThreads, sizeof(compute_t<S>) == 8 ? 2 : kRunBlocksPerSM)
    run_partials_kernel(Geometry geo, const __grid_constant__ LevelTable table, int level,
                        MatrixView grad_features, MatrixView grad_tap_features,
                        const uint32_t* __restrict__ sorted_entries,
                        const compute_t<S>* __restrict__ fractions,
                        const uint32_t* __restrict__ run_start, int64_t num_positions,
                        int chunk_log2, compute_t<S>* __restrict__ partials) {
  using T = compute_t<S>;
  const Level& lv = table.levels[level];
  const PlaneView& v = lv.view;
  const int64_t keys = v.planes * v.height * v.width;
  const int64_t key = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / cuda::kWarpSize;
  if (key >= keys) return;  // whole warps
  const int lane = cuda::lane_id();
  const int group_lanes = 1 << chunk_log2, slots = cuda::kWarpSize >> chunk_log2;
  const int slot = lane >> chunk_log2, chunk_lane = lane & (group_lanes - 1);
  const int64_t x0 = key % v.width, y0 = (key / v.width) % v.height;
  const int64_t k = key / (v.width * v.height);
  const int t = static_cast<int>(k / 3), own = static_cast<int>(k % 3);
  // Where each corner's share goes: its own partial, or (at the border) the coinciding corner's.
  const bool has_x1 = x0 + 1 < v.width, has_y1 = y0 + 1 < v.height;
  const S* plane = static_cast<const S*>(lv.data);
  const T gate = static_cast<T>(lv.gate);
  const T h = static_cast<T>(geo.h);
  T R[9];
  rotation_of<V>(geo, t, R);
  const uint32_t begin = run_start[key], end = run_start[key + 1];
  const int64_t first_col = lv.column + t * v.channels;
  for (int64_t c0 = int64_t{chunk_lane} * kLanes; c0 - chunk_lane * kLanes < v.channels;
       c0 += int64_t{kLanes} << chunk_log2) {
    T acc[4][kLanes] = {};
    for (uint32_t i = begin + slot; i < end && c0 < v.channels; i += slots) {
      const uint32_t e = sorted_entries[i];
      const Position pos = position_of(e - k * num_positions, geo.pts.rows);
      T p[3];
      slot_point(geo, pos.slot, p);
      BilinearTap<T> taps[3];
      position_taps<V>(R, p, pos.tap, h, v.height, v.width, taps);
      // The own plane's weights are the key kernel's (Note [deterministic gather]). Selects, not
      // taps[own]: a runtime index would put taps in local memory.
      BilinearTap<T> own_tap = own == 0 ? taps[0] : own == 1 ? taps[1] : taps[2];
      own_tap.tx = fractions[2 * static_cast<int64_t>(e)];
      own_tap.ty = fractions[2 * static_cast<int64_t>(e) + 1];
      // Only the partner planes' corners: the own plane's gradient does not depend on them.
      Corners<T> corners[kLanes][3];
      load_chunk(plane, v, table.read_vector[level], t, c0, taps, corners, /*skip=*/own);
      T g[kLanes];
      upstream_chunk<T, G>(pick(pos.slot.is_tap_point, grad_tap_features, grad_features),
                           pos.slot.is_tap_point ? pos.tap : 0, pos.slot.row, first_col, c0,
                           v.channels, table.features_vector[level], g);
#pragma unroll
      for (int j = 0; j < kLanes; ++j) {
        T s[3], partial[3];
#pragma unroll
        for (int p_ = 0; p_ < 3; ++p_) {
          const T(&c)[4] = corners[j][p_].v;
          s[p_] = p_ == own ? T(0) : taps[p_].sample(c[0], c[1], c[2], c[3]);
        }
        plane_product_partials(s, partial);  // partial[own] is the product of the partners
        const T partners = own == 0 ? partial[0] : own == 1 ? partial[1] : partial[2];
        T share[4];
        own_tap.scatter(g[j] * gate * partners, share);
        // In corner order, each into its partial or the coinciding one's; constant indices only
        // (a computed index would put acc in local memory).
        acc[0][j] += share[0];
        if (has_x1) {
          acc[1][j] += share[1];
        } else {
          acc[0][j] += share[1];
        }
        if (has_y1) {
          acc[2][j] += share[2];
        } else {
          acc[0][j] += share[2];
        }
        if (has_x1 && has_y1) {
          acc[3][j] += share[3];
        } else if (has_y1) {
          acc[2][j] += share[3];
        } else if (has_x1) {
          acc[1][j] += share[3];
        } else {
          acc[0][j] += share[3];
        }
      }
    }
    // The slot groups' sums, combined in a fixed order (every lane takes part).
#pragma unroll
    for (int corner = 0; corner < 4; ++corner) {
#pragma unroll
      for (int j = 0; j < kLanes; ++j) {
        for (int offset = group_lanes; offset < cuda::kWarpSize; offset <<= 1) {
          acc[corner][j] += __shfl_xor_sync(cuda::kFullWarp, acc[corner][j], offset);
        }
        if (slot == 0 && c0 + j < v.channels) {
          partials[(corner * keys + key) * v.channels + c0 + j] = acc[corner][j];
        }
      }
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

int end_bit_for(int64_t num_keys) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < num_keys) ++bits;
  return bits;
}

/// Sorts level l's (position, plane) entries by base cell and finds each cell's run.
template <Variant V, class S>
void sort_entries(const Problem& pb, const Geometry& geo, const LevelTable& table, int level,
                  const GatherBuffers& buf, int64_t entries, int64_t keys, cudaStream_t stream) {
  const int64_t positions = pb.num_positions();
  if (entries > 0) {
    const dim3 key_grid(static_cast<unsigned>(cuda::ceil_div(positions, kThreads)),
                        static_cast<unsigned>(pb.num_tilts));
    entry_keys_kernel<V, S>
        <<<key_grid, kThreads, 0, stream>>>(geo, table, level, positions, buf.keys, buf.entries,
                                            static_cast<compute_t<S>*>(buf.fractions));
    cuda::check_launch(pb.op, "entry_keys_kernel", stream);
    std::size_t scratch = buf.sort_scratch_bytes;
    cuda::check(cub::DeviceRadixSort::SortPairs(buf.sort_scratch, scratch, buf.keys,
                                                buf.sorted_keys, buf.entries, buf.sorted_entries,
                                                entries, 0, end_bit_for(keys), stream),
                pb.op, "cub::DeviceRadixSort::SortPairs");
  }
  run_starts_kernel<<<static_cast<unsigned>(cuda::ceil_div(keys + 1, 256)), 256, 0, stream>>>(
      buf.sorted_keys, entries, keys, buf.run_start);
  cuda::check_launch(pb.op, "run_starts_kernel", stream);
}

/// Sums each run into its cell's four partials and combines them into level l's gradient.
template <Variant V, class S, class G>
void sum_runs(const BackwardArgs& a, const Geometry& geo, const LevelTable& table, int level,
              const GatherBuffers& buf, std::size_t l, int64_t keys, cudaStream_t stream) {
  using T = compute_t<S>;
  const Problem& pb = a.problem;
  const PlaneView& v = pb.levels[l].view;
  // Lanes per entry: one per 4-channel chunk, rounded up to a power of two, at most a warp.
  const int64_t chunks = cuda::ceil_div(v.channels, kLanes);
  int chunk_log2 = 0;
  while (chunk_log2 < 5 && (int64_t{1} << chunk_log2) < chunks) ++chunk_log2;
  auto* partials = static_cast<T*>(buf.run_partials);
  constexpr int64_t kWarpsPerBlock = kThreads / cuda::kWarpSize;
  run_partials_kernel<V, S, G>
      <<<static_cast<unsigned>(cuda::ceil_div(keys, kWarpsPerBlock)), kThreads, 0, stream>>>(
          geo, table, level, a.grad_features, a.grad_tap_features, buf.sorted_entries,
          static_cast<const T*>(buf.fractions), buf.run_start, pb.num_positions(), chunk_log2,
          partials);
  cuda::check_launch(pb.op, "run_partials_kernel", stream);
  combine_partials_kernel<S>
      <<<static_cast<unsigned>(cuda::ceil_div(keys * v.channels, 256)), 256, 0, stream>>>(
          partials, v, static_cast<S*>(pb.levels[l].grad), pb.levels[l].grad_view);
  cuda::check_launch(pb.op, "combine_partials_kernel", stream);
}

}  // namespace

GatherBuffers carve_gather_buffers(const Problem& pb, Carver& carve) {
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
  GatherBuffers b;
  b.keys = carve.take<uint32_t>(max_entries);
  b.sorted_keys = carve.take<uint32_t>(max_entries);
  b.entries = carve.take<uint32_t>(max_entries);
  b.sorted_entries = carve.take<uint32_t>(max_entries);
  b.run_start = carve.take<uint32_t>(max_keys + 1);
  const std::size_t compute_bytes =
      pb.plane_dtype == DType::Float64 ? sizeof(double) : sizeof(float);
  b.fractions = carve.take<char>(2 * max_entries * compute_bytes);
  b.run_partials = carve.take<char>(4 * max_cells * compute_bytes);
  std::size_t scratch = 0;
  cuda::check(
      cub::DeviceRadixSort::SortPairs(nullptr, scratch, b.keys, b.sorted_keys, b.entries,
                                      b.sorted_entries, max_entries, 0, end_bit_for(max_keys)),
      pb.op, "cub::DeviceRadixSort::SortPairs (size query)");
  b.sort_scratch_bytes = scratch;
  b.sort_scratch = carve.take<char>(scratch);
  return b;
}

void gather_plane_gradients(const BackwardArgs& a, const GatherBuffers& buf, cudaStream_t stream) {
  const Problem& pb = a.problem;
  const Geometry geo = geometry_of(pb);
  dispatch_problem(pb, a.grad_dtype, [&](auto plane_tag, auto grad_tag, auto variant) {
    using S = typename decltype(plane_tag)::type;
    using G = typename decltype(grad_tag)::type;
    constexpr Variant V = decltype(variant)::value;
    for (std::size_t l = 0; l < pb.levels.size(); ++l) {
      const int64_t group = static_cast<int64_t>(l) / kMaxLevelsPerLaunch;
      const int level = static_cast<int>(l % kMaxLevelsPerLaunch);
      LevelTable table = level_table<S>(pb, group);
      mark_feature_chunks(table, a.grad_features, a.grad_tap_features, sizeof(G));
      const PlaneView& v = pb.levels[l].view;
      const int64_t entries = pb.num_positions() * v.planes;
      const int64_t keys = v.planes * v.height * v.width;
      sort_entries<V, S>(pb, geo, table, level, buf, entries, keys, stream);
      sum_runs<V, S, G>(a, geo, table, level, buf, l, keys, stream);
    }
  });
}

}  // namespace fieldfuse::detail::kplanes
