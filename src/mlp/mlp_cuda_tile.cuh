// SPDX-License-Identifier: Apache-2.0
// The fused row-tile kernels both CUDA MLP drivers share: one block owns a tile of rows and runs
// the whole network (forward, backward or double backward) on it, with a pluggable matrix-product
// engine (SIMT FMA or tensor cores).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/cuda_launch.cuh"
#include "mlp/mlp_drivers.h"

namespace fieldfuse::detail::mlp::tile {

// Note [mlp tile kernel]
// A launch has a persistent grid: block b walks the row tiles b, b + G, b + 2G, ... (G = the grid),
// and for each tile runs the entry's sweeps layer by layer (Note [mlp recompute]): every layer's
// product is a block-wide GEMM (block_gemm) whose operands are staged chunk by chunk into shared
// memory in the engine's operand type (float/double for SIMT, 16-bit for tensor cores, which is
// where the rounding of the tensor-core contract happens) and whose result goes through an
// epilogue (bias, set or accumulate) into the tile state. The tile state (a_k, σ′(p_k), and for the
// double backward σ″ ⊙ g ⊙ u, δ_k and t_k, plus two ping-pong buffers) lives in shared memory when
// it fits in the device's opt-in limit, else in a per-block slot of the workspace; the code is the
// same (generic pointers). Parameter gradients accumulate in a per-block slot of the workspace
// (each element owned by one thread at a time: no atomics) and a second kernel sums the G slots in
// block order, so a device gives the same bits on every call.

constexpr int kThreads = 256;

constexpr std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

enum class Entry : int { Forward, Backward, DoubleBackward };

/// Element (i, j) of a strided matrix at data[i·sr + j·sc] (global or shared memory).
template <class T>
struct Mat {
  const T* data;
  int64_t sr, sc;
  __device__ FF_FORCE_INLINE T operator()(int64_t i, int64_t j) const {
    return data[i * sr + j * sc];
  }
};

/// One layer as the kernels read it from the workspace (uploaded once per call), with the offsets
/// of its tile buffers (elements from the tile state's start) and parameter slots.
struct LayerDesc {
  int64_t in = 0, out = 0;
  const void* weight = nullptr;
  int64_t w_so = 0, w_si = 0;
  const void* bias = nullptr;
  int64_t b_s = 0;
  const void* v = nullptr;  ///< grad_grad_weight (double backward) or null
  int64_t v_so = 0, v_si = 0;
  const void* c = nullptr;  ///< grad_grad_bias (double backward) or null
  int64_t c_s = 0;
  int32_t want_dw = 0, want_db = 0;
  int64_t a_off = 0, d1_off = 0, s_off = 0, delta_off = 0, t_off = 0;
  int64_t dw_off = 0, db_off = 0;
};

/// Layer descriptors travel to the device by value in chunks of this many (kernel parameter size),
/// so any number of layers works and CUDA graphs capture no host pointer.
constexpr int kUploadChunk = 8;
struct UploadChunk {
  LayerDesc layers[kUploadChunk];
  int count;
};

// static: every driver translation unit that includes this header has its own copy.
static __global__ void upload_layers_kernel(const UploadChunk chunk, LayerDesc* dst) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < chunk.count) dst[i] = chunk.layers[i];
}

/// Everything the tile kernel reads, by value.
template <class T>
struct KernelArgs {
  const LayerDesc* layers;
  int num_layers;
  int rows;  ///< R, rows per tile
  int64_t batch, tiles;
  Activation hidden, output;
  ActivationParams params;
  Mat<T> x, grad_out, grad_grad_x;
  Mat<T> grad_y;  ///< r_L (double backward); data null: zero
  T* out;
  T* grad_x;
  T* grad_grad_out;
  T* partials;
  int64_t slot_len;
  T* state_global;
  int64_t state_len;
  int state_in_smem;
  int64_t g0_off, g1_off, t_last_off;
};

__device__ FF_FORCE_INLINE int tid() { return static_cast<int>(threadIdx.x); }

template <class T>
__device__ FF_FORCE_INLINE T bias_at(const void* b, int64_t stride, int64_t j) {
  return b == nullptr ? T(0) : static_cast<const T*>(b)[j * stride];
}

/// C[M×N] = X[M×K] · Y[K×N] through the engine, then epi(i, j, c) for every in-range element.
/// Operands outside [M, K] / [K, N] stage as zero, so widths need no padding. Ends synchronised.
template <class Engine, class T, class Epi>
__device__ void block_gemm(unsigned char* smem, int64_t M, int64_t N, int64_t K, Mat<T> X, Mat<T> Y,
                           const Epi& epi) {
  using S = typename Engine::Operand;
  using C = typename Engine::Result;
  S* xs = reinterpret_cast<S*>(smem + Engine::kXsOffset);
  S* ys = reinterpret_cast<S*>(smem + Engine::kYsOffset);
  C* cs = reinterpret_cast<C*>(smem + Engine::kCsOffset);
  constexpr int TM = Engine::kTileM, TN = Engine::kTileN, TK = Engine::kTileK;
  for (int64_t m0 = 0; m0 < M; m0 += TM) {
    for (int64_t n0 = 0; n0 < N; n0 += TN) {
      typename Engine::Acc acc;
      Engine::zero(acc);
      for (int64_t k0 = 0; k0 < K; k0 += TK) {
        for (int e = tid(); e < TM * TK; e += kThreads) {
          const int i = e / TK, k = e % TK;
          const bool in = m0 + i < M && k0 + k < K;
          xs[i * Engine::kLdx + k] = Engine::to_operand(in ? X(m0 + i, k0 + k) : T(0));
        }
        for (int e = tid(); e < TK * TN; e += kThreads) {
          const int k = e / TN, j = e % TN;
          const bool in = k0 + k < K && n0 + j < N;
          ys[k * Engine::kLdy + j] = Engine::to_operand(in ? Y(k0 + k, n0 + j) : T(0));
        }
        __syncthreads();
        Engine::step(acc, xs, ys);
        __syncthreads();
      }
      Engine::store(acc, cs);
      __syncthreads();
      for (int e = tid(); e < TM * TN; e += kThreads) {
        const int i = e / TN, j = e % TN;
        if (m0 + i < M && n0 + j < N) epi(m0 + i, n0 + j, T(cs[i * Engine::kLdc + j]));
      }
      __syncthreads();
    }
  }
}

/// dst[r·cols + c] = src(row0 + r, c) for the tile's rows.
template <class T>
__device__ void load_rows(Mat<T> src, int64_t row0, int rows, int64_t cols, T* dst) {
  const int64_t n = rows * cols;
  for (int64_t e = tid(); e < n; e += kThreads) dst[e] = src(row0 + e / cols, e % cols);
  __syncthreads();
}

/// out[(row0 + r)·cols + c] = src[r·cols + c] (out contiguous, or null: skipped).
template <class T>
__device__ void store_rows(const T* src, int64_t row0, int rows, int64_t cols, T* out) {
  if (out == nullptr) return;
  const int64_t n = rows * cols;
  T* dst = out + row0 * cols;
  for (int64_t e = tid(); e < n; e += kThreads) dst[e] = src[e];
}

template <class T>
__device__ FF_FORCE_INLINE Mat<T> rows_of(const T* p, int64_t cols) {
  return Mat<T>{p, cols, 1};  // [rows, cols] row-major
}
template <class T>
__device__ FF_FORCE_INLINE Mat<T> transposed_rows_of(const T* p, int64_t cols) {
  return Mat<T>{p, 1, cols};  // the transpose of [rows, cols] row-major
}
/// Wᵀ [in, out] and W [out, in] of a layer (or of its grad_grad_weight V).
template <class T>
__device__ FF_FORCE_INLINE Mat<T> weight_t(const void* w, int64_t so, int64_t si) {
  return Mat<T>{static_cast<const T*>(w), si, so};
}
template <class T>
__device__ FF_FORCE_INLINE Mat<T> weight(const void* w, int64_t so, int64_t si) {
  return Mat<T>{static_cast<const T*>(w), so, si};
}

/// slot[dw] += Xᵀ·A over the tile's rows, for X [rows, out] and A [rows, in].
template <class Engine, class T>
__device__ void accumulate_dw(unsigned char* smem, const LayerDesc& l, int rows, const T* x,
                              const T* a, T* slot) {
  T* dw = slot + l.dw_off;
  const int64_t in = l.in;
  block_gemm<Engine>(smem, l.out, in, rows, transposed_rows_of(x, l.out), rows_of(a, in),
                     [&](int64_t i, int64_t j, T v) { dw[i * in + j] += v; });
}

/// slot[db] += Σ_rows X, for X [rows, out], summed in row order.
template <class T>
__device__ void accumulate_db(const LayerDesc& l, int rows, const T* x, T* slot) {
  T* db = slot + l.db_off;
  for (int64_t j = tid(); j < l.out; j += kThreads) {
    T sum = T(0);
    for (int r = 0; r < rows; ++r) sum += x[r * l.out + j];
    db[j] += sum;
  }
  __syncthreads();
}

/// The forward sweep over the tile. Plain forward (`save` false): ping-pong in g0/g1 and returns
/// the buffer holding a_L. Saving (backward entries): a_k at each layer's a_off, σ′ at d1_off and,
/// with `curvature`, σ″ at s_off; the last layer's σ is evaluated only where the call writes y
/// (a.out: the backward's optional output), and returned in g1.
template <class Engine, class T>
__device__ T* forward_sweep(unsigned char* smem, const KernelArgs<T>& a, T* state, int64_t row0,
                            int rows, bool save, bool curvature) {
  const int L = a.num_layers;
  T* cur = save ? state + a.layers[0].a_off : state + a.g0_off;
  T* spare = state + a.g1_off;
  load_rows(a.x, row0, rows, a.layers[0].in, cur);
  for (int k = 0; k < L; ++k) {
    const LayerDesc& l = a.layers[k];
    const int64_t out = l.out;
    T* p = save && k + 1 < L ? state + a.layers[k + 1].a_off : spare;
    const void* bias = l.bias;
    const int64_t bs = l.b_s;
    block_gemm<Engine>(
        smem, rows, out, l.in, rows_of<T>(cur, l.in), weight_t<T>(l.weight, l.w_so, l.w_si),
        [&](int64_t i, int64_t j, T v) { p[i * out + j] = v + bias_at<T>(bias, bs, j); });
    const Activation kind = k + 1 == L ? a.output : a.hidden;
    const int64_t n = rows * out;
    if (save) {
      T* d1 = state + l.d1_off;
      T* d2 = state + l.s_off;
      const bool value = k + 1 < L || a.out != nullptr;
      for (int64_t e = tid(); e < n; e += kThreads) {
        const Derivs<T> d = activation_derivs<T>(kind, a.params, p[e]);
        d1[e] = d.d1;
        if (curvature) d2[e] = d.d2;
        if (value) p[e] = d.value;
      }
    } else {
      for (int64_t e = tid(); e < n; e += kThreads) {
        p[e] = activation_derivs<T>(kind, a.params, p[e]).value;
      }
    }
    __syncthreads();
    if (!save) {
      spare = cur;
    }
    cur = p;
  }
  return cur;
}

/// dst [rows, in] = (or, with `add`, +=) src [rows, out] · M, where M [out, in] is the layer's
/// weight (`m` = l.weight) or its grad_grad_weight V (`m` = l.v), read through its strides.
template <class Engine, class T>
__device__ void reverse_product(unsigned char* smem, const LayerDesc& l, int rows, const T* src,
                                bool of_v, T* dst, bool add) {
  const int64_t in = l.in;
  const Mat<T> m = of_v ? weight<T>(l.v, l.v_so, l.v_si) : weight<T>(l.weight, l.w_so, l.w_si);
  block_gemm<Engine>(smem, rows, in, l.out, rows_of<T>(src, l.out), m,
                     [&](int64_t i, int64_t j, T v) {
                       T& d = dst[i * in + j];
                       d = add ? d + v : v;
                     });
}

template <class Engine, class T>
__device__ void backward_tile(unsigned char* smem, const KernelArgs<T>& a, T* state, T* slot,
                              int64_t row0, int rows) {
  const int L = a.num_layers;
  // y where the call wants it, from g1, which the reverse sweep next writes after a barrier.
  const T* y = forward_sweep<Engine>(smem, a, state, row0, rows, true, false);
  store_rows(y, row0, rows, a.layers[L - 1].out, a.out);
  T* g = state + a.g0_off;
  T* next = state + a.g1_off;
  load_rows(a.grad_out, row0, rows, a.layers[L - 1].out, g);
  for (int k = L - 1; k >= 0; --k) {
    const LayerDesc& l = a.layers[k];
    const T* d1 = state + l.d1_off;
    const int64_t n = rows * l.out;
    for (int64_t e = tid(); e < n; e += kThreads) g[e] *= d1[e];  // δ_k
    __syncthreads();
    if (l.want_dw) accumulate_dw<Engine>(smem, l, rows, g, state + l.a_off, slot);
    if (l.want_db) accumulate_db(l, rows, g, slot);
    if (k == 0 && a.grad_x == nullptr) break;
    reverse_product<Engine>(smem, l, rows, g, false, next, false);
    T* t = g;
    g = next;
    next = t;
  }
  store_rows(g, row0, rows, a.layers[0].in, a.grad_x);
}

/// Steps 1–4 of the double backward (include/fieldfuse/mlp.h) on one tile, as mlp_cpu.cpp's
/// double_backward_tile (the reference): s_k holds σ″, then σ″ ⊙ g_k, then s_k, then q_k.
template <class Engine, class T>
__device__ void double_backward_tile(unsigned char* smem, const KernelArgs<T>& a, T* state, T* slot,
                                     int64_t row0, int rows) {
  const int L = a.num_layers;
  forward_sweep<Engine>(smem, a, state, row0, rows, true, true);
  // First reverse sweep: δ_k kept, s_k ← σ″ ⊙ g_k.
  {
    T* g = state + a.g0_off;
    T* next = state + a.g1_off;
    load_rows(a.grad_out, row0, rows, a.layers[L - 1].out, g);
    for (int k = L - 1; k >= 0; --k) {
      const LayerDesc& l = a.layers[k];
      const T* d1 = state + l.d1_off;
      T* s = state + l.s_off;
      T* delta = state + l.delta_off;
      const int64_t n = rows * l.out;
      for (int64_t e = tid(); e < n; e += kThreads) {
        s[e] *= g[e];
        delta[e] = g[e] * d1[e];
      }
      __syncthreads();
      if (k == 0) break;
      reverse_product<Engine>(smem, l, rows, delta, false, next, false);
      T* t = g;
      g = next;
      next = t;
    }
  }
  // Steps 1 and 2: tangent sweep u_k = W_k t_{k−1} + V_k a_{k−1} + c_k; s_k *= u_k; t_k = σ′ ⊙ u_k.
  load_rows(a.grad_grad_x, row0, rows, a.layers[0].in, state + a.layers[0].t_off);
  for (int k = 0; k < L; ++k) {
    const LayerDesc& l = a.layers[k];
    const int64_t out = l.out;
    const T* t = state + l.t_off;
    T* u = state + (k + 1 < L ? a.layers[k + 1].t_off : a.t_last_off);
    const void* c = l.c;
    const int64_t cs = l.c_s;
    block_gemm<Engine>(
        smem, rows, out, l.in, rows_of<T>(t, l.in), weight_t<T>(l.weight, l.w_so, l.w_si),
        [&](int64_t i, int64_t j, T v) { u[i * out + j] = v + bias_at<T>(c, cs, j); });
    if (l.v != nullptr) {
      block_gemm<Engine>(smem, rows, out, l.in, rows_of<T>(state + l.a_off, l.in),
                         weight_t<T>(l.v, l.v_so, l.v_si),
                         [&](int64_t i, int64_t j, T v) { u[i * out + j] += v; });
    }
    const T* d1 = state + l.d1_off;
    T* s = state + l.s_off;
    const int64_t n = rows * out;
    for (int64_t e = tid(); e < n; e += kThreads) {
      s[e] *= u[e];
      u[e] *= d1[e];
    }
    __syncthreads();
  }
  store_rows(state + a.t_last_off, row0, rows, a.layers[L - 1].out, a.grad_grad_out);
  // Steps 3 and 4: r_L = grad_y (absent: 0), q_k = σ′ ⊙ r_k + s_k, r_{k−1} = W_kᵀ q_k + V_kᵀ δ_k.
  T* r = state + a.g0_off;
  T* next = state + a.g1_off;
  const bool has_grad_y = a.grad_y.data != nullptr;
  if (has_grad_y) load_rows(a.grad_y, row0, rows, a.layers[L - 1].out, r);
  for (int k = L - 1; k >= 0; --k) {
    const LayerDesc& l = a.layers[k];
    T* q = state + l.s_off;
    const T* d1 = state + l.d1_off;
    const T* delta = state + l.delta_off;
    const int64_t n = rows * l.out;
    if (k < L - 1 || has_grad_y) {
      for (int64_t e = tid(); e < n; e += kThreads) q[e] += d1[e] * r[e];
      __syncthreads();
    }
    if (l.want_dw) {
      accumulate_dw<Engine>(smem, l, rows, delta, state + l.t_off, slot);
      accumulate_dw<Engine>(smem, l, rows, q, state + l.a_off, slot);
    }
    if (l.want_db) accumulate_db(l, rows, q, slot);
    if (k == 0 && a.grad_x == nullptr) break;
    reverse_product<Engine>(smem, l, rows, q, false, next, false);
    if (l.v != nullptr) reverse_product<Engine>(smem, l, rows, delta, true, next, true);
    T* t = r;
    r = next;
    next = t;
  }
  if (a.grad_x != nullptr) store_rows(r, row0, rows, a.layers[0].in, a.grad_x);
}

template <class Engine, Entry E>
__global__ void __launch_bounds__(kThreads)
    tile_kernel(const __grid_constant__ KernelArgs<typename Engine::Value> a) {
  using T = typename Engine::Value;
  extern __shared__ __align__(128) unsigned char smem[];
  T* state = a.state_in_smem ? reinterpret_cast<T*>(smem + Engine::kStageBytes)
                             : a.state_global + static_cast<int64_t>(blockIdx.x) * a.state_len;
  T* slot = a.partials + static_cast<int64_t>(blockIdx.x) * a.slot_len;
  if (E != Entry::Forward) {
    for (int64_t e = tid(); e < a.slot_len; e += kThreads) slot[e] = T(0);
    __syncthreads();
  }
  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    const int64_t row0 = tile * a.rows;
    const int64_t left = a.batch - row0;
    const int rows = left < a.rows ? static_cast<int>(left) : a.rows;
    if constexpr (E == Entry::Forward) {
      const T* y = forward_sweep<Engine>(smem, a, state, row0, rows, false, false);
      store_rows(y, row0, rows, a.layers[a.num_layers - 1].out, a.out);
    } else if constexpr (E == Entry::Backward) {
      backward_tile<Engine>(smem, a, state, slot, row0, rows);
    } else {
      double_backward_tile<Engine>(smem, a, state, slot, row0, rows);
    }
    __syncthreads();  // the next tile overwrites the state
  }
}

/// out[e] = Σ_b partials[b·slot_len + offset + e], blocks summed in order b = 0, 1, ...
template <class T>
__global__ void reduce_partials_kernel(const T* partials, int64_t slot_len, int blocks,
                                       int64_t offset, int64_t count, T* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += stride) {
    T sum = T(0);
    for (int b = 0; b < blocks; ++b) sum += partials[b * slot_len + offset + e];
    out[e] = sum;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: the plan (tile rows, state placement, grid, workspace layout) from metadata only.
// ---------------------------------------------------------------------------------------------

struct Plan {
  Entry entry = Entry::Forward;
  int rows = 0;
  int64_t tiles = 0;
  int grid = 0;
  int64_t state_len = 0;  ///< elements of tile state per block
  bool state_in_smem = false;
  std::size_t smem_bytes = 0;
  int64_t slot_len = 0;  ///< parameter-partial elements per block
  int64_t g0_off = 0, g1_off = 0, t_last_off = 0;
  std::size_t table_bytes = 0, partials_offset = 0, state_offset = 0, total = 0;
  std::vector<LayerDesc> layers;
};

/// Element offsets of the tile buffers for `rows` rows (fills the layers' *_off, returns the
/// total).
inline int64_t layout_state(const Problem& p, Entry entry, int64_t rows, std::vector<LayerDesc>& d,
                            Plan& plan) {
  int64_t maxw = p.in_features();
  for (int k = 0; k < p.num_layers; ++k) maxw = std::max(maxw, p.layers[k].out);
  int64_t off = 0;
  auto take = [&](int64_t cols) {
    const int64_t at = off;
    off += align_up(static_cast<std::size_t>(rows * cols), 4);
    return at;
  };
  plan.g0_off = take(maxw);
  plan.g1_off = take(maxw);
  if (entry == Entry::Forward) return off;
  for (int k = 0; k < p.num_layers; ++k) {
    d[k].a_off = take(d[k].in);
    d[k].d1_off = take(d[k].out);
    if (entry == Entry::DoubleBackward) {
      d[k].s_off = take(d[k].out);
      d[k].delta_off = take(d[k].out);
      d[k].t_off = take(d[k].in);
    }
  }
  if (entry == Entry::DoubleBackward) plan.t_last_off = take(p.out_features());
  return off;
}

/// The plan of one entry for engine `Engine` on the problem's device (metadata and device
/// attributes only, so the workspace query and the call agree).
template <class Engine>
Plan make_plan(const Problem& p, Entry entry) {
  using T = typename Engine::Value;
  Plan plan;
  plan.entry = entry;
  plan.layers.resize(static_cast<std::size_t>(p.num_layers));
  int64_t slot = 0;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& l = p.layers[k];
    LayerDesc& d = plan.layers[k];
    d.in = l.in;
    d.out = l.out;
    d.weight = l.weight;
    d.w_so = l.weight_stride_out;
    d.w_si = l.weight_stride_in;
    d.bias = l.bias;
    d.b_s = l.bias_stride;
    d.v = l.grad_grad_weight;
    d.v_so = l.grad_grad_weight_stride_out;
    d.v_si = l.grad_grad_weight_stride_in;
    d.c = l.grad_grad_bias;
    d.c_s = l.grad_grad_bias_stride;
    d.want_dw = l.grad_weight != nullptr;
    d.want_db = l.grad_bias != nullptr;
    d.dw_off = slot;
    slot += static_cast<int64_t>(align_up(static_cast<std::size_t>(l.out * l.in), 4));
    d.db_off = slot;
    slot += static_cast<int64_t>(align_up(static_cast<std::size_t>(l.out), 4));
  }
  plan.slot_len = entry == Entry::Forward ? 0 : slot;

  int device = p.device.index;
  int sms = 1, smem_optin = 48 * 1024;
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), p.op,
              "cudaDeviceGetAttribute(MultiProcessorCount)");
  cuda::check(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
              p.op, "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  // The most rows whose state fits next to the staging buffers; else the preferred tile in the
  // workspace (deep, wide networks, float64).
  const std::size_t budget = static_cast<std::size_t>(smem_optin) > Engine::kStageBytes
                                 ? smem_optin - Engine::kStageBytes
                                 : 0;
  plan.rows = Engine::kPreferredRows;
  plan.state_in_smem = false;
  for (int rows = Engine::kPreferredRows; rows >= 16; rows /= 2) {
    std::vector<LayerDesc> trial = plan.layers;
    const int64_t len = layout_state(p, entry, rows, trial, plan);
    if (static_cast<std::size_t>(len) * sizeof(T) <= budget) {
      plan.rows = rows;
      plan.state_in_smem = true;
      break;
    }
  }
  plan.state_len = layout_state(p, entry, plan.rows, plan.layers, plan);
  plan.smem_bytes = Engine::kStageBytes +
                    (plan.state_in_smem ? static_cast<std::size_t>(plan.state_len) * sizeof(T) : 0);
  plan.tiles = (p.batch + plan.rows - 1) / plan.rows;
  // Blocks per SM from the shared memory each needs (registers allow two 256-thread blocks at
  // <= 128 registers; the limit of 2 keeps the per-block partial slots few).
  int smem_per_sm = 0;
  cuda::check(
      cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
      p.op, "cudaDeviceGetAttribute(MaxSharedMemoryPerMultiprocessor)");
  const int per_sm = std::max(
      1, std::min(
             2, static_cast<int>(smem_per_sm / std::max<std::size_t>(plan.smem_bytes + 1024, 1))));
  plan.grid = static_cast<int>(std::min<int64_t>(plan.tiles, static_cast<int64_t>(sms) * per_sm));

  plan.table_bytes = align_up(sizeof(LayerDesc) * plan.layers.size(), 256);
  plan.partials_offset = plan.table_bytes;
  const std::size_t partial_bytes =
      align_up(static_cast<std::size_t>(plan.grid) * plan.slot_len * sizeof(T), 256);
  plan.state_offset = plan.partials_offset + partial_bytes;
  const std::size_t state_bytes =
      plan.state_in_smem
          ? 0
          : align_up(static_cast<std::size_t>(plan.grid) * plan.state_len * sizeof(T), 256);
  plan.total = std::max<std::size_t>(plan.state_offset + state_bytes, 1);
  return plan;
}

template <class Engine>
std::size_t workspace_bytes(const Problem& p, Entry entry) {
  cuda::DeviceGuard guard(p.device.index, p.op);
  return make_plan<Engine>(p, entry).total;
}

/// Inputs and outputs of one call, whatever the entry.
template <class T>
struct Call {
  MatrixView x{}, grad_out{}, grad_grad_x{}, grad_y{};
  void* out = nullptr;
  void* grad_x = nullptr;
  void* grad_grad_out = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Stream stream{};
};

template <class T>
Mat<T> mat_of(const MatrixView& m) {
  return Mat<T>{static_cast<const T*>(m.data), m.stride_row, m.stride_col};
}

/// Runs one entry: uploads the layer table, the tile kernel over the persistent grid, then the
/// fixed-order reduction of the parameter partials into the layers' gradient outputs.
template <class Engine, Entry E>
void run(const Problem& p, const Call<typename Engine::Value>& call) {
  using T = typename Engine::Value;
  cuda::ProfileRange range(p.op);
  cuda::DeviceGuard guard(p.device.index, p.op);
  const auto stream = static_cast<cudaStream_t>(call.stream.handle);
  const Plan plan = make_plan<Engine>(p, E);
  char* ws = static_cast<char*>(call.workspace);
  auto* table = reinterpret_cast<LayerDesc*>(ws);
  T* partials = reinterpret_cast<T*>(ws + plan.partials_offset);
  if (plan.tiles > 0) {
    for (std::size_t k0 = 0; k0 < plan.layers.size(); k0 += kUploadChunk) {
      UploadChunk chunk{};
      chunk.count = static_cast<int>(std::min<std::size_t>(kUploadChunk, plan.layers.size() - k0));
      for (int i = 0; i < chunk.count; ++i) chunk.layers[i] = plan.layers[k0 + i];
      upload_layers_kernel<<<1, kUploadChunk, 0, stream>>>(chunk, table + k0);
      cuda::check_launch(p.op, "upload_layers_kernel", stream);
    }
    KernelArgs<T> a{};
    a.layers = table;
    a.num_layers = p.num_layers;
    a.rows = plan.rows;
    a.batch = p.batch;
    a.tiles = plan.tiles;
    a.hidden = p.activation;
    a.output = p.output_activation;
    a.params = p.params;
    a.x = mat_of<T>(call.x);
    a.grad_out = mat_of<T>(call.grad_out);
    a.grad_grad_x = mat_of<T>(call.grad_grad_x);
    a.grad_y = mat_of<T>(call.grad_y);
    a.out = static_cast<T*>(call.out);
    a.grad_x = static_cast<T*>(call.grad_x);
    a.grad_grad_out = static_cast<T*>(call.grad_grad_out);
    a.partials = partials;
    a.slot_len = plan.slot_len;
    a.state_global = reinterpret_cast<T*>(ws + plan.state_offset);
    a.state_len = plan.state_len;
    a.state_in_smem = plan.state_in_smem ? 1 : 0;
    a.g0_off = plan.g0_off;
    a.g1_off = plan.g1_off;
    a.t_last_off = plan.t_last_off;
    const auto kernel = tile_kernel<Engine, E>;
    cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(plan.smem_bytes)),
                p.op, "cudaFuncSetAttribute(tile_kernel)");
    kernel<<<plan.grid, kThreads, plan.smem_bytes, stream>>>(a);
    cuda::check_launch(p.op, "tile_kernel", stream);
  }
  if (E == Entry::Forward) return;
  const int blocks = plan.tiles > 0 ? plan.grid : 0;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& l = p.layers[k];
    const LayerDesc& d = plan.layers[k];
    void* outputs[2] = {l.grad_weight, l.grad_bias};
    const int64_t offsets[2] = {d.dw_off, d.db_off};
    const int64_t counts[2] = {l.out * l.in, l.out};
    for (int part = 0; part < 2; ++part) {
      if (outputs[part] == nullptr) continue;
      const int reduce_blocks =
          static_cast<int>(std::min<int64_t>(cuda::ceil_div(counts[part], kThreads), 1024));
      reduce_partials_kernel<T>
          <<<reduce_blocks, kThreads, 0, stream>>>(partials, plan.slot_len, blocks, offsets[part],
                                                   counts[part], static_cast<T*>(outputs[part]));
      cuda::check_launch(p.op, "reduce_partials_kernel", stream);
    }
  }
}

/// Any entry of mlp_drivers.h over one engine: the entry follows from the argument struct.
template <class Engine, class Args>
void launch(const Args& args) {
  Call<typename Engine::Value> call;
  call.x = args.x;
  call.workspace = args.workspace;
  call.workspace_bytes = args.workspace_bytes;
  call.stream = args.stream;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    call.out = args.out;
    run<Engine, Entry::Forward>(args.problem, call);
  } else if constexpr (std::is_same_v<Args, BackwardArgs>) {
    call.grad_out = args.grad_out;
    call.grad_x = args.grad_x;
    call.out = args.out;
    run<Engine, Entry::Backward>(args.problem, call);
  } else {
    static_assert(std::is_same_v<Args, DoubleBackwardArgs>);
    call.grad_out = args.grad_out;
    call.grad_grad_x = args.grad_grad_x;
    call.grad_y = args.grad_y;
    call.grad_x = args.grad_x;
    call.grad_grad_out = args.grad_grad_out;
    run<Engine, Entry::DoubleBackward>(args.problem, call);
  }
}

// ---------------------------------------------------------------------------------------------
// The SIMT engine: 64×64 result tiles, 4×4 per thread, operands staged as `S` (float/double, or
// 16-bit for the tensor-core fallback on GPUs without the instruction), accumulated in `T`.
// ---------------------------------------------------------------------------------------------

template <class S>
__device__ FF_FORCE_INLINE float operand_value(S v) {
  return static_cast<float>(v);
}
__device__ FF_FORCE_INLINE double operand_value(double v) { return v; }

template <class T, class S, int PreferredRows>
struct SimtEngine {
  using Value = T;
  using Operand = S;
  using Result = T;
  struct Acc {
    T v[4][4];
  };
  static constexpr int kPreferredRows = PreferredRows;
  static constexpr int kTileM = 64, kTileN = 64, kTileK = 16;
  static constexpr int kLdx = kTileK + 1, kLdy = kTileN, kLdc = kTileN + 1;
  static constexpr std::size_t kXsOffset = 0;
  static constexpr std::size_t kYsOffset = align_up(sizeof(S) * kTileM * kLdx, 128);
  static constexpr std::size_t kCsOffset = kYsOffset + align_up(sizeof(S) * kTileK * kLdy, 128);
  static constexpr std::size_t kStageBytes = kCsOffset + align_up(sizeof(T) * kTileM * kLdc, 128);

  __device__ static FF_FORCE_INLINE S to_operand(T v) { return static_cast<S>(v); }
  __device__ static FF_FORCE_INLINE void zero(Acc& acc) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc.v[i][j] = T(0);
  }
  __device__ static FF_FORCE_INLINE void step(Acc& acc, const S* xs, const S* ys) {
    const int ty = tid() / 16, tx = tid() % 16;
#pragma unroll 4
    for (int k = 0; k < kTileK; ++k) {
      T a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = T(operand_value(xs[(ty * 4 + i) * kLdx + k]));
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = T(operand_value(ys[k * kLdy + tx * 4 + j]));
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc.v[i][j] += a[i] * b[j];
    }
  }
  __device__ static FF_FORCE_INLINE void store(const Acc& acc, T* cs) {
    const int ty = tid() / 16, tx = tid() % 16;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) cs[(ty * 4 + i) * kLdc + tx * 4 + j] = acc.v[i][j];
  }
};

}  // namespace fieldfuse::detail::mlp::tile
