// SPDX-License-Identifier: Apache-2.0
// What the K-Planes CUDA translation units share: launch constants, the level table, the geometry
// of a slot, the corner reads of a tap, the lane groups, the host-side launch helpers, workspace
// carving, and the deterministic gather's entry points (kplanes_cuda_gather.cu).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse::detail::kplanes {

using cuda::compute_t;

constexpr int kThreads = 128;
/// Channels a thread handles per step: one 16-byte load of float32 channels-last corners.
constexpr int kLanes = 4;
// Note [kplanes occupancy]
// Blocks of kThreads per SM the hot kernels are compiled for (__launch_bounds__), for a 32-bit
// compute type. Left to itself the compiler gave the float32 forward 158 registers (3 blocks) and
// the scatter backward 195 (2 blocks, 12 % occupancy): too few warps to hide the corner loads' L2
// latency. On an H100 at the tomography step (2026-11-24): forward 0.371 ms unbounded, 0.364 at
// 2 or 3 blocks, 0.300 at 4 (128 registers, 8 bytes spilled), 0.506 at 6; backward 0.721
// unbounded or at 2, 0.616 at 3 (168 registers, 20 bytes spilled), 1.005 at 4. float64 keeps the
// compiler's choice (its corners take twice the registers). An earlier cap, measured on an H200
// before the backward's zero-upstream skip, made fwd+bwd 18 % slower: re-measure when the kernels
// change.
template <class T>
constexpr int forward_min_blocks() {
  return sizeof(T) == 4 ? 4 : 1;
}
template <class T>
constexpr int backward_min_blocks() {
  return sizeof(T) == 4 ? 3 : 1;
}
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
  /// The level's feature columns of the outputs (forward) or of the upstream gradients
  /// (backward) are whole, aligned 4-channel pieces: one vector store or load per 4 channels.
  /// Scalar stores of 4 bytes made the L2 see each 32-byte sector of a feature row four times.
  bool features_vector[kMaxLevelsPerLaunch] = {};
};

/// Points, tap points and rotations: everything about a slot except the planes.
struct Geometry {
  PointsView pts, tap_pts;
  double h = 0.0;
  const void* rotations = nullptr;
  int64_t rotation_strides[3] = {0, 0, 0};
  int num_tilts = 1;
  const bool* valid = nullptr;  ///< Problem::valid
  int64_t valid_stride = 0;
};

inline Geometry geometry_of(const Problem& pb) {
  Geometry g;
  g.pts = pb.pts;
  g.tap_pts = pb.tap_pts;
  g.h = pb.h;
  g.rotations = pb.rotations;
  for (int i = 0; i < 3; ++i) g.rotation_strides[i] = pb.rotation_strides[i];
  g.num_tilts = pb.num_tilts;
  g.valid = pb.valid;
  g.valid_stride = pb.valid_stride;
  return g;
}

/// Positions of the flattened list: the B points, then kTapsPerTapPoint per tap point.
__device__ FF_FORCE_INLINE int64_t num_positions(const Geometry& geo) {
  return geo.pts.rows + kTapsPerTapPoint * geo.tap_pts.rows;
}

template <Variant V, class T>
__device__ FF_FORCE_INLINE void rotation_of(const Geometry& geo, int t, T (&R)[9]) {
  rotation_or_identity<V>(geo.rotations, geo.rotation_strides, t, R);
}

template <class T>
__device__ FF_FORCE_INLINE void slot_point(const Geometry& geo, const Slot& slot, T (&p)[3]) {
  load_point(slot.is_tap_point ? geo.tap_pts : geo.pts, slot.row, p);
}

// ---- 4-channel vector loads and corner reads --------------------------------------------------

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

__device__ FF_FORCE_INLINE void store4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ FF_FORCE_INLINE void store4(double* p, const double (&v)[4]) {
  reinterpret_cast<double2*>(p)[0] = make_double2(v[0], v[1]);
  reinterpret_cast<double2*>(p)[1] = make_double2(v[2], v[3]);
}
__device__ FF_FORCE_INLINE void store4(__half* p, const float (&v)[4]) {
  const __half2 a = __floats2half2_rn(v[0], v[1]), b = __floats2half2_rn(v[2], v[3]);
  *reinterpret_cast<uint2*>(p) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}
__device__ FF_FORCE_INLINE void store4(__nv_bfloat16* p, const float (&v)[4]) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]);
  const __nv_bfloat162 b = __floats2bfloat162_rn(v[2], v[3]);
  *reinterpret_cast<uint2*>(p) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
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
/// corners[j][p] for channel c0 + j (channels past C are left at 0 and never stored). Plane
/// `skip` (if any) is not read and its corners are left unset.
template <class S, class T>
__device__ FF_FORCE_INLINE void load_chunk(const S* plane, const PlaneView& v, bool vector, int t,
                                           int64_t c0, const BilinearTap<T> (&taps)[3],
                                           Corners<T> (&corners)[kLanes][3], int skip = -1) {
#pragma unroll
  for (int p = 0; p < 3; ++p) {
    if (p == skip) continue;
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

/// `a` if `first` else `b`, chosen field by field: a choice between two kernel parameters by
/// reference would copy both to local memory to take the address of one.
__device__ FF_FORCE_INLINE MatrixView pick(bool first, const MatrixView& a, const MatrixView& b) {
  return {first ? a.data : b.data, first ? a.stride_tap : b.stride_tap,
          first ? a.stride_row : b.stride_row, first ? a.stride_col : b.stride_col};
}

/// The upstream gradient of channels c0 .. c0 + 3 of a level (0 past the last channel): one
/// vector load when the level's columns are whole aligned pieces (LevelTable::features_vector).
template <class T, class G>
__device__ FF_FORCE_INLINE void upstream_chunk(const MatrixView& m, int64_t tap, int64_t row,
                                               int64_t first_col, int64_t c0, int64_t channels,
                                               bool vector, T (&g)[kLanes]) {
  if (vector) {
    const G* p =
        static_cast<const G*>(m.data) + tap * m.stride_tap + row * m.stride_row + first_col + c0;
    load4(p, g);
    return;
  }
#pragma unroll
  for (int j = 0; j < kLanes; ++j) {
    g[j] = c0 + j < channels ? matrix_at<T, G>(m, tap, row, first_col + c0 + j) : T(0);
  }
}

// Note [lanes]
// A (slot, tilt) is owned by a group of `lanes` consecutive threads (a power of two <= 32 that
// leaves no lane idle where it can, see lanes_log2): lane j handles chunks j, j + lanes, ... So a
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

// ---- host side: launch helpers -----------------------------------------------------------------

template <class S>
bool aligned_channels_last(const PlaneView& v, const void* data) {
  const auto multiple = [](int64_t size, int64_t stride) { return size == 1 || stride % 4 == 0; };
  return v.stride_c == 1 && v.channels % 4 == 0 && multiple(v.planes, v.stride_k) &&
         multiple(v.height, v.stride_y) && multiple(v.width, v.stride_x) &&
         reinterpret_cast<std::uintptr_t>(data) % (4 * sizeof(S)) == 0;
}

inline int64_t level_groups(const Problem& pb) {
  return (static_cast<int64_t>(pb.levels.size()) + kMaxLevelsPerLaunch - 1) / kMaxLevelsPerLaunch;
}

/// log2 of `count` lanes rounded up to a power of two, at most a warp.
inline int warp_lanes_log2(int64_t count) {
  int log2 = 0;
  while (log2 < 5 && (int64_t{1} << log2) < count) ++log2;
  return log2;
}

/// log2 of the lanes per (slot, tilt) group (Note [lanes]), from the 4-channel chunks of the
/// widest level: the largest power of two (at most a warp) that divides them, so no lane idles,
/// unless that leaves a lane more than 4 chunks; then one lane per chunk, rounded up to a power of
/// two. (Production config, C = 48, 12 chunks, H100: 4 lanes × 3 chunks ran the forward in 2.31
/// ms against 3.10 ms for 16 lanes with 4 idle, fwd+bwd 10.4 against 11.0 ms.)
inline int lanes_log2(const Problem& pb) {
  int64_t chunks = 1;
  for (const Level& level : pb.levels) {
    chunks = std::max(chunks, cuda::ceil_div(level.view.channels, kLanes));
  }
  int divisor_log2 = 0;
  while (divisor_log2 < 5 && chunks % (int64_t{2} << divisor_log2) == 0) ++divisor_log2;
  if (chunks <= (int64_t{4} << divisor_log2)) return divisor_log2;
  return warp_lanes_log2(chunks);
}

inline int64_t slot_blocks(const Problem& pb) {
  return cuda::ceil_div(pb.num_slots() << lanes_log2(pb), kThreads);
}

/// Whether 4-channel pieces of a [.., F] feature matrix starting at column `column` (a multiple
/// of 4 when `channels` is) are whole and aligned, for elements of `element_bytes`.
inline bool aligned_feature_chunks(const MatrixView& m, bool has_taps, int64_t channels,
                                   int64_t column, std::size_t element_bytes) {
  if (m.data == nullptr) return true;  // not read or written by this call
  const auto multiple = [](int64_t n) { return n % 4 == 0; };
  return channels % 4 == 0 && multiple(column) && m.stride_col == 1 && multiple(m.stride_row) &&
         (!has_taps || multiple(m.stride_tap)) &&
         reinterpret_cast<std::uintptr_t>(m.data) % (4 * element_bytes) == 0;
}

/// Sets `table.features_vector` for feature matrices `a` and `b` (either may be unused: null).
inline void mark_feature_chunks(LevelTable& table, const MatrixView& a, const MatrixView& b,
                                std::size_t element_bytes) {
  for (int i = 0; i < table.count; ++i) {
    const Level& level = table.levels[i];
    table.features_vector[i] =
        aligned_feature_chunks(a, false, level.view.channels, level.column, element_bytes) &&
        aligned_feature_chunks(b, true, level.view.channels, level.column, element_bytes);
  }
}

/// The table of levels [first, last) (at most kMaxLevelsPerLaunch of them).
template <class S>
LevelTable level_table(const Problem& pb, int64_t first, int64_t last) {
  LevelTable table;
  table.count = static_cast<int>(last - first);
  for (int64_t l = first; l < last; ++l) {
    const int i = static_cast<int>(l - first);
    table.levels[i] = pb.levels[l];
    table.read_vector[i] = aligned_channels_last<S>(pb.levels[l].view, pb.levels[l].data);
  }
  return table;
}

/// The table of level group `group`: levels group·kMaxLevelsPerLaunch onwards.
template <class S>
LevelTable level_table(const Problem& pb, int64_t group) {
  const int64_t first = group * kMaxLevelsPerLaunch;
  return level_table<S>(pb, first,
                        std::min<int64_t>(first + kMaxLevelsPerLaunch, pb.levels.size()));
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

/// Calls f(TypeTag<S>, TypeTag<G>, variant) for the call's plane dtype S, upstream gradient (or
/// output) dtype G and variant: every kernel template the K-Planes launches instantiate.
template <class F>
void dispatch_problem(const Problem& pb, DType feature_dtype, const F& f) {
  cuda::dispatch_float_types(pb.op, pb.plane_dtype, [&](auto plane_tag) {
    using S = typename decltype(plane_tag)::type;
    dispatch_feature_dtype<S>(pb.op, feature_dtype, [&](auto feature_tag) {
      visit_variant(pb.variant, [&](auto variant) { f(plane_tag, feature_tag, variant); });
    });
  });
}

inline void check_grid(const Problem& pb) {
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

// ---- host side: workspace ----------------------------------------------------------------------

inline std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

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

// ---- the deterministic plane gradient (kplanes_cuda_gather.cu) ---------------------------------

/// What backward_kernel does for the plane gradients: nothing, add each corner's share with
/// atomics (the default), or store each entry's ∂L/∂sample for the deterministic gather.
enum class PlaneGradient { kSkip, kScatter, kShares };

/// The share row of entry (plane k, position) of a level, [planes, positions, C] in the compute
/// type: channels c0 .. c0 + 3 (those past C are not stored).
template <class T>
__device__ FF_FORCE_INLINE T* share_row(T* shares, const PlaneView& v, int64_t positions, int64_t k,
                                        int64_t position) {
  return shares + (k * positions + position) * v.channels;
}

template <class T>
__device__ FF_FORCE_INLINE void store_share_chunk(T* shares, const PlaneView& v, int64_t positions,
                                                  int64_t k, int64_t position, int64_t c0,
                                                  const T (&share)[kLanes]) {
  T* row = share_row(shares, v, positions, k, position) + c0;
  if (v.channels % kLanes == 0) {  // rows start 16-byte aligned: the buffer is ours
    store4(row, share);
    return;
  }
#pragma unroll
  for (int j = 0; j < kLanes; ++j) {
    if (c0 + j < v.channels) row[j] = share[j];
  }
}

/// The deterministic gather's share of the backward workspace (Note [deterministic gather]).
struct GatherBuffers {
  uint32_t *keys = nullptr, *sorted_keys = nullptr, *entries = nullptr, *sorted_entries = nullptr;
  uint32_t* run_start = nullptr;
  void* fractions = nullptr;     // [entries, 2] compute type: (tx, ty) on the entry's own plane
  void* shares = nullptr;        // [entries, C] compute type: one level's, at a time
  void* run_partials = nullptr;  // [4, keys, C] compute type
  void* sort_scratch = nullptr;
  std::size_t sort_scratch_bytes = 0;
};

/// Takes the gather's buffers from `carve`, sized for the largest level (`carve` may only measure).
GatherBuffers carve_gather_buffers(const Problem& pb, Carver& carve);

/// Writes level l's plane gradient of `a` from the shares the backward kernel stored for it, on
/// `stream` (Note [deterministic gather]).
void gather_level_gradient(const BackwardArgs& a, const GatherBuffers& buf, std::size_t l,
                           cudaStream_t stream);

/// Writes every plane gradient of `a` by the deterministic gather, on `stream`.
void gather_plane_gradients(const BackwardArgs& a, const GatherBuffers& buf, cudaStream_t stream);

}  // namespace fieldfuse::detail::kplanes
