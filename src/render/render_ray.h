// SPDX-License-Identifier: Apache-2.0
// The per-ray routines of the render family, host+device: the CPU driver runs them over rays with
// OpenMP, the CUDA driver with one thread per ray. Each ray is marched in sample order with
// float64 accumulators, so results are deterministic and identical in structure on both devices.
#pragma once

#include <cstdint>

#include "render/render_drivers.h"
#include "render/render_math.h"

namespace fieldfuse::detail::render {

/// Storage → float64. Specialised for the 16-bit CUDA types in render_cuda.cu (their conversion
/// operators make a plain static_cast ambiguous).
template <class S>
struct Widen {
  FF_HOST_DEVICE FF_FORCE_INLINE static double of(S x) { return static_cast<double>(x); }
};

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double load(const Vec& v, int64_t i) {
  return Widen<S>::of(static_cast<const S*>(v.data)[i * v.stride]);
}

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double load(const Mat& m, int64_t i, int64_t j) {
  return Widen<S>::of(static_cast<const S*>(m.data)[i * m.stride0 + j * m.stride1]);
}

/// An absent upstream gradient reads as 0.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double load_or_zero(const Vec& v, int64_t i) {
  return v.present() ? load<S>(v, i) : 0.0;
}

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void store(const Vec& v, int64_t i, double x) {
  static_cast<S*>(v.data)[i * v.stride] = static_cast<S>(x);
}

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void store(const Mat& m, int64_t i, int64_t j, double x) {
  static_cast<S*>(m.data)[i * m.stride0 + j * m.stride1] = static_cast<S>(x);
}

/// Channels accumulated per pass over a ray: rays with more channels are marched again per block
/// (the march itself is cheap next to the colour reads), which keeps the accumulators in registers
/// for any channel count.
constexpr int kChannelBlock = 4;

// ---- volume rendering --------------------------------------------------------------------------

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE Absorption<double> sample_absorption(const VolumeRenderArgs& a,
                                                                    int64_t s) {
  return a.alpha_input ? absorption_from_alpha(load<S>(a.sigmas, s))
                       : absorption_from_density(load<S>(a.sigmas, s), load<S>(a.delta_ts, s));
}

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double initial_transmittance(const VolumeRenderArgs& a, int64_t r) {
  return a.prefix.present() ? load<S>(a.prefix, r) : 1.0;
}

/// Forward of ray r (Note [compositing]): every requested output of the ray is written.
template <class S>
FF_HOST_DEVICE void render_ray_forward(const VolumeRenderArgs& a, int64_t r) {
  int64_t begin, end;
  a.rays.range(r, begin, end);
  for (int64_t c0 = 0; c0 < a.channels; c0 += kChannelBlock) {
    const bool first_block = c0 == 0;
    double colour[kChannelBlock] = {0, 0, 0, 0};
    double trans = initial_transmittance<S>(a, r), opacity = 0, depth = 0;
    int64_t s = begin;
    // A ray whose prefix transmittance is already at the threshold composites nothing, so marching
    // in chunks (prefix = the previous chunk's T) equals marching in one pass.
    bool done = terminates(trans, a.threshold);
    while (!done && s < end) {
      const Absorption<double> ab = sample_absorption<S>(a, s);
      const double w = ab.alpha * trans;
      for (int j = 0; j < kChannelBlock; ++j) {
        if (c0 + j < a.channels) colour[j] += w * load<S>(a.rgbs, s, c0 + j);
      }
      if (first_block) {
        opacity += w;
        if (a.depth.present()) depth += w * load<S>(a.ts, s);
        if (a.weights.present()) store<S>(a.weights, s, w);
      }
      trans *= ab.factor;
      ++s;
      done = terminates(trans, a.threshold);
    }
    for (int j = 0; j < kChannelBlock; ++j) {
      if (c0 + j >= a.channels) break;
      const double bg = a.background.present() ? load<S>(a.background, r, c0 + j) : 0.0;
      store<S>(a.rgb, r, c0 + j, colour[j] + trans * bg);
    }
    if (!first_block) continue;
    if (a.weights.present()) {
      for (int64_t t = s; t < end; ++t) store<S>(a.weights, t, 0.0);
    }
    if (a.opacity.present()) store<S>(a.opacity, r, opacity);
    if (a.depth.present()) store<S>(a.depth, r, depth);
    if (a.transmittance.present()) store<S>(a.transmittance, r, trans);
    if (a.total_samples.present()) {
      static_cast<int64_t*>(a.total_samples.data)[r * a.total_samples.stride] = s - begin;
    }
  }
}

/// Backward of ray r (Note [stable backward]): a forward march finds the composited samples, the
/// final transmittance and the optical depth before the last sample; a back-to-front march then
/// carries U and rebuilds T_i = T_0·exp(−τ_i) from that optical depth (not by dividing T_final by
/// the factors, which fails behind an opaque sample).
template <class S>
FF_HOST_DEVICE void render_ray_backward(const VolumeRenderArgs& a, int64_t r) {
  int64_t begin, end;
  a.rays.range(r, begin, end);
  const double t0 = initial_transmittance<S>(a, r);

  // Pass 1: n, T_final and τ_{n−1} = Σ_{s < last} ℓ_s (ℓ = σδ, or −log(1 − α)).
  double trans = t0, depth_before_last = 0, depth_through = 0;
  int64_t stop = begin;
  bool done = terminates(trans, a.threshold);  // as in the forward
  while (!done && stop < end) {
    const Absorption<double> ab = sample_absorption<S>(a, stop);
    depth_before_last = depth_through;
    depth_through += a.alpha_input ? -log1p(-load<S>(a.sigmas, stop))
                                   : load<S>(a.sigmas, stop) * load<S>(a.delta_ts, stop);
    trans *= ab.factor;
    ++stop;
    done = terminates(trans, a.threshold);
  }
  const double t_final = trans;

  // Upstream gradients of the ray.
  const double g_opacity = load_or_zero<S>(a.grad_opacity, r);
  const double g_depth = load_or_zero<S>(a.grad_depth, r);
  double behind = load_or_zero<S>(a.grad_transmittance, r);  // U, starting as q_bg
  for (int64_t c = 0; c < a.channels; ++c) {
    const double g = load<S>(a.grad_rgb, r, c);
    if (a.background.present()) behind += g * load<S>(a.background, r, c);
    if (a.grad_background.present()) {
      if (a.grad_background_float32) {
        store<float>(a.grad_background, r, c, g * t_final);
      } else {
        store<S>(a.grad_background, r, c, g * t_final);
      }
    }
  }

  // Pass 2, back to front.
  double tau_after = depth_before_last;  // τ_{i+1} for i < last
  for (int64_t s = stop - 1; s >= begin; --s) {
    const bool last = s == stop - 1;
    const Absorption<double> ab = sample_absorption<S>(a, s);
    const double sigma = load<S>(a.sigmas, s);
    const double ell = a.alpha_input ? -log1p(-sigma) : sigma * load<S>(a.delta_ts, s);
    const double tau_before = last ? depth_before_last : tau_after - ell;
    const double trans_before = t0 * exponential(-tau_before);
    const double trans_after = last ? t_final : t0 * exponential(-tau_after);
    const double w = ab.alpha * trans_before;

    double colour_term = 0;
    for (int64_t c = 0; c < a.channels; ++c) {
      const double g = load<S>(a.grad_rgb, r, c);
      colour_term += g * load<S>(a.rgbs, s, c);
      if (a.grad_rgbs.present()) store<S>(a.grad_rgbs, s, c, g * w);
    }
    const double t_s = a.ts.present() ? load<S>(a.ts, s) : 0.0;
    const double q =
        sample_value(colour_term, g_depth, t_s, g_opacity, load_or_zero<S>(a.grad_weights, s));
    if (a.grad_sigmas.present()) {
      const double g =
          a.alpha_input ? alpha_gradient(trans_before, q, behind)
                        : load<S>(a.delta_ts, s) * optical_depth_gradient(trans_after, q, behind);
      store<S>(a.grad_sigmas, s, g);
    }
    if (a.grad_delta_ts.present()) {
      // σ = ∞ leaves T_{i+1} = 0: the gradient is 0, not ∞·0.
      const double g = optical_depth_gradient(trans_after, q, behind);
      store<S>(a.grad_delta_ts, s, a.alpha_input || g == 0.0 ? 0.0 : sigma * g);
    }
    if (a.grad_ts.present()) store<S>(a.grad_ts, s, g_depth * w);
    behind = behind_value(ab, q, behind);
    tau_after = tau_before;
  }
  if (a.grad_prefix.present()) store<S>(a.grad_prefix, r, behind);

  // Samples past termination: exactly zero.
  for (int64_t s = stop; s < end; ++s) {
    if (a.grad_sigmas.present()) store<S>(a.grad_sigmas, s, 0.0);
    if (a.grad_delta_ts.present()) store<S>(a.grad_delta_ts, s, 0.0);
    if (a.grad_ts.present()) store<S>(a.grad_ts, s, 0.0);
    if (a.grad_rgbs.present()) {
      for (int64_t c = 0; c < a.channels; ++c) store<S>(a.grad_rgbs, s, c, 0.0);
    }
  }
}

// ---- line integral -----------------------------------------------------------------------------

template <class S>
FF_HOST_DEVICE void line_integral_ray_forward(const LineIntegralArgs& a, int64_t r) {
  int64_t begin, end;
  a.rays.range(r, begin, end);
  for (int64_t c0 = 0; c0 < a.channels; c0 += kChannelBlock) {
    double sum[kChannelBlock] = {0, 0, 0, 0};
    for (int64_t s = begin; s < end; ++s) {
      const double delta = load<S>(a.delta_ts, s);
      for (int j = 0; j < kChannelBlock; ++j) {
        if (c0 + j < a.channels) sum[j] += load<S>(a.values, s, c0 + j) * delta;
      }
    }
    for (int j = 0; j < kChannelBlock && c0 + j < a.channels; ++j) {
      store<S>(a.out, r, c0 + j, sum[j]);
    }
  }
}

template <class S>
FF_HOST_DEVICE void line_integral_ray_backward(const LineIntegralArgs& a, int64_t r) {
  int64_t begin, end;
  a.rays.range(r, begin, end);
  for (int64_t s = begin; s < end; ++s) {
    const double delta = load<S>(a.delta_ts, s);
    double d_delta = 0;
    for (int64_t c = 0; c < a.channels; ++c) {
      const double g = load<S>(a.out, r, c);
      if (a.grad_values.present()) store<S>(a.grad_values, s, c, delta * g);
      if (a.grad_delta_ts.present()) d_delta += load<S>(a.values, s, c) * g;
    }
    if (a.grad_delta_ts.present()) store<S>(a.grad_delta_ts, s, d_delta);
  }
}

// ---- ray-box sampling --------------------------------------------------------------------------

/// The span and sample count of ray r (n = 0 for a miss).
template <class S>
struct RaySpan {
  double o[3], d[3];
  BoxSpan<double> box;
  int64_t n;
};

template <class S>
FF_HOST_DEVICE RaySpan<S> ray_span(const RayBoxArgs& a, int64_t r) {
  RaySpan<S> span;
  for (int i = 0; i < 3; ++i) {
    span.o[i] = load<S>(a.origins, r, i);
    span.d[i] = load<S>(a.directions, r, i);
  }
  span.box = intersect_box(span.o, span.d);
  span.n = span.box.hit ? sample_count(span.box.exit - span.box.enter, a.ds) : 0;
  if (a.padded && span.n > a.capacity) span.n = a.capacity;
  return span;
}

/// Where sample k of ray r goes: offsets[r] + k (packed) or r·S + k (padded).
FF_HOST_DEVICE FF_FORCE_INLINE int64_t sample_slot(const RayBoxArgs& a, int64_t r, int64_t k) {
  return (a.padded ? r * a.capacity : a.offsets[r * a.offsets_stride]) + k;
}

/// Slots ray r writes: its n samples (packed) or all S, padding included (padded).
FF_HOST_DEVICE FF_FORCE_INLINE int64_t slots_of(const RayBoxArgs& a, int64_t n) {
  return a.padded ? a.capacity : n;
}

template <class S>
FF_HOST_DEVICE void ray_box_count(const RayBoxArgs& a, int64_t r) {
  static_cast<int64_t*>(a.counts.data)[r * a.counts.stride] = ray_span<S>(a, r).n;
}

template <class S>
FF_HOST_DEVICE void ray_box_fill(const RayBoxArgs& a, int64_t r) {
  const RaySpan<S> span = ray_span<S>(a, r);
  const double step = span.n >= 2 ? sample_step(span.box.exit - span.box.enter, span.n) : 0.0;
  for (int64_t k = 0; k < slots_of(a, span.n); ++k) {
    const int64_t slot = sample_slot(a, r, k);
    const bool live = k < span.n;
    const double t = span.box.enter + static_cast<double>(k) * step;
    for (int i = 0; i < 3; ++i) store<S>(a.points, slot, i, live ? span.o[i] + t * span.d[i] : 0.0);
    store<S>(a.delta_ts, slot, live ? step : 0.0);
    if (a.valid.present()) static_cast<bool*>(a.valid.data)[slot * a.valid.stride] = live;
  }
}

// Note [ray-box gradient]
// Sample k is p_k = o + t_k·d with t_k = t_in + k·δ and δ = (t_out − t_in)/(n − 1), where t_in and
// t_out come from the slabs that bound the span: t = (±1 − o_a)/d_a on axis a. So beyond the direct
// terms (∂p/∂o = I, ∂p/∂d = t_k·I), every point and step moves with t_in and t_out, which move
// with o_a and d_a of their slab. n is piecewise constant (its jumps have no gradient).

/// Gradients to o and d of ray r from its samples' points and steps (Note [ray-box gradient]).
template <class S>
FF_HOST_DEVICE void ray_box_gradient(const RayBoxArgs& a, int64_t r) {
  const RaySpan<S> span = ray_span<S>(a, r);
  double d_o[3] = {0, 0, 0}, d_d[3] = {0, 0, 0};
  if (span.n >= 2) {
    const double length = span.box.exit - span.box.enter;
    const double inv = 1.0 / static_cast<double>(span.n - 1);
    const double step = length * inv;
    double d_enter = 0, d_exit = 0;  // ∂L/∂t_in, ∂L/∂t_out
    for (int64_t k = 0; k < span.n; ++k) {
      const int64_t slot = sample_slot(a, r, k);
      const double t = span.box.enter + static_cast<double>(k) * step;
      double g_dot_d = 0;
      for (int i = 0; i < 3; ++i) {
        const double g = load<S>(a.grad_points, slot, i);
        d_o[i] += g;
        d_d[i] += t * g;
        g_dot_d += g * span.d[i];
      }
      // t_k = t_in + k·(t_out − t_in)/(n − 1); δ = (t_out − t_in)/(n − 1).
      const double frac = static_cast<double>(k) * inv;
      d_enter += (1 - frac) * g_dot_d;
      d_exit += frac * g_dot_d;
      if (a.grad_delta_ts.present()) {
        const double g_step = load<S>(a.grad_delta_ts, slot);
        d_enter -= inv * g_step;
        d_exit += inv * g_step;
      }
    }
    // t_in = (s_a − o_a)/d_a on its bounding slab a: ∂/∂o_a = −1/d_a, ∂/∂d_a = −t_in/d_a.
    const int ea = span.box.entry_axis, xa = span.box.exit_axis;
    d_o[ea] -= d_enter / span.d[ea];
    d_d[ea] -= d_enter * span.box.enter / span.d[ea];
    d_o[xa] -= d_exit / span.d[xa];
    d_d[xa] -= d_exit * span.box.exit / span.d[xa];
  }
  for (int i = 0; i < 3; ++i) {
    if (a.grad_origins.present()) store<S>(a.grad_origins, r, i, d_o[i]);
    if (a.grad_directions.present()) store<S>(a.grad_directions, r, i, d_d[i]);
  }
}

}  // namespace fieldfuse::detail::render
