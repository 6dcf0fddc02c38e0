// SPDX-License-Identifier: Apache-2.0
// The per-sample formulas of the render family (specs/render.md): emission-absorption compositing
// and its backward, line integrals, and parallel-beam ray-box sampling, written once as
// host+device functions for the CPU and CUDA drivers.
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
FF_HOST_DEVICE FF_FORCE_INLINE float log_one_plus(float x) { return log1pf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double log_one_plus(double x) { return log1p(x); }
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

/// Optical depths below this take the series in absorption_from_density.
constexpr double kSmallDepth = 0.125;

/// 1/(k + 1)! for k = 0 … 9, the coefficients of absorbed_per_depth.
#define FIELDFUSE_INVERSE_FACTORIALS                                                              \
  {                                                                                               \
    1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880, \
        1.0 / 3628800                                                                             \
  }
#if defined(__CUDACC__)
// On the GPU the coefficients live in the constant bank: a float64 immediate that is not a short
// literal costs two uniform moves per multiply-add, a constant-bank operand one uniform load, and
// the march issues them for every sample.
static __constant__ double kInverseFactorialsDevice[10] = FIELDFUSE_INVERSE_FACTORIALS;
#endif

/// (1 − e^{−x})/x for 0 ≤ x < kSmallDepth: its Taylor series Σ_k (−x)^k/(k+1)!, to the term
/// past which the remainder is below float64 rounding (x^10/11! < 3e-17 at x = 1/8). Ten fused
/// multiply-adds instead of an exp and an expm1: the march's per-sample cost in the common case.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T absorbed_per_depth(T x) {
#if defined(__CUDA_ARCH__)
  const double* inverse_factorials = kInverseFactorialsDevice;
#else
  constexpr double inverse_factorials[10] = FIELDFUSE_INVERSE_FACTORIALS;
#endif
  T p = T(inverse_factorials[9]);
  for (int k = 8; k >= 0; --k) p = T(inverse_factorials[k]) - x * p;
  return p;
}
#undef FIELDFUSE_INVERSE_FACTORIALS

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Absorption<T> absorption_from_density(T sigma, T delta) {
  const T depth = sigma * delta;
  if (depth >= T(0) && depth < T(kSmallDepth)) {
    // a = x·(1 − e^{−x})/x keeps its relative accuracy for tiny x, and 1 − a ≥ 0.88 is exact
    // to rounding.
    const T alpha = depth * absorbed_per_depth(depth);
    return {alpha, T(1) - alpha};
  }
  return {-exponential_minus_one(-depth), exponential(-depth)};
}

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Absorption<T> absorption_from_alpha(T alpha) {
  return {alpha, T(1) - alpha};
}

/// The optical depth ℓ = −log(1 − a) a sample of opacity a stands for (∞ at a = 1); the backward
/// rebuilds transmittances from sums of ℓ (Note [stable backward]).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T optical_depth_of_alpha(T alpha) {
  return -log_one_plus(-alpha);
}

/// Whether the ray stops after a sample that left it with transmittance `trans` (the terminating
/// sample is still composited and counted). A threshold of 0 stops only at T = 0 (opaque).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE bool terminates(T trans, T transmittance_thresh) {
  return trans <= transmittance_thresh;
}

// Note [stable backward]
// Let q_s = ∂L/∂w_s as seen through every output (q_s = Σ_c g_rgb,c·rgb_s,c + g_depth·t_s +
// g_opacity + g_w,s) and q_bg = Σ_c g_rgb,c·bg_c + g_T the value of the final transmittance, and
// measure transmittance relative to the ray's initial T_0: T'_i = T_i/T_0 = exp(−τ_i), with τ_i
// the optical depth in front of sample i (Σ_{k<i} ℓ_k, ℓ = σδ or −log(1 − a)). Then
//   ∂L/∂σ_i = T_0·δ_i·(T'_{i+1}·q_i − V_i),   ∂L/∂a_i = T_0·(T'_i·q_i − V_i/(1 − a_i)),
//   ∂L/∂T_0 = V_{−1},
// where V_i = Σ_{j>i} q_j·a_j·T'_j + q_bg·T'_final is what the samples behind i contribute: a
// suffix sum, built from the back, of terms that are each accurate to rounding, because every T'
// comes from a float64 sum of optical depths, never from a quotient or a difference of
// transmittances. Its error is then relative to T'_{i+1}, the size of the gradient itself. The
// spec's "C − C_≤i" form of the same suffix loses all its digits behind an opaque surface, and
// the recursion V ↦ a·q + (1 − a)·V with per-sample factors compounds their rounding over a long
// ray. T'_{i+1} = 0 past an opaque sample makes both terms of ∂L/∂σ exactly 0. For the alpha input
// at the last composited sample (the only place a can be 1, since T = 0 stops the ray at any
// threshold in [0, 1)), V/(1 − a) is T'_last·q_bg; elsewhere 1 − a > 0.

/// The value of one composited sample: q = Σ_c g_rgb,c·rgb_c + g_depth·t + g_opacity + g_weight.
/// (The caller sums the colour term over channels.)
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_value(T colour_term, T g_depth, T t, T g_opacity,
                                              T g_weight) {
  return colour_term + g_depth * t + g_opacity + g_weight;
}

/// ∂L/∂(σδ)/T_0 of sample i: T'_{i+1}·q_i − V_i; times δ for σ, times σ for δ.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T optical_depth_gradient(T trans_after, T q, T behind) {
  return trans_after * q - behind;
}

/// ∂L/∂a_i/T_0 for the alpha input: T'_i·q_i − V_i/(1 − a_i), finite at a = 1 (Note [stable
/// backward]).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T alpha_gradient(T trans_before, T q, T behind, T factor, bool last,
                                                T q_background) {
  return trans_before * q - (last ? trans_before * q_background : behind / factor);
}

/// ∂L/∂σ_i/T_0 for the density input, or ∂L/∂a_i/T_0 for the alpha input (whose δ is not read):
/// the two forms of Note [stable backward].
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sigma_gradient(bool alpha_input, T delta, T trans_before,
                                                T trans_after, T q, T behind, T factor, bool last,
                                                T q_background) {
  return alpha_input ? alpha_gradient(trans_before, q, behind, factor, last, q_background)
                     : delta * optical_depth_gradient(trans_after, q, behind);
}

/// ∂L/∂δ_i = T_0·σ_i·(T'_{i+1}·q_i − V_i), and 0 for the alpha input (no δ). σ = ∞ leaves
/// T'_{i+1} = 0 and V_i = 0: the gradient is 0, not ∞·0.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T delta_gradient(bool alpha_input, T t0, T sigma, T trans_after, T q,
                                                T behind) {
  const T g = optical_depth_gradient(trans_after, q, behind);
  return alpha_input || g == T(0) ? T(0) : t0 * sigma * g;
}

// ---- line integral -----------------------------------------------------------------------------

/// Sample s's term v_s,c·δ_s of channel c's integral P_c = Σ_s v_s,c·δ_s, rounded once in the
/// caller's compute type (the caller sums the terms in float64).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T line_integral_term(T value, T delta) {
  return value * delta;
}

/// ∂L/∂v_s,c = δ_s·g_c, with g_c the upstream gradient of P_c.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T line_integral_value_gradient(T delta, T g) {
  return delta * g;
}

/// Channel c's term v_s,c·g_c of ∂L/∂δ_s = Σ_c v_s,c·g_c.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T line_integral_delta_term(T value, T g) {
  return value * g;
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

// Note [ray-box sample count]
// ds is a distance in the box's units, not a step of the ray parameter t: a ray gets
// n = ceil(ℓ/ds) + 1 samples (at least 2) for the chord length ℓ = |d|·(t_exit − t_enter). A chord
// of the box [−1, 1]³ is at most its diagonal 2√3 long, so n <= ceil(2√3/ds) + 1 for every
// direction length, and that bound is the padded layout's capacity S: padded rows hold every
// sample the packed layout produces. (Counting steps of t instead made n grow as 1/|d|, and a
// direction of length 1/2 overflowed S.) In floating point |d|·(t_exit − t_enter) can exceed 2√3
// by a few ulps on a diagonal ray, so the count is capped at the bound, which exact arithmetic
// never reaches past; the cap keeps packed and padded identical by construction.

/// The most steps any ray takes through the box: ceil(2√3/ds) (Note [ray-box sample count]).
FF_HOST_DEVICE FF_FORCE_INLINE double max_box_steps(double ds) {
  return round_up(2.0 * 1.7320508075688772 / ds);
}

/// |d| without overflow or underflow of the squares (scaled by the largest component), each
/// product and sum rounded once on host and device alike, so CPU and CUDA counts agree.
FF_HOST_DEVICE FF_FORCE_INLINE double direction_length(const double (&d)[3]) {
  double m = magnitude(d[0]);
  m = magnitude(d[1]) > m ? magnitude(d[1]) : m;
  m = magnitude(d[2]) > m ? magnitude(d[2]) : m;
  if (m == 0.0 || !(m < INFINITY)) return m;
  double sum = 0.0;
  for (int i = 0; i < 3; ++i) {
    const double x = d[i] / m;
#if defined(__CUDA_ARCH__)
    sum = __dadd_rn(sum, __dmul_rn(x, x));  // no contraction into an fma: the host rounds twice
#else
    sum += x * x;
#endif
  }
  return m * sqrt(sum);
}

/// Samples of a chord of length `length` at step `ds`: ceil(length/ds) + 1, at least 2, and at
/// most max_steps + 1 (Note [ray-box sample count]).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE int64_t sample_count(T length, T ds, T max_steps) {
  T steps = round_up(length / ds);
  steps = steps > max_steps ? max_steps : steps;
  return steps < T(1) ? 2 : static_cast<int64_t>(steps) + 1;
}

/// The uniform step of n samples over a span: length/(n − 1).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T sample_step(T length, int64_t n) {
  return length / static_cast<T>(n - 1);
}

}  // namespace fieldfuse::detail::render
