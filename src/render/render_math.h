// SPDX-License-Identifier: Apache-2.0
// The per-sample formulas of the render family (specs/render.md): emission-absorption compositing
// and its backward, and parallel-beam ray-box sampling, written once as host+device functions for
// the CPU and CUDA drivers.
#pragma once

#include <cmath>
#include <cstdint>

// Relative, as in kplanes_math.h, so the GoogleTest target can include this header directly.
#include "core/macros.h"

namespace fieldfuse::detail::render {

// Note [compositing]
// A ray's samples are composited front to back with the transmittance T (1, or the ray's prefix
// transmittance, before the first sample):
//   a_s = 1 − exp(−σ_s δ_s),  w_s = a_s·T,  T ← T·(1 − a_s),
// and the ray stops after the first sample whose updated T is ≤ the threshold (that sample is
// composited and counted); a ray that starts at or below the threshold composites nothing. The
// factor (1 − a_s) is formed as exp(−σ_s δ_s) and a_s as −expm1(−σ_s δ_s), not by subtracting from
// 1: for small optical depths 1 − exp(x) loses all digits of a_s, and the two are each accurate to
// rounding this way. σ = ∞ gives a = 1 and stops the ray. The alpha-input variant takes a_s
// directly (factor 1 − a_s, exact for a = 1).

// Float and double overloads, so nvcc and g++ both pick the type-exact function.
FF_HOST_DEVICE FF_FORCE_INLINE float exponential(float x) { return expf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double exponential(double x) { return exp(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float exponential_minus_one(float x) { return expm1f(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double exponential_minus_one(double x) { return expm1(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float round_up(float x) { return ceilf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double round_up(double x) { return ceil(x); }
FF_HOST_DEVICE FF_FORCE_INLINE float magnitude(float x) { return fabsf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double magnitude(double x) { return fabs(x); }

/// One sample's opacity a and transmittance factor 1 − a.
template <class T>
struct Absorption {
  T alpha;   ///< a_s
  T factor;  ///< 1 − a_s
};

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Absorption<T> absorption_from_density(T sigma, T delta) {
  const T depth = sigma * delta;
  return {-exponential_minus_one(-depth), exponential(-depth)};
}

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Absorption<T> absorption_from_alpha(T alpha) {
  return {alpha, T(1) - alpha};
}

/// Whether the ray stops after a sample that left it with transmittance `trans` (the terminating
/// sample is still composited and counted). A threshold of 0 stops only at T = 0 (opaque).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE bool terminates(T trans, T threshold) {
  return trans <= threshold;
}

// Note [stable backward]
// With q_s = ∂L/∂w_s as seen through every output (q_s = Σ_c g_rgb,c·rgb_s,c + g_depth·t_s +
// g_opacity + g_w,s) and q_bg = Σ_c g_rgb,c·bg_c the value of the final transmittance,
//   ∂L/∂σ_i = δ_i·T_{i+1}·(q_i − U_i),   ∂L/∂a_i = T_i·(q_i − U_i)   (alpha input),
// where U_i is the loss value of everything behind sample i seen with a fresh transmittance of 1:
//   U_i = Σ_{j>i} q_j·a_j·Π_{i<k<j}(1 − a_k) + q_bg·Π_{k>i}(1 − a_k),
// i.e. back-to-front compositing of q: U_last = q_bg, U_{i−1} = a_i·q_i + (1 − a_i)·U_i. Every
// step is a convex combination, so U carries no cancellation; the spec's "C − C_≤i" form of the
// same suffix sum loses all its digits behind an opaque surface. T_{i+1} multiplies the result, so
// it is exactly zero past an opaque sample and for samples past termination (which are excluded).
// ∂L/∂T_prefix = U_{−1} (the whole ray seen with a fresh transmittance), from the same recursion.
// The final-transmittance output and a background enter through q_bg = Σ_c g_rgb,c·bg_c + g_T.

/// The value of one composited sample: q = Σ_c g_rgb,c·rgb_c + g_depth·t + g_opacity + g_weight.
/// (The caller sums the colour term over channels.)
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_value(T colour_term, T g_depth, T t, T g_opacity,
                                              T g_weight) {
  return colour_term + g_depth * t + g_opacity + g_weight;
}

/// U_{i−1} from U_i and sample i (Note [stable backward]).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T behind_value(const Absorption<T>& a, T q, T behind) {
  return a.alpha * q + a.factor * behind;
}

/// ∂L/∂(σδ) of sample i: T_{i+1}·(q_i − U_i); times δ for σ, times σ for δ.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T optical_depth_gradient(T trans_after, T q, T behind) {
  return trans_after * (q - behind);
}

/// ∂L/∂a_i for the alpha input: T_i·(q_i − U_i), finite at a = 1.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T alpha_gradient(T trans_before, T q, T behind) {
  return trans_before * (q - behind);
}

// ---- parallel-beam ray-box sampling ------------------------------------------------------------

/// Rays closer than this to parallel with a slab's faces are treated as parallel (specs/render.md).
constexpr double kParallelEps = 1e-8;

/// Where a ray o + t·d is inside the box [−1, 1]³: [t_enter, t_exit], or `hit = false`.
template <class T>
struct BoxSpan {
  T enter, exit;
  bool hit;
  int entry_axis, exit_axis;  ///< the slabs that set t_enter and t_exit (the first on ties)
};

/// Slab method. An axis with |d| <= eps constrains nothing if |o| ≤ 1 and misses otherwise. A ray
/// that only touches the box (t_exit ≤ t_enter: a corner or an edge grazed from outside) misses,
/// and so does a direction within eps of zero on every axis.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE BoxSpan<T> intersect_box(const T (&o)[3], const T (&d)[3]) {
  T enter = -static_cast<T>(INFINITY), exit = static_cast<T>(INFINITY);
  bool inside = true;
  int entry_axis = -1, exit_axis = -1;
  for (int axis = 0; axis < 3; ++axis) {
    const T oa = o[axis], da = d[axis];
    if (magnitude(da) <= T(kParallelEps)) {
      inside = inside && magnitude(oa) <= T(1);
      continue;
    }
    const T t1 = (T(-1) - oa) / da, t2 = (T(1) - oa) / da;
    const T near = t1 < t2 ? t1 : t2, far = t1 < t2 ? t2 : t1;
    if (near > enter) enter = near, entry_axis = axis;
    if (far < exit) exit = far, exit_axis = axis;
  }
  // A direction parallel to every face (zero, or below eps on all axes) bounds nothing: a miss.
  return {enter, exit, inside && entry_axis >= 0 && exit > enter, entry_axis, exit_axis};
}

/// Samples of a span of length `length` at step `ds`: ceil(length/ds) + 1, at least 2.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE int64_t sample_count(T length, T ds) {
  const T steps = round_up(length / ds);
  return steps < T(1) ? 2 : static_cast<int64_t>(steps) + 1;
}

/// The uniform step of n samples over a span: length/(n − 1).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_step(T length, int64_t n) {
  return length / static_cast<T>(n - 1);
}

/// Detector coordinate of pixel index k of an n-pixel axis: 2k/(n − 1) − 1 (0 for n = 1).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T detector_coordinate(int64_t k, int64_t n) {
  return n > 1 ? T(2) * static_cast<T>(k) / static_cast<T>(n - 1) - T(1) : T(0);
}

}  // namespace fieldfuse::detail::render
