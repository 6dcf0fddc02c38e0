// SPDX-License-Identifier: Apache-2.0
// The CUDA SIMT driver's path for a readout: one layer with one output, y = σ(w·x + b), as the
// tomography decoder (K-Planes features → density) uses. A matrix–vector product is memory-bound,
// so it runs as plain streaming kernels instead of the padded 16-wide warp-fused tiles.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "core/warp.cuh"
#include "mlp/mlp_drivers.h"
#include "mlp/mlp_math.h"

namespace fieldfuse::detail::mlp::readout {

// Note [mlp readout]
// The warp-fused kernels pad every layer's output width to 16, so a 32 → 1 layer does 16× the
// products it needs and its backward accumulates 16 rows of dW; on the tomography step's 1.1 M rows
// that was 0.19 ms forward and 0.43 ms backward on an H100, several times the time to stream x.
// Here each warp is cut into segments of W lanes (W the power of two >= min(in, 32)), one row per
// segment, so a warp reads 32/W rows × W consecutive columns at a time (coalesced for a contiguous
// x); lane c of a segment owns the J = ceil(in / W) columns c, c + W, ... and, to keep enough
// loads in flight, U = kLaneValues / J rows per step (all loaded before any is used):
// - p = b + Σ over the segment's lanes of their Σ_j w_k·x_k, combined by a fixed xor butterfly
//   (every lane of the segment gets p); y = σ(p) (forward);
// - backward: δ = g·σ′(p); grad_x[r, k] = δ·w_k; dW_k += δ·x_k from the x the lane still holds;
//   db += δ once per row. The lanes' dW (and db) are summed across a warp's segments by a fixed
//   butterfly, across the block's warps in warp order in shared memory, and each block writes its
//   partial (double) to the workspace; finish_kernel sums the partials in block order with one
//   fixed warp reduction per column. The grid is a fixed function of the batch, so the bits do not
//   change between runs.
// With one row per warp step (U = 1) the loads of a warp were one 128-byte row at a time and the
// kernels ran at a quarter of the bandwidth (0.31 ms forward on the step above); U rows in flight
// per lane is what makes them stream.
// Rows of contiguous x (column stride 1, row stride and base 16-byte aligned, in a multiple of the
// vector) are read (and grad_x written) V = 16 / sizeof(T) columns at a time: lane c's columns are
// then (c + j·W)·V + v, W the power of two >= min(in / V, 32). At in = 32 float32 that is 8 lanes a
// row, 4 rows a warp instruction, and a butterfly of 3 steps instead of 5: with one scalar a
// lane the kernels were bound by their shuffles and index arithmetic (70 % SM throughput, 1.2 TB/s
// on the tomography step's 1.1 M rows on an H100).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / cuda::kWarpSize;
constexpr int kLaneValues = 8;         ///< x values a lane holds per step, scalar columns
constexpr int kVectorLaneValues = 16;  ///< the same for vector columns (U rows × J × V)
constexpr int kMaxInputs = kLaneValues * cuda::kWarpSize;  ///< widest input (J = 8, U = 1)
constexpr int64_t kMaxBlocks = 1024;  ///< persistent grid (partials: blocks·(in + 1))

/// Whether the problem is a readout this path runs: one float32/float64 layer, one output.
inline bool applies(const Problem& p) {
  return p.num_layers == 1 && p.layers[0].out == 1 && p.layers[0].in >= 1 &&
         p.layers[0].in <= kMaxInputs && p.compute_dtype == p.dtype;
}

/// V for contiguous rows: the columns of one 16-byte load.
template <class T>
constexpr int vector_width() {
  return static_cast<int>(16 / sizeof(T));
}

/// log2 of the segment width W for `units` columns (or vectors of columns) a row.
inline int segment_log2(int64_t units) {
  int log2 = 0;
  while ((int64_t{1} << log2) < units && log2 < 5) ++log2;
  return log2;
}

/// J, the units per lane: ceil(units / W) rounded up to a power of two (1, 2, 4 or 8).
inline int columns_per_lane(int64_t units) {
  const int64_t w = int64_t{1} << segment_log2(units);
  int j = 1;
  while (j * w < units) j *= 2;
  return j;
}

/// U, the rows a lane holds per step with J units of V columns.
constexpr int rows_per_step(int j, int v) {
  const int values = v == 1 ? kLaneValues : kVectorLaneValues;
  return values / (j * v) > 1 ? values / (j * v) : 1;
}

/// The persistent grid for `in` inputs read V columns at a time (a fixed function of the problem,
/// so the partials' order, and the bits, do not change between runs).
inline int64_t blocks_for(int64_t batch, int64_t in, int v) {
  const int64_t units = in / v, j = columns_per_lane(units);
  const int64_t rows_per_warp =
      int64_t{rows_per_step(static_cast<int>(j), v)} * (cuda::kWarpSize >> segment_log2(units));
  const int64_t needed = (batch + kWarps * rows_per_warp - 1) / (kWarps * rows_per_warp);
  return needed < 1 ? 1 : needed < kMaxBlocks ? needed : kMaxBlocks;
}

/// Backward workspace: the blocks' partial [in + 1] sums (dW then db), double, for whichever
/// column width the call's strides allow (the query sees no pointers).
inline std::size_t backward_workspace_bytes(const Problem& p) {
  const int64_t in = p.layers[0].in;
  const int v = p.dtype == DType::Float64 ? vector_width<double>() : vector_width<float>();
  const int64_t blocks =
      std::max(blocks_for(p.batch, in, 1), in % v == 0 ? blocks_for(p.batch, in, v) : int64_t{1});
  return static_cast<std::size_t>(blocks * (in + 1)) * sizeof(double);
}

template <class T>
struct Readout {
  int64_t batch = 0, in = 0;
  int64_t units = 0;  ///< in / V
  int log2_w = 0;     ///< segment width W = 1 << log2_w
  const T* x = nullptr;
  int64_t x_row = 0, x_col = 0;
  const T* w = nullptr;
  int64_t w_stride = 0;
  const T* b = nullptr;  ///< null: no bias
};

/// One lane's place in the grid for J units of V columns per lane: the rows it reads each step are
/// first + u·segments + step·n for u < U.
template <int J, int V>
struct LanePlace {
  static constexpr int kRows = rows_per_step(J, V);  ///< U
  int64_t first, step;  ///< the warp's first row, and the rows the grid covers per step
  int segments;         ///< segments per warp (32 / W)
  int segment, c;       ///< this lane's segment and unit offset

  template <class T>
  __device__ FF_FORCE_INLINE explicit LanePlace(const Readout<T>& r) {
    const int lane = cuda::lane_id();
    segments = cuda::kWarpSize >> r.log2_w;
    segment = lane >> r.log2_w;
    c = lane & ((1 << r.log2_w) - 1);
    const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / cuda::kWarpSize;
    first = warp * kRows * segments;
    step = static_cast<int64_t>(gridDim.x) * kWarps * kRows * segments;
  }
  __device__ FF_FORCE_INLINE int64_t row(int64_t base, int u) const {
    return base + u * segments + segment;
  }
  /// The unit of the lane's j-th slot (its columns are unit·V .. unit·V + V − 1).
  __device__ FF_FORCE_INLINE int64_t unit(int j, int log2_w) const {
    return c + (int64_t{j} << log2_w);
  }
};

/// V consecutive values from p (one 16-byte load for V > 1: p is 16-byte aligned).
template <int V, class T>
__device__ FF_FORCE_INLINE void load_vector(const T* p, T (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = *p;
  } else if constexpr (std::is_same_v<T, float>) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    const double2 q = *reinterpret_cast<const double2*>(p);
    v[0] = q.x, v[1] = q.y;
  }
}

template <int V, class T>
__device__ FF_FORCE_INLINE void store_vector(T* p, const T (&v)[V]) {
  if constexpr (V == 1) {
    *p = v[0];
  } else if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *reinterpret_cast<double2*>(p) = make_double2(v[0], v[1]);
  }
}

/// Loads the lane's weights (0 past the input width).
template <class T, int J, int V>
__device__ FF_FORCE_INLINE void load_weights(const Readout<T>& r, const LanePlace<J, V>& at,
                                             T (&w)[J][V]) {
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t k = at.unit(j, r.log2_w) * V + v;
      w[j][v] = k < r.in ? r.w[k * r.w_stride] : T(0);
    }
  }
}

/// Loads the lane's x for U rows from `base` (0 past the row's end or the batch).
template <class T, int J, int V>
__device__ FF_FORCE_INLINE void load_rows(const Readout<T>& r, const LanePlace<J, V>& at,
                                          int64_t base, T (&x)[LanePlace<J, V>::kRows][J][V]) {
#pragma unroll
  for (int u = 0; u < LanePlace<J, V>::kRows; ++u) {
    const int64_t row = at.row(base, u);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t unit = at.unit(j, r.log2_w);
      if (row < r.batch && unit < r.units) {
        if constexpr (V == 1) {
          x[u][j][0] = r.x[row * r.x_row + unit * r.x_col];
        } else {
          load_vector<V>(r.x + row * r.x_row + unit * V, x[u][j]);
        }
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) x[u][j][v] = T(0);
      }
    }
  }
}

/// p of row u: the bias plus the segment's butterfly sum of its lanes' Σ w_k·x_k.
template <class T, int J, int V>
__device__ FF_FORCE_INLINE T pre_activation(const Readout<T>& r, T bias, const T (&w)[J][V],
                                            const T (&x)[J][V]) {
  T partial = 0;
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int v = 0; v < V; ++v) partial += w[j][v] * x[j][v];
  }
  return bias + cuda::group_sum(partial, r.log2_w);
}

template <class T, int J, int V, class Act>
__global__ void __launch_bounds__(kThreads) forward_kernel(Readout<T> r, Act act, T* out) {
  using Place = LanePlace<J, V>;
  constexpr int U = Place::kRows;
  const Place at(r);
  T w[J][V], x[U][J][V];
  load_weights(r, at, w);
  const T bias = r.b != nullptr ? *r.b : T(0);
  // Whole warps run every step (the butterflies need all lanes): rows past the batch load zeros.
  for (int64_t base = at.first; base < r.batch; base += at.step) {
    load_rows(r, at, base, x);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const T p = pre_activation(r, bias, w, x[u]);
      const int64_t row = at.row(base, u);
      if (at.c == 0 && row < r.batch) out[row] = act.value(p);
    }
  }
}

template <class T, int J, int V, class Act>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(Readout<T> r, Act act, MatrixView grad_out, T* grad_x, double* partials) {
  using Place = LanePlace<J, V>;
  constexpr int U = Place::kRows;
  __shared__ T warp_sums[kWarps][kMaxInputs + 1];
  const Place at(r);
  T w[J][V], x[U][J][V], dw[J][V] = {}, db = 0;
  load_weights(r, at, w);
  const T bias = r.b != nullptr ? *r.b : T(0);
  const T* g = static_cast<const T*>(grad_out.data);
  for (int64_t base = at.first; base < r.batch; base += at.step) {
    load_rows(r, at, base, x);
    T upstream[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t row = at.row(base, u);
      upstream[u] = row < r.batch ? g[row * grad_out.stride_row] : T(0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t row = at.row(base, u);
      const T delta = upstream[u] * act.d1(pre_activation(r, bias, w, x[u]));
#pragma unroll
      for (int j = 0; j < J; ++j) {
        T gx[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          dw[j][v] += delta * x[u][j][v];
          gx[v] = delta * w[j][v];
        }
        const int64_t unit = at.unit(j, r.log2_w);
        if (grad_x != nullptr && row < r.batch && unit < r.units) {
          store_vector<V>(grad_x + row * r.in + unit * V, gx);
        }
      }
      if (at.c == 0) db += delta;  // rows past the batch have δ = 0
    }
  }
  // Across the warp's segments (lanes with the same c), then across warps in warp order.
  const int warp = static_cast<int>(threadIdx.x / cuda::kWarpSize);
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      T sum = dw[j][v];
      for (int offset = 1 << r.log2_w; offset < cuda::kWarpSize; offset <<= 1) {
        sum += __shfl_xor_sync(cuda::kFullWarp, sum, offset);
      }
      const int64_t k = at.unit(j, r.log2_w) * V + v;
      if (at.segment == 0 && k < r.in) warp_sums[warp][k] = sum;
    }
  }
  db = cuda::warp_sum(db);  // lanes with c != 0 hold 0
  if (cuda::lane_id() == 0) warp_sums[warp][r.in] = db;
  __syncthreads();
  double* out = partials + static_cast<int64_t>(blockIdx.x) * (r.in + 1);
  for (int64_t k = threadIdx.x; k <= r.in; k += kThreads) {
    double sum = 0;
    for (int q = 0; q < kWarps; ++q) sum += static_cast<double>(warp_sums[q][k]);
    out[k] = sum;
  }
}

/// dW_k and db from the blocks' partials: one warp per column, lanes over blocks, a fixed
/// butterfly.
template <class T>
__global__ void finish_kernel(const double* partials, int64_t blocks, int64_t in, T* grad_w,
                              T* grad_b) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / cuda::kWarpSize;
  if (column > in) return;  // whole warps leave together
  double sum = 0;
  for (int64_t q = cuda::lane_id(); q < blocks; q += cuda::kWarpSize) {
    sum += partials[q * (in + 1) + column];
  }
  sum = cuda::warp_sum(sum);
  if (cuda::lane_id() != 0) return;
  if (column < in && grad_w != nullptr) grad_w[column] = static_cast<T>(sum);
  if (column == in && grad_b != nullptr) *grad_b = static_cast<T>(sum);
}

/// Calls run(J) with J the units per lane as an integral constant, J <= kMaxJ (columns of V > 1
/// number at most kMaxInputs / 2 units, so J <= 4 there).
template <int kMaxJ, class Run>
void visit_columns(int64_t units, const Run& run) {
  switch (columns_per_lane(units)) {
    case 1:
      return run(std::integral_constant<int, 1>{});
    case 2:
      return run(std::integral_constant<int, 2>{});
    case 4:
      return run(std::integral_constant<int, 4>{});
    default:
      return run(std::integral_constant<int, kMaxJ>{});
  }
}

/// V for this call: vector_width<T>() when x's rows are contiguous, 16-byte aligned and a whole
/// number of vectors long (and grad_x, when written, is aligned too), else 1.
template <class T>
int vector_of(const Problem& p, const MatrixView& x, const void* grad_x) {
  constexpr int v = vector_width<T>();
  const auto aligned = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  const bool fits = p.layers[0].in % v == 0 && x.stride_col == 1 && x.stride_row % v == 0 &&
                    aligned(x.data) && (grad_x == nullptr || aligned(grad_x));
  return fits ? v : 1;
}

template <class T>
Readout<T> readout_of(const Problem& p, const MatrixView& x, int v) {
  const LayerView& layer = p.layers[0];
  Readout<T> r;
  r.batch = p.batch;
  r.in = layer.in;
  r.units = layer.in / v;
  r.log2_w = segment_log2(r.units);
  r.x = static_cast<const T*>(x.data);
  r.x_row = x.stride_row;
  r.x_col = x.stride_col;
  r.w = static_cast<const T*>(layer.weight);
  r.w_stride = layer.weight_stride_in;
  r.b = static_cast<const T*>(layer.bias);
  return r;
}

/// Calls run(J, V) as integral constants for the call's layout.
template <class T, class Run>
void visit_layout(const Readout<T>& r, int v, const Run& run) {
  if (v == 1) {
    visit_columns<8>(r.units, [&](auto j) { run(j, std::integral_constant<int, 1>{}); });
  } else {
    visit_columns<4>(r.units,
                     [&](auto j) { run(j, std::integral_constant<int, vector_width<T>()>{}); });
  }
}

template <class T>
void forward(const ForwardArgs& a) {
  const Problem& p = a.problem;
  if (p.batch == 0) return;
  cuda::ProfileRange range(p.op);
  cuda::DeviceGuard guard(p.device.index, p.op);
  const cudaStream_t stream = static_cast<cudaStream_t>(a.stream.handle);
  const int v = vector_of<T>(p, a.x, nullptr);
  const Readout<T> r = readout_of<T>(p, a.x, v);
  const unsigned blocks = static_cast<unsigned>(blocks_for(p.batch, r.in, v));
  visit_activation<T>(p.output_activation, p.params, [&](auto act) {
    visit_layout(r, v, [&](auto columns, auto width) {
      forward_kernel<T, decltype(columns)::value, decltype(width)::value>
          <<<blocks, kThreads, 0, stream>>>(r, act, static_cast<T*>(a.out));
    });
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
  const int v = vector_of<T>(p, a.x, a.grad_x);
  const int64_t blocks = blocks_for(p.batch, layer.in, v), in = layer.in;
  auto* partials = static_cast<double*>(a.workspace);
  const Readout<T> r = readout_of<T>(p, a.x, v);
  // With no rows each block's partial is written as zero, so the sums are 0 (the contract).
  visit_activation<T>(p.output_activation, p.params, [&](auto act) {
    visit_layout(r, v, [&](auto columns, auto width) {
      backward_kernel<T, decltype(columns)::value, decltype(width)::value>
          <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
              r, act, a.grad_out, static_cast<T*>(a.grad_x), partials);
    });
  });
  cuda::check_launch(p.op, "mlp readout backward_kernel", stream);
  if (layer.grad_weight == nullptr && layer.grad_bias == nullptr) return;
  finish_kernel<T><<<static_cast<unsigned>((in + 1 + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      partials, blocks, in, static_cast<T*>(layer.grad_weight), static_cast<T*>(layer.grad_bias));
  cuda::check_launch(p.op, "mlp readout finish_kernel", stream);
}

}  // namespace fieldfuse::detail::mlp::readout
