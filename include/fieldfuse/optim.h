// SPDX-License-Identifier: Apache-2.0
// Fused optimiser steps (the `optim` family): Adam with global gradient-norm clipping and cosine
// learning-rate decay, one call for every parameter tensor of a model.
//
// Conventions (the same as PyTorch, so a C++ app and a torch training loop follow one trajectory):
// - the update is torch.optim.Adam's (bias-corrected moments, eps added outside the square root,
//   weight decay as L2: g ← g + weight_decay·p) applied after torch.nn.utils.clip_grad_norm_
//   (scale = min(1, max_grad_norm / (norm + 1e-6)) over the global L2 norm of all gradients), with
//   the learning rate of torch.optim.lr_scheduler.CosineAnnealingLR (eta_min = 0, T_max =
//   total_steps) stepped after each update.
// - the step counter lives in device memory (an int64 tensor of one element on the parameters'
//   device) and is read and incremented by the call itself, so the call keeps no host-side state,
//   never synchronises, and can be captured in a CUDA graph and replayed.
// - dtypes: float32 or float64, every tensor of one call the same dtype (the counter is int64);
//   CPU (OpenMP) or CUDA, every tensor of one call on the same device.
// - layout: `param`, `grad`, `exp_avg` and `exp_avg_sq` of one entry have the same shape and are
//   contiguous (the update runs over flat element ranges). Tensors may be empty. No tensor the
//   call writes (params, moments, step, grad_norm_out) may share memory with any other tensor of
//   the call; gradients may share memory with each other. Both are checked (ValueError).
// - determinism: the global norm is a reduction in an order fixed by the tensor sizes (float64
//   partial sums per block, then a fixed-order sum; no float atomics), so repeated calls on the
//   same inputs give the same bits. CPU and CUDA agree to rounding, not bit for bit.
// - the caller allocates a workspace of `adam_workspace_size` bytes (device memory for CUDA
//   tensors, host memory for CPU tensors, 8-byte aligned as any allocator's memory is); the
//   library never allocates. It needs no initialisation; a captured CUDA graph keeps using the
//   workspace it was captured with, so it must outlive the graph.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"

namespace fieldfuse {

/// One parameter tensor with its gradient and its two Adam moment buffers, all the same shape,
/// dtype and device, all contiguous. `param`, `exp_avg` and `exp_avg_sq` are updated in place;
/// `grad` is only read. The moments start at zero (a fresh optimiser state).
struct AdamParam {
  TensorRef param, grad, exp_avg, exp_avg_sq;
  double lr = 1e-3;  ///< base learning rate of this tensor (per-group rates), finite and >= 0
};

struct AdamOptions {
  double beta1 = 0.9;    ///< in [0, 1)
  double beta2 = 0.999;  ///< in [0, 1)
  double eps = 1e-8;     ///< finite, >= 0
  /// L2 penalty as torch.optim.Adam (added to the gradient after clipping), finite, >= 0.
  double weight_decay = 0.0;
  /// > 0: scale all gradients by min(1, max_grad_norm / (norm + 1e-6)) with `norm` the global L2
  /// norm of every gradient (torch.nn.utils.clip_grad_norm_); 0: no clipping. Finite, >= 0.
  double max_grad_norm = 0.0;
  /// > 0: cosine decay lr_t = lr·0.5·(1 + cos(π·min(t, T)/T)) with T = total_steps and t the
  /// 0-based step index before this update; 0: constant learning rate. >= 0.
  int64_t total_steps = 0;
};

/// Workspace bytes `adam_step` needs for these tensors (>= 8). Reads only the metadata of
/// `params` (data pointers may be null). `count` >= 0.
std::size_t adam_workspace_size(const AdamParam* params, int count);

/// One Adam update of every tensor in `params[0 .. count)`.
///
/// `step` is an int64 tensor of one element on the parameters' device holding t, the number of
/// updates done so far (0 for a fresh optimiser); the call uses it for the bias corrections
/// (1 − beta^(t+1)) and the cosine factor, then stores t + 1. `grad_norm_out` is optional (a
/// default-constructed TensorRef means none): a float32 or float64 tensor of one element on the
/// same device that receives the global L2 norm of the gradients before clipping (computed whenever
/// it is given or clipping is on). A non-finite norm goes into the clip scale as in PyTorch
/// (clip_grad_norm_ with error_if_nonfinite = False): with clipping on, a NaN gradient makes every
/// parameter NaN. t must be >= 0; it is not checked (reading it would synchronise).
void adam_step(const AdamParam* params, int count, const AdamOptions& options,
               const TensorRef& step, const TensorRef& grad_norm_out, void* workspace,
               std::size_t workspace_bytes, Stream stream = {});

}  // namespace fieldfuse
