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
// An entry is one (position, plane) pair of a level: its bilinear tap has a base cell (y0, x0), and
// its share is ∂L/∂sample on that plane for each channel (the upstream gradient times the gate
// times the product of the two other planes' samples). The backward kernel, which computes every
// share anyway for the point gradients, stores them ([planes, positions, C] per level) instead of
// scattering them (PlaneGradient::kShares). Entries are sorted by (plane, base cell) with a stable
// radix sort of their index, so each base cell's entries form a run in position order. The key
// kernel also stores each entry's fractions (tx, ty) on its own plane: the run kernel takes the
// base cell from the key and the weights from these, so an entry can never land in one run and be
// weighted for a neighbouring cell (a recomputed tap may round differently where FMA contraction
// differs between kernels). A warp then owns one run: its lanes take the entries and 4-channel
// chunks in a fixed pattern, weight each entry's share by its four corner weights and sum them
// into four partials — one per corner, each bound for a fixed neighbour of the base cell: (y0, x0),
// (y0, x0+1), (y0+1, x0), (y0+1, x0+1) — each lane in run order, the lanes then by a fixed
// butterfly. Where the border makes corners coincide (x0 = W−1 or y0 = H−1) the shares fold into
// the corner that exists, in corner order. A second kernel gives each cell the sum of the four
// partials bound for it, in a fixed order. Every cell is written, so nothing is zero-filled, and
// the result has the same bits on every run.
// Cost: the shares take C values per entry (3·T·positions·C, one level at a time: the backward
// runs one launch per level on this path, each followed by its level's sort and sums; 236 MB at
// the tomography config, 1.2 GB at the production one, against the planes' 15 MB and 242 MB),
// against which the run kernel only streams them. The versions before recomputed each entry's
// two partner samples in the run kernel instead (8 corner gathers per entry, 3× the default
// backward's reads, in cell order): 2.3 ms of a 2.9 ms fwd+bwd at the tomography config, where
// the default path takes 0.95 ms (bench/RESULTS.md, issue 12).

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

/// (tx, ty) of an entry: one 8- or 16-byte load.
__device__ FF_FORCE_INLINE void load_fractions(const float* p, float& tx, float& ty) {
  const float2 q = __ldg(reinterpret_cast<const float2*>(p));
  tx = q.x, ty = q.y;
}
__device__ FF_FORCE_INLINE void load_fractions(const double* p, double& tx, double& ty) {
  const double2 q = __ldg(reinterpret_cast<const double2*>(p));
  tx = q.x, ty = q.y;
}

/// A group of 2^(chunk_log2 + slots_log2) lanes per base cell (Note [deterministic gather]): it
/// splits into 2^slots_log2 slots of 2^chunk_log2 lanes; slot s takes run entries s, s + slots, ...
/// and lane c of a slot channel chunks c, c + 2^chunk_log2, ... . Each lane sums its entries in
/// run order, the slots are then combined by a fixed xor butterfly, and slot 0 writes the cell's
/// four partials.
template <class T>
__global__ void __launch_bounds__(kThreads)
    run_partials_kernel(PlaneView v, const uint32_t* __restrict__ sorted_entries,
                        const T* __restrict__ fractions, const T* __restrict__ shares,
                        const uint32_t* __restrict__ run_start, int chunk_log2, int slots_log2,
                        T* __restrict__ partials) {
  const int64_t keys = v.planes * v.height * v.width;
  const int cell_log2 = chunk_log2 + slots_log2;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t key = thread >> cell_log2;
  if ((key & ~int64_t{(cuda::kWarpSize >> cell_log2) - 1}) >= keys) return;  // whole warps
  const bool live = key < keys;  // a dead group still takes part in the shuffles
  const int lane_in_cell = static_cast<int>(thread & ((1 << cell_log2) - 1));
  const int group_lanes = 1 << chunk_log2, slots = 1 << slots_log2;
  const int slot = lane_in_cell >> chunk_log2, chunk_lane = lane_in_cell & (group_lanes - 1);
  const int64_t x0 = key % v.width, y0 = (key / v.width) % v.height;
  // Where each corner's share goes: its own partial, or (at the border) the coinciding corner's.
  const bool has_x1 = x0 + 1 < v.width, has_y1 = y0 + 1 < v.height;
  const bool vector = v.channels % kLanes == 0;
  const uint32_t begin = live ? run_start[key] : 0, end = live ? run_start[key + 1] : 0;
  for (int64_t c0 = int64_t{chunk_lane} * kLanes; c0 - chunk_lane * kLanes < v.channels;
       c0 += int64_t{kLanes} << chunk_log2) {
    T acc[4][kLanes] = {};
    for (uint32_t i = begin + slot; i < end && c0 < v.channels; i += slots) {
      const int64_t e = sorted_entries[i];
      BilinearTap<T> tap{};
      load_fractions(fractions + 2 * e, tap.tx, tap.ty);
      const T* row = shares + e * v.channels + c0;
      T d_sample[kLanes];
      if (vector) {
        load4(row, d_sample);
      } else {
#pragma unroll
        for (int j = 0; j < kLanes; ++j) d_sample[j] = c0 + j < v.channels ? row[j] : T(0);
      }
#pragma unroll
      for (int j = 0; j < kLanes; ++j) {
        T share[4];
        tap.scatter(d_sample[j], share);
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
    // The slots' sums, combined in a fixed order (every lane takes part).
#pragma unroll
    for (int corner = 0; corner < 4; ++corner) {
#pragma unroll
      for (int j = 0; j < kLanes; ++j) {
        for (int offset = group_lanes; offset < (1 << cell_log2); offset <<= 1) {
          acc[corner][j] += __shfl_xor_sync(cuda::kFullWarp, acc[corner][j], offset);
        }
      }
      if (!live || slot != 0 || c0 >= v.channels) continue;
      T* out = partials + (corner * keys + key) * v.channels + c0;
      if (vector) {
        store4(out, acc[corner]);
      } else {
#pragma unroll
        for (int j = 0; j < kLanes; ++j) {
          if (c0 + j < v.channels) out[j] = acc[corner][j];
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
template <class S>
void sum_runs(const Problem& pb, const GatherBuffers& buf, std::size_t l, int64_t keys,
              cudaStream_t stream) {
  using T = compute_t<S>;
  const PlaneView& v = pb.levels[l].view;
  // Lanes per entry: one per 4-channel chunk, rounded up to a power of two, at most a warp.
  const int chunk_log2 = warp_lanes_log2(cuda::ceil_div(v.channels, kLanes));
  // Slots per cell: about one per 4 entries of the mean run, at most what fills a warp. Short runs
  // (a fine level) want few: the butterfly costs as much as the run (2.3 shuffles per entry at
  // one slot per entry and 15-entry runs). A function of the shapes only, so the summation order
  // (and the bits) do not depend on the data.
  const int64_t mean_run = pb.num_positions() / std::max<int64_t>(1, v.height * v.width);
  int slots_log2 = 0;
  while (chunk_log2 + slots_log2 < 5 && (int64_t{4} << (slots_log2 + 1)) <= mean_run) ++slots_log2;
  auto* partials = static_cast<T*>(buf.run_partials);
  const int64_t lanes = keys << (chunk_log2 + slots_log2);
  run_partials_kernel<T>
      <<<static_cast<unsigned>(cuda::ceil_div(lanes, kThreads)), kThreads, 0, stream>>>(
          v, buf.sorted_entries, static_cast<const T*>(buf.fractions),
          static_cast<const T*>(buf.shares), buf.run_start, chunk_log2, slots_log2, partials);
  cuda::check_launch(pb.op, "run_partials_kernel", stream);
  combine_partials_kernel<S>
      <<<static_cast<unsigned>(cuda::ceil_div(keys * v.channels, 256)), 256, 0, stream>>>(
          partials, v, static_cast<S*>(pb.levels[l].grad), pb.levels[l].grad_view);
  cuda::check_launch(pb.op, "combine_partials_kernel", stream);
}

}  // namespace

GatherBuffers carve_gather_buffers(const Problem& pb, Carver& carve) {
  int64_t max_entries = 0, max_keys = 0, max_cells = 0, max_shares = 0;
  for (const Level& level : pb.levels) {
    const PlaneView& v = level.view;
    max_entries = std::max(max_entries, pb.num_positions() * v.planes);
    max_shares = std::max(max_shares, pb.num_positions() * v.planes * v.channels);
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
  b.shares = carve.take<char>(max_shares * compute_bytes);
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

void gather_level_gradient(const BackwardArgs& a, const GatherBuffers& buf, std::size_t l,
                           cudaStream_t stream) {
  const Problem& pb = a.problem;
  const Geometry geo = geometry_of(pb);
  const int64_t group = static_cast<int64_t>(l) / kMaxLevelsPerLaunch;
  const int level = static_cast<int>(l % kMaxLevelsPerLaunch);
  const PlaneView& v = pb.levels[l].view;
  const int64_t entries = pb.num_positions() * v.planes;
  const int64_t keys = v.planes * v.height * v.width;
  // The shares already hold the upstream gradient: only the plane dtype and variant matter here.
  cuda::dispatch_float_types(pb.op, pb.plane_dtype, [&](auto plane_tag) {
    using S = typename decltype(plane_tag)::type;
    visit_variant(pb.variant, [&](auto variant) {
      constexpr Variant V = decltype(variant)::value;
      sort_entries<V, S>(pb, geo, level_table<S>(pb, group), level, buf, entries, keys, stream);
      sum_runs<S>(pb, buf, l, keys, stream);
    });
  });
}

}  // namespace fieldfuse::detail::kplanes
