// SPDX-License-Identifier: Apache-2.0
// Volume total variation (the `tv` family): squared, isotropic, per-axis L1 and weighted L1.
//
// Contracts follow specs/tv.md. Every functional uses forward differences
// `Δd v[i,j,k] = v[i+1,j,k] − v[i,j,k]` (likewise Δh on j, Δw on k) over the last three dims of a
// `[..., D, H, W]` tensor; leading dims are independent slices whose terms are summed together.
//
// Common to every function here:
// - dtypes: float32 and float64 on CPU and CUDA; float16 and bfloat16 on CUDA only, computed in
//   float32 with float64 sums. The scalar outputs are float32 for 16-bit inputs and the input
//   dtype otherwise; gradients have the input's dtype.
// - layout: any strides (non-contiguous views are read in place, never copied); `grad_*` outputs
//   may have strides of their own. Outputs must not share memory with inputs and must not repeat
//   elements (stride 0); both are checked (ValueError).
// - outputs are always fully written (never accumulated into), so they may be uninitialised.
// - determinism: sums are accumulated in float64 in an order fixed by the shape (per-plane
//   partials on the CPU, whatever the strides or thread count; per-block partials on CUDA, whose
//   vectorised path for dense layouts first adds 4 neighbouring voxels in the compute type), so the
//   same input gives the same bits on every call. CPU and CUDA agree to rounding, not bit for bit.
// - `grad_out` is read from device memory by the backward kernels (no host synchronisation), so the
//   backward passes can be captured in CUDA graphs.
// - forwards take a caller-allocated workspace of `*_workspace_size` bytes, aligned to 8 bytes (as
//   any allocator's memory is): device memory for CUDA inputs, host memory for CPU inputs. It holds
//   the float64 partial sums, so the library itself never allocates.
// - all work is enqueued on `stream` for CUDA tensors; CPU calls run to completion with OpenMP.
#pragma once

#include <cstddef>

#include "fieldfuse/core.h"

namespace fieldfuse {

// ---------------------------------------------------------------------------------------------
// tv_sq_3d: S = Σ_n [ Σ_{i<D−1} Δd² + Σ_{j<H−1} Δh² + Σ_{k<W−1} Δw² ]  (unnormalised sum)
// ---------------------------------------------------------------------------------------------

/// Workspace bytes `tv_sq_3d_forward` needs for `vol` (>= 1). Reads only vol's metadata (its data
/// pointer may be null), as do the other `*_workspace_size` queries.
std::size_t tv_sq_3d_workspace_size(const TensorRef& vol);

/// Squared anisotropic TV of `vol [..., D, H, W]` into the 0-d (one element) tensor `out`.
/// A size-1 axis contributes 0; an empty `vol` gives 0.
void tv_sq_3d_forward(const TensorRef& vol, const TensorRef& out, void* workspace,
                      std::size_t workspace_bytes, Stream stream = {});

/// `grad_vol = g · ∂S/∂vol` with `g = grad_out[0]` (one element, out's dtype, on vol's device):
/// `∂S/∂v = 2·Σ_axes [(v − prev)·[prev exists] − (next − v)·[next exists]]`.
void tv_sq_3d_backward(const TensorRef& vol, const TensorRef& grad_out, const TensorRef& grad_vol,
                       Stream stream = {});

// ---------------------------------------------------------------------------------------------
// tv_iso_3d: L = Σ_corners sqrt(Δd² + Δh² + Δw² + eps) / N, N = B·(D−1)(H−1)(W−1)
// ---------------------------------------------------------------------------------------------
// The three differences of a corner are anchored at the same voxel (i, j, k), i < D−1, j < H−1,
// k < W−1. Any of D, H, W < 2 gives L = 0 and a zero gradient. eps must be finite and >= 0; with
// eps = 0 a corner whose differences are all zero has an undefined gradient (0/0), as in PyTorch.

std::size_t tv_iso_3d_workspace_size(const TensorRef& vol);

void tv_iso_3d_forward(const TensorRef& vol, double eps, const TensorRef& out, void* workspace,
                       std::size_t workspace_bytes, Stream stream = {});

/// 4-corner gather per voxel (each term only where that corner exists), times g/N:
/// `−(Δd+Δh+Δw)/s` from corner (a,b,c), `+Δd/s` from (a−1,b,c), `+Δh/s` from (a,b−1,c),
/// `+Δw/s` from (a,b,c−1).
void tv_iso_3d_backward(const TensorRef& vol, double eps, const TensorRef& grad_out,
                        const TensorRef& grad_vol, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// tv_l1_3d: out[3] = [Σ|Δd|, Σ|Δh|, Σ|Δw|] over all slices (raw sums)
// ---------------------------------------------------------------------------------------------
// Callers that normalise divide by N_d = B(D−1)HW, N_h = BD(H−1)W, N_w = BDH(W−1).

std::size_t tv_l1_3d_workspace_size(const TensorRef& vol);

/// `out` is a 3-element tensor.
void tv_l1_3d_forward(const TensorRef& vol, const TensorRef& out, void* workspace,
                      std::size_t workspace_bytes, Stream stream = {});

/// `grad_out` has 3 elements (one upstream gradient per axis). Uses sign(Δ) with sign(0) = 0, so a
/// constant volume gets an exactly-zero gradient.
void tv_l1_3d_backward(const TensorRef& vol, const TensorRef& grad_out, const TensorRef& grad_vol,
                       Stream stream = {});

// ---------------------------------------------------------------------------------------------
// tv_weighted_l1 (ptychography object constraint)
// ---------------------------------------------------------------------------------------------
// For k = num_weights ∈ {2, 3} trailing axes of `array [..., *k axes]`:
//   L = Σ_a w_a · mean|Δ_a| / max(1, #{a : w_a > 0}),  axes with w_a == 0 skipped,
// where the mean runs over every difference along axis a (leading dims included). With weights
// (w_z, w_xy, w_xy) on (slices, y, x) and (w_xy, w_xy) on (y, x) this is exactly the ptychography
// TV constraint. Weights must be finite and >= 0. An axis of size 1 with a nonzero weight has no
// differences to average and is rejected (ValueError naming the axis and its weight).

std::size_t tv_weighted_l1_workspace_size(const TensorRef& array, int num_weights);

void tv_weighted_l1_forward(const TensorRef& array, const double* weights, int num_weights,
                            const TensorRef& out, void* workspace, std::size_t workspace_bytes,
                            Stream stream = {});

/// Same sign(0) = 0 convention as tv_l1_3d; `grad_out` has one element.
void tv_weighted_l1_backward(const TensorRef& array, const double* weights, int num_weights,
                             const TensorRef& grad_out, const TensorRef& grad_array,
                             Stream stream = {});

}  // namespace fieldfuse
