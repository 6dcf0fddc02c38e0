// SPDX-License-Identifier: Apache-2.0
// The interface between the MLP front (mlp.cpp), which validates and describes the network, and
// the CPU, CUDA (SIMT) and CUDA tensor-core drivers, which only iterate and reduce.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/macros.h"
#include "fieldfuse/core.h"
#include "mlp/mlp_math.h"

namespace fieldfuse::detail::mlp {

// Note [mlp recompute]
// Nothing is saved between the forward and the backward: each backward entry recomputes the
// forward sweep for its own block of rows (the pre-activations p_k, and in the double backward
// the first reverse sweep's g_k too) and keeps it in block-local scratch. Why not save p_k as an
// extra forward output:
// - memory traffic: saving p_k writes and re-reads B·Σ out_k values; for 32 → 64×4 → 16 at
//   B = 2^18 that is 285 MB in float32 (~0.2 ms of H100 bandwidth), while recomputing is
//   ~15k multiply-adds per row (~0.01 ms on tensor cores). Small MLPs are bandwidth bound, so
//   recomputing is the faster choice on the GPU, and on the CPU the recomputed block stays in
//   cache (one extra forward, ~1/4 of a fused forward + backward);
// - memory footprint: a 5-layer width-256 network on 2^20 points would keep 5 GB of state alive;
// - interface: the backward and double backward take exactly the forward's inputs plus upstream
//   gradients, so the autograd graph holds only x, weights and biases, and the double backward
//   (which also needs g_k from the first reverse sweep) needs no second kind of saved output.

/// One layer `p = W a + b` as the drivers see it. Weights and biases are read through their
/// strides; gradient outputs are contiguous and fully written.
struct LayerView {
  int64_t in = 0, out = 0;
  const void* weight = nullptr;  ///< [out, in] in Problem::dtype
  int64_t weight_stride_out = 0, weight_stride_in = 0;
  const void* bias = nullptr;  ///< [out] in Problem::dtype, or null: no bias
  int64_t bias_stride = 0;
  void* grad_weight = nullptr;  ///< backward entries: contiguous [out, in], or null (not wanted)
  void* grad_bias = nullptr;  ///< backward entries: contiguous [out], or null (not wanted/no bias)
  /// Double backward only: V_k = dL2/d(grad_weight) [out, in] and c_k = dL2/d(grad_bias) [out]
  /// in Problem::dtype through their strides, or null (zero).
  const void* grad_grad_weight = nullptr;
  int64_t grad_grad_weight_stride_out = 0, grad_grad_weight_stride_in = 0;
  const void* grad_grad_bias = nullptr;
  int64_t grad_grad_bias_stride = 0;
};

/// A strided `[batch, cols]` input matrix (x, grad_out, grad_grad_x); element strides.
struct MatrixView {
  const void* data = nullptr;
  int64_t stride_row = 0, stride_col = 0;
};

/// A validated network and batch. Built from metadata only for the workspace queries (data and
/// gradient pointers may then be null).
struct Problem {
  const char* op = "";                   ///< public name, for errors and profiler ranges
  DType dtype = DType::Float32;          ///< x, weights, biases, every output: float32 or float64
  DType compute_dtype = DType::Float32;  ///< == dtype, or Float16/BFloat16 (dtype is then Float32)
  Device device{};
  int64_t batch = 0;  ///< B >= 0
  int num_layers = 0;
  /// Host memory, num_layers entries, valid only during the call: a CUDA driver must not read it
  /// asynchronously (pass what kernels need by value, or launch per layer).
  const LayerView* layers = nullptr;
  Activation activation = Activation::ReLU;         ///< hidden layers 0..L−2
  Activation output_activation = Activation::None;  ///< layer L−1
  ActivationParams params{};

  Activation activation_of(int k) const {
    return k + 1 == num_layers ? output_activation : activation;
  }
  int64_t in_features() const { return layers[0].in; }
  int64_t out_features() const { return layers[num_layers - 1].out; }
};

/// y = a_L into `out`, contiguous [batch, out_features()].
struct ForwardArgs {
  Problem problem;
  MatrixView x;  ///< [batch, in_features()]
  void* out = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Stream stream{};
};

/// The first-order backward (include/fieldfuse/mlp.h): grad_x = g_0 (contiguous [batch, in], or
/// null), and the layers' grad_weight / grad_bias where non-null. Parameter gradients are sums over
/// every row (zero when batch == 0).
struct BackwardArgs {
  Problem problem;
  MatrixView x;
  MatrixView grad_out;  ///< g_L [batch, out_features()]
  void* grad_x = nullptr;
  void* out = nullptr;  ///< y (contiguous [batch, out_features()]), or null
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Stream stream{};
};

/// The double backward (four steps, include/fieldfuse/mlp.h, with the layers' grad_grad_weight
/// V_k and grad_grad_bias c_k where non-null, and r_L = grad_y where its data is): grad_grad_out =
/// t_L (contiguous [batch, out_features()], or null), grad_x = r_0 (contiguous [batch, in], or
/// null), the layers' grad_weight = Σ(δ_k t_{k−1}ᵀ + q_k a_{k−1}ᵀ) and grad_bias = Σ q_k where
/// non-null.
struct DoubleBackwardArgs {
  Problem problem;
  MatrixView x;
  MatrixView grad_out;     ///< g_L [batch, out_features()]
  MatrixView grad_grad_x;  ///< v = t_0 [batch, in_features()]
  MatrixView grad_y;       ///< r_L [batch, out_features()]; data null: zero
  void* grad_grad_out = nullptr;
  void* grad_x = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Stream stream{};
};

// --- CPU (mlp_cpu.cpp): float32 and float64 -------------------------------------------------

std::size_t forward_workspace_cpu(const Problem& problem);
std::size_t backward_workspace_cpu(const Problem& problem);
std::size_t double_backward_workspace_cpu(const Problem& problem);
void forward_cpu(const ForwardArgs& args);
void backward_cpu(const BackwardArgs& args);
void double_backward_cpu(const DoubleBackwardArgs& args);

#if FIELDFUSE_WITH_CUDA
// --- CUDA SIMT (mlp_cuda.cu): float32 and float64, compute_dtype == dtype -------------------

std::size_t forward_workspace_cuda(const Problem& problem);
std::size_t backward_workspace_cuda(const Problem& problem);
std::size_t double_backward_workspace_cuda(const Problem& problem);
void forward_cuda(const ForwardArgs& args);
void backward_cuda(const BackwardArgs& args);
void double_backward_cuda(const DoubleBackwardArgs& args);

// --- CUDA tensor cores (mlp_cuda_tensor_core.cu): compute_dtype Float16 / BFloat16 ----------
// Contract for the implementer (the front calls these only with problem.compute_dtype 16-bit,
// problem.dtype == Float32, a CUDA device, and every argument validated as above):
// - inputs: x [batch, in] float32 read through MatrixView strides (any, possibly non-contiguous);
//   weights [out_k, in_k] float32 masters and biases [out_k] float32 (or null) read through the
//   LayerView strides; grad_out / grad_grad_x and the layers' grad_grad_weight / grad_grad_bias
//   (double backward, null = zero) float32 through their strides.
// - math: identical to the float32 SIMT path and to mlp_math.h (the one definition of σ, σ′, σ″;
//   evaluate them in float32): each matrix product takes its operands rounded to compute_dtype
//   (weights converted from the masters, activations/tangents/gradients rounded as they enter a
//   product) and accumulates in float32; bias adds, σ, σ′, σ″ and the elementwise products of the
//   sweeps are float32. No fp16 accumulation anywhere (the spec's point: second order accuracy).
//   The register kernels write the exp-based σ in mlp_math.h's formulas over approximate exp2,
//   log2 and reciprocal instructions (Note [mlp fast math]: errors near 2^-22, far below u).
// - outputs: float32, contiguous, fully written (never accumulated into): out [batch, out_L];
//   grad_x [batch, in]; grad_grad_out [batch, out_L]; grad_weight [out_k, in_k]; grad_bias [out_k];
//   any may be null (skip). Parameter gradients are sums over all rows (zero for batch == 0).
// - determinism: no atomics into outputs; per-block float32 partials in the workspace summed in a
//   fixed order, so one device gives the same bits every call.
// - workspace: `*_workspace_cuda_tensor_core(problem)` bytes (>= 1), from metadata only (fixed for
//   CUDA graphs): converted weights, per-block partial sums, anything else. The caller allocates;
//   no cudaMalloc, no host synchronisation, everything on args.stream; a layer table needed by a
//   kernel is passed by value (problem.layers is host memory valid only during the call).
// - widths: in and out_L arbitrary (>= 1), hidden widths multiples of 16 in [16, 256]; pad
//   internally, never visibly. batch may be 0 (outputs empty; parameter gradients zero-filled).
// Implemented in mlp_cuda_tensor_core.cu over the shared tile kernels of mlp_cuda_tile.cuh.
std::size_t forward_workspace_cuda_tensor_core(const Problem& problem);
std::size_t backward_workspace_cuda_tensor_core(const Problem& problem);
std::size_t double_backward_workspace_cuda_tensor_core(const Problem& problem);
void forward_cuda_tensor_core(const ForwardArgs& args);
void backward_cuda_tensor_core(const BackwardArgs& args);
void double_backward_cuda_tensor_core(const DoubleBackwardArgs& args);
#endif

}  // namespace fieldfuse::detail::mlp
