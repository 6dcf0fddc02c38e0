// SPDX-License-Identifier: Apache-2.0
// The K-Planes reconstruction's elementwise glue, written once: a counter-based RNG, poses and
// their derivatives, quaternion rotations, rays, densities, the loss terms and their gradients.
// Each stage is a functor over an index range, run by a CPU loop and by a CUDA kernel alike.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "mlp/mlp_math.h"

namespace fieldfuse::detail::tomo {

// ---------------------------------------------------------------------------------------------
// Counter-based random numbers: a value is a pure function of (seed, purpose, counter, index),
// so CPU and CUDA (and a resumed run) draw the same pixels for the same seed and step.
// ---------------------------------------------------------------------------------------------

/// The splitmix64 finaliser: a bijection of 64-bit words with good avalanche.
FF_HOST_DEVICE FF_FORCE_INLINE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// What a draw is for, so the streams of different uses never coincide.
enum Purpose : uint64_t { kDrawPixel = 1, kDrawTapRay = 2, kDrawTapSample = 3, kDrawInit = 4 };

FF_HOST_DEVICE FF_FORCE_INLINE uint64_t random_bits(uint64_t seed, uint64_t purpose,
                                                    uint64_t counter, uint64_t index) {
  // Chained mixing: each word enters after the previous ones are diffused.
  uint64_t z = mix64(seed + 0x9e3779b97f4a7c15ULL * (purpose + 1));
  z = mix64(z ^ (counter + 0x632be59bd9b4e019ULL));
  return mix64(z ^ (index + 0x85ebca77c2b2ae63ULL));
}

/// An index in [0, n) for n < 2^32 (multiply-high of the top 32 bits: no modulo bias worth
/// speaking of, no division).
FF_HOST_DEVICE FF_FORCE_INLINE int64_t random_index(uint64_t bits, int64_t n) {
  return static_cast<int64_t>(((bits >> 32) * static_cast<uint64_t>(n)) >> 32);
}

/// Uniform in [0, 1) with 53 random bits.
FF_HOST_DEVICE FF_FORCE_INLINE double random_unit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// ---------------------------------------------------------------------------------------------
// Poses: R = Rz(−z1)·Rx(tilt)·Rz(−z3) (degrees), with ∂R/∂z1 and ∂R/∂z3; tilt_rotation (tomo.h)
// is this function on the host.
// ---------------------------------------------------------------------------------------------

constexpr double kRadiansPerDegree = 3.14159265358979323846 / 180.0;

using mlp::cos_of;
using mlp::sin_of;
FF_HOST_DEVICE FF_FORCE_INLINE float root(float x) { return sqrtf(x); }
FF_HOST_DEVICE FF_FORCE_INLINE double root(double x) { return sqrt(x); }

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void mul3(const T* a, const T* b, T* out) {
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      out[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
}

/// Rz(a) = [[c, −s, 0], [s, c, 0], [0, 0, 1]] and, in `d`, dRz/da (per radian).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void rotation_z(T radians, T* r, T* d) {
  const T c = cos_of(radians), s = sin_of(radians);
  const T rv[9] = {c, -s, T(0), s, c, T(0), T(0), T(0), T(1)};
  const T dv[9] = {-s, -c, T(0), c, -s, T(0), T(0), T(0), T(0)};
  for (int k = 0; k < 9; ++k) {
    r[k] = rv[k];
    d[k] = dv[k];
  }
}

/// r = the pose; dz1, dz3 = its derivatives per degree of z1 and z3.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void pose_rotation(T tilt_deg, T z1_deg, T z3_deg, T* r, T* dz1,
                                                  T* dz3) {
  const T k = T(kRadiansPerDegree);
  T a[9], da[9], c[9], dc[9], left[9], dleft[9];
  rotation_z(-z1_deg * k, a, da);
  rotation_z(-z3_deg * k, c, dc);
  const T ct = cos_of(tilt_deg * k), st = sin_of(tilt_deg * k);
  const T b[9] = {T(1), T(0), T(0), T(0), ct, -st, T(0), st, ct};
  mul3(a, b, left);
  mul3(left, c, r);
  mul3(da, b, dleft);
  mul3(dleft, c, dz1);
  mul3(left, dc, dz3);
  // d/dz of Rz(−z·k) is −k·Rz′.
  for (int i = 0; i < 9; ++i) {
    dz1[i] *= -k;
    dz3[i] *= -k;
  }
}

// ---------------------------------------------------------------------------------------------
// Field rotations from quaternions (w, x, y, z), normalised first (nn/rotations.py
// quaternion_to_rotation), and the exact vector-Jacobian product.
// ---------------------------------------------------------------------------------------------

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void quaternion_rotation(const T* q_raw, T* r) {
  const T norm =
      root(q_raw[0] * q_raw[0] + q_raw[1] * q_raw[1] + q_raw[2] * q_raw[2] + q_raw[3] * q_raw[3]);
  const T w = q_raw[0] / norm, x = q_raw[1] / norm, y = q_raw[2] / norm, z = q_raw[3] / norm;
  r[0] = T(1) - T(2) * (y * y + z * z);
  r[1] = T(2) * (x * y - w * z);
  r[2] = T(2) * (x * z + w * y);
  r[3] = T(2) * (x * y + w * z);
  r[4] = T(1) - T(2) * (x * x + z * z);
  r[5] = T(2) * (y * z - w * x);
  r[6] = T(2) * (x * z - w * y);
  r[7] = T(2) * (y * z + w * x);
  r[8] = T(1) - T(2) * (x * x + y * y);
}

/// grad_q = ∂L/∂q_raw from g = ∂L/∂R: through the matrix entries to the unit quaternion q̂, then
/// through the normalisation (the projection (I − q̂q̂ᵀ)/|q|, tangent to the sphere).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void quaternion_rotation_backward(const T* q_raw, const T* g,
                                                                 T* grad_q) {
  const T norm =
      root(q_raw[0] * q_raw[0] + q_raw[1] * q_raw[1] + q_raw[2] * q_raw[2] + q_raw[3] * q_raw[3]);
  const T w = q_raw[0] / norm, x = q_raw[1] / norm, y = q_raw[2] / norm, z = q_raw[3] / norm;
  T gq[4];
  gq[0] = T(2) * (-z * g[1] + y * g[2] + z * g[3] - x * g[5] - y * g[6] + x * g[7]);
  gq[1] = T(2) * (y * g[1] + z * g[2] + y * g[3] - T(2) * x * g[4] - w * g[5] + z * g[6] +
                  w * g[7] - T(2) * x * g[8]);
  gq[2] = T(2) * (-T(2) * y * g[0] + x * g[1] + w * g[2] + x * g[3] + z * g[5] - w * g[6] +
                  z * g[7] - T(2) * y * g[8]);
  gq[3] = T(2) * (-T(2) * z * g[0] - w * g[1] + x * g[2] + w * g[3] - T(2) * z * g[4] + y * g[5] +
                  x * g[6] + y * g[7]);
  const T dot = w * gq[0] + x * gq[1] + y * gq[2] + z * gq[3];
  const T unit[4] = {w, x, y, z};
  for (int i = 0; i < 4; ++i) grad_q[i] = (gq[i] - unit[i] * dot) / norm;
}

// ---------------------------------------------------------------------------------------------
// The stages. Pointers are contiguous buffers the reconstruction owns; T is float or double.
// ---------------------------------------------------------------------------------------------

/// Indices [0, n): pose m (rotation, ∂/∂z1, ∂/∂z3, each [n, 9]); [n, n + T): field rotation t.
template <class T>
struct PoseStage {
  int64_t projections = 0, tilts = 0;
  const T* tilt = nullptr;         ///< [n] degrees
  const T* z1 = nullptr;           ///< [n]
  const T* z3 = nullptr;           ///< [n]
  const T* quaternions = nullptr;  ///< [T, 4]
  T* pose = nullptr;               ///< [n, 9]
  T* pose_dz1 = nullptr;           ///< [n, 9]
  T* pose_dz3 = nullptr;           ///< [n, 9]
  T* field_rotations = nullptr;    ///< [T, 9]

  FF_HOST_DEVICE void operator()(int64_t i) const {
    if (i < projections) {
      pose_rotation(tilt[i], z1[i], z3[i], pose + 9 * i, pose_dz1 + 9 * i, pose_dz3 + 9 * i);
    } else {
      const int64_t t = i - projections;
      quaternion_rotation(quaternions + 4 * t, field_rotations + 9 * t);
    }
  }
};

/// The detector position (u − s_u, v − s_v) of ray r's pixel and its projection.
template <class T>
struct RayPixel {
  int64_t m, pixel;
  T local_u, local_v;
};

/// The pixel draw of a step: ray r samples projection r mod n at a pixel drawn from
/// (seed, step, r). The ray stage and the pose gradient draw the same pixels from it.
template <class T>
struct PixelDraw {
  int64_t projections = 0, height = 0, width = 0;
  uint64_t seed = 0;
  const int64_t* step = nullptr;  ///< the optimiser's counter: this step's draw
  const T* shifts = nullptr;      ///< [n, 2]

  FF_HOST_DEVICE FF_FORCE_INLINE RayPixel<T> operator()(int64_t r) const {
    RayPixel<T> p;
    p.m = r % projections;
    p.pixel = random_index(
        random_bits(seed, kDrawPixel, static_cast<uint64_t>(step[0]), static_cast<uint64_t>(r)),
        height * width);
    const int64_t i = p.pixel / width, j = p.pixel % width;
    const T u = T(-1) + T(2 * j + 1) / T(width), v = T(-1) + T(2 * i + 1) / T(height);
    p.local_u = u - shifts[2 * p.m];
    p.local_v = v - shifts[2 * p.m + 1];
    return p;
  }
};

/// Rays [0, R): origin R_m·(u − s_u, v − s_v, 0), direction R_m·e_z, target.
template <class T>
struct RayStage {
  PixelDraw<T> draw;
  const T* pose = nullptr;   ///< [n, 9]
  const T* stack = nullptr;  ///< [n, H, W] normalised
  T* origins = nullptr;      ///< [R, 3]
  T* directions = nullptr;   ///< [R, 3]
  T* targets = nullptr;      ///< [R]

  FF_HOST_DEVICE void operator()(int64_t r) const {
    const RayPixel<T> p = draw(r);
    const T* rot = pose + 9 * p.m;
    for (int a = 0; a < 3; ++a) {
      origins[3 * r + a] = rot[3 * a] * p.local_u + rot[3 * a + 1] * p.local_v;
      directions[3 * r + a] = rot[3 * a + 2];
    }
    targets[r] = stack[p.m * draw.height * draw.width + p.pixel];
  }
};

/// The valid samples of a padded row: they are a prefix of its `capacity` slots, so a binary
/// search finds their count in log2(S) loads (a linear scan costs up to S dependent loads).
FF_HOST_DEVICE FF_FORCE_INLINE int64_t valid_prefix(const bool* row, int64_t capacity) {
  int64_t low = 0, high = capacity;
  while (low < high) {
    const int64_t mid = (low + high) / 2;
    if (row[mid]) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

/// Tap points [0, N): a valid sample of a drawn ray (valid samples fill a padded row's front),
/// or, for a ray that misses the box, a uniform point of the box. Detached: no pose gradient.
template <class T>
struct TapStage {
  int64_t rays = 0, capacity = 0;  ///< R, S
  uint64_t seed = 0;
  const int64_t* step = nullptr;
  const T* points = nullptr;    ///< [R, S, 3]
  const bool* valid = nullptr;  ///< [R, S]
  T* tap_points = nullptr;      ///< [N, 3]

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const uint64_t counter = static_cast<uint64_t>(step[0]);
    const int64_t r = random_index(random_bits(seed, kDrawTapRay, counter, i), rays);
    const int64_t count = valid_prefix(valid + r * capacity, capacity);
    const uint64_t bits = random_bits(seed, kDrawTapSample, counter, i);
    if (count > 0) {
      const T* p = points + 3 * (r * capacity + random_index(bits, count));
      for (int a = 0; a < 3; ++a) tap_points[3 * i + a] = p[a];
    } else {
      for (int a = 0; a < 3; ++a) {
        tap_points[3 * i + a] = T(2 * random_unit(mix64(bits + a)) - 1);
      }
    }
  }
};

/// The density ρ = softplus(x − 1) (specs/tomography.md) and its derivative.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T density(T raw) {
  return mlp::Softplus<T>{T(1)}.value(raw - T(1));
}
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T density_derivative(T raw) {
  return mlp::Softplus<T>{T(1)}.d1(raw - T(1));
}

/// Padding slot (r, s) of the padded samples takes the position of the ray's valid sample
/// s mod count (count: the ray's valid samples, a prefix of its row). The K-Planes ops skip the
/// padding (their `valid` mask), but the deterministic plane gradient still sorts every position
/// by cell: ray_box_samples_padded leaves padding at the origin, and ~40 % of all samples in one
/// plane cell made that gather one run of 400 000 entries (145 ms a step at the reference
/// configuration). The step runs this stage for the deterministic gradient only.
template <class T>
struct SpreadPaddingStage {
  int64_t capacity = 0;  ///< S
  const bool* valid = nullptr;
  T* points = nullptr;  ///< [R, S, 3]

  FF_HOST_DEVICE void operator()(int64_t i) const {
    if (valid[i]) return;
    const int64_t row = i - i % capacity;
    const int64_t low = valid_prefix(valid + row, capacity);
    if (low == 0) return;  // the ray misses the box: nothing to copy
    const int64_t source = row + (i - row) % low;
    for (int a = 0; a < 3; ++a) points[3 * i + a] = points[3 * source + a];
  }
};

/// Samples [0, R·S) masked by `valid`, then [R·S, R·S + 4N) the taps (unmasked).
template <class T>
struct DensityStage {
  int64_t ray_samples = 0;
  const T* raw = nullptr;
  const bool* valid = nullptr;
  T* rho = nullptr;

  FF_HOST_DEVICE void operator()(int64_t s) const {
    rho[s] = (s >= ray_samples || valid[s]) ? density(raw[s]) : T(0);
  }
};

/// Volume TV of one tap point: sqrt(Σ_i ((ρ_i − ρ_0)/h)²) with ρ_i = rho4[i·stride], and (when
/// `grad4` is not null) its gradient to ρ_0..ρ_3 times `scale` into grad4[0..3] (0 where every
/// difference is 0: the subgradient of nn/losses.py volume_tv_from_taps).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T tap_tv(const T* rho4, int64_t stride, T h, T scale, T* grad4) {
  T diff[3], sum = T(0);
  for (int i = 0; i < 3; ++i) {
    diff[i] = (rho4[(i + 1) * stride] - rho4[0]) / h;
    sum += diff[i] * diff[i];
  }
  const T norm = root(sum);
  if (grad4 != nullptr) {
    T g0 = T(0);
    for (int i = 0; i < 3; ++i) {
      const T g = norm > T(0) ? scale * diff[i] / (norm * h) : T(0);
      grad4[i + 1] = g;
      g0 -= g;
    }
    grad4[0] = g0;
  }
  return norm;
}

/// Per-item loss terms, `terms [R + N, 3]`: ray r (pred − target, Σρ over its valid samples,
/// their count); tap point n at row R + n (its TV norm, 0, 0).
constexpr int64_t kTermColumns = 3;

template <class T>
struct TermStage {
  int64_t rays = 0, capacity = 0, taps = 0;
  T h = T(1);
  const T* pred = nullptr;
  const T* targets = nullptr;
  const T* rho = nullptr;       ///< [R·S + 4N]
  const bool* valid = nullptr;  ///< [R, S]
  bool sum_density = true;      ///< Σρ of the ray (only the sparsity term needs it)
  T* terms = nullptr;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    T* row = terms + kTermColumns * i;
    if (i < rays) {
      // The same order as a masked loop over the row, without a branch per slot, so the loads
      // can be in flight together.
      const int64_t count = valid_prefix(valid + i * capacity, capacity);
      const T* samples = rho + i * capacity;
      T sum = T(0);
      FF_DEVICE_UNROLL(8)
      for (int64_t s = 0; s < (sum_density ? count : 0); ++s) sum += samples[s];
      row[0] = pred[i] - targets[i];
      row[1] = sum;
      row[2] = T(count);
    } else {
      row[0] = tap_tv(rho + rays * capacity + (i - rays), taps, h, T(0), static_cast<T*>(nullptr));
      row[1] = T(0);
      row[2] = T(0);
    }
  }
};

/// Adds item i's share to the float64 loss sums `acc[kNumSums]` (the CPU loop and the CUDA block
/// call it in their fixed orders).
enum Sum : int { kSumSquares = 0, kSumRho = 1, kSumCount = 2, kSumTV = 3, kNumSums = 4 };

template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void accumulate_terms(const T* terms, int64_t i, int64_t rays,
                                                     double* acc) {
  const T* row = terms + kTermColumns * i;
  if (i < rays) {
    acc[kSumSquares] += double(row[0]) * double(row[0]);
    acc[kSumRho] += double(row[1]);
    acc[kSumCount] += double(row[2]);
  } else {
    acc[kSumTV] += double(row[0]);
  }
}

/// What the loss reduction needs besides the terms.
struct LossWeights {
  int64_t rays = 0, taps = 0, levels = 0;
  double tv_volume = 0, tv_plane = 0, sparsity = 0;
};

/// Scalars the reduction writes (float64): the loss, then what the gradient seeds need.
enum Scalar : int { kLoss = 0, kValidCount = 1, kNumScalars = 2 };

/// The loss from the sums and the plane-TV level terms (each term only when its weight is > 0).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void finish_loss(const double* acc, const T* plane_tv,
                                                const LossWeights& w, double* scalars, T* loss) {
  double total = acc[kSumSquares] / double(w.rays);
  if (w.tv_volume > 0 && w.taps > 0) total += w.tv_volume * acc[kSumTV] / double(w.taps);
  if (w.sparsity > 0 && acc[kSumCount] > 0) total += w.sparsity * acc[kSumRho] / acc[kSumCount];
  if (w.tv_plane > 0) {
    for (int64_t l = 0; l < w.levels; ++l) total += w.tv_plane * double(plane_tv[l]);
  }
  scalars[kLoss] = total;
  scalars[kValidCount] = acc[kSumCount];
  *loss = T(total);
}

/// Seeds [0, R·S): ∂L/∂raw of ray samples from the line integral's ∂/∂ρ plus sparsity;
/// [R·S, R·S + N): the four taps of point n from the volume TV.
template <class T>
struct SeedStage {
  int64_t ray_samples = 0, taps = 0;
  T h = T(1), tv_scale = T(0), sparsity = T(0);
  const double* scalars = nullptr;
  const T* raw = nullptr;
  const T* rho = nullptr;
  const bool* valid = nullptr;
  const T* grad_values = nullptr;  ///< line_integral_backward's ∂L/∂ρ [R·S]
  T* grad_raw = nullptr;           ///< [R·S + 4N]

  FF_HOST_DEVICE void operator()(int64_t s) const {
    if (s < ray_samples) {
      T g = T(0);
      if (valid[s]) {
        const T count = T(scalars[kValidCount]);
        g = (grad_values[s] + (count > T(0) ? sparsity / count : T(0))) *
            density_derivative(raw[s]);
      }
      grad_raw[s] = g;
      return;
    }
    const int64_t n = s - ray_samples;
    const int64_t base = ray_samples + n;
    T g4[4];
    tap_tv(rho + base, taps, h, tv_scale, g4);
    for (int k = 0; k < 4; ++k) {
      grad_raw[base + k * taps] = g4[k] * density_derivative(raw[base + k * taps]);
    }
  }
};

/// ∂L/∂pred = 2(pred − target)/R.
template <class T>
struct ResidualSeedStage {
  int64_t rays = 0;
  const T* terms = nullptr;
  T* grad_pred = nullptr;
  FF_HOST_DEVICE void operator()(int64_t r) const {
    grad_pred[r] = T(2) * terms[kTermColumns * r] / T(rays);
  }
};

/// Field rotation t: ∂L/∂q_t from ∂L/∂R_t.
template <class T>
struct RotationBackwardStage {
  const T* quaternions = nullptr;
  const T* grad_rotations = nullptr;
  T* grad_quaternions = nullptr;
  FF_HOST_DEVICE void operator()(int64_t t) const {
    quaternion_rotation_backward(quaternions + 4 * t, grad_rotations + 9 * t,
                                 grad_quaternions + 4 * t);
  }
};

/// Pose gradients, in two stages (one thread per projection walking its ~R/n rays, each drawing
/// its pixel again, took 31 µs of the 1.6 ms reference step on an H100; a thread per ray takes 2).
/// o = R·l with l = (u − s_u, v − s_v, 0) and d = R·e_z give ∂L/∂R = g_o·lᵀ + g_d·e_zᵀ and
/// ∂L/∂s = −(R_{:,0}·g_o, R_{:,1}·g_o).
constexpr int kPoseTerms = 4;  ///< ∂L/∂z1, ∂L/∂z3, ∂L/∂s_u, ∂L/∂s_v

/// Ray r's share of its projection's pose gradient, into terms[4r .. 4r + 3].
template <class T>
struct RayPoseTermStage {
  PixelDraw<T> draw;
  const T* pose = nullptr;
  const T* pose_dz1 = nullptr;
  const T* pose_dz3 = nullptr;
  const T* grad_origins = nullptr;     ///< [R, 3]
  const T* grad_directions = nullptr;  ///< [R, 3]
  T* terms = nullptr;                  ///< [R, kPoseTerms]

  FF_HOST_DEVICE void operator()(int64_t r) const {
    const RayPixel<T> p = draw(r);
    const T* rot = pose + 9 * p.m;
    const T* dz1 = pose_dz1 + 9 * p.m;
    const T* dz3 = pose_dz3 + 9 * p.m;
    const T* go = grad_origins + 3 * r;
    const T* gd = grad_directions + 3 * r;
    T gz1 = T(0), gz3 = T(0), gsu = T(0), gsv = T(0);
    for (int a = 0; a < 3; ++a) {
      const T g_col0 = go[a] * p.local_u, g_col1 = go[a] * p.local_v, g_col2 = gd[a];
      gz1 += g_col0 * dz1[3 * a] + g_col1 * dz1[3 * a + 1] + g_col2 * dz1[3 * a + 2];
      gz3 += g_col0 * dz3[3 * a] + g_col1 * dz3[3 * a + 1] + g_col2 * dz3[3 * a + 2];
      gsu -= rot[3 * a] * go[a];
      gsv -= rot[3 * a + 1] * go[a];
    }
    T* out = terms + kPoseTerms * r;
    out[0] = gz1, out[1] = gz3, out[2] = gsu, out[3] = gsv;
  }
};

/// Projection m: the sum of its rays' terms, r = m, m + n, ... in that order (no atomics). The
/// reference projection gets zeros.
template <class T>
struct PoseBackwardStage {
  int64_t projections = 0, rays = 0, reference = 0;
  const T* terms = nullptr;  ///< [R, kPoseTerms] from RayPoseTermStage
  T* grad_z1 = nullptr;
  T* grad_z3 = nullptr;
  T* grad_shifts = nullptr;

  FF_HOST_DEVICE void operator()(int64_t m) const {
    T sum[kPoseTerms] = {T(0), T(0), T(0), T(0)};
    if (m != reference) {
      FF_DEVICE_UNROLL(4)
      for (int64_t r = m; r < rays; r += projections) {
        for (int k = 0; k < kPoseTerms; ++k) sum[k] += terms[kPoseTerms * r + k];
      }
    }
    grad_z1[m] = sum[0];
    grad_z3[m] = sum[1];
    grad_shifts[2 * m] = sum[2];
    grad_shifts[2 * m + 1] = sum[3];
  }
};

/// Export: voxel centres of a [D, H, W] grid from flat index `first + i`.
template <class T>
struct VoxelStage {
  int64_t first = 0, depth = 0, height = 0, width = 0;
  T* points = nullptr;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t v = first + i;
    const int64_t j = v % width, row = v / width, ii = row % height, k = row / height;
    points[3 * i] = T(-1) + T(2 * j + 1) / T(width);
    points[3 * i + 1] = T(-1) + T(2 * ii + 1) / T(height);
    points[3 * i + 2] = T(-1) + T(2 * k + 1) / T(depth);
  }
};

/// Export: out[first + i] = ρ(raw[i]) in the volume's dtype V.
template <class T, class V>
struct ExportDensityStage {
  int64_t first = 0;
  const T* raw = nullptr;
  V* out = nullptr;
  FF_HOST_DEVICE void operator()(int64_t i) const { out[first + i] = V(density(raw[i])); }
};

}  // namespace fieldfuse::detail::tomo
