// SPDX-License-Identifier: Apache-2.0
// The denoising solvers' element-wise steps: each formula once, driven by a CPU loop and a CUDA
// kernel.
//
// Every step is an argument struct plus an `apply_at(args, i)` overload that updates element i and
// returns its share of the step's sums (PairSum). vector_ops_cpu.cpp and vector_ops_cuda.cu only
// decide iteration and reduction order, so the two paths cannot drift apart.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace fieldfuse::cli {

/// Two float64 sums returned by a step (unused ones stay 0).
struct PairSum {
  double first = 0.0;
  double second = 0.0;
};

FF_HOST_DEVICE inline PairSum operator+(PairSum a, PairSum b) {
  return {a.first + b.first, a.second + b.second};
}

/// Gradient step of F(x) = 0.5‖x − y‖² + λ·TV(x) from the extrapolated point z:
/// next = z − step·(z − y + λ∇TV(z)). Sums: first = Σ (z − next)·(next − previous), whose sign
/// drives the adaptive restart; second = Σ (z − next)² = step²·‖∇F(z)‖², for the stopping test.
struct GradientStepArgs {
  static constexpr bool kReturnsSums = true;
  const float* extrapolated;
  const float* noisy;
  const float* tv_gradient;  // λ∇TV at `extrapolated`
  const float* previous;
  float* next;
  float step;
};

FF_HOST_DEVICE inline PairSum apply_at(const GradientStepArgs& a, std::int64_t i) {
  const float z = a.extrapolated[i];
  const float next = z - a.step * (z - a.noisy[i] + a.tv_gradient[i]);
  a.next[i] = next;
  const double descent = static_cast<double>(z) - next;
  return {descent * (static_cast<double>(next) - a.previous[i]), descent * descent};
}

/// Nesterov extrapolation z = next + momentum·(next − previous). No sums.
struct ExtrapolateArgs {
  static constexpr bool kReturnsSums = false;
  const float* next;
  const float* previous;
  float* extrapolated;
  float momentum;
};

FF_HOST_DEVICE inline PairSum apply_at(const ExtrapolateArgs& a, std::int64_t i) {
  a.extrapolated[i] = a.next[i] + a.momentum * (a.next[i] - a.previous[i]);
  return {};
}

/// Frank-Wolfe on the dual of the anisotropic (L1) problem: the dual vertex s = sign(Dx) maps to
/// the primal point t = y − λDᵀs = noisy − tv_gradient. Sums: first = −Σ x·(t − x), the duality
/// gap; second = Σ (t − x)², for the exact line search.
struct FrankWolfeSumsArgs {
  static constexpr bool kReturnsSums = true;
  const float* current;
  const float* noisy;
  const float* tv_gradient;  // λDᵀ sign(D·current)
};

FF_HOST_DEVICE inline float frank_wolfe_target(float noisy, float tv_gradient) {
  return noisy - tv_gradient;
}

FF_HOST_DEVICE inline PairSum apply_at(const FrankWolfeSumsArgs& a, std::int64_t i) {
  const double x = a.current[i];
  const double toward = frank_wolfe_target(a.noisy[i], a.tv_gradient[i]) - x;
  return {-x * toward, toward * toward};
}

/// The Frank-Wolfe move x ← x + γ·(t − x). No sums.
struct FrankWolfeMoveArgs {
  static constexpr bool kReturnsSums = false;
  float* current;
  const float* noisy;
  const float* tv_gradient;
  float gamma;
};

FF_HOST_DEVICE inline PairSum apply_at(const FrankWolfeMoveArgs& a, std::int64_t i) {
  const float x = a.current[i];
  a.current[i] = x + a.gamma * (frank_wolfe_target(a.noisy[i], a.tv_gradient[i]) - x);
  return {};
}

/// first = Σ (a − b)²: the data term, or the error against the clean volume.
struct SquaredDistanceArgs {
  static constexpr bool kReturnsSums = true;
  const float* a;
  const float* b;
};

FF_HOST_DEVICE inline PairSum apply_at(const SquaredDistanceArgs& a, std::int64_t i) {
  const double diff = static_cast<double>(a.a[i]) - a.b[i];
  return {diff * diff, 0.0};
}

/// The shape of a volume whose size-1 axes are doubled, and the original it came from. The
/// isotropic TV of a volume with size-1 axes is taken over its replicated copy (Note [iso on
/// size-1 axes] in tv_term.cpp); sizes are [D, H, W], C order.
struct ReplicaShape {
  std::int64_t depth, height, width;        ///< the original volume
  std::int64_t r_depth, r_height, r_width;  ///< the replicated one: 2 where the original has 1
};

/// The [d, h, w] coordinates of flat C-order index i in a volume of `height` x `width` planes.
struct Voxel {
  std::int64_t d, h, w;
};

FF_HOST_DEVICE inline Voxel unravel(std::int64_t i, std::int64_t height, std::int64_t width) {
  return {i / (width * height), i / width % height, i % width};
}

/// replicated[e] = original[the voxel e copies]: coordinates past a size-1 axis clamp to 0. No
/// sums.
struct ReplicateArgs {
  static constexpr bool kReturnsSums = false;
  const float* original;
  float* replicated;
  ReplicaShape shape;
};

FF_HOST_DEVICE inline PairSum apply_at(const ReplicateArgs& a, std::int64_t e) {
  const ReplicaShape& s = a.shape;
  const Voxel v = unravel(e, s.r_height, s.r_width);
  a.replicated[e] =
      a.original[((v.d < s.depth ? v.d : 0) * s.height + (v.h < s.height ? v.h : 0)) * s.width +
                 (v.w < s.width ? v.w : 0)];
  return {};
}

/// The adjoint of ReplicateArgs: original[i] = Σ of replicated over the copies of voxel i (the
/// chain rule for a gradient taken on the replicated volume). No sums.
struct FoldReplicasArgs {
  static constexpr bool kReturnsSums = false;
  const float* replicated;
  float* original;
  ReplicaShape shape;
};

FF_HOST_DEVICE inline PairSum apply_at(const FoldReplicasArgs& a, std::int64_t i) {
  const ReplicaShape& s = a.shape;
  const Voxel v = unravel(i, s.height, s.width);
  const int copies_d = s.r_depth > s.depth ? 2 : 1;
  const int copies_h = s.r_height > s.height ? 2 : 1;
  const int copies_w = s.r_width > s.width ? 2 : 1;
  float sum = 0.0f;
  for (int cd = 0; cd < copies_d; ++cd)
    for (int ch = 0; ch < copies_h; ++ch)
      for (int cw = 0; cw < copies_w; ++cw)
        sum += a.replicated[((v.d + cd) * s.r_height + v.h + ch) * s.r_width + v.w + cw];
  a.original[i] = sum;
  return {};
}

/// How the CUDA drivers run: the stream (a cudaStream_t) and device scratch for per-block partial
/// sums, kMaxReductionBlocks entries, owned by the caller (the library and app never allocate
/// behind the caller's back).
struct CudaLaunch {
  void* stream = nullptr;
  PairSum* partials = nullptr;
};
constexpr std::int64_t kMaxReductionBlocks = 1024;

// Drivers: apply a step to elements [0, count) and return its sums, accumulated in float64 in an
// order fixed by `count` alone, so runs repeat bit for bit. Instantiated for the argument structs
// above. The CUDA driver enqueues on the stream and, for steps with sums, waits for them; CUDA
// failures throw fieldfuse::Error (Runtime) naming the call.
namespace cpu {
template <class Args>
PairSum run(std::int64_t count, const Args& args);
}  // namespace cpu

namespace cuda {
template <class Args>
PairSum run(std::int64_t count, const Args& args, const CudaLaunch& launch);
}  // namespace cuda

}  // namespace fieldfuse::cli
