// SPDX-License-Identifier: Apache-2.0
// The multiresolution hash-grid encoding (`hash_grid`, part of the `mlp` family), with first and
// second derivatives, in tiny-cuda-nn's parameter layout.
//
// Contract (specs/mlp.md, "Hash-grid encoding"; issue 13). With L levels of F features, table size
// 2^T, base resolution N and per-level scale b, level l has
//   scale_l = b^l · N − 1  (evaluated in float32 exactly as tiny-cuda-nn evaluates it:
//             exp2f(l · log2f(b)) · N − 1, so both agree on every level's size),
//   res_l   = ceil(scale_l) + 1,
//   rows_l  = min(next_multiple(min(res_l^D, 2^31 − 1), 8), 2^T),
// and `params [Σ_l rows_l, F]` holds the levels one after the other (level 0 first), each row one
// grid vertex's F features. A point x ∈ [0, 1]^D is first clamped to [0, 1]^D per coordinate, then
// `pos_i = x_i · scale_l + 0.5`, cell `g_i = floor(pos_i)`, fraction `t_i = pos_i − g_i`. The
// cell's 2^D corners c ∈ {0, 1}^D sit at vertex `g + c`, whose row within the level is
//   dense  (res_l^D ≤ rows_l): (Σ_i (g_i + c_i) · res_l^i) mod rows_l,
//   hashed (otherwise):        (XOR_i (g_i + c_i) · π_i, in uint32 arithmetic) mod rows_l,
// π = (1, 2654435761, 805459861). The feature is Σ_c Π_i w_i(c_i) · params[row_c, f] with
// w_i(1) = s(t_i), w_i(0) = 1 − s(t_i), and s(t) = t ("linear") or s(t) = t²(3 − 2t)
// ("smoothstep"). Output `[B, L·F]`, level-major (level l's F features at columns l·F ... l·F+F−1).
// Note [tcnn layout] in src/encoding/hash_grid_math.h lists what was checked against tiny-cuda-nn.
//
// Clamping and NaN: coordinates outside [0, 1] are clamped (allowed, not an error); the gradient
// with respect to a clamped coordinate (x_i < 0 or x_i > 1) is 0. A point with a NaN coordinate
// gets NaN features at every level and a NaN x-gradient, and contributes nothing to the params
// gradient (its cell is never looked up: no read depends on a NaN).
//
// Common to every function here:
// - dtypes: x is float32 or float64 (the compute type). params has x's dtype, or, on CUDA with
//   float32 x, float16 (read as float32; params gradients are accumulated in a float32
//   workspace and rounded to float16 once). Features, upstream gradients and x-gradients have
//   x's dtype; params gradients have params' dtype.
// - layout: x, params, upstream gradients and seeds are read through their strides. Outputs
//   (`out`, `grad_*`) must be contiguous and must not overlap any input. Outputs are fully written
//   (never accumulated into), so they may be uninitialised.
// - determinism: the CPU drivers are deterministic and independent of the thread count (x-side
//   results are per point; the params gradient is scattered by one thread per level, in point
//   order). The CUDA backward and double backward scatter params gradients and sum the levels'
//   x-gradients with float atomics (exact terms, run-to-run rounding differences).
// - workspace: the backward and double backward take `*_workspace_size(...)` bytes (>= 1), device
//   memory for CUDA inputs and host memory for CPU inputs, aligned to 8 bytes; it is only used
//   for the float32 accumulator of float16 params gradients. The queries read metadata only, so
//   sizes are fixed for a CUDA graph. The library never allocates.
// - all work is enqueued on `stream` for CUDA tensors (no host synchronisation; CUDA graphs can
//   capture it); CPU calls run to completion with OpenMP.
// - errors start with the public name of the call: `hash_grid(): ` from hash_grid_forward,
//   `hash_grid_backward(): ` and `hash_grid_double_backward(): ` from those entries and their
//   workspace queries, `hash_grid_num_params(): ` from hash_grid_num_params.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"

namespace fieldfuse {

/// The encoding's hyperparameters, named as in `fieldfuse.hash_grid(...)`'s keyword arguments.
struct HashGridConfig {
  int n_levels = 16;                     ///< L >= 1
  int n_features_per_level = 2;          ///< F ∈ {1, 2, 4, 8}; must equal params' second dim
  int log2_hashmap_size = 19;            ///< T ∈ [1, 31]
  int base_resolution = 16;              ///< N >= 1
  double per_level_scale = 2.0;          ///< b >= 1, finite in float32; the finest scale_l <= 2^24
  const char* interpolation = "linear";  ///< "linear" or "smoothstep"
};

/// Rows of `params` (Σ_l rows_l) for D = n_input_dims ∈ {2, 3}. n_features_per_level and
/// interpolation are validated but do not change the count.
int64_t hash_grid_num_params(int n_input_dims, const HashGridConfig& config);

/// `out [B, L·F] = encoding(x [B, D], params [hash_grid_num_params(D, config), F])`.
void hash_grid_forward(const TensorRef& x, const TensorRef& params, const HashGridConfig& config,
                       const TensorRef& out, Stream stream = {});

/// Workspace bytes of hash_grid_backward (>= 1); `wants_grad_params` says whether grad_params
/// will be passed.
std::size_t hash_grid_backward_workspace_size(const TensorRef& x, const TensorRef& params,
                                              const HashGridConfig& config, bool wants_grad_params);

/// From the upstream `grad_out [B, L·F]`:
///   grad_params[row, f] = Σ_{b, l, c: row_c = row} W_c · grad_out[b, l·F + f],
///   grad_x[b, i]        = Σ_{l, f, c} ∂W_c/∂x_i · params[row_c, f] · grad_out[b, l·F + f],
/// with ∂W_c/∂x_i = ±s'(t_i) · scale_l · Π_{j≠i} w_j (0 for a clamped coordinate). Either
/// output may be absent (a default TensorRef): that gradient and the work only it needs are
/// skipped. Rows no point touches get 0.
void hash_grid_backward(const TensorRef& x, const TensorRef& params, const HashGridConfig& config,
                        const TensorRef& grad_out, const TensorRef& grad_x,
                        const TensorRef& grad_params, void* workspace, std::size_t workspace_bytes,
                        Stream stream = {});

/// Workspace bytes of hash_grid_double_backward (>= 1).
std::size_t hash_grid_double_backward_workspace_size(const TensorRef& x, const TensorRef& params,
                                                     const HashGridConfig& config,
                                                     bool wants_grad_params);

/// The derivative of hash_grid_backward: given seeds `grad_grad_x [B, D]` and
/// `grad_grad_params [rows, F]` (the gradients of a loss with respect to the backward's
/// outputs; either may be absent, meaning 0), writes the gradients with respect to the
/// backward's inputs:
///   grad_grad_out[b, l·F + f] = Σ_c W_c · u[row_c, f] + Σ_{i, c} v_i · ∂_i W_c · params[row_c, f],
///   grad_params[row_c, f]    += grad_out[b, l·F + f] · Σ_i v_i · ∂_i W_c,
///   grad_x[b, j]              = Σ_{l, f} grad_out[b, l·F + f] · Σ_c (∂_j W_c · u[row_c, f]
///                                 + Σ_i v_i · ∂_j ∂_i W_c · params[row_c, f]),
/// with u = grad_grad_params, v = grad_grad_x[b], and ∂_i ∂_i W_c = ±s''(t_i) · scale_l² ·
/// Π_{j≠i} w_j (0 for linear interpolation). Each output may be absent (not computed). The CUDA
/// driver walks the table once for all three (one thread per point and level).
void hash_grid_double_backward(const TensorRef& x, const TensorRef& params,
                               const HashGridConfig& config, const TensorRef& grad_out,
                               const TensorRef& grad_grad_x, const TensorRef& grad_grad_params,
                               const TensorRef& grad_grad_out, const TensorRef& grad_x,
                               const TensorRef& grad_params, void* workspace,
                               std::size_t workspace_bytes, Stream stream = {});

}  // namespace fieldfuse
