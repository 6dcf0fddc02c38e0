// SPDX-License-Identifier: Apache-2.0
// The CUDA SIMT driver's path for a readout: one layer with one output, y = σ(w·x + b), as the
// tomography decoder (K-Planes features → density) uses. A matrix–vector product is memory-bound,
// so it runs as plain streaming kernels instead of the padded 16-wide warp-fused tiles.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda_launch.cuh"
#include "mlp/mlp_drivers.h"
#include "mlp/mlp_math.h"

namespace fieldfuse::detail::mlp::readout {

// Note [mlp readout]
// The warp-fused kernels pad every layer's output width to 16, so a 32 → 1 layer does 16× the
// products it needs and its backward accumulates 16 rows of dW; on the tomography step's 1.1 M rows
// that was 0.19 ms forward and 0.43 ms backward on an H100, several times the time to stream x.
// Here a block takes kRows rows at a time:
// - each thread owns one row: p = b + Σ_k w_k·x_k (k in order, as the fused FMA path does),
//   y = σ(p) (forward) or δ = g·σ′(p) (backward, into shared memory);
// - backward: the block's threads then take (row group, column) pairs so that a warp reads
//   consecutive columns of a row (coalesced when x is contiguous): grad_x[r, k] = δ_r·w_k, and
//   each thread sums δ_r·x[r, k] over its rows for dW_k (float32, like the fused path's float32
//   accumulators); the groups' sums and the δ column sums for db meet in shared memory in a fixed
//   order, and each block writes its partial (double) to the workspace;
// - a second kernel sums the blocks' partials in block order (deterministic, no atomics).
constexpr int kThreads = 256;
constexpr int kRows = kThreads;       ///< rows per block step: one per thread in the dot products
constexpr int kMaxInputs = kThreads;  ///< widest input the column mapping covers
constexpr int64_t kMaxBlocks = 1024;  ///< persistent grid (partials: kMaxBlocks·(in + 1) doubles)

/// Whether the problem is a readout this path runs: one float32/float64 layer, one output.
inline bool applies(const Problem& p) {
  return p.num_layers == 1 && p.layers[0].out == 1 && p.layers[0].in >= 1 &&
         p.layers[0].in <= kMaxInputs && p.compute_dtype == p.dtype;
}

inline int64_t blocks_for(int64_t batch) {
  const int64_t needed = (batch + kRows - 1) / kRows;
  return needed < 1 ? 1 : needed < kMaxBlocks ? needed : kMaxBlocks;
}

/// Backward workspace: the blocks' partial [in + 1] sums (dW then db), double.
inline std::size_t backward_workspace_bytes(const Problem& p) {
  return static_cast<std::size_t>(blocks_for(p.batch) * (p.layers[0].in + 1)) * sizeof(double);
}

template <class T>
struct Readout {
  int64_t batch = 0, in = 0;
  const T* x = nullptr;
  int64_t x_row = 0, x_col = 0;
  const T* w = nullptr;
  int64_t w_stride = 0;
  const T* b = nullptr;  ///< null: no bias

  __device__ FF_FORCE_INLINE T pre_activation(int64_t row) const {
    const T* xr = x + row * x_row;
    T p = b != nullptr ? *b : T(0);
    for (int64_t k = 0; k < in; ++k) p += w[k * w_stride] * xr[k * x_col];
    return p;
  }
};

template <class T>
Readout<T> readout_of(const Problem& p, const MatrixView& x) {
  const LayerView& layer = p.layers[0];
  Readout<T> r;
  r.batch = p.batch;
  r.in = layer.in;
  r.x = static_cast<const T*>(x.data);
  r.x_row = x.stride_row;
  r.x_col = x.stride_col;
  r.w = static_cast<const T*>(layer.weight);
  r.w_stride = layer.weight_stride_in;
  r.b = static_cast<const T*>(layer.bias);
  return r;
}

template <class T, class Act>
__global__ void __launch_bounds__(kThreads) forward_kernel(Readout<T> r, Act act, T* out) {
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; row < r.batch;
       row += static_cast<int64_t>(gridDim.x) * kThreads) {
    out[row] = act.value(r.pre_activation(row));
  }
}

template <class T, class Act>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(Readout<T> r, Act act, MatrixView grad_out, T* grad_x, double* partials) {
  __shared__ T delta[kRows];
  __shared__ T column_sums[kThreads];
  __shared__ T delta_sums[kThreads];
  const int64_t in = r.in;
  const int groups = static_cast<int>(kThreads / in);  // >= 1: in <= kMaxInputs
  const int group = static_cast<int>(threadIdx.x / in), k = static_cast<int>(threadIdx.x % in);
  const bool column_thread = group < groups;
  const T w_k = column_thread ? r.w[k * r.w_stride] : T(0);
  const T* g = static_cast<const T*>(grad_out.data);
  T dw = 0, db = 0;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kRows; first < r.batch;
       first += static_cast<int64_t>(gridDim.x) * kRows) {
    const int64_t row = first + threadIdx.x;
    T d = 0;
    if (row < r.batch) d = g[row * grad_out.stride_row] * act.d1(r.pre_activation(row));
    delta[threadIdx.x] = d;
    db += d;
    __syncthreads();
    if (column_thread) {
      const int rows = static_cast<int>(r.batch - first < kRows ? r.batch - first : kRows);
      for (int i = group; i < rows; i += groups) {
        const T d_i = delta[i];
        const int64_t row_i = first + i;
        dw += d_i * r.x[row_i * r.x_row + k * r.x_col];
        if (grad_x != nullptr) grad_x[row_i * in + k] = d_i * w_k;
      }
    }
    __syncthreads();  // delta is rewritten by the next step
  }
  column_sums[threadIdx.x] = dw;
  delta_sums[threadIdx.x] = db;
  __syncthreads();
  // Fixed order: column k sums its groups 0, 1, ...; db sums the threads 0, 1, ...
  double* out = partials + static_cast<int64_t>(blockIdx.x) * (in + 1);
  for (int64_t c = threadIdx.x; c < in; c += kThreads) {
    double sum = 0;
    for (int q = 0; q < groups; ++q) sum += static_cast<double>(column_sums[q * in + c]);
    out[c] = sum;
  }
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int t = 0; t < kThreads; ++t) sum += static_cast<double>(delta_sums[t]);
    out[in] = sum;
  }
}

/// dW_k and db from the blocks' partials, summed in block order.
template <class T>
__global__ void finish_kernel(const double* partials, int64_t blocks, int64_t in, T* grad_w,
                              T* grad_b) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c > in) return;
  double sum = 0;
  for (int64_t q = 0; q < blocks; ++q) sum += partials[q * (in + 1) + c];
  if (c < in && grad_w != nullptr) grad_w[c] = static_cast<T>(sum);
  if (c == in && grad_b != nullptr) *grad_b = static_cast<T>(sum);
}

template <class T>
void forward(const ForwardArgs& a) {
  const Problem& p = a.problem;
  if (p.batch == 0) return;
  cuda::ProfileRange range(p.op);
  cuda::DeviceGuard guard(p.device.index, p.op);
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream.handle);
  const Readout<T> r = readout_of<T>(p, a.x);
  visit_activation<T>(p.output_activation, p.params, [&](auto act) {
    forward_kernel<<<static_cast<unsigned>(blocks_for(p.batch)), kThreads, 0, stream>>>(
        r, act, static_cast<T*>(a.out));
  });
  cuda::check_launch(p.op, "mlp readout forward_kernel", stream);
}

template <class T>
void backward(const BackwardArgs& a) {
  const Problem& p = a.problem;
  const LayerView& layer = p.layers[0];
  cuda::ProfileRange range(p.op);
  cuda::DeviceGuard guard(p.device.index, p.op);
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream.handle);
  const int64_t blocks = blocks_for(p.batch), in = layer.in;
  auto* partials = static_cast<double*>(a.workspace);
  const Readout<T> r = readout_of<T>(p, a.x);
  // With no rows each block's partial is written as zero, so the sums are 0 (the contract).
  visit_activation<T>(p.output_activation, p.params, [&](auto act) {
    backward_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        r, act, a.grad_out, static_cast<T*>(a.grad_x), partials);
  });
  cuda::check_launch(p.op, "mlp readout backward_kernel", stream);
  if (layer.grad_weight == nullptr && layer.grad_bias == nullptr) return;
  finish_kernel<T><<<static_cast<unsigned>((in + 1 + 127) / 128), 128, 0, stream>>>(
      partials, blocks, in, static_cast<T*>(layer.grad_weight), static_cast<T*>(layer.grad_bias));
  cuda::check_launch(p.op, "mlp readout finish_kernel", stream);
}

}  // namespace fieldfuse::detail::mlp::readout
