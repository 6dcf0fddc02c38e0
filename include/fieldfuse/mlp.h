// SPDX-License-Identifier: Apache-2.0
// Fused multilayer perceptron (the `mlp` family) with exact first- and second-order derivatives.
//
// Contracts follow specs/mlp.md. With L = num_layers >= 1, layer k = 1..L computes
//   p_k = W_k a_{k−1} + b_k,   a_k = σ_k(p_k),   a_0 = x,   y = a_L,
// where σ_k is `activation` for the hidden layers k < L and `output_activation` for k = L.
//
// Arguments (named as in the Python function `fieldfuse.mlp(x, weights, biases, *, activation,
// output_activation, softplus_beta, sine_omega0, leaky_slope, compute_dtype)`; every error starts
// with `mlp(): ` from a forward entry or its workspace query, `mlp_backward(): ` and
// `mlp_double_backward(): ` from the others):
// - `x` `[B, in]`, any strides, B >= 0 (B = 0 gives empty outputs and zero parameter gradients).
// - `weights`: `num_layers` tensors, `weights[k]` `[out_k, in_k]` (the torch.nn.Linear layout, any
//   strides) with in_0 = in and in_k = out_{k−1}. Hidden widths out_0..out_{L−2} are multiples of
//   16 from 16 to 256; the input and output widths in and out_{L−1} are any size >= 1.
// - `biases`: null (no biases), or `num_layers` entries where each is `[out_k]` (any stride) or
//   absent (a default-constructed TensorRef: that layer has no bias).
// - `options`: the activations and their parameters (MLPOptions). Activation names: "relu",
//   "leaky_relu" (slope `leaky_slope`), "softplus" (log1p(exp(βp))/β with β = `softplus_beta` > 0,
//   exactly p where βp > 20, as PyTorch), "sine" (sin(ω₀p), ω₀ = `sine_omega0` != 0), "tanh",
//   "sigmoid", "silu", "exp", "none".
// - dtypes: x, weights and biases share one dtype, float32 or float64, on CPU and CUDA; outputs and
//   gradients have that dtype. `compute_dtype` float16/bfloat16 (CUDA only, float32 parameters)
//   runs the matrix products on tensor cores with float32 accumulation; the parameters stay float32
//   masters and every output is float32.
// - outputs (`out`, `grad_*`) are contiguous, on x's device, fully written (never accumulated
//   into), so they may be uninitialised; they must not overlap any input or each other (checked).
// - nothing is saved between calls: each backward recomputes the forward it needs (Note [mlp
//   recompute] in src/mlp/mlp_drivers.h), so the backward entries take exactly the forward's
//   inputs plus the upstream gradients.
// - workspace: every entry takes `<entry>_workspace_size(...)` bytes of scratch (>= 1), device
//   memory for CUDA inputs and host memory for CPU inputs, aligned to 8 bytes (any allocator's
//   memory is). The queries read only metadata (shapes, strides, dtypes, device, options), never
//   data, so the sizes are fixed for a CUDA graph. The library itself never allocates.
// - determinism: parameter gradients are reduced per block of rows into the workspace and the
//   blocks summed in a fixed order (where a kernel adds into its block's slot with atomics, each
//   address has one writer, so the order is still fixed). The same inputs give the same bits on
//   every call of a device, whatever the CPU thread count. CPU and CUDA agree to rounding.
// - all work is enqueued on `stream` for CUDA tensors (no host synchronisation, so CUDA graphs can
//   capture it); CPU calls run to completion with OpenMP.
#pragma once

#include <cstddef>
#include <optional>

#include "fieldfuse/core.h"

namespace fieldfuse {

/// Activations and precision of one MLP; field names are the Python keyword arguments.
struct MLPOptions {
  const char* activation = "relu";         ///< hidden layers
  const char* output_activation = "none";  ///< the last layer
  // Below float64 compute the drivers hold these in float32, so there they must also be normal
  // (softplus_beta, sine_omega0) or finite (leaky_slope) as float32 numbers.
  double softplus_beta = 1.0;  ///< finite, > 0
  double sine_omega0 = 30.0;   ///< finite, != 0
  double leaky_slope = 0.01;   ///< finite
  /// Matrix-product dtype: empty = x's dtype; Float16 or BFloat16 = tensor cores (CUDA only).
  std::optional<DType> compute_dtype;
};

// ---------------------------------------------------------------------------------------------
// Forward: out [B, out_{L−1}] = y.
// ---------------------------------------------------------------------------------------------

std::size_t mlp_forward_workspace_size(const TensorRef& x, const TensorRef* weights,
                                       const TensorRef* biases, int num_layers,
                                       const MLPOptions& options);
void mlp_forward(const TensorRef& x, const TensorRef* weights, const TensorRef* biases,
                 int num_layers, const MLPOptions& options, const TensorRef& out, void* workspace,
                 std::size_t workspace_bytes, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Backward: given `grad_out` g_L = dL/dy [B, out_{L−1}] (any strides),
//   δ_k = g_k ⊙ σ′(p_k),  g_{k−1} = W_kᵀ δ_k,  grad_weights[k] = Σ_rows δ_k a_{k−1}ᵀ,
//   grad_biases[k] = Σ_rows δ_k,  grad_x = g_0.
// A null `grad_x` / `grad_weights` / `grad_biases` skips those gradients (and the work only they
// need); `grad_weights` points to num_layers tensors shaped like the weights, `grad_biases` to
// num_layers entries shaped like the biases (absent where the layer has no bias). A non-null `out`
// [B, out_{L−1}] also receives the forward's output y, which the backward recomputes on its way
// (mlp_value_and_input_grad's y and grad_x come from one call).
// ---------------------------------------------------------------------------------------------

std::size_t mlp_backward_workspace_size(const TensorRef& x, const TensorRef* weights,
                                        const TensorRef* biases, int num_layers,
                                        const MLPOptions& options);
void mlp_backward(const TensorRef& x, const TensorRef* weights, const TensorRef* biases,
                  int num_layers, const MLPOptions& options, const TensorRef& grad_out,
                  const TensorRef* grad_x, const TensorRef* grad_weights,
                  const TensorRef* grad_biases, const TensorRef* out, void* workspace,
                  std::size_t workspace_bytes, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Double backward: the derivative of the backward. Given `grad_out` g_L (as in the backward) and
// the upstream gradients of the backward's outputs, `grad_grad_x` v = dL2/d(grad_x) [B, in] and,
// optionally (null: zero), `grad_grad_weights[k]` V_k = dL2/d(grad_weights[k]) [out_k, in_k] and
// `grad_grad_biases[k]` c_k = dL2/d(grad_biases[k]) [out_k] (entries may be absent: zero), and
// `grad_y` = dL2/dy [B, out_{L−1}] (null: zero), the gradient reaching the network's output y
// itself where the caller also used y (mlp_value_and_input_grad), all with any strides, in four
// steps (specs/mlp.md, "Second-order", extended by the V, c and grad_y terms):
//   1. tangent sweep:   t_0 = v,  u_k = W_k t_{k−1} + V_k a_{k−1} + c_k,  t_k = σ′(p_k) ⊙ u_k
//   2. curvature:       s_k = σ″(p_k) ⊙ g_k ⊙ u_k
//   3. second reverse:  r_L = grad_y,  q_k = σ′(p_k) ⊙ r_k + s_k,  r_{k−1} = W_kᵀ q_k + V_kᵀ δ_k
//   4. parameters:      grad_weights[k] = Σ_rows (δ_k t_{k−1}ᵀ + q_k a_{k−1}ᵀ),
//                       grad_biases[k] = Σ_rows q_k
// outputs `grad_grad_out` = t_L [B, out_{L−1}] (dL2/dg_L) and `grad_x` = r_0 [B, in] (dL2/dx).
// Null outputs are skipped as in the backward. Since r is linear in grad_y, the grad_y terms are
// exactly mlp_backward's gradients for grad_out = grad_y: one call gives a loss on both y and the
// input gradient (an SDF's surface and Eikonal terms) its parameter gradients in one sweep.
// ---------------------------------------------------------------------------------------------

std::size_t mlp_double_backward_workspace_size(const TensorRef& x, const TensorRef* weights,
                                               const TensorRef* biases, int num_layers,
                                               const MLPOptions& options);
void mlp_double_backward(const TensorRef& x, const TensorRef* weights, const TensorRef* biases,
                         int num_layers, const MLPOptions& options, const TensorRef& grad_out,
                         const TensorRef& grad_grad_x, const TensorRef* grad_grad_weights,
                         const TensorRef* grad_grad_biases, const TensorRef* grad_y,
                         const TensorRef* grad_grad_out, const TensorRef* grad_x,
                         const TensorRef* grad_weights, const TensorRef* grad_biases,
                         void* workspace, std::size_t workspace_bytes, Stream stream = {});

}  // namespace fieldfuse
