// SPDX-License-Identifier: Apache-2.0
// The denoising solvers' element-wise steps: each formula once, driven by a CPU loop and a CUDA
// kernel.
//
// Every step is an argument struct plus an `apply_at(args, i)` overload that updates element i and
// returns its share of the step's sums (PairSum). vector_ops_cpu.cpp and vector_ops_cuda.cu only
// decide iteration and reduction order, so the two paths cannot drift apart.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FF_APP_HOST_DEVICE __host__ __device__
#else
#define FF_APP_HOST_DEVICE
#endif

namespace fieldfuse::cli {

/// Two float64 sums returned by a step (unused ones stay 0).
struct PairSum {
  double first = 0.0;
  double second = 0.0;
};

FF_APP_HOST_DEVICE inline PairSum operator+(PairSum a, PairSum b) {
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

FF_APP_HOST_DEVICE inline PairSum apply_at(const GradientStepArgs& a, std::int64_t i) {
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

FF_APP_HOST_DEVICE inline PairSum apply_at(const ExtrapolateArgs& a, std::int64_t i) {
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

FF_APP_HOST_DEVICE inline float frank_wolfe_target(float noisy, float tv_gradient) {
  return noisy - tv_gradient;
}

FF_APP_HOST_DEVICE inline PairSum apply_at(const FrankWolfeSumsArgs& a, std::int64_t i) {
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

FF_APP_HOST_DEVICE inline PairSum apply_at(const FrankWolfeMoveArgs& a, std::int64_t i) {
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

FF_APP_HOST_DEVICE inline PairSum apply_at(const SquaredDistanceArgs& a, std::int64_t i) {
  const double diff = static_cast<double>(a.a[i]) - a.b[i];
  return {diff * diff, 0.0};
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
// failures throw CliError (runtime).
namespace cpu {
template <class Args>
PairSum run(std::int64_t count, const Args& args);
}  // namespace cpu

namespace cuda {
template <class Args>
PairSum run(std::int64_t count, const Args& args, const CudaLaunch& launch);
}  // namespace cuda

}  // namespace fieldfuse::cli
