// SPDX-License-Identifier: Apache-2.0
// K-Planes feature interpolation (the `kplanes` family): tilted and axis-aligned multiscale
// feature planes, finite-difference volume-TV taps, and plane TV.
//
// Contracts follow specs/kplanes.md. A field has L levels; level l is a tensor of logical shape
// `[P, C_l, H_l, W_l]` (P = 3T planes for T tilts, plane k = 3t + p; P = 3 axis-aligned). A point's
// features are, per level and tilt, the channel-wise product of its bilinear samples on the
// tilt's three planes (F.grid_sample with align_corners=True and padding_mode="border": points
// outside [−1, 1] are clamped to the border, and a coordinate on or beyond ±1 gets a zero
// coordinate gradient), times the level's gate. Features are laid out level-major, then
// tilt-major, channel fastest: column `offset_l + t·C_l + c`, offset_l = T·Σ_{m<l} C_m.
//
//   tilted:       r = R_t·p; planes (gx, gy) = (r_x, r_y), (r_z, r_x), (r_y, r_z)
//   axis-aligned: r = p;     planes (gx, gy) = (p_x, p_y), (p_x, p_z), (p_y, p_z)
//
// Volume-TV taps: a tap point q is evaluated at q, q + h·e_x, q + h·e_y and q + h·e_z (tilted:
// R·q + h·R[:, i], so tap 0 is bit-identical to evaluating q as a point).
//
// Common to every function here:
// - dtypes: points, tap points and rotations share one dtype, float32 or float64 (the compute
//   type). Planes have that dtype too, or, on CUDA with float32 points, float16 or bfloat16
//   (computed in float32; plane gradients are accumulated in float32 and rounded once). Features
//   are the compute type or the plane dtype (`features.dtype` chooses).
// - layout: points and rotations are read through their strides. Planes may have any strides
//   (NCHW, channels-last `[P, C, H, W]` with strides (H·W·C, 1, W·C, C), sliced views): on CUDA a
//   level whose channels are not adjacent (or, with C % 4 == 0, whose strides are not multiples
//   of 4) is first copied channels-last into the workspace and its gradient accumulated there and
//   copied back, so every layout runs at the channels-last speed (Note [plane staging] in
//   src/kplanes/kplanes_staging.cpp); channels-last levels with C % 4 == 0 and 16-byte-aligned
//   data take the vectorised loads in place. The CPU reads every layout in place. The CUDA
//   kernels need sm_80 or newer. Feature outputs must be contiguous. Plane gradients must be dense
//   (a permutation of a contiguous layout, as `torch.empty_like` gives for NCHW and channels-last
//   planes); they are fully written, in their own layout.
// - determinism: point and rotation gradients are always reduced in a fixed order. On CUDA the
//   default plane-gradient scatter uses float atomics (exact sums, order-dependent rounding);
//   `deterministic = true` gathers each cell's contributions in a fixed order instead, so the
//   backward gives the same bits every run. The CPU driver is always deterministic and
//   independent of the thread count.
// - all work is enqueued on `stream` for CUDA tensors; CPU calls run to completion with OpenMP.
#pragma once

#include <cstddef>

#include "fieldfuse/core.h"

namespace fieldfuse {

// ---------------------------------------------------------------------------------------------
// Feature interpolation: four public functions, each with a forward, a backward and a workspace
// query for each. Arguments are named as in the Python functions of the same name
// (`fieldfuse.kplanes_tilted(pts, rotations, planes, gates)`, ...), and every error starts with
// the function's name: `kplanes_tilted(): ...` from a forward, `kplanes_tilted_backward(): ...`
// from a backward or its workspace query.
//
// Arguments common to all of them:
// - `pts` `[B, 3]` (B may be 0); `tap_pts` `[N, 3]`; `rotations` `[T, 3, 3]` row-major, not
//   assumed orthogonal.
// - `planes`: `num_levels` >= 1 level tensors (see the header comment); `gates`: `num_levels`
//   finite per-level factors, or null (all 1). Gates are constants: they get no gradient.
// - `h`: the finite tap step.
// - outputs: `features [B, F]`, `tap_features [4, N, F]` (tap-major: taps 0..3 are the point,
//   then +h along x, y, z), contiguous, in the compute type or the plane dtype.
// - backward: upstream `grad_features` / `grad_tap_features` (any strides, the features' dtype);
//   gradient outputs `grad_<input>` shaped and typed like their inputs. A null gradient pointer
//   skips that gradient and the work only it needs; `grad_planes` points to `num_levels` tensors.
// - workspace: the forward takes `<name>_forward_workspace_size(...)` bytes of scratch and the
//   backward `<name>_backward_workspace_size(...)` (each >= 1), device memory for CUDA inputs and
//   host memory for CPU inputs, aligned to 8 bytes (any allocator's memory is). The queries read
//   only metadata (shapes, strides, dtypes, device, flags), never data, so sizes are fixed for a
//   CUDA graph; `wants_grad_planes` says whether `grad_planes` will be passed. Both hold the
//   channels-last copies of the staged levels (on CUDA, levels not channels-last: each level's
//   plane bytes, and in the backward as much again for its gradient unless the planes are 16-bit
//   and the path is the default one). The backward's also grows with `deterministic` (the sort
//   buffers, and 4 partial sums per plane cell of the largest level in the compute type) and with
//   16-bit planes (float32 accumulators). Errors of a query start with the name of the call it
//   sizes (`<name>(): ` or `<name>_backward(): `).
// ---------------------------------------------------------------------------------------------

/// Total feature columns F = T·Σ_l C_l from the planes' metadata (T = 1 for axis-aligned planes).
int64_t kplanes_num_features(const TensorRef* planes, int num_levels, int num_tilts);

/// Tilted features: `features[b, offset_l + t·C_l + c] = gate_l · Π_p sample(3t + p, c, ...)` at
/// `r = R_t·pts[b]`.
std::size_t kplanes_tilted_forward_workspace_size(const TensorRef& pts, const TensorRef& rotations,
                                                  const TensorRef* planes, int num_levels);
void kplanes_tilted_forward(const TensorRef& pts, const TensorRef& rotations,
                            const TensorRef* planes, int num_levels, const double* gates,
                            const TensorRef& features, void* workspace, std::size_t workspace_bytes,
                            Stream stream = {});
std::size_t kplanes_tilted_backward_workspace_size(const TensorRef& pts, const TensorRef& rotations,
                                                   const TensorRef* planes, int num_levels,
                                                   bool wants_grad_planes, bool deterministic);
void kplanes_tilted_backward(const TensorRef& pts, const TensorRef& rotations,
                             const TensorRef* planes, int num_levels, const double* gates,
                             const TensorRef& grad_features, const TensorRef* grad_pts,
                             const TensorRef* grad_rotations, const TensorRef* grad_planes,
                             bool deterministic, void* workspace, std::size_t workspace_bytes,
                             Stream stream = {});

/// Axis-aligned features (planes (x, y), (x, z), (y, z); `[3, C_l, H_l, W_l]` levels).
std::size_t kplanes_forward_workspace_size(const TensorRef& pts, const TensorRef* planes,
                                           int num_levels);
void kplanes_forward(const TensorRef& pts, const TensorRef* planes, int num_levels,
                     const double* gates, const TensorRef& features, void* workspace,
                     std::size_t workspace_bytes, Stream stream = {});
std::size_t kplanes_backward_workspace_size(const TensorRef& pts, const TensorRef* planes,
                                            int num_levels, bool wants_grad_planes,
                                            bool deterministic);
void kplanes_backward(const TensorRef& pts, const TensorRef* planes, int num_levels,
                      const double* gates, const TensorRef& grad_features,
                      const TensorRef* grad_pts, const TensorRef* grad_planes, bool deterministic,
                      void* workspace, std::size_t workspace_bytes, Stream stream = {});

/// The four volume-TV taps of every point: `tap_features [4, B, F]`; tap 0 is bit-identical to
/// `kplanes_tilted_forward` of the same points.
std::size_t kplanes_tilted_taps_forward_workspace_size(const TensorRef& pts,
                                                       const TensorRef& rotations,
                                                       const TensorRef* planes, int num_levels);
void kplanes_tilted_taps_forward(const TensorRef& pts, const TensorRef& rotations,
                                 const TensorRef* planes, int num_levels, double h,
                                 const double* gates, const TensorRef& tap_features,
                                 void* workspace, std::size_t workspace_bytes, Stream stream = {});
std::size_t kplanes_tilted_taps_backward_workspace_size(const TensorRef& pts,
                                                        const TensorRef& rotations,
                                                        const TensorRef* planes, int num_levels,
                                                        bool wants_grad_planes, bool deterministic);
void kplanes_tilted_taps_backward(const TensorRef& pts, const TensorRef& rotations,
                                  const TensorRef* planes, int num_levels, double h,
                                  const double* gates, const TensorRef& grad_tap_features,
                                  const TensorRef* grad_pts, const TensorRef* grad_rotations,
                                  const TensorRef* grad_planes, bool deterministic, void* workspace,
                                  std::size_t workspace_bytes, Stream stream = {});

/// A batch and its volume-TV taps in one launch and one backward (which accumulates into the
/// planes once): `features [B, F]` of `pts` and `tap_features [4, N, F]` of `tap_pts`, each
/// bit-identical to the separate calls.
/// `valid` (bool `[B]`, or null: every point) marks the points to evaluate, as the padded
/// ray–box sampler returns it: an invalid point's feature row is 0 and it adds nothing to any
/// gradient (its upstream gradient is not read), so the padding of a padded batch costs neither
/// corner reads nor atomics. Tap points are always evaluated.
std::size_t kplanes_tilted_with_taps_forward_workspace_size(const TensorRef& pts,
                                                            const TensorRef& tap_pts,
                                                            const TensorRef& rotations,
                                                            const TensorRef* planes,
                                                            int num_levels);
void kplanes_tilted_with_taps_forward(const TensorRef& pts, const TensorRef& tap_pts,
                                      const TensorRef& rotations, const TensorRef* planes,
                                      int num_levels, double h, const double* gates,
                                      const TensorRef* valid, const TensorRef& features,
                                      const TensorRef& tap_features, void* workspace,
                                      std::size_t workspace_bytes, Stream stream = {});
std::size_t kplanes_tilted_with_taps_backward_workspace_size(
    const TensorRef& pts, const TensorRef& tap_pts, const TensorRef& rotations,
    const TensorRef* planes, int num_levels, bool wants_grad_planes, bool deterministic);
void kplanes_tilted_with_taps_backward(
    const TensorRef& pts, const TensorRef& tap_pts, const TensorRef& rotations,
    const TensorRef* planes, int num_levels, double h, const double* gates, const TensorRef* valid,
    const TensorRef& grad_features, const TensorRef& grad_tap_features, const TensorRef* grad_pts,
    const TensorRef* grad_tap_pts, const TensorRef* grad_rotations, const TensorRef* grad_planes,
    bool deterministic, void* workspace, std::size_t workspace_bytes, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// plane_tv: smoothness of the planes themselves
// ---------------------------------------------------------------------------------------------
// Per level, with P = 3T planes of C×H×W:
//   level_l = (1/T)·Σ_k [ Σ_{c,h<H−1,w} ΔH² / (C(H−1)W) + Σ_{c,h,w<W−1} ΔW² / (CH(W−1)) ]
// (T = 1 axis-aligned: the plain sum over the 3 planes), times H_l·W_l / max_m(H_m·W_m) with
// `PlaneTVNorm::PerCell`. An axis of size 1 contributes 0. The loss is Σ_l level_l; `out` holds the
// L level terms so callers can log them. Sums are float64 in a fixed order (deterministic).

enum class PlaneTVNorm : int32_t { Mean, PerCell };

/// Workspace bytes for `plane_tv_forward` (>= 1); reads only metadata.
std::size_t plane_tv_workspace_size(const TensorRef* planes, int num_levels);

/// `out` has num_levels elements: float32 for 16-bit planes, else the planes' dtype.
void plane_tv_forward(const TensorRef* planes, int num_levels, int num_tilts, PlaneTVNorm norm,
                      const TensorRef& out, void* workspace, std::size_t workspace_bytes,
                      Stream stream = {});

/// `grad_planes[l] = grad_out[l] · ∂level_l/∂planes[l]` (any strides of their own), or with
/// `accumulate` `grad_planes[l] += grad_out[l] · ∂level_l/∂planes[l]` (16-bit gradients are added
/// in float32 and rounded once), so a caller can add the TV gradient straight into a parameter's
/// gradient. Every element of grad_planes is written; without `accumulate` its old content is
/// never read. Deterministic (each element gathers its own neighbours; no atomics).
void plane_tv_backward(const TensorRef* planes, int num_levels, int num_tilts, PlaneTVNorm norm,
                       const TensorRef& grad_out, const TensorRef* grad_planes, Stream stream = {},
                       bool accumulate = false);

}  // namespace fieldfuse
