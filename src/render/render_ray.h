// SPDX-License-Identifier: Apache-2.0
// The serial per-ray routines of the render family, host+device: the CPU driver runs them over
// rays with OpenMP, each ray marched in sample order with float64 accumulators (deterministic).
// CUDA runs them for the ray-box counts (one thread per ray) and has warp routines for volume
// rendering, line integrals and the ray-box fill and gradient (render_warp.cuh) over the same
// formulas, the same ray state, and the per-ray and per-sample rules written here once for both
// (outputs, background, zeros past termination, a ray-box sample's slot and gradient terms).
#pragma once

#include <cstdint>

#include "render/render_drivers.h"
#include "render/render_math.h"

namespace fieldfuse::detail::render {

/// Storage → the compute type T (float64 unless asked). Specialised for the 16-bit CUDA types in
/// render_cuda.cu (their conversion operators make a plain static_cast to double ambiguous).
template <class S>
struct Widen {
  template <class T = double>
  FF_HOST_DEVICE FF_FORCE_INLINE static T of(S x) {
    return static_cast<T>(x);
  }
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

// Note [dense layout]
// Per-sample tensors are read and written in place with any strides, through a layout policy L
// (sample_load, sample_store). The CPU and most CUDA calls use Strided. When every per-sample
// tensor of a CUDA call is dense ([N] with stride 1, [N, C] row-major), the launch picks the Dense
// policy, whose element offsets are the indices themselves: the 64-bit stride products, their
// constant loads and their compares were about a third of the forward's instructions (H100,
// per-opcode counts of the march). Per-ray tensors are touched once a ray and stay strided.

/// Element offsets of strided per-sample tensors.
struct Strided {
  FF_HOST_DEVICE FF_FORCE_INLINE static int64_t at(const Vec& v, int64_t i) { return i * v.stride; }
  FF_HOST_DEVICE FF_FORCE_INLINE static int64_t at(const Mat& m, int64_t i, int64_t j, int64_t) {
    return i * m.stride0 + j * m.stride1;
  }
};

/// Element offsets of dense per-sample tensors (rows of `channels` elements).
struct Dense {
  FF_HOST_DEVICE FF_FORCE_INLINE static int64_t at(const Vec&, int64_t i) { return i; }
  FF_HOST_DEVICE FF_FORCE_INLINE static int64_t at(const Mat&, int64_t i, int64_t j,
                                                   int64_t channels) {
    return i * channels + j;
  }
};

/// Per-sample element i (of row i, column j) in the compute type, under layout policy L.
template <class T, class S, class L>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_load(const Vec& v, int64_t i) {
  return Widen<S>::template of<T>(static_cast<const S*>(v.data)[L::at(v, i)]);
}

template <class T, class S, class L>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_load(const Mat& m, int64_t i, int64_t j, int64_t channels) {
  return Widen<S>::template of<T>(static_cast<const S*>(m.data)[L::at(m, i, j, channels)]);
}

template <class S, class L>
FF_HOST_DEVICE FF_FORCE_INLINE void sample_store(const Vec& v, int64_t i, double x) {
  static_cast<S*>(v.data)[L::at(v, i)] = static_cast<S>(x);
}

template <class S, class L>
FF_HOST_DEVICE FF_FORCE_INLINE void sample_store(const Mat& m, int64_t i, int64_t j,
                                                 int64_t channels, double x) {
  static_cast<S*>(m.data)[L::at(m, i, j, channels)] = static_cast<S>(x);
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

// Note [ray state]
// The backward needs four facts of each ray's march: how many samples were composited, the final
// T, and the optical depths τ in front of and through the last composited sample (float64, so
// that T'_i = exp(−τ_i) can be rebuilt without dividing transmittances; Note [stable backward]).
// A training forward writes them as an [R, 4] float64 row per ray, and a backward that receives
// them skips re-marching every ray, which would read σ and δ again and repeat the forward's
// transmittance products. Without it the backward finds the same values itself.

/// A ray's march as the backward needs it.
struct RayState {
  int64_t stop = 0;  ///< the first sample not composited
  double trans_final = 1, depth_before_last = 0, depth_through = 0;
};

/// Row r of the ray state; the count is stored relative to the ray's first sample (exact in a
/// double up to 2^53 samples).
FF_HOST_DEVICE FF_FORCE_INLINE void store_ray_state(const Mat& m, int64_t r, int64_t begin,
                                                    const RayState& state) {
  double* row = static_cast<double*>(m.data) + r * m.stride0;
  row[0] = static_cast<double>(state.stop - begin);
  row[m.stride1] = state.trans_final;
  row[2 * m.stride1] = state.depth_before_last;
  row[3 * m.stride1] = state.depth_through;
}

FF_HOST_DEVICE FF_FORCE_INLINE RayState load_ray_state(const Mat& m, int64_t r, int64_t begin,
                                                       int64_t end) {
  const double* row = static_cast<const double*>(m.data) + r * m.stride0;
  RayState state;
  // Clamped into the ray, so a state from other inputs cannot index outside it.
  const double count = row[0];
  const auto length = static_cast<double>(end - begin);
  state.stop = begin + static_cast<int64_t>(count > 0 ? (count < length ? count : length) : 0);
  state.trans_final = row[m.stride1];
  state.depth_before_last = row[2 * m.stride1];
  state.depth_through = row[3 * m.stride1];
  return state;
}

// Note [NaN samples]
// A NaN in a sample poisons what depends on it and nothing else, as autograd through the float64
// oracle (python/fieldfuse/reference/render.py) does: NaN never terminates a ray, so its colour and
// every output after it are NaN, and so are the ray's gradients to σ, δ, α and the prefix (they
// move the transmittance the NaN sample sees); but the weights of the samples in front of it, and
// so the gradients to their colours and depths, stay finite. The backward rebuilds τ in front of
// each sample from the back, τ_i = τ_ref − Σ_{i≤j<ref} ℓ_j, with the reference ref the last
// composited sample (its ℓ may be ∞; τ in front of it is the ray state's). When a NaN made τ
// through the ray NaN, the reference moves to the first sample whose ℓ is not finite, found by a
// second march over that ray's σ and δ alone (the forward and its ray state stay as they are: no
// cost to rays without a NaN), and the samples behind it get τ = NaN. One gradient departs from
// the oracle's: that of a NaN α itself. L is linear in each α, so the oracle's is finite, but ours
// is formed as T'·q − V/(1 − α) (Note [stable backward]), NaN there.

/// The sample the backward rebuilds τ from, and τ in front of it (Note [NaN samples]).
struct Reference {
  int64_t sample;
  double depth_before;
};

/// Whether x is NaN or ±∞ (without <cmath>'s classification, the same on host and device).
FF_HOST_DEVICE FF_FORCE_INLINE bool non_finite(double x) { return !(x - x == 0.0); }

/// Adds one composited sample's ℓ to the optical depths of a ray state (ℓ of the last sample
/// can be ∞, and τ in front of it stays finite).
FF_HOST_DEVICE FF_FORCE_INLINE void add_depth(RayState& state, double ell) {
  state.depth_before_last = state.depth_through;
  state.depth_through += ell;
}

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double initial_transmittance(const VolumeRenderArgs& a, int64_t r) {
  return a.prefix.present() ? load<S>(a.prefix, r) : 1.0;
}

// The per-ray rules below are shared by the serial routines here and the warp routines of
// render_warp.cuh, which differ only in which lanes run them.

/// Writes channel c of ray r's colour: the composited sum plus the final T times the background.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void store_colour(const VolumeRenderArgs& a, int64_t r, int64_t c,
                                                 double composited, double trans) {
  const double bg = a.background.present() ? load<S>(a.background, r, c) : 0.0;
  store<S>(a.rgb, r, c, composited + trans * bg);
}

/// Writes ray r's requested outputs besides its colour, for a march that composited
/// [begin, stop) and left T = `trans`. `state` holds the march's optical depths when
/// `keep_state` (the ray state was requested).
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void store_ray_outputs(const VolumeRenderArgs& a, int64_t r,
                                                      int64_t begin, int64_t stop, double trans,
                                                      double opacity, double depth, bool keep_state,
                                                      RayState state) {
  if (a.opacity.present()) store<S>(a.opacity, r, opacity);
  if (a.depth.present()) store<S>(a.depth, r, depth);
  if (a.transmittance.present()) store<S>(a.transmittance, r, trans);
  if (keep_state) {
    state.stop = stop;
    state.trans_final = trans;
    store_ray_state(a.ray_state, r, begin, state);
  }
  if (a.total_samples.present()) {
    static_cast<int64_t*>(a.total_samples.data)[r * a.total_samples.stride] = stop - begin;
  }
}

/// q_bg = Σ_c g_rgb,c·bg_c + g_T, what the ray's final transmittance is worth to the loss (Note
/// [stable backward]); summed over channels in order.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double background_value(const VolumeRenderArgs& a, int64_t r) {
  double q_background = load_or_zero<S>(a.grad_transmittance, r);
  if (a.background.present()) {
    for (int64_t c = 0; c < a.channels; ++c) {
      q_background += load<S>(a.grad_rgb, r, c) * load<S>(a.background, r, c);
    }
  }
  return q_background;
}

/// Writes ∂L/∂bg of channel c of ray r: g_rgb,c·T_final, stored as float32 where the front asked
/// for it with 16-bit inputs (VolumeRenderArgs::grad_background_float32).
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void store_background_gradient(const VolumeRenderArgs& a, int64_t r,
                                                              int64_t c, double trans_final) {
  const double g = load<S>(a.grad_rgb, r, c) * trans_final;
  if (a.grad_background_float32) {
    store<float>(a.grad_background, r, c, g);
  } else {
    store<S>(a.grad_background, r, c, g);
  }
}

/// Writes the requested gradients of sample s, which lies past the ray's termination: it was not
/// composited, so they are exactly zero.
template <class S, class L>
FF_HOST_DEVICE FF_FORCE_INLINE void zero_sample_gradients(const VolumeRenderArgs& a, int64_t s) {
  if (a.grad_sigmas.present()) sample_store<S, L>(a.grad_sigmas, s, 0.0);
  if (a.grad_delta_ts.present()) sample_store<S, L>(a.grad_delta_ts, s, 0.0);
  if (a.grad_ts.present()) sample_store<S, L>(a.grad_ts, s, 0.0);
  if (a.grad_rgbs.present()) {
    for (int64_t c = 0; c < a.channels; ++c) sample_store<S, L>(a.grad_rgbs, s, c, a.channels, 0.0);
  }
}

/// ℓ of sample s in float64: σδ, or −log(1 − α) for the alpha input.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double sample_optical_depth(const VolumeRenderArgs& a, int64_t s) {
  return a.alpha_input ? optical_depth_of_alpha(load<S>(a.sigmas, s))
                       : load<S>(a.sigmas, s) * load<S>(a.delta_ts, s);
}

/// Marches ray r in sample order by the rule of Note [compositing], calling
/// `visit(s, absorption, T in front of s)` for each composited sample. Returns the first sample
/// not composited; `trans` is left at T behind the last one.
template <class S, class Visit>
FF_HOST_DEVICE FF_FORCE_INLINE int64_t march_ray(const VolumeRenderArgs& a, int64_t r,
                                                 int64_t begin, int64_t end, double& trans,
                                                 const Visit& visit) {
  trans = initial_transmittance<S>(a, r);
  int64_t s = begin;
  // A ray whose prefix transmittance is already at the threshold composites nothing, so marching
  // in chunks (prefix = the previous chunk's T) equals marching in one pass.
  bool done = terminates(trans, a.transmittance_thresh);
  while (!done && s < end) {
    const Absorption<double> ab = sample_absorption<S>(a, s);
    visit(s, ab, trans);
    trans *= ab.factor;
    ++s;
    done = terminates(trans, a.transmittance_thresh);
  }
  return s;
}

/// Forward of ray r (Note [compositing]): every requested output of the ray is written.
template <class S>
FF_HOST_DEVICE void render_ray_forward(const VolumeRenderArgs& a, int64_t r) {
  int64_t begin, end;
  a.rays.range(r, begin, end);
  for (int64_t c0 = 0; c0 < a.channels; c0 += kChannelBlock) {
    const bool first_block = c0 == 0;
    double colour[kChannelBlock] = {0, 0, 0, 0};
    double trans, opacity = 0, depth = 0;
    RayState state;
    const auto composite = [&](int64_t t, const Absorption<double>& ab, double before) {
      const double w = ab.alpha * before;
      for (int j = 0; j < kChannelBlock; ++j) {
        if (c0 + j < a.channels) colour[j] += w * load<S>(a.rgbs, t, c0 + j);
      }
      if (!first_block) return;
      opacity += w;
      if (a.depth.present()) depth += w * load<S>(a.ts, t);
      if (a.weights.present()) store<S>(a.weights, t, w);
      if (a.ray_state.present()) add_depth(state, sample_optical_depth<S>(a, t));
    };
    const int64_t s = march_ray<S>(a, r, begin, end, trans, composite);
    for (int j = 0; j < kChannelBlock; ++j) {
      if (c0 + j >= a.channels) break;
      store_colour<S>(a, r, c0 + j, colour[j], trans);
    }
    if (!first_block) continue;
    if (a.weights.present()) {
      for (int64_t t = s; t < end; ++t) store<S>(a.weights, t, 0.0);
    }
    store_ray_outputs<S>(a, r, begin, s, trans, opacity, depth, a.ray_state.present(), state);
  }
}

/// The march of ray r as the backward needs it (Note [ray state]), by the forward's rule.
template <class S>
FF_HOST_DEVICE RayState march_ray_state(const VolumeRenderArgs& a, int64_t r, int64_t begin,
                                        int64_t end) {
  RayState state;
  state.stop = march_ray<S>(a, r, begin, end, state.trans_final,
                            [&](int64_t s, const Absorption<double>&, double) {
                              add_depth(state, sample_optical_depth<S>(a, s));
                            });
  return state;
}

/// The reference of a march whose ray state is `state` (Note [NaN samples]).
template <class S>
FF_HOST_DEVICE Reference reference_sample(const VolumeRenderArgs& a, int64_t begin,
                                          const RayState& state) {
  const Reference last{state.stop - 1, state.depth_before_last};
  if (!(state.depth_through != state.depth_through)) return last;  // no NaN: the common case
  double depth = 0;
  for (int64_t s = begin; s < last.sample; ++s) {
    const double ell = sample_optical_depth<S>(a, s);
    if (non_finite(ell)) return {s, depth};
    depth += ell;
  }
  return last;
}

/// Backward of ray r (Note [stable backward]): the ray state (given, or found by a forward march)
/// says which samples were composited; a back-to-front march then sums V and rebuilds each
/// T' = exp(−τ) from τ, carried down by subtracting each sample's ℓ in float64.
template <class S>
FF_HOST_DEVICE void render_ray_backward(const VolumeRenderArgs& a, int64_t r) {
  int64_t begin, end;
  a.rays.range(r, begin, end);
  const double t0 = initial_transmittance<S>(a, r);

  // Pass 1 (Note [ray state]): n, T_final, τ_{n−1} = Σ_{s < last} ℓ_s and τ_n.
  const RayState state = a.ray_state.present() ? load_ray_state(a.ray_state, r, begin, end)
                                               : march_ray_state<S>(a, r, begin, end);
  const int64_t stop = state.stop;
  const double t_final = state.trans_final;

  // Upstream gradients of the ray.
  const double g_opacity = load_or_zero<S>(a.grad_opacity, r);
  const double g_depth = load_or_zero<S>(a.grad_depth, r);
  const double q_background = background_value<S>(a, r);
  if (a.grad_background.present()) {
    for (int64_t c = 0; c < a.channels; ++c) store_background_gradient<S>(a, r, c, t_final);
  }

  // Pass 2, back to front, with T' = T/T_0.
  const double rel_final = exponential(-state.depth_through);
  double behind = q_background * rel_final;  // V behind the sample
  double rel_behind = rel_final;             // T' behind the sample
  const Reference ref = reference_sample<S>(a, begin, state);
  double depth_behind = ref.depth_before;  // τ behind the sample, for those before the reference
  for (int64_t s = stop - 1; s >= begin; --s) {
    const bool last = s == stop - 1;
    const Absorption<double> ab = sample_absorption<S>(a, s);
    const double sigma = load<S>(a.sigmas, s);
    const double ell = sample_optical_depth<S>(a, s);
    // Behind the reference, τ depends on a NaN (Note [NaN samples]).
    const double depth_before = s > ref.sample    ? static_cast<double>(NAN)
                                : s == ref.sample ? ref.depth_before
                                                  : depth_behind - ell;
    const double rel_before = exponential(-depth_before);
    const double w = ab.alpha * rel_before;  // the weight over T_0

    double colour_term = 0;
    for (int64_t c = 0; c < a.channels; ++c) {
      const double g = load<S>(a.grad_rgb, r, c);
      colour_term += g * load<S>(a.rgbs, s, c);
      if (a.grad_rgbs.present()) store<S>(a.grad_rgbs, s, c, g * t0 * w);
    }
    const double t_s = a.ts.present() ? load<S>(a.ts, s) : 0.0;
    const double q =
        sample_value(colour_term, g_depth, t_s, g_opacity, load_or_zero<S>(a.grad_weights, s));
    if (a.grad_sigmas.present()) {
      const double delta = a.alpha_input ? 0.0 : load<S>(a.delta_ts, s);
      const double g = sigma_gradient(a.alpha_input, delta, rel_before, rel_behind, q, behind,
                                      ab.factor, last, q_background);
      store<S>(a.grad_sigmas, s, t0 * g);
    }
    if (a.grad_delta_ts.present()) {
      store<S>(a.grad_delta_ts, s, delta_gradient(a.alpha_input, t0, sigma, rel_behind, q, behind));
    }
    if (a.grad_ts.present()) store<S>(a.grad_ts, s, g_depth * t0 * w);
    behind += q * w;
    rel_behind = rel_before;
    depth_behind = depth_before;
  }
  if (a.grad_prefix.present()) store<S>(a.grad_prefix, r, behind);

  // Samples past termination: exactly zero.
  for (int64_t s = stop; s < end; ++s) zero_sample_gradients<S, Strided>(a, s);
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
        if (c0 + j < a.channels) sum[j] += line_integral_term(load<S>(a.values, s, c0 + j), delta);
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
      if (a.grad_values.present()) {
        store<S>(a.grad_values, s, c, line_integral_value_gradient(delta, g));
      }
      if (a.grad_delta_ts.present())
        d_delta += line_integral_delta_term(load<S>(a.values, s, c), g);
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
  // Note [ray-box sample count]: n counts steps of ds along the chord, |d|·(t_exit − t_enter).
  const double chord = (span.box.exit - span.box.enter) * direction_length(span.d);
  span.n = span.box.hit ? sample_count(chord, a.ds, static_cast<double>(a.capacity - 1)) : 0;
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

/// The uniform step of ray r's samples, (t_exit − t_enter)/(n − 1); 0 when it has fewer than 2.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double span_step(const RaySpan<S>& span) {
  return span.n >= 2 ? sample_step(span.box.exit - span.box.enter, span.n) : 0.0;
}

/// t_k = t_in + k·δ, the parameter of sample k at step δ.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE double sample_parameter(const RaySpan<S>& span, double step,
                                                       int64_t k) {
  return span.box.enter + static_cast<double>(k) * step;
}

/// Writes slot k of ray r: sample k's point o + t_k·d and step, or zeros (and valid = false) for
/// a padding slot past the ray's n samples.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void store_box_sample(const RayBoxArgs& a, int64_t r,
                                                     const RaySpan<S>& span, double step,
                                                     int64_t k) {
  const int64_t slot = sample_slot(a, r, k);
  const bool live = k < span.n;
  const double t = sample_parameter(span, step, k);
  for (int i = 0; i < 3; ++i) store<S>(a.points, slot, i, live ? span.o[i] + t * span.d[i] : 0.0);
  store<S>(a.delta_ts, slot, live ? step : 0.0);
  if (a.valid.present()) static_cast<bool*>(a.valid.data)[slot * a.valid.stride] = live;
}

template <class S>
FF_HOST_DEVICE void ray_box_fill(const RayBoxArgs& a, int64_t r) {
  const RaySpan<S> span = ray_span<S>(a, r);
  const double step = span_step(span);
  for (int64_t k = 0; k < slots_of(a, span.n); ++k) store_box_sample(a, r, span, step, k);
}

// Note [ray-box gradient]
// Sample k is p_k = o + t_k·d with t_k = t_in + k·δ and δ = (t_out − t_in)/(n − 1), where t_in and
// t_out come from the slabs that bound the span: t = (±1 − o_a)/d_a on axis a. So beyond the direct
// terms (∂p/∂o = I, ∂p/∂d = t_k·I), every point and step moves with t_in and t_out, which move
// with o_a and d_a of their slab. n is piecewise constant (its jumps have no gradient). The sums
// over samples are independent per sample, so the CPU adds them in sample order and a CUDA warp
// splits them over its lanes and adds the lanes' sums in a fixed butterfly; both then apply the
// slab terms once (finish_box_gradient).

/// A ray's gradient sums over its samples (Note [ray-box gradient]): the direct terms to o and d,
/// and ∂L/∂t_in, ∂L/∂t_out.
struct BoxGradientSums {
  double d_o[3] = {0, 0, 0}, d_d[3] = {0, 0, 0};
  double d_enter = 0, d_exit = 0;
};

/// What the gradient of a ray's samples needs of its n: 1/(n − 1) and δ = (t_out − t_in)/(n − 1),
/// the latter formed as a product (not the forward's quotient; the gradient needs it to rounding
/// only). Both 0 for a ray with fewer than 2 samples, which adds no terms.
struct GradientSteps {
  double inv, step;
};

template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE GradientSteps gradient_steps(const RaySpan<S>& span) {
  if (span.n < 2) return {0.0, 0.0};
  const double inv = 1.0 / static_cast<double>(span.n - 1);
  return {inv, (span.box.exit - span.box.enter) * inv};
}

/// Adds the terms of ray r's sample k to `sums`.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void add_box_sample_gradient(const RayBoxArgs& a, int64_t r,
                                                            const RaySpan<S>& span,
                                                            const GradientSteps& steps, int64_t k,
                                                            BoxGradientSums& sums) {
  const double inv = steps.inv;
  const int64_t slot = sample_slot(a, r, k);
  const double t = sample_parameter(span, steps.step, k);
  double g_dot_d = 0;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const double g = load<S>(a.grad_points, slot, i);
    sums.d_o[i] += g;
    sums.d_d[i] += t * g;
    g_dot_d += g * span.d[i];
  }
  // t_k = t_in + k·(t_out − t_in)/(n − 1); δ = (t_out − t_in)/(n − 1).
  const double frac = static_cast<double>(k) * inv;
  sums.d_enter += (1 - frac) * g_dot_d;
  sums.d_exit += frac * g_dot_d;
  if (a.grad_delta_ts.present()) {
    const double g_step = load<S>(a.grad_delta_ts, slot);
    sums.d_enter -= inv * g_step;
    sums.d_exit += inv * g_step;
  }
}

/// Folds ∂L/∂t_in and ∂L/∂t_out into the gradients to o and d through the bounding slabs, and
/// writes ray r's requested gradients. A ray with fewer than 2 samples gets zeros.
template <class S>
FF_HOST_DEVICE FF_FORCE_INLINE void finish_box_gradient(const RayBoxArgs& a, int64_t r,
                                                        const RaySpan<S>& span,
                                                        BoxGradientSums sums) {
  if (span.n < 2) sums = BoxGradientSums{};
  // t_in = (s_a − o_a)/d_a on its bounding slab a: ∂/∂o_a = −1/d_a, ∂/∂d_a = −t_in/d_a. Each
  // axis's terms are formed and then selected: indexing by the slab's axis (or branching on it,
  // which nvcc turns back into an index) puts the arrays in local memory on CUDA.
  const bool sampled = span.n >= 2;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const bool entry = sampled && i == span.box.entry_axis;
    const bool exit = sampled && i == span.box.exit_axis;
    const double o_entered = sums.d_o[i] - sums.d_enter / span.d[i];
    const double d_entered = sums.d_d[i] - sums.d_enter * span.box.enter / span.d[i];
    sums.d_o[i] = entry ? o_entered : sums.d_o[i];
    sums.d_d[i] = entry ? d_entered : sums.d_d[i];
    const double o_exited = sums.d_o[i] - sums.d_exit / span.d[i];
    const double d_exited = sums.d_d[i] - sums.d_exit * span.box.exit / span.d[i];
    sums.d_o[i] = exit ? o_exited : sums.d_o[i];
    sums.d_d[i] = exit ? d_exited : sums.d_d[i];
  }
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    if (a.grad_origins.present()) store<S>(a.grad_origins, r, i, sums.d_o[i]);
    if (a.grad_directions.present()) store<S>(a.grad_directions, r, i, sums.d_d[i]);
  }
}

/// Gradients to o and d of ray r from its samples' points and steps (Note [ray-box gradient]).
template <class S>
FF_HOST_DEVICE void ray_box_gradient(const RayBoxArgs& a, int64_t r) {
  const RaySpan<S> span = ray_span<S>(a, r);
  const GradientSteps steps = gradient_steps(span);
  BoxGradientSums sums;
  for (int64_t k = 0; k < span.n; ++k) add_box_sample_gradient(a, r, span, steps, k, sums);
  finish_box_gradient(a, r, span, sums);
}

}  // namespace fieldfuse::detail::render
