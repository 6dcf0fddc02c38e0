// SPDX-License-Identifier: Apache-2.0
// Ray integration (the `render` family): emission-absorption volume rendering, X-ray line
// integrals and parallel-beam ray-box sampling, on packed rays.
//
// Contracts follow specs/render.md. Rays are packed: the samples of ray r occupy
// [offsets[r], offsets[r+1]) of every per-sample tensor; `offsets [R+1]` is int64 with
// offsets[0] = 0, offsets[R] = N and non-decreasing entries (empty rays allowed). Offsets are read
// on the device and validated there only as far as memory safety needs (a sample index outside
// [0, N) is clamped away); the Python layer checks them fully before the first call.
//
// Common to every function here:
// - dtypes: float32 and float64 on CPU and CUDA; float16 and bfloat16 per-sample inputs on CUDA,
//   accumulated in float64 along each ray (float32 and float64 inputs are too), outputs in the
//   input dtype.
// - layout: every tensor is read and written through its strides (no copies).
// - determinism: each ray is reduced in a fixed order (one CPU thread in sample order; one CUDA
//   warp with fixed scans); nothing uses atomics, so the same input gives the same bits on every
//   call on a device. CPU and CUDA agree to rounding.
// - outputs are fully written (never accumulated into); a gradient or output passed absent
//   (default-constructed TensorRef) is not computed, and neither is the work only it needs.
#pragma once

#include "fieldfuse/core.h"

namespace fieldfuse {

// ---------------------------------------------------------------------------------------------
// volume_render: front-to-back emission-absorption compositing with early termination
// ---------------------------------------------------------------------------------------------
// Per ray, with T = 1 (or prefix_transmittance[r]):
//   a = 1 − exp(−σ·δ) (alpha_input: a = α);  w = a·T;  rgb += w·rgb_s;  depth += w·t_s;
//   opacity += w;  weights[s] = w;  T ← T·(1 − a);  stop after the first sample with T <= thresh
// (that sample is composited and counted in total_samples); a ray whose starting T is already
// <= thresh composites nothing (so chunked marching equals one pass). Then rgb += T·background.
// Weights past termination are 0. An empty ray gives rgb = T·background, zero depth and opacity.
// A NaN sample poisons only what depends on it: the ray's outputs, its gradients to σ, δ, α and
// the prefix, but not the gradients to the colours and depths in front of it (Note [NaN samples]
// in src/render/render_ray.h).

struct VolumeRenderInputs {
  TensorRef sigmas;          ///< [N] densities, or opacities in [0, 1] with `alpha_input`
  bool alpha_input = false;  ///< sigmas holds α; delta_ts is then unused and may be absent
  TensorRef rgbs;            ///< [N, C], C >= 1
  TensorRef delta_ts;        ///< [N]
  TensorRef ts;              ///< [N] sample depths; needed only for the depth output
  TensorRef offsets;         ///< [R + 1] int64
  double transmittance_thresh = 0.0;  ///< in [0, 1)
  TensorRef background;               ///< absent, [C] or [R, C]
  TensorRef prefix_transmittance;     ///< absent or [R] (chunked marching)
};

/// Outputs; `rgb` is required, the others are computed only when present.
struct VolumeRenderOutputs {
  TensorRef rgb;            ///< [R, C]
  TensorRef opacity;        ///< [R] Σ w
  TensorRef depth;          ///< [R] Σ w·t (not divided by the opacity)
  TensorRef weights;        ///< [N]
  TensorRef total_samples;  ///< [R] int64
  TensorRef transmittance;  ///< [R] the final T
  /// [R, 4] float64: what the backward needs of the march (Note [ray state] in
  /// src/render/render_ray.h). Hand it to volume_render_backward with the same inputs and it
  /// skips re-marching every ray.
  TensorRef ray_state;
};

void volume_render_forward(const VolumeRenderInputs& inputs, const VolumeRenderOutputs& outputs,
                           Stream stream = {});

/// Upstream gradients (absent = zero) and the gradients to compute (absent = skipped).
/// The backward is exact and stable on long opaque rays (see Note [stable backward] in
/// src/render/render_math.h); samples past termination get exactly zero gradient.
struct VolumeRenderGradients {
  TensorRef grad_rgb;            ///< [R, C] (required)
  TensorRef grad_opacity;        ///< [R]
  TensorRef grad_depth;          ///< [R]
  TensorRef grad_weights;        ///< [N]
  TensorRef grad_transmittance;  ///< [R]
  /// [R, 4] float64 from the forward with these same inputs, or absent (the backward then
  /// re-marches the rays to find it).
  TensorRef ray_state;

  TensorRef grad_sigmas;      ///< [N] (∂L/∂α with alpha_input)
  TensorRef grad_rgbs;        ///< [N, C]
  TensorRef grad_delta_ts;    ///< [N]
  TensorRef grad_ts;          ///< [N]
  TensorRef grad_background;  ///< [R, C] per ray (sum over rays for a [C] background); float32
                              ///< is accepted for 16-bit inputs, so that sum rounds only once
  TensorRef grad_prefix_transmittance;  ///< [R]
};

void volume_render_backward(const VolumeRenderInputs& inputs, const VolumeRenderGradients& grads,
                            Stream stream = {});

// ---------------------------------------------------------------------------------------------
// line_integral: P_r = Σ_{s ∈ r} v_s·δ_s  (X-ray projection)
// ---------------------------------------------------------------------------------------------

/// `values [N]` or `[N, C]`, `delta_ts [N]`, `out [R]` or `[R, C]` (matching values).
void line_integral_forward(const TensorRef& values, const TensorRef& delta_ts,
                           const TensorRef& offsets, const TensorRef& out, Stream stream = {});

/// grad_values[s] = δ_s·grad_out[r], grad_delta_ts[s] = Σ_c v_s,c·grad_out[r, c]; either may be
/// absent.
void line_integral_backward(const TensorRef& values, const TensorRef& delta_ts,
                            const TensorRef& offsets, const TensorRef& grad_out,
                            const TensorRef& grad_values, const TensorRef& grad_delta_ts,
                            Stream stream = {});

// ---------------------------------------------------------------------------------------------
// ray_box_samples: uniform samples of rays through the box [−1, 1]³
// ---------------------------------------------------------------------------------------------
// For ray r = o + t·d: the slab intersection [t_in, t_out] (parallel within 1e-8 of a face: inside
// only if |o| <= 1 on that axis; touching an edge or a corner is a miss), n = ceil(ℓ/ds) + 1
// (>= 2) samples for the chord length ℓ = |d|·(t_out − t_in) (ds is a distance, so n does not
// depend on |d|), at t_k = t_in + k·δ with δ = (t_out − t_in)/(n − 1) (a step of t: the distance
// between samples for unit d), points o + t_k·d. A ray that misses has n = 0. Points and δ are
// differentiable with respect to o and d (t_in, t_out and δ included; n is piecewise constant).
//
// Layouts: packed (`offsets [R+1]`, the exclusive sum of `ray_box_samples_counts`; points [N, 3],
// delta_ts [N]) or padded (points [R, S, 3], delta_ts [R, S], `valid [R, S]` bool) with the
// capacity S = ceil(2√3/ds) + 1, which holds every ray for any direction length (a chord of the
// box is at most its diagonal; Note [ray-box sample count] in src/render/render_math.h). Padding
// slots are written as zeros. ds must be finite, > 0, and small counts only: R·S·3 must fit in
// int64 (else ValueError naming ds).

/// The padded capacity S = ceil(2√3/ds) + 1 for a step (errors named ray_box_samples_padded).
int64_t ray_box_samples_padded_capacity(double ds);

/// counts[r] = n of ray r (int64): what ray_box_samples_forward writes for ray r.
void ray_box_samples_counts(const TensorRef& origins, const TensorRef& directions, double ds,
                            const TensorRef& counts, Stream stream = {});

/// The packed samples: `offsets` is the exclusive sum of ray_box_samples_counts.
void ray_box_samples_forward(const TensorRef& origins, const TensorRef& directions, double ds,
                             const TensorRef& offsets, const TensorRef& points,
                             const TensorRef& delta_ts, Stream stream = {});

/// Gradients to origins and directions (either may be absent) from grad_points and, if present,
/// grad_delta_ts, in the packed layout.
void ray_box_samples_backward(const TensorRef& origins, const TensorRef& directions, double ds,
                              const TensorRef& offsets, const TensorRef& grad_points,
                              const TensorRef& grad_delta_ts, const TensorRef& grad_origins,
                              const TensorRef& grad_directions, Stream stream = {});

/// The padded samples and their mask ([R, S] rows with S = ray_box_samples_padded_capacity(ds)).
void ray_box_samples_padded_forward(const TensorRef& origins, const TensorRef& directions,
                                    double ds, const TensorRef& points, const TensorRef& delta_ts,
                                    const TensorRef& valid, Stream stream = {});

/// ray_box_samples_backward in the padded layout.
void ray_box_samples_padded_backward(const TensorRef& origins, const TensorRef& directions,
                                     double ds, const TensorRef& grad_points,
                                     const TensorRef& grad_delta_ts, const TensorRef& grad_origins,
                                     const TensorRef& grad_directions, Stream stream = {});

}  // namespace fieldfuse
