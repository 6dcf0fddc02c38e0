// SPDX-License-Identifier: Apache-2.0
// K-Planes forward on CUDA: one lane group per (sample slot, tilt) walks every level of a launch
// and writes the slot's feature rows (Note [lanes], Note [level table] in kplanes_cuda.cuh).
#include <cstdint>

#include "core/cuda_launch.cuh"
#include "kplanes/kplanes_cuda.cuh"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse::detail::kplanes {
namespace {

/// The zero feature row of an unevaluated point: this tilt's channels of every level, from this
/// lane's first channel c0 in steps of `stride`.
template <class O>
__device__ FF_FORCE_INLINE void write_zero_features(const LevelTable& table, O* row, int t,
                                                    int64_t c0, int64_t stride) {
  for (int l = 0; l < table.count; ++l) {
    const Level& level = table.levels[l];
    const int64_t channels = level.view.channels;
    O* out = row + level.column + t * channels;
    for (int64_t c = c0; c < channels; c += stride) {
      if (table.features_vector[l]) {
        const compute_t<O> zero[kLanes] = {};
        store4(out + c, zero);
      } else {
        for (int j = 0; j < kLanes && c + j < channels; ++j) out[c + j] = O(0);
      }
    }
  }
}

template <Variant V, class S, class O>
__global__ void __launch_bounds__(kThreads, forward_min_blocks<compute_t<S>>())
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
  if (!evaluated(slot, geo.valid, geo.valid_stride)) {
    write_zero_features(table, features + slot.row * num_features, t, group.lane * kLanes, stride);
    return;
  }
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
        if (table.features_vector[l]) {
          T f[kLanes];
#pragma unroll
          for (int j = 0; j < kLanes; ++j) f[j] = channel_feature(taps, corners[j]) * gate;
          store4(out + c0, f);
        } else {
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
  dispatch_problem(pb, out.dtype, [&](auto plane_tag, auto out_tag, auto variant) {
    using S = typename decltype(plane_tag)::type;
    using O = typename decltype(out_tag)::type;
    constexpr Variant V = decltype(variant)::value;
    for (int64_t group = 0; group < level_groups(pb); ++group) {
      LevelTable table = level_table<S>(pb, group);
      // The outputs are contiguous [B, F] and [4, N, F].
      MatrixView features{out.features, 0, pb.num_features, 1};
      MatrixView tap_features{out.tap_features, pb.tap_pts.rows * pb.num_features, pb.num_features,
                              1};
      mark_feature_chunks(table, features, tap_features, sizeof(O));
      forward_kernel<V, S, O><<<grid, kThreads, 0, stream>>>(
          geo, table, static_cast<O*>(out.features), static_cast<O*>(out.tap_features),
          pb.num_slots(), pb.num_features, lanes_log2(pb));
      cuda::check_launch(pb.op, "forward_kernel", stream);
    }
  });
}

}  // namespace fieldfuse::detail::kplanes
