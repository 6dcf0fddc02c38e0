// SPDX-License-Identifier: Apache-2.0
// CPU driver of the K-Planes family: OpenMP over sample slots for the features and the point and
// rotation gradients; over (level, tilt) plane owners for the plane gradients, so no two threads
// ever add into the same cell and every sum runs in slot order (deterministic, thread-count
// independent, no atomics).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse::detail::kplanes {
namespace {

/// Slots per rotation-gradient partial: fixed, so the summation order never depends on threads.
constexpr int64_t kSlotsPerChunk = 64;

template <Variant V, class T>
void rotation_of(const Problem& pb, int t, T (&R)[9]) {
  rotation_or_identity<V>(pb.rotations, pb.rotation_strides, t, R);
}

template <class T>
void slot_point(const Problem& pb, const Slot& slot, T (&p)[3]) {
  load_point(slot.is_tap_point ? pb.tap_pts : pb.pts, slot.row, p);
}

/// Work units (corner loads) of one slot, for parallel_for's grain.
int64_t slot_work(const Problem& pb) { return 12 * std::max<int64_t>(1, pb.num_features); }

/// The taps of rotated point r on tilt t's three planes of `level` (written to `taps`), then
/// `per_channel(c, corners)` for every channel c with the three planes' corners. Channels-last
/// planes get their own instance of the loop, which vectorises.
template <Variant V, class T, class PerChannel>
void for_each_channel(const Level& level, int t, const T (&r)[3], BilinearTap<T> (&taps)[3],
                      const PerChannel& per_channel) {
  const PlaneView& v = level.view;
  const T* plane = static_cast<const T*>(level.data);
  plane_taps<V>(r, v.height, v.width, taps);
  const CornerRows<T> rows[3] = {corner_rows(plane, v, 3 * t, taps[0]),
                                 corner_rows(plane, v, 3 * t + 1, taps[1]),
                                 corner_rows(plane, v, 3 * t + 2, taps[2])};
  const auto channels = [&](auto dense) {
    constexpr bool kDense = decltype(dense)::value;
    for (int64_t c = 0; c < v.channels; ++c) {
      const Corners<T> corners[3] = {rows[0].template load<T, kDense>(c),
                                     rows[1].template load<T, kDense>(c),
                                     rows[2].template load<T, kDense>(c)};
      per_channel(c, corners);
    }
  };
  if (v.stride_c == 1) {
    channels(std::true_type{});
  } else {
    channels(std::false_type{});
  }
}

/// Features, tilt by tilt: a work item is one tilt over a chunk of kSlotsPerChunk slots, so the
/// planes a thread reads at a time are one tilt's (a third of a level's for T = 1, 1/3T in
/// general), which stay in cache far better than every tilt's planes per point.
template <Variant V, class T>
void forward_typed(const Problem& pb, const ForwardOutputs& out) {
  T* features = static_cast<T*>(out.features);
  T* tap_features = static_cast<T*>(out.tap_features);
  const int64_t num_points = pb.pts.rows, num_taps = pb.tap_pts.rows, f = pb.num_features;
  const T h = static_cast<T>(pb.h);
  const int64_t chunks = (pb.num_slots() + kSlotsPerChunk - 1) / kSlotsPerChunk;
  parallel_for(
      0, chunks * pb.num_tilts, kSlotsPerChunk * slot_work(pb) / pb.num_tilts, [&](int64_t item) {
        const int t = static_cast<int>(item / chunks);
        const int64_t chunk = item % chunks;
        T R[9];
        rotation_of<V>(pb, t, R);
        const int64_t end = std::min(pb.num_slots(), (chunk + 1) * kSlotsPerChunk);
        for (int64_t s = chunk * kSlotsPerChunk; s < end; ++s) {
          const Slot slot = slot_of(s, num_points);
          if (!evaluated(slot, pb.valid, pb.valid_stride)) {
            for (const Level& level : pb.levels) {
              T* out_row = features + slot.row * f + level.column + t * level.view.channels;
              std::fill(out_row, out_row + level.view.channels, T(0));
            }
            continue;
          }
          T p[3];
          slot_point(pb, slot, p);
          for (int tap = 0; tap < slot.num_positions; ++tap) {
            T* row = slot.is_tap_point ? tap_features + (tap * num_taps + slot.row) * f
                                       : features + slot.row * f;
            T r[3];
            tap_position<V>(R, p, tap, h, r);
            for (const Level& level : pb.levels) {
              const T gate = static_cast<T>(level.gate);
              T* out_row = row + level.column + t * level.view.channels;
              BilinearTap<T> taps[3];
              for_each_channel<V>(level, t, r, taps, [&](int64_t c, const Corners<T>(&corners)[3]) {
                out_row[c] = channel_feature(taps, corners) * gate;
              });
            }
          }
        }
      });
}

/// The upstream gradient of feature column `col` of position `tap` of a slot.
template <class T>
T upstream(const BackwardArgs& a, const Slot& slot, int tap, int64_t col) {
  return slot.is_tap_point ? matrix_at<T>(a.grad_tap_features, tap, slot.row, col)
                           : matrix_at<T>(a.grad_features, 0, slot.row, col);
}

/// Runs the channel backward of one (position, tilt, level) and hands each channel's d_sample to
/// `scatter(c, d_sample)`; returns the level's dr through `dr`.
template <Variant V, class T, class Scatter>
void level_backward(const BackwardArgs& a, const Slot& slot, int tap, int t, const Level& level,
                    const T (&r)[3], T (&dr)[3], const Scatter& scatter) {
  const T gate = static_cast<T>(level.gate);
  T d_index_x[3] = {0, 0, 0}, d_index_y[3] = {0, 0, 0};
  const int64_t first_col = level.column + t * level.view.channels;
  BilinearTap<T> taps[3];
  for_each_channel<V>(level, t, r, taps, [&](int64_t c, const Corners<T>(&corners)[3]) {
    const T g = upstream<T>(a, slot, tap, first_col + c) * gate;
    T d_sample[3];
    channel_backward(taps, corners, g, d_sample, d_index_x, d_index_y);
    scatter(c, taps, d_sample);
  });
  rotated_point_gradient<V>(taps, d_index_x, d_index_y, dr);
}

// Note [CPU backward]
// Plane gradients have owners: one per (level, tilt), or per (level, plane) when there are fewer
// (level, tilt) pairs than threads. An owner clears its planes and adds every slot's shares in
// slot order, so a cell's sum has the same order whatever the split or the thread count.
// Point and rotation gradients are kept per (level, tilt) "set": each slot's dp share of the set,
// and the set's dR summed over chunks of kSlotsPerChunk slots. With plane gradients wanted, the
// owners keep them in the same pass (one pass over the samples instead of two); without, work
// items of (set, chunk) do. Either way the partials are the same numbers, summed at the end in
// the same fixed order, so the bits never depend on which gradients were requested.

/// The fused pass's workspace: point partials [sets, slots, 3] (compute type), then rotation
/// partials [sets, chunks, 9] (float64).
template <class T>
struct Partials {
  T* points;
  double* rotations;
  int64_t sets, chunks;

  static std::size_t point_bytes(const Problem& pb) {
    const std::size_t bytes =
        pb.levels.size() * static_cast<std::size_t>(pb.num_tilts) * pb.num_slots() * 3 * sizeof(T);
    return (bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
  }
  static int64_t chunk_count(const Problem& pb) {
    return (pb.num_slots() + kSlotsPerChunk - 1) / kSlotsPerChunk;
  }
  static std::size_t bytes(const Problem& pb) {
    return point_bytes(pb) + pb.levels.size() * static_cast<std::size_t>(pb.num_tilts) *
                                 chunk_count(pb) * 9 * sizeof(double);
  }
  static Partials in(void* workspace, const Problem& pb) {
    return {static_cast<T*>(workspace),
            reinterpret_cast<double*>(static_cast<char*>(workspace) + point_bytes(pb)),
            static_cast<int64_t>(pb.levels.size()) * pb.num_tilts, chunk_count(pb)};
  }
};

/// One slot's backward for one (level, tilt): its shares go to `scatter`; with `keep`, its dp
/// share is stored and its dR added to `rotation_sum`.
template <Variant V, class T, class Scatter>
void slot_backward(const BackwardArgs& a, const Level& level, int t, const T (&R)[9], int64_t s,
                   bool keep, T* dp_out, double (&rotation_sum)[9], const Scatter& scatter) {
  const Problem& pb = a.problem;
  const T h = static_cast<T>(pb.h);
  const Slot slot = slot_of(s, pb.pts.rows);
  T p[3], dp[3] = {0, 0, 0}, dR[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (!evaluated(slot, pb.valid, pb.valid_stride)) {
    if (keep) dp_out[0] = dp_out[1] = dp_out[2] = T(0);
    return;
  }
  slot_point(pb, slot, p);
  for (int tap = 0; tap < slot.num_positions; ++tap) {
    T r[3], dr[3];
    tap_position<V>(R, p, tap, h, r);
    level_backward<V>(a, slot, tap, t, level, r, dr, scatter);
    if (keep) accumulate_tap_gradient<V>(R, p, tap, h, dr, dR, dp);
  }
  if (!keep) return;
  dp_out[0] = dp[0], dp_out[1] = dp[1], dp_out[2] = dp[2];
  for (int i = 0; i < 9; ++i) rotation_sum[i] += static_cast<double>(dR[i]);
}

template <Variant V, class T>
void owner_backward(const BackwardArgs& a, const Partials<T>& parts) {
  const Problem& pb = a.problem;
  const int tilts = pb.num_tilts;
  const auto levels = static_cast<int64_t>(pb.levels.size());
  const int64_t num_slots = pb.num_slots();
  const bool geometry = a.wants_geometry();
  // Per-plane owners recompute the other two planes' samples (3× the work) to use more threads.
  const int per_owner = levels * tilts >= max_threads() ? 3 : 1;  // planes
  const int64_t owners_per_level = 3 * static_cast<int64_t>(tilts) / per_owner;
  parallel_for(0, levels * owners_per_level, num_slots * slot_work(pb), [&](int64_t owner) {
    const int64_t l = owner / owners_per_level;
    const Level& level = pb.levels[l];
    const int64_t first = (owner % owners_per_level) * per_owner;  // first plane k owned
    const int t = static_cast<int>(first / 3);
    const bool keep = geometry && first % 3 == 0;  // one owner per set keeps its geometry
    const int64_t set = l * tilts + t;
    const PlaneView& gv = level.grad_view;
    T* grad = static_cast<T*>(level.grad);
    for (int64_t k = first; k < first + per_owner; ++k)
      for (int64_t c = 0; c < gv.channels; ++c)
        for (int64_t y = 0; y < gv.height; ++y)
          for (int64_t x = 0; x < gv.width; ++x) grad[gv.offset(k, c, y, x)] = T(0);
    const auto scatter = [&](int64_t c, const BilinearTap<T>(&taps)[3], const T(&d_sample)[3]) {
      for (int64_t k = first; k < first + per_owner; ++k) {
        const int p = static_cast<int>(k - 3 * t);
        const BilinearTap<T>& tap = taps[p];
        T share[4];
        tap.scatter(d_sample[p], share);
        T* base = grad + k * gv.stride_k + c * gv.stride_c;
        base[tap.y0 * gv.stride_y + tap.x0 * gv.stride_x] += share[0];
        base[tap.y0 * gv.stride_y + tap.x1 * gv.stride_x] += share[1];
        base[tap.y1 * gv.stride_y + tap.x0 * gv.stride_x] += share[2];
        base[tap.y1 * gv.stride_y + tap.x1 * gv.stride_x] += share[3];
      }
    };
    T R[9];
    rotation_of<V>(pb, t, R);
    for (int64_t chunk = 0; chunk < parts.chunks; ++chunk) {
      double rotation_sum[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
      const int64_t end = std::min(num_slots, (chunk + 1) * kSlotsPerChunk);
      for (int64_t s = chunk * kSlotsPerChunk; s < end; ++s) {
        slot_backward<V>(a, level, t, R, s, keep, parts.points + (set * num_slots + s) * 3,
                         rotation_sum, scatter);
      }
      if (keep)
        std::copy(rotation_sum, rotation_sum + 9,
                  parts.rotations + (set * parts.chunks + chunk) * 9);
    }
  });
}

/// The point and rotation partials alone, over (set, chunk) work items.
template <Variant V, class T>
void geometry_partials(const BackwardArgs& a, const Partials<T>& parts) {
  const Problem& pb = a.problem;
  const int64_t num_slots = pb.num_slots();
  const auto no_scatter = [](int64_t, const BilinearTap<T>(&)[3], const T(&)[3]) {};
  parallel_for(0, parts.sets * parts.chunks, kSlotsPerChunk * slot_work(pb), [&](int64_t item) {
    const int64_t set = item / parts.chunks, chunk = item % parts.chunks;
    const int t = static_cast<int>(set % pb.num_tilts);
    const Level& level = pb.levels[set / pb.num_tilts];
    T R[9];
    rotation_of<V>(pb, t, R);
    double rotation_sum[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t end = std::min(num_slots, (chunk + 1) * kSlotsPerChunk);
    for (int64_t s = chunk * kSlotsPerChunk; s < end; ++s) {
      slot_backward<V>(a, level, t, R, s, true, parts.points + (set * num_slots + s) * 3,
                       rotation_sum, no_scatter);
    }
    std::copy(rotation_sum, rotation_sum + 9, parts.rotations + (set * parts.chunks + chunk) * 9);
  });
}

/// grad_pts = Σ_sets of the point partials and grad_rotations[t] = Σ_levels Σ_chunks, in order.
template <class T>
void reduce_geometry(const BackwardArgs& a, const Partials<T>& parts) {
  const Problem& pb = a.problem;
  const int64_t num_slots = pb.num_slots();
  parallel_for(0, num_slots, 3 * parts.sets, [&](int64_t s) {
    const Slot slot = slot_of(s, pb.pts.rows);
    void* out = slot.is_tap_point ? a.grad_tap_pts : a.grad_pts;
    if (out == nullptr) return;
    T dp[3] = {0, 0, 0};
    for (int64_t set = 0; set < parts.sets; ++set) {
      const T* in = parts.points + (set * num_slots + s) * 3;
      dp[0] += in[0], dp[1] += in[1], dp[2] += in[2];
    }
    const int64_t(&st)[2] = slot.is_tap_point ? a.grad_tap_pts_strides : a.grad_pts_strides;
    T* row = static_cast<T*>(out) + slot.row * st[0];
    row[0] = dp[0], row[st[1]] = dp[1], row[2 * st[1]] = dp[2];
  });
  if (a.grad_rotations == nullptr) return;
  const int tilts = pb.num_tilts;
  for (int t = 0; t < tilts; ++t) {
    for (int i = 0; i < 9; ++i) {
      double sum = 0.0;
      for (int64_t set = t; set < parts.sets; set += tilts)
        for (int64_t chunk = 0; chunk < parts.chunks; ++chunk)
          sum += parts.rotations[(set * parts.chunks + chunk) * 9 + i];
      const int64_t(&st)[3] = a.grad_rotation_strides;
      static_cast<T*>(a.grad_rotations)[t * st[0] + (i / 3) * st[1] + (i % 3) * st[2]] =
          static_cast<T>(sum);
    }
  }
}

}  // namespace

void forward_cpu(const Problem& problem, const ForwardOutputs& out) {
  dispatch_float_types(problem.op, problem.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_variant(problem.variant,
                  [&](auto v) { forward_typed<decltype(v)::value, T>(problem, out); });
  });
}

std::size_t backward_workspace_cpu(const Problem& problem) {
  const std::size_t bytes = dispatch_float_types(problem.op, problem.dtype, [&](auto tag) {
    return Partials<typename decltype(tag)::type>::bytes(problem);
  });
  return std::max<std::size_t>(1, bytes);
}
void backward_cpu(const BackwardArgs& args) {
  dispatch_float_types(args.problem.op, args.problem.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_variant(args.problem.variant, [&](auto v) {
      constexpr Variant V = decltype(v)::value;
      const Partials<T> parts = Partials<T>::in(args.workspace, args.problem);
      if (args.wants_planes) {
        owner_backward<V, T>(args, parts);  // and the geometry partials in the same pass
      } else if (args.wants_geometry()) {
        geometry_partials<V, T>(args, parts);
      }
      if (args.wants_geometry()) reduce_geometry<T>(args, parts);
    });
  });
}

}  // namespace fieldfuse::detail::kplanes
