// SPDX-License-Identifier: Apache-2.0
// The per-ray routines of the render family on CUDA: one warp per ray, its lanes on consecutive
// samples (Note [warp march], Note [ray-box warp]). They compute what the serial routines of
// render_ray.h compute, from the same formulas of render_math.h; only the order of the float64 sums
// differs.
#pragma once

#include <cstdint>

#include "core/cuda_launch.cuh"
#include "core/warp.cuh"
#include "render/render_drivers.h"
#include "render/render_math.h"
#include "render/render_ray.h"

namespace fieldfuse::detail::render {

// Note [warp march]
// A warp marches a ray in chunks of 32 consecutive samples, lane k on sample base + k, so every
// load is coalesced and every lane works (one thread per ray reads one sample per ray per step,
// scattered, and leaves most of the GPU idle at 65 536 rays).
// - Forward: T in front of each lane is the chunk's entry T times an exclusive product scan of the
//   factors (1 − a) in float64. T only decreases, so the first lane whose T after it is ≤ the
//   threshold (a ballot) is the terminating sample of the serial rule. Colour, opacity and depth
//   accumulate per lane and are summed once per ray.
// - Backward: the ray state (Note [ray state]: from the training forward, or found by the same
//   march) gives the composited samples, the final T and the optical depths in front of and
//   through the last one (float64); chunks aligned to that last sample are then walked back to
//   front. T' in front of each lane is exp(−τ) with τ from a suffix sum of optical
//   depths, and V behind it a suffix sum of q·a·T' plus the sum carried from the chunks behind
//   (Note [stable backward]); both sums run in float64.
// Lanes are assigned to samples by position and every scan and reduction combines in a fixed
// order, so results are the same bits on every run.

using cuda::compute_t;
using cuda::kFullWarp;
using cuda::kWarpSize;
using cuda::lane_id;
using cuda::warp_sum;

// Note [channel instances]
// The render routines also have instances for C = 1 and C = 3 (grey and RGB), chosen for dense
// inputs (Note [dense layout], render_ray.h): they see the channel count as a compile-time
// constant, so the per-channel predicates, the row-offset products and the loops past the first
// channel block fold away. The RGB instances are about a fifth smaller in SASS; forward + backward
// at R = 65 536 × 256 went from 0.526 to 0.466 ms (H100). Other counts take the instance that
// reads C at run time (kChannels = 0). The CPU driver keeps one instance: there a fixed C made the
// forward 27% faster with its inputs in cache, but no faster streaming them from memory (the
// benchmark's setting), and the backward not at all.

/// The call's arguments as the instance for kChannels channels sees them (0: as given).
template <int kChannels>
__device__ FF_FORCE_INLINE VolumeRenderArgs with_channels(const VolumeRenderArgs& a) {
  VolumeRenderArgs fixed = a;
  if constexpr (kChannels > 0) fixed.channels = kChannels;
  return fixed;
}

// ---- volume rendering --------------------------------------------------------------------------

/// One lane's inputs for one sample, loaded a chunk ahead of their use so that a warp's loads are
/// in flight while it computes. Lanes past the ray hold zeros: a transparent sample.
template <class T>
struct SampleInputs {
  T sigma = T(0);  ///< σ, or α for the alpha input
  T delta = T(0);
  T colour[kChannelBlock] = {T(0), T(0), T(0), T(0)};  ///< channels c0 … c0 + 3
  T t = T(0);
  T grad_weight = T(0);  ///< backward: the upstream gradient of the sample's weight
};

/// What to load besides σ and δ.
struct Wanted {
  int64_t c0;  ///< first channel of the block
  int count;   ///< channels of the block: min(C − c0, kChannelBlock), or 0 (a 32-bit compare)
  bool depth, grad_weight;
};

/// The inputs of sample s, or zeros where `live` is false (s may then be outside the ray).
template <class T, class S, class L>
__device__ FF_FORCE_INLINE SampleInputs<T> fetch(const VolumeRenderArgs& a, int64_t s, bool live,
                                                 const Wanted& want) {
  SampleInputs<T> in;
  if (!live) return in;
  in.sigma = sample_load<T, S, L>(a.sigmas, s);
  if (!a.alpha_input) in.delta = sample_load<T, S, L>(a.delta_ts, s);
#pragma unroll
  for (int j = 0; j < kChannelBlock; ++j) {
    if (j < want.count) {
      in.colour[j] = sample_load<T, S, L>(a.rgbs, s, want.c0 + j, a.channels);
    }
  }
  if (want.depth) in.t = sample_load<T, S, L>(a.ts, s);
  if (want.grad_weight) in.grad_weight = sample_load<T, S, L>(a.grad_weights, s);
  return in;
}

/// a and 1 − a in float64 (exact products of 16- or 32-bit inputs): T is a product of up to 10^5
/// factors, where float32 roundings of each would add up; the serial routine's are float64 too.
template <class T>
__device__ FF_FORCE_INLINE Absorption<double> absorption_of(const VolumeRenderArgs& a,
                                                            const SampleInputs<T>& in) {
  const auto sigma = static_cast<double>(in.sigma);
  return a.alpha_input ? absorption_from_alpha(sigma)
                       : absorption_from_density(sigma, static_cast<double>(in.delta));
}

/// ℓ of a sample in float64: σδ (exact from 16- or 32-bit inputs), or −log(1 − a).
template <class T>
__device__ FF_FORCE_INLINE double optical_depth_of(const VolumeRenderArgs& a,
                                                   const SampleInputs<T>& in) {
  const auto sigma = static_cast<double>(in.sigma);
  return a.alpha_input ? optical_depth_of_alpha(sigma) : sigma * static_cast<double>(in.delta);
}

/// Where a warp's march along a ray stands between chunks (the same in every lane).
struct MarchState {
  double trans;  ///< T in front of the next sample
  int64_t stop;  ///< the first sample not composited (end while the ray goes on)
  bool done;
};

/// One lane's sample of a marched chunk.
template <class T>
struct MarchedSample {
  Absorption<double> ab;
  double trans_before;  ///< T in front of the sample
  bool composited;
  int last_lane;  ///< the chunk's last composited lane (the same in every lane)
};

template <class S>
__device__ FF_FORCE_INLINE MarchState start_march(const VolumeRenderArgs& a, int64_t r,
                                                  int64_t begin, int64_t end) {
  const double t0 = initial_transmittance<S>(a, r);
  // A ray that starts at or below the threshold composites nothing (Note [compositing]).
  const bool done = terminates(t0, a.transmittance_thresh);
  return {t0, done ? begin : end, done};
}

/// Marches the chunk of samples [base, base + 32) ∩ [., end), whose inputs are `in`, and
/// advances `m`.
template <class T>
__device__ FF_FORCE_INLINE MarchedSample<T> march_chunk(const VolumeRenderArgs& a,
                                                        const SampleInputs<T>& in, int64_t base,
                                                        int64_t end, MarchState& m) {
  const int lane = lane_id();
  MarchedSample<T> x;
  x.ab = absorption_of(a, in);
  const double through = cuda::warp_prefix_product(x.ab.factor);
  const double before = __shfl_up_sync(kFullWarp, through, 1);
  x.trans_before = m.trans * (lane == 0 ? 1.0 : before);
  const double after = m.trans * through;
  const bool live = base + lane < end;
  const unsigned stops =
      __ballot_sync(kFullWarp, live && terminates(after, a.transmittance_thresh));
  const int live_lanes = end - base < kWarpSize ? static_cast<int>(end - base) : kWarpSize;
  x.last_lane = stops != 0 ? __ffs(static_cast<int>(stops)) - 1 : live_lanes - 1;
  x.composited = lane <= x.last_lane;
  m.trans = __shfl_sync(kFullWarp, after, x.last_lane);
  if (stops != 0) {
    m.done = true;
    m.stop = base + x.last_lane + 1;
  }
  return x;
}

/// The optical depths of a ray state as a warp marches (the counterpart of add_depth), summed
/// per lane and reduced once per ray. ℓ of each chunk's last composited sample is kept apart
/// until the next chunk shows it was not the ray's last: only the ray's last can be ∞ (σ = ∞ or
/// a = 1 leaves T = 0 and stops the ray), and τ in front of it must stay finite.
struct DepthSums {
  double lane_sum = 0;     ///< this lane's composited samples, but for each chunk's last
  double chunk_lasts = 0;  ///< the finished chunks' last samples (the same in every lane)
  double last = 0;         ///< the latest chunk's last sample (the same in every lane)

  template <class T>
  __device__ FF_FORCE_INLINE void add(const MarchedSample<T>& x, double ell) {
    chunk_lasts += last;
    lane_sum += x.composited && lane_id() != x.last_lane ? ell : 0.0;
    last = __shfl_sync(kFullWarp, ell, x.last_lane);
  }

  __device__ FF_FORCE_INLINE void finish(RayState& state) const {
    state.depth_before_last = warp_sum(lane_sum) + chunk_lasts;
    state.depth_through = state.depth_before_last + last;
  }
};

/// Marches ray r chunk by chunk, loading the next chunk's inputs while `visit(inputs, marched,
/// chunk_start)` handles this one, until the ray stops or ends. Returns where the march stands;
/// `base` is left at the first chunk not marched.
template <class T, class S, class L, class Visit>
__device__ FF_FORCE_INLINE MarchState march_ray(const VolumeRenderArgs& a, int64_t r, int64_t begin,
                                                int64_t end, const Wanted& want, int64_t& base,
                                                const Visit& visit) {
  const int lane = lane_id();
  MarchState m = start_march<S>(a, r, begin, end);
  base = begin;
  SampleInputs<T> next;
  if (!m.done) next = fetch<T, S, L>(a, base + lane, base + lane < end, want);
  for (; !m.done && base < end; base += kWarpSize) {
    const SampleInputs<T> in = next;
    const int64_t ahead = base + kWarpSize + lane;
    next = fetch<T, S, L>(a, ahead, ahead < end, want);
    visit(in, march_chunk(a, in, base, end, m), base);
  }
  return m;
}

/// Forward of ray r by the calling warp: every requested output of the ray is written.
/// kKeepState: the ray state is requested (a training forward); a separate instance, so that
/// inference does not carry its registers. kChannels: Note [channel instances].
template <class S, class L, int kChannels, bool kKeepState>
__device__ void render_ray_forward_warp(const VolumeRenderArgs& args, int64_t r) {
  using T = compute_t<S>;
  const VolumeRenderArgs a = with_channels<kChannels>(args);
  int64_t begin, end;
  a.rays.range(r, begin, end);
  const int lane = lane_id();
  for (int64_t c0 = 0; c0 < a.channels; c0 += kChannelBlock) {
    const bool first_block = c0 == 0;
    const int count =
        static_cast<int>(a.channels - c0 < kChannelBlock ? a.channels - c0 : kChannelBlock);
    const Wanted want{c0, count, first_block && a.depth.present(), false};
    double colour[kChannelBlock] = {0, 0, 0, 0};
    double opacity = 0, depth = 0;
    const bool keep_state = kKeepState && first_block;
    DepthSums depths;
    int64_t base;
    const auto composite = [&](const SampleInputs<T>& in, const MarchedSample<T>& x,
                               int64_t chunk) {
      if (keep_state) depths.add(x, optical_depth_of(a, in));
      const double w = x.composited ? x.ab.alpha * x.trans_before : 0.0;
#pragma unroll
      for (int j = 0; j < kChannelBlock; ++j) {
        // Warp-uniform: a float64 conversion and FMA per channel that exists.
        if (j < count) colour[j] += w * static_cast<double>(in.colour[j]);
      }
      if (first_block) {
        opacity += w;
        if (want.depth) depth += w * static_cast<double>(in.t);
        if (a.weights.present() && chunk + lane < end)
          sample_store<S, L>(a.weights, chunk + lane, w);
      }
    };
    const MarchState m = march_ray<T, S, L>(a, r, begin, end, want, base, composite);
#pragma unroll
    for (int j = 0; j < kChannelBlock; ++j) {
      if (j >= count) break;  // warp-uniform
      const double sum = warp_sum(colour[j]);
      if (lane == j) store_colour<S>(a, r, c0 + j, sum, m.trans);
    }
    if (!first_block) continue;
    if (a.weights.present()) {
      for (int64_t s = base + lane; s < end; s += kWarpSize) sample_store<S, L>(a.weights, s, 0.0);
    }
    opacity = warp_sum(opacity);
    if (a.depth.present()) depth = warp_sum(depth);
    RayState state;
    if (keep_state) depths.finish(state);  // in every lane: it reduces across the warp
    if (lane != 0) continue;
    store_ray_outputs<S>(a, r, begin, m.stop, m.trans, opacity, depth, keep_state, state);
  }
}

/// The march of ray r as the backward needs it (Note [ray state]), by the forward's rule.
template <class S, class L>
__device__ FF_FORCE_INLINE RayState march_ray_state_warp(const VolumeRenderArgs& a, int64_t r,
                                                         int64_t begin, int64_t end) {
  using T = compute_t<S>;
  const Wanted want{0, 0, false, false};  // σ and δ only
  DepthSums depths;
  int64_t base;
  const MarchState m = march_ray<T, S, L>(a, r, begin, end, want, base,
                                          [&](const SampleInputs<T>& in, const MarchedSample<T>& x,
                                              int64_t) { depths.add(x, optical_depth_of(a, in)); });
  RayState state;
  depths.finish(state);
  state.stop = m.stop;
  state.trans_final = m.trans;
  return state;
}

/// reference_sample of render_ray.h by the calling warp (Note [NaN samples]): off the common
/// path, which returns at once; a ray whose τ is NaN is marched again, σ and δ only.
template <class T, class S, class L>
__device__ FF_FORCE_INLINE Reference reference_sample_warp(const VolumeRenderArgs& a, int64_t begin,
                                                           const RayState& ray) {
  const Reference last{ray.stop - 1, ray.depth_before_last};
  if (!(ray.depth_through != ray.depth_through)) return last;  // warp-uniform
  const Wanted want{0, 0, false, false};
  const int lane = lane_id();
  double depth = 0;
  for (int64_t base = begin; base < last.sample; base += kWarpSize) {
    const bool live = base + lane < last.sample;
    const double ell = live ? optical_depth_of(a, fetch<T, S, L>(a, base + lane, live, want)) : 0.0;
    const unsigned bad = __ballot_sync(kFullWarp, live && non_finite(ell));
    if (bad != 0) {
      const int k = __ffs(static_cast<int>(bad)) - 1;
      return {base + k, depth + warp_sum(lane < k ? ell : 0.0)};
    }
    depth += warp_sum(ell);
  }
  return last;
}

/// Backward of ray r by the calling warp (Note [stable backward], Note [warp march]).
template <class S, class L, int kChannels>
__device__ void render_ray_backward_warp(const VolumeRenderArgs& args, int64_t r) {
  using T = compute_t<S>;
  const VolumeRenderArgs a = with_channels<kChannels>(args);
  int64_t begin, end;
  a.rays.range(r, begin, end);
  const int lane = lane_id();
  const double t0 = initial_transmittance<S>(a, r);
  const RayState ray = a.ray_state.present() ? load_ray_state(a.ray_state, r, begin, end)
                                             : march_ray_state_warp<S, L>(a, r, begin, end);

  // Upstream gradients of the ray.
  const double g_opacity = load_or_zero<S>(a.grad_opacity, r);
  const double g_depth = load_or_zero<S>(a.grad_depth, r);
  double g_colour[kChannelBlock] = {0, 0, 0, 0};  // the first channels' g, kept in registers
#pragma unroll
  for (int j = 0; j < kChannelBlock; ++j) {
    if (j < a.channels) g_colour[j] = load<S>(a.grad_rgb, r, j);
  }
  const double q_background = background_value<S>(a, r);
  if (a.grad_background.present()) {
    for (int64_t c = lane; c < a.channels; c += kWarpSize) {
      store_background_gradient<S>(a, r, c, ray.trans_final);
    }
  }

  // Back to front in chunks [hi − 32, hi), the first one ending at the last composited sample;
  // T' = T/T_0. Each lane's τ is τ in front of the reference sample (the last, but for Note [NaN
  // samples]) minus the ℓ of the samples from it to the reference (exclusive), V the sum of q·w'
  // over the samples behind it.
  const Wanted want{0, a.channels < kChannelBlock ? static_cast<int>(a.channels) : kChannelBlock,
                    a.ts.present(), a.grad_weights.present()};
  const Reference ref = reference_sample_warp<T, S, L>(a, begin, ray);
  const double rel_final = exponential(-ray.depth_through);
  double behind_chunk = q_background * rel_final;  // V behind the chunk
  double depth_behind_chunk = 0;                   // Σ ℓ of the samples behind (the last: 0)
  double rel_behind_chunk = rel_final;             // T' in front of the chunk behind
  SampleInputs<T> next;
  const int64_t first = ray.stop - kWarpSize + lane;
  if (ray.stop > begin) next = fetch<T, S, L>(a, first, first >= begin, want);
  for (int64_t hi = ray.stop; hi > begin; hi -= kWarpSize) {
    const int64_t s = hi - kWarpSize + lane;
    const bool live = s >= begin;
    const bool last = s == ray.stop - 1;
    const SampleInputs<T> in = next;
    next = fetch<T, S, L>(a, s - kWarpSize, s - kWarpSize >= begin, want);
    const Absorption<double> ab = absorption_of(a, in);

    const double ell = s < ref.sample ? optical_depth_of(a, in) : 0.0;
    const double depth_from = cuda::warp_suffix_sum(ell);  // this sample's ℓ and those behind
    // Behind the reference, τ depends on a NaN (Note [NaN samples]).
    const double rel_before =
        s > ref.sample ? static_cast<double>(NAN)
                       : exponential(-(ref.depth_before - (depth_behind_chunk + depth_from)));
    const double rel_next = __shfl_down_sync(kFullWarp, rel_before, 1);
    const double rel_after = lane == kWarpSize - 1 ? rel_behind_chunk : rel_next;
    const double w = ab.alpha * rel_before;  // the weight over T_0

    double colour_term = 0;
#pragma unroll
    for (int j = 0; j < kChannelBlock; ++j) {
      colour_term += g_colour[j] * static_cast<double>(in.colour[j]);
    }
    for (int64_t c = kChannelBlock; live && c < a.channels; ++c) {
      colour_term += load<S>(a.grad_rgb, r, c) * sample_load<T, S, L>(a.rgbs, s, c, a.channels);
    }
    const double q = sample_value(colour_term, g_depth, static_cast<double>(in.t), g_opacity,
                                  static_cast<double>(in.grad_weight));

    // V behind each lane: the chunk's own terms behind it, then what lies behind the chunk.
    const double own = live ? q * w : 0.0;
    const double from = cuda::warp_suffix_sum(own);
    const double later = __shfl_down_sync(kFullWarp, from, 1);
    const double behind = lane == kWarpSize - 1 ? behind_chunk : behind_chunk + later;

    if (live) {
      if (a.grad_rgbs.present()) {
        for (int64_t c = 0; c < a.channels; ++c) {
          const double g = c < kChannelBlock ? g_colour[c] : load<S>(a.grad_rgb, r, c);
          sample_store<S, L>(a.grad_rgbs, s, c, a.channels, g * t0 * w);
        }
      }
      if (a.grad_sigmas.present()) {
        const double g =
            sigma_gradient(a.alpha_input, static_cast<double>(in.delta), rel_before, rel_after, q,
                           behind, 1.0 - static_cast<double>(in.sigma), last, q_background);
        sample_store<S, L>(a.grad_sigmas, s, t0 * g);
      }
      if (a.grad_delta_ts.present()) {
        sample_store<S, L>(
            a.grad_delta_ts, s,
            delta_gradient(a.alpha_input, t0, static_cast<double>(in.sigma), rel_after, q, behind));
      }
      if (a.grad_ts.present()) sample_store<S, L>(a.grad_ts, s, g_depth * t0 * w);
    }
    behind_chunk += __shfl_sync(kFullWarp, from, 0);
    depth_behind_chunk += __shfl_sync(kFullWarp, depth_from, 0);
    rel_behind_chunk = __shfl_sync(kFullWarp, rel_before, 0);
  }
  if (a.grad_prefix.present() && lane == 0) store<S>(a.grad_prefix, r, behind_chunk);

  // Samples past termination: exactly zero.
  for (int64_t s = ray.stop + lane; s < end; s += kWarpSize) zero_sample_gradients<S, L>(a, s);
}

// ---- line integral -----------------------------------------------------------------------------

/// Samples each lane has in flight per step: independent loads, so a lane waits on memory once per
/// step rather than once per sample.
constexpr int kSamplesInFlight = 4;

/// Forward of ray r by the calling warp: P = Σ v·δ per channel, kBlock channels a pass. Each
/// product is rounded once in the compute type and summed in float64 per lane, then in a fixed
/// butterfly across lanes.
template <class S, class L, int kBlock>
__device__ void line_integral_ray_forward_warp(const LineIntegralArgs& a, int64_t r) {
  using T = compute_t<S>;
  int64_t begin, end;
  a.rays.range(r, begin, end);
  const int lane = lane_id();
  for (int64_t c0 = 0; c0 < a.channels; c0 += kBlock) {
    double sum[kBlock] = {};
    for (int64_t first = begin + lane; first < end; first += kSamplesInFlight * kWarpSize) {
      T delta[kSamplesInFlight], value[kSamplesInFlight][kBlock];
#pragma unroll
      for (int k = 0; k < kSamplesInFlight; ++k) {
        const int64_t s = first + k * kWarpSize;
        delta[k] = s < end ? sample_load<T, S, L>(a.delta_ts, s) : T(0);
#pragma unroll
        for (int j = 0; j < kBlock; ++j) {
          value[k][j] = s < end && c0 + j < a.channels
                            ? sample_load<T, S, L>(a.values, s, c0 + j, a.channels)
                            : T(0);
        }
      }
#pragma unroll
      for (int k = 0; k < kSamplesInFlight; ++k) {
#pragma unroll
        for (int j = 0; j < kBlock; ++j) {
          sum[j] += static_cast<double>(line_integral_term(value[k][j], delta[k]));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      const double total = warp_sum(sum[j]);
      if (lane == j && c0 + j < a.channels) store<S>(a.out, r, c0 + j, total);
    }
  }
}

/// Backward of ray r by the calling warp: ∂v = δ·g and ∂δ = Σ_c v_c·g_c, sample by sample.
template <class S, class L>
__device__ void line_integral_ray_backward_warp(const LineIntegralArgs& a, int64_t r) {
  using T = compute_t<S>;
  int64_t begin, end;
  a.rays.range(r, begin, end);
  const int lane = lane_id();
  for (int64_t first = begin + lane; first < end; first += kSamplesInFlight * kWarpSize) {
    T delta[kSamplesInFlight];
    double d_delta[kSamplesInFlight] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < kSamplesInFlight; ++k) {
      const int64_t s = first + k * kWarpSize;
      delta[k] = s < end ? sample_load<T, S, L>(a.delta_ts, s) : T(0);
    }
    for (int64_t c = 0; c < a.channels; ++c) {
      const double g = load<S>(a.out, r, c);
      T value[kSamplesInFlight];
#pragma unroll
      for (int k = 0; k < kSamplesInFlight; ++k) {
        const int64_t s = first + k * kWarpSize;
        value[k] = s < end && a.grad_delta_ts.present()
                       ? sample_load<T, S, L>(a.values, s, c, a.channels)
                       : T(0);
      }
#pragma unroll
      for (int k = 0; k < kSamplesInFlight; ++k) {
        const int64_t s = first + k * kWarpSize;
        if (s >= end) continue;
        if (a.grad_values.present()) {
          sample_store<S, L>(a.grad_values, s, c, a.channels,
                             line_integral_value_gradient(static_cast<double>(delta[k]), g));
        }
        d_delta[k] += line_integral_delta_term(static_cast<double>(value[k]), g);
      }
    }
    if (!a.grad_delta_ts.present()) continue;
#pragma unroll
    for (int k = 0; k < kSamplesInFlight; ++k) {
      const int64_t s = first + k * kWarpSize;
      if (s < end) sample_store<S, L>(a.grad_delta_ts, s, d_delta[k]);
    }
  }
}

// ---- ray-box sampling --------------------------------------------------------------------------

// Note [ray-box warp]
// A ray-box ray is a few dozen flops of span against a stream of S slots (521 at the tomography
// step's ds), so one thread per ray left the stores scattered and the GPU idle at 2048 rays. A
// warp takes a ray: every lane finds the span (the same loads of o and d, broadcast) and lane k
// handles slots k, k + 32, …, so each store instruction writes consecutive slots. The gradient's
// lanes each sum their samples' terms (BoxGradientSums), the lanes' sums are added by a fixed
// butterfly (warp_sum: no atomics, the same bits every run) and lane 0 applies the slab terms
// (Note [ray-box gradient]). Per sample the formulas are render_ray.h's, as on the CPU; only the
// order of the gradient's float64 sums (and nvcc's fused multiply-adds) differ.

/// ray_box_fill by the calling warp (Note [ray-box warp]): every slot of ray r, padding included.
template <class S>
__device__ void ray_box_fill_warp(const RayBoxArgs& a, int64_t r) {
  const RaySpan<S> span = ray_span<S>(a, r);
  const double step = span_step(span);
  const int64_t slots = slots_of(a, span.n);
  for (int64_t k = lane_id(); k < slots; k += kWarpSize) store_box_sample(a, r, span, step, k);
}

/// ray_box_gradient by the calling warp (Note [ray-box warp]).
template <class S>
__device__ void ray_box_gradient_warp(const RayBoxArgs& a, int64_t r) {
  const RaySpan<S> span = ray_span<S>(a, r);
  const GradientSteps steps = gradient_steps(span);
  BoxGradientSums sums;
  for (int64_t k = lane_id(); k < span.n; k += kWarpSize) {
    add_box_sample_gradient(a, r, span, steps, k, sums);
  }
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    sums.d_o[i] = warp_sum(sums.d_o[i]);
    sums.d_d[i] = warp_sum(sums.d_d[i]);
  }
  sums.d_enter = warp_sum(sums.d_enter);
  sums.d_exit = warp_sum(sums.d_exit);
  if (lane_id() == 0) finish_box_gradient(a, r, span, sums);
}

}  // namespace fieldfuse::detail::render
