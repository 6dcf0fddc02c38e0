// SPDX-License-Identifier: Apache-2.0
// The fully fused tensor-core MLP kernels (forward, backward and double backward): each warp owns
// 16 rows of its block's tile and runs every layer on them out of shared memory with WMMA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "mlp/mlp_cuda_tile.cuh"
#include "mlp/mlp_drivers.h"

namespace fieldfuse::detail::mlp::fused {

// Note [mlp warp-fused kernel]
// The general tile kernels (Note [mlp tile kernel]) run every product as a block-wide GEMM with
// staged chunks and block barriers, which leaves the tensor cores idle. This path follows the
// fully fused MLP design instead, for the problems it covers (sm_80+, at most kMaxLayers layers,
// every padded width <= kMaxWidth, and the plan fits in shared memory; the rest keep the tile
// kernels):
// - "16-bit" below is the operand type S: float16/bfloat16 for the tensor-core driver, float32
//   for the SIMT driver's float32 problems, whose products are FMAs in registers (Regs: each lane
//   owns the 8 elements of a 16×16 tile that a spilled WMMA tile would give it, so the rest of the
//   code is the same); float64 keeps the tile kernels;
// - the float32 master weights are converted ONCE per call into the workspace as 16-bit
//   [out_pad, in_pad] matrices, zero-padded to multiples of 16 (convert_weights_kernel);
// - a block of `warps` warps (1, 2 or 4) walks row tiles of 16·warps rows (persistent grid);
//   warp w owns 16 rows and runs the whole network on them with only __syncwarp between layers:
//   its activations live in shared memory as 16-bit [16, width + kSkew] rows, each 16×16 output
//   tile is a chain of WMMA 16×16×16 products with float32 accumulation, stored to a per-warp
//   float32 scratch tile where bias, σ, σ′ are applied in float32 (mlp_math.h) and the result is
//   rounded to 16 bits as it becomes the next product's operand (the tensor-core contract);
// - the weights are B fragments: all layers staged into shared memory once per block when they
//   fit ("resident", rows skewed by kSkew against bank conflicts), else read straight from the
//   converted copy in the workspace (L1/L2-resident);
// - backward: the forward recompute keeps every layer's 16-bit input a_k and σ′(p_k) (float32,
//   or 16-bit when σ′ ∈ {0, 1} exactly, i.e. ReLU and identity) per warp; the reverse sweep
//   writes δ_k (16-bit) into one of two ping-pong buffers; then, after ONE block barrier per
//   layer, the block computes dW_k += Σ_warps δᵀ a over its 16·warps rows with the 16×16 output
//   fragments split across warps, accumulating into a float32 [out_pad, in_pad + 4] buffer in
//   shared memory when it fits, else into the block's partial slot in the workspace (the same
//   layout, L2-resident). db_k sums the float32 δ per warp (column sums in a fixed order), and
//   the warps' sums are added in warp order at the end. Blocks write per-block partials; a second
//   kernel sums them in block order (deterministic, no atomics), as in the tile path.
// - double backward: the same structure over the four steps of include/fieldfuse/mlp.h. Each warp
//   keeps per layer a_k and t_k (16-bit inputs of the forward and tangent products), p_k then
//   σ′(p_k) and s_k (float32: the elementwise terms stay float32) and δ_k (16-bit: it only enters
//   products); the second reverse sweep's q_k uses the ping-pong buffers, and dW_k gets both
//   terms q_kᵀ a_k + δ_kᵀ t_k in the one per-layer block step. V_k is converted like W_k (after
//   the weights in the workspace) and read from there; c_k is added in float32 like a bias. At
//   width 64 this is ~72 KB per warp, so the Eikonal network runs 2 warps per block.
// Rows past the batch are zeros (x, v and grad_out load as 0, so δ = s = q = 0 there), so they add
// nothing to the sums.

namespace wmma = nvcuda::wmma;

constexpr int kMaxWarps = 4;
constexpr int kMaxLayers = 16;
constexpr int kMaxWidth = 256;
constexpr int kSkew = 8;        ///< elements of row padding (keeps rows 16-byte aligned)
constexpr int kScratchLd = 20;  ///< float32 scratch row pitch (a multiple of 4, as WMMA needs)
constexpr int kDwSkew = 4;      ///< float32 dW accumulator row padding

constexpr int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }
constexpr std::size_t align128(std::size_t n) { return (n + 127) / 128 * 128; }

/// One layer as the fused kernels see it (offsets in elements of their buffer's type).
struct Layer {
  int in = 0, out = 0, in_pad = 0, out_pad = 0;
  int64_t w_ws = 0;     ///< converted weight in the workspace, [out_pad, in_pad]
  int w_sm = 0;         ///< resident weight in shared memory, [out_pad, in_pad + kSkew]
  int a_sm = 0;         ///< per-warp 16-bit input a_k, [16, in_pad + kSkew] (backward)
  int d1_sm = 0;        ///< per-warp σ′(p_k), [16, out_pad] (backward)
  int db_sm = 0;        ///< per-warp db partial, [out_pad] (backward)
  int64_t dw_acc = 0;   ///< dW accumulator, [out_pad, in_pad + kDwSkew] (backward)
  int64_t db_slot = 0;  ///< db partial in the block's slot, [out_pad] (backward)
  int64_t v_ws = 0;     ///< converted V in the workspace, [out_pad, in_pad] (double backward)
  int dl_sm = 0;        ///< per-warp 16-bit δ_k, [16, out_pad + kSkew] (double backward)
  const float* bias = nullptr;
  int64_t bias_stride = 0;
  const float* c = nullptr;  ///< grad_grad_bias c_k (double backward), or null
  int64_t c_stride = 0;
  int want_dw = 0, want_db = 0, has_v = 0;
};

/// Everything a fused kernel reads, by value.
struct Args {
  Layer layers[kMaxLayers];
  int num_layers = 0;
  int warps = 0;
  int64_t batch = 0, tiles = 0;
  Activation hidden = Activation::None, output = Activation::None;
  ActivationParams params{};
  const float* x = nullptr;
  int64_t x_sr = 0, x_sc = 0;
  const float* grad_out = nullptr;
  int64_t go_sr = 0, go_sc = 0;
  const float* grad_grad_x = nullptr;  ///< v = t_0 (double backward)
  int64_t ggx_sr = 0, ggx_sc = 0;
  float* grad_grad_out = nullptr;  ///< t_L (double backward), or null
  float* out = nullptr;
  float* grad_x = nullptr;
  const void* weights = nullptr;  ///< the converted weights (type S) in the workspace
  int resident = 0;               ///< weights staged in shared memory
  int d1_16 = 0;                  ///< σ′ stored in 16 bits
  int dw_in_smem = 0;
  float* partials = nullptr;
  int64_t slot_len = 0, dw_len = 0, db_len = 0;  ///< floats
  int ld_g = 0;                                  ///< ping-pong row pitch (max width + kSkew)
  // Byte offsets in dynamic shared memory: the dW accumulator, the warps' regions (each
  // warp_bytes long) and, within a warp's region, its buffers.
  int dw_base = 0, warp_base = 0, warp_bytes = 0;
  int g0 = 0, g1 = 0, scratch = 0, acts = 0, d1s = 0, dbs = 0;
  // Double backward only: tangents t_k (layout of acts), curvature s_k (layout of d1s, float32;
  // d1s then holds p_k and, from the first reverse sweep on, σ′(p_k)), δ_k (16-bit).
  int tans = 0, curvs = 0, deltas = 0;
};

/// dst [out_pad, in_pad] (16-bit) = the float32 weight [out, in] read through its strides, zero
/// padded.
template <class S>
__global__ void convert_weights_kernel(const float* w, int64_t so, int64_t si, int out, int in,
                                       int in_pad, int64_t count, S* dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += stride) {
    const int64_t o = e / in_pad, i = e % in_pad;
    dst[e] = static_cast<S>(o < out && i < in ? w[o * so + i * si] : 0.0f);
  }
}

/// out[e] = Σ_b partials[b·slot_len + offset + (e / cols)·ld + e % cols], blocks in order.
static __global__ void reduce_padded_kernel(const float* partials, int64_t slot_len, int blocks,
                                            int64_t offset, int64_t cols, int64_t ld, int64_t count,
                                            float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += stride) {
    const int64_t at = offset + (e / cols) * ld + e % cols;
    float sum = 0.0f;
    for (int b = 0; b < blocks; ++b) sum += partials[b * slot_len + at];
    out[e] = sum;
  }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

__device__ FF_FORCE_INLINE int lane_id() { return static_cast<int>(threadIdx.x) & 31; }
__device__ FF_FORCE_INLINE int warp_id() { return static_cast<int>(threadIdx.x) >> 5; }
/// The row of this lane's element i of a 16×16 tile in the spill layout (column: lane % 16).
__device__ FF_FORCE_INLINE int row_of(int i) { return (lane_id() >> 4) + 2 * i; }

using Frag = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// This lane's 8 elements of a warp's 16×16 float32 tile in the spill layout: the float32 (SIMT)
/// engine's accumulator.
struct Regs {
  float v[8];
};

/// The warp's 16×16 float32 product tile: a WMMA accumulator for 16-bit operands, Regs for
/// float32 operands (FMAs in registers: float32 has no exact tensor-core product).
template <class S>
using Acc = std::conditional_t<std::is_same_v<S, float>, Regs, Frag>;

/// c += Σ_kk A[16, 16kk..] · B[16kk.., 16]: A row-major (pitch lda); B's k-th 16-row step starts at
/// b + kk·b_step, in `BLayout` with pitch ldb. The float32 engine reads 4 k at a time (pitches and
/// bases are multiples of 4 elements) and adds in k order.
template <class S, class BLayout>
__device__ FF_FORCE_INLINE void warp_product_add(Acc<S>& c, const S* a, int lda, const S* b,
                                                 int ldb, int64_t b_step, int ksteps) {
  if constexpr (std::is_same_v<S, float>) {
    const int col = lane_id() & 15;
    for (int kk = 0; kk < ksteps; ++kk) {
      const float* ak = a + kk * 16;
      const float* bk = b + kk * b_step;
#pragma unroll
      for (int k = 0; k < 16; k += 4) {
        float bv[4];
        if constexpr (std::is_same_v<BLayout, wmma::col_major>) {  // B[k, n] = bk[n·ldb + k]
          const float4 t = *reinterpret_cast<const float4*>(bk + col * ldb + k);
          bv[0] = t.x, bv[1] = t.y, bv[2] = t.z, bv[3] = t.w;
        } else {  // B[k, n] = bk[k·ldb + n]
#pragma unroll
          for (int q = 0; q < 4; ++q) bv[q] = bk[(k + q) * ldb + col];
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float4 av = *reinterpret_cast<const float4*>(ak + row_of(i) * lda + k);
          c.v[i] = fmaf(av.x, bv[0], c.v[i]);
          c.v[i] = fmaf(av.y, bv[1], c.v[i]);
          c.v[i] = fmaf(av.z, bv[2], c.v[i]);
          c.v[i] = fmaf(av.w, bv[3], c.v[i]);
        }
      }
    }
  } else {
    for (int kk = 0; kk < ksteps; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, S, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, S, BLayout> fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, b + kk * b_step, ldb);
      wmma::mma_sync(c, fa, fb, c);
    }
  }
}

/// c = the same product, from zero.
template <class S, class BLayout>
__device__ FF_FORCE_INLINE void warp_product(Acc<S>& c, const S* a, int lda, const S* b, int ldb,
                                             int64_t b_step, int ksteps) {
  if constexpr (std::is_same_v<S, float>) {
#pragma unroll
    for (int i = 0; i < 8; ++i) c.v[i] = 0.0f;
  } else {
    wmma::fill_fragment(c, 0.0f);
  }
  warp_product_add<S, BLayout>(c, a, lda, b, ldb, b_step, ksteps);
}

/// This lane's 8 elements of c in the spill layout. A WMMA accumulator goes through the warp's
/// scratch tile (its register layout is unspecified); Regs already are in that layout.
__device__ FF_FORCE_INLINE void spill(const Regs& c, float*, float (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = c.v[i];
}

__device__ FF_FORCE_INLINE void spill(const Frag& c, float* scratch, float (&v)[8]) {
  wmma::store_matrix_sync(scratch, c, kScratchLd, wmma::mem_row_major);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = scratch[row_of(i) * kScratchLd + (lane_id() & 15)];
  __syncwarp();
}

/// The weight of layer l as a B operand: its base and row pitch (resident or in the workspace).
template <class S>
__device__ FF_FORCE_INLINE const S* weight_of(const Args& a, const Layer& l, const S* wsm,
                                              int& ld) {
  ld = a.resident ? l.in_pad + kSkew : l.in_pad;
  return a.resident ? wsm + l.w_sm : static_cast<const S*>(a.weights) + l.w_ws;
}

/// Stages every converted weight into shared memory (resident plans), 16 bytes at a time.
template <class S>
__device__ void stage_weights(const Args& a, S* wsm) {
  for (int k = 0; k < a.num_layers; ++k) {
    const Layer& l = a.layers[k];
    constexpr int kVec = 16 / sizeof(S);  // elements per 16 bytes
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const S*>(a.weights) + l.w_ws);
    const int per_row = l.in_pad / kVec;
    const int n = l.out_pad * per_row;
    for (int e = static_cast<int>(threadIdx.x); e < n; e += static_cast<int>(blockDim.x)) {
      const int o = e / per_row, c = e % per_row;
      *reinterpret_cast<uint4*>(wsm + l.w_sm + o * (l.in_pad + kSkew) + c * kVec) = src[e];
    }
  }
}

/// The warp's 16 rows of the [batch, in] matrix `src` (x, or v in the double backward; zeros past
/// the batch and past `in`) as 16-bit [16, in_pad] rows.
template <class S>
__device__ FF_FORCE_INLINE void load_input(const Args& a, const float* src, int64_t sr, int64_t sc,
                                           int64_t row0, S* dst, int ld) {
  const Layer& l = a.layers[0];
  for (int e = lane_id(); e < 16 * l.in_pad; e += 32) {
    const int r = e / l.in_pad, c = e % l.in_pad;
    const int64_t row = row0 + r;
    const float v = row < a.batch && c < l.in ? src[row * sr + c * sc] : 0.0f;
    dst[r * ld + c] = static_cast<S>(v);
  }
  __syncwarp();
}

__device__ FF_FORCE_INLINE float bias_of(const Layer& l, int col) {
  return l.bias != nullptr && col < l.out ? l.bias[col * l.bias_stride] : 0.0f;
}

/// One layer's forward product for the warp's 16 rows: for each 16-column output tile j, calls
/// epi(col, r, p) for this lane's 8 elements with p = (a·Wᵀ)[r, col] + b[col] in float32 (zero bias
/// past `out`), then __syncwarp.
template <class S, class Epi>
__device__ FF_FORCE_INLINE void layer_forward(const Args& a, const Layer& l, const S* wsm,
                                              const S* in, int ldin, float* scratch,
                                              const Epi& epi) {
  int ldw = 0;
  const S* w = weight_of(a, l, wsm, ldw);
  for (int j = 0; j < l.out_pad / 16; ++j) {
    Acc<S> c;
    warp_product<S, wmma::col_major>(c, in, ldin, w + j * 16 * ldw, ldw, 16, l.in_pad / 16);
    float v[8];
    spill(c, scratch, v);
    const int col = j * 16 + (lane_id() & 15);
    const float b = bias_of(l, col);
#pragma unroll
    for (int i = 0; i < 8; ++i) epi(col, row_of(i), v[i] + b);
  }
  __syncwarp();
}

template <class S>
__global__ void __launch_bounds__(32 * kMaxWarps, 1)
    forward_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  S* wsm = reinterpret_cast<S*>(smem);
  unsigned char* mine = smem + a.warp_base + warp_id() * a.warp_bytes;
  S* const buf0 = reinterpret_cast<S*>(mine + a.g0);
  S* const buf1 = reinterpret_cast<S*>(mine + a.g1);
  float* scratch = reinterpret_cast<float*>(mine + a.scratch);
  if (a.resident) {
    stage_weights(a, wsm);
    __syncthreads();
  }
  const int L = a.num_layers;
  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    const int64_t row0 = (tile * a.warps + warp_id()) * 16;
    if (row0 >= a.batch) continue;  // no block barrier below: warps are independent
    load_input(a, a.x, a.x_sr, a.x_sc, row0, buf0, a.ld_g);
    S* cur = buf0;  // pointers, not an indexed array: no local memory
    S* nxt = buf1;
    for (int k = 0; k < L; ++k) {
      const Layer& l = a.layers[k];
      const bool last = k + 1 == L;
      const Activation kind = last ? a.output : a.hidden;
      layer_forward(a, l, wsm, cur, a.ld_g, scratch, [&](int col, int r, float p) {
        const float y = activation_derivs<float>(kind, a.params, p).value;
        if (!last) {
          nxt[r * a.ld_g + col] = static_cast<S>(col < l.out ? y : 0.0f);
        } else if (row0 + r < a.batch && col < l.out) {
          a.out[(row0 + r) * l.out + col] = y;
        }
      });
      S* const t = cur;
      cur = nxt;
      nxt = t;
    }
  }
}

__device__ FF_FORCE_INLINE float d1_at(const Args& a, const unsigned char* mine, const Layer& l,
                                       int idx) {
  if (a.d1_16) return __half2float(reinterpret_cast<const __half*>(mine + a.d1s)[l.d1_sm + idx]);
  return reinterpret_cast<const float*>(mine + a.d1s)[l.d1_sm + idx];
}

__device__ FF_FORCE_INLINE void set_d1(const Args& a, unsigned char* mine, const Layer& l, int idx,
                                       float d) {
  if (a.d1_16) {
    reinterpret_cast<__half*>(mine + a.d1s)[l.d1_sm + idx] = __float2half(d);
  } else {
    reinterpret_cast<float*>(mine + a.d1s)[l.d1_sm + idx] = d;
  }
}

/// Adds the column sums of the two half-warps' rows (`sum` per lane, column `col`) to the warp's
/// db partial of layer l, when wanted.
__device__ FF_FORCE_INLINE void add_db(const Args& a, unsigned char* mine, const Layer& l, int col,
                                       float sum) {
  sum += __shfl_xor_sync(0xffffffffu, sum, 16);
  if (l.want_db && lane_id() < 16) reinterpret_cast<float*>(mine + a.dbs)[l.db_sm + col] += sum;
}

/// This lane's 8 elements of column tile j of g_L (the output layer l's grad_out), 0 past the
/// batch and past `out`.
__device__ FF_FORCE_INLINE void load_grad_out(const Args& a, const Layer& l, int64_t row0, int j,
                                              float (&g)[8]) {
  const int col = j * 16 + (lane_id() & 15);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = row0 + row_of(i);
    g[i] = row < a.batch && col < l.out ? a.grad_out[row * a.go_sr + col * a.go_sc] : 0.0f;
  }
}

/// Writes this lane's 8 elements of column tile j of g_0 (layer 0 is l) to grad_x, within bounds.
__device__ FF_FORCE_INLINE void store_grad_x(const Args& a, const Layer& l, int64_t row0, int j,
                                             const float (&v)[8]) {
  const int col = j * 16 + (lane_id() & 15);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = row0 + row_of(i);
    if (row < a.batch && col < l.in) a.grad_x[row * l.in + col] = v[i];
  }
}

/// δ = g ⊙ σ′(p_l) for this lane's 8 elements of column tile j: rounded into `dst` (16-bit rows)
/// and, when wanted, summed over the warp's 16 rows into its db partial (fixed order).
template <class S>
__device__ FF_FORCE_INLINE void emit_delta(const Args& a, unsigned char* mine, const Layer& l,
                                           int j, const float (&g)[8], S* dst) {
  const int lane = lane_id();
  const int col = j * 16 + (lane & 15);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = row_of(i);
    const float delta = g[i] * d1_at(a, mine, l, r * l.out_pad + col);
    dst[r * a.ld_g + col] = static_cast<S>(delta);
    sum += delta;
  }
  add_db(a, mine, l, col, sum);
}

/// One term δᵀ a of a dW product: byte offsets of the 16-bit operands δ [16, out_pad] and
/// a [16, in_pad] in every warp's region, and their row pitches (elements).
struct Outer {
  int lhs, lhs_ld, rhs, rhs_ld;
};

/// q = σ′(p_l) ⊙ r + s_l (double backward, σ′ and s in float32) for this lane's 8 elements of
/// column tile j: rounded into `dst` and, when wanted, summed into the warp's db partial.
template <class S>
__device__ FF_FORCE_INLINE void emit_q(const Args& a, unsigned char* mine, const Layer& l, int j,
                                       const float (&r)[8], S* dst) {
  const float* d1 = reinterpret_cast<const float*>(mine + a.d1s) + l.d1_sm;
  const float* s = reinterpret_cast<const float*>(mine + a.curvs) + l.d1_sm;
  const int col = j * 16 + (lane_id() & 15);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int at = row_of(i) * l.out_pad + col;
    const float q = d1[at] * r[i] + s[at];
    dst[row_of(i) * a.ld_g + col] = static_cast<S>(q);
    sum += q;
  }
  add_db(a, mine, l, col, sum);
}

/// dW_l += Σ over the block's rows of Σ_terms δᵀ a (16-bit operands, float32 accumulator `acc`),
/// the 16×16 output fragments split across the warps; terms and warps in a fixed order. Needs
/// every warp's operands written.
template <class S, int N>
__device__ FF_FORCE_INLINE void accumulate_dw(const Args& a, unsigned char* smem, const Layer& l,
                                              const Outer (&terms)[N], float* acc) {
  const int mt = l.out_pad / 16, nt = l.in_pad / 16;
  const int ldd = l.in_pad + kDwSkew;
  for (int f = warp_id(); f < mt * nt; f += a.warps) {
    const int m = f / nt, n = f % nt;
    float* at = acc + l.dw_acc + m * 16 * ldd + n * 16;
    if constexpr (std::is_same_v<S, float>) {  // this lane's 8 elements, rows in order
      const int col = lane_id() & 15;
      Regs c;
#pragma unroll
      for (int i = 0; i < 8; ++i) c.v[i] = at[row_of(i) * ldd + col];
      for (int w = 0; w < a.warps; ++w) {
        const unsigned char* theirs = smem + a.warp_base + w * a.warp_bytes;
#pragma unroll
        for (int t = 0; t < N; ++t) {
          const float* delta = reinterpret_cast<const float*>(theirs + terms[t].lhs) + m * 16;
          const float* act = reinterpret_cast<const float*>(theirs + terms[t].rhs) + n * 16;
          for (int r = 0; r < 16; ++r) {
            const float b = act[r * terms[t].rhs_ld + col];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              c.v[i] = fmaf(delta[r * terms[t].lhs_ld + row_of(i)], b, c.v[i]);
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) at[row_of(i) * ldd + col] = c.v[i];
    } else {
      Frag c;
      wmma::load_matrix_sync(c, at, ldd, wmma::mem_row_major);
      for (int w = 0; w < a.warps; ++w) {
        const unsigned char* theirs = smem + a.warp_base + w * a.warp_bytes;
#pragma unroll
        for (int t = 0; t < N; ++t) {
          const S* delta = reinterpret_cast<const S*>(theirs + terms[t].lhs);
          const S* act = reinterpret_cast<const S*>(theirs + terms[t].rhs);
          wmma::fragment<wmma::matrix_a, 16, 16, 16, S, wmma::col_major> fa;  // δᵀ
          wmma::fragment<wmma::matrix_b, 16, 16, 16, S, wmma::row_major> fb;  // a
          wmma::load_matrix_sync(fa, delta + m * 16, terms[t].lhs_ld);
          wmma::load_matrix_sync(fb, act + n * 16, terms[t].rhs_ld);
          wmma::mma_sync(c, fa, fb, c);
        }
      }
      wmma::store_matrix_sync(at, c, ldd, wmma::mem_row_major);
    }
  }
}

/// The ping-pong buffer `g` (0 or 1) times layer l's input a_l: the first-order dW term.
template <class S>
__device__ FF_FORCE_INLINE Outer outer_with_input(const Args& a, const Layer& l, int g) {
  return Outer{g == 0 ? a.g0 : a.g1, a.ld_g, a.acts + l.a_sm * static_cast<int>(sizeof(S)),
               l.in_pad + kSkew};
}

/// The reverse sweep of the backward (terms δ_k) and of the double backward's second sweep (terms
/// q_k): every warp's layer-(L−1) term in its buffer g0; for k = L−1 .. 0, one block barrier,
/// dw(l, buffer) adds the layer's dW terms, then per column tile j of in_pad the product
/// c = term_k W_k (+ extra(l, j, c)) goes to emit(layer k−1, j, c, the other buffer) or, for
/// k = 0, to grad_x (skipped when not wanted).
template <class S, class Dw, class Extra, class Emit>
__device__ FF_FORCE_INLINE void reverse_sweep(const Args& a, unsigned char* smem, const S* wsm,
                                              unsigned char* mine, int64_t row0, const Dw& dw,
                                              const Extra& extra, const Emit& emit) {
  float* scratch = reinterpret_cast<float*>(mine + a.scratch);
  S* gcur = reinterpret_cast<S*>(mine + a.g0);
  S* gnext = reinterpret_cast<S*>(mine + a.g1);
  int cur = 0;
  for (int k = a.num_layers - 1; k >= 0; --k) {
    const Layer& l = a.layers[k];
    __syncthreads();  // every warp's term k is written; the previous layer's dW reads are done
    if (l.want_dw) dw(l, cur);
    if (k == 0 && a.grad_x == nullptr) break;
    int ldw = 0;
    const S* w = weight_of(a, l, wsm, ldw);
    for (int j = 0; j < l.in_pad / 16; ++j) {
      Acc<S> c;
      warp_product<S, wmma::row_major>(c, gcur, a.ld_g, w + j * 16, ldw,
                                       static_cast<int64_t>(16) * ldw, l.out_pad / 16);
      extra(l, j, c);
      float v[8];
      spill(c, scratch, v);
      if (k > 0) {
        emit(a.layers[k - 1], j, v, gnext);
      } else {
        store_grad_x(a, l, row0, j, v);
      }
    }
    __syncwarp();
    cur ^= 1;
    S* const t = gcur;
    gcur = gnext;
    gnext = t;
  }
}

/// Zeroes the block's dW accumulator and the warp's db partial and stages the resident weights,
/// then a block barrier.
template <class S>
__device__ FF_FORCE_INLINE void begin_partials(const Args& a, S* wsm, float* acc, float* dbw) {
  for (int64_t e = threadIdx.x; e < a.dw_len; e += blockDim.x) acc[e] = 0.0f;
  for (int e = lane_id(); e < a.db_len; e += 32) dbw[e] = 0.0f;
  if (a.resident) stage_weights(a, wsm);
  __syncthreads();
}

/// The block's partials after its last tile (and barrier): dW (copied from shared memory, or
/// already in the slot) and db (the warps' sums added in warp order).
__device__ FF_FORCE_INLINE void end_partials(const Args& a, const unsigned char* smem,
                                             const float* acc, float* slot) {
  if (a.dw_in_smem) {
    for (int64_t e = threadIdx.x; e < a.dw_len; e += blockDim.x) slot[e] = acc[e];
  }
  for (int e = static_cast<int>(threadIdx.x); e < a.db_len; e += static_cast<int>(blockDim.x)) {
    float sum = 0.0f;
    for (int w = 0; w < a.warps; ++w) {
      sum += reinterpret_cast<const float*>(smem + a.warp_base + w * a.warp_bytes + a.dbs)[e];
    }
    slot[a.dw_len + e] = sum;
  }
}

template <class S>
__global__ void __launch_bounds__(32 * kMaxWarps, 1)
    backward_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  S* wsm = reinterpret_cast<S*>(smem);
  unsigned char* mine = smem + a.warp_base + warp_id() * a.warp_bytes;
  S* acts = reinterpret_cast<S*>(mine + a.acts);
  float* scratch = reinterpret_cast<float*>(mine + a.scratch);
  float* dbw = reinterpret_cast<float*>(mine + a.dbs);
  float* slot = a.partials + static_cast<int64_t>(blockIdx.x) * a.slot_len;
  float* acc = a.dw_in_smem ? reinterpret_cast<float*>(smem + a.dw_base) : slot;
  begin_partials(a, wsm, acc, dbw);
  const int L = a.num_layers;
  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    // Every warp runs every step (rows past the batch are zeros): the dW products need all warps.
    const int64_t row0 = (tile * a.warps + warp_id()) * 16;
    S* const g0 = reinterpret_cast<S*>(mine + a.g0);  // δ_L, where the reverse sweep starts
    load_input(a, a.x, a.x_sr, a.x_sc, row0, acts + a.layers[0].a_sm, a.layers[0].in_pad + kSkew);
    // Forward recompute: a_{k+1} (16-bit) and σ′(p_k).
    for (int k = 0; k < L; ++k) {
      const Layer& l = a.layers[k];
      const bool last = k + 1 == L;
      const Activation kind = last ? a.output : a.hidden;
      S* nxt = last ? nullptr : acts + a.layers[k + 1].a_sm;
      const int ldn = l.out_pad + kSkew;
      layer_forward(a, l, wsm, acts + l.a_sm, l.in_pad + kSkew, scratch,
                    [&](int col, int r, float p) {
                      const Derivs<float> d = activation_derivs<float>(kind, a.params, p);
                      const bool in_range = col < l.out;
                      set_d1(a, mine, l, r * l.out_pad + col, in_range ? d.d1 : 0.0f);
                      if (!last) nxt[r * ldn + col] = static_cast<S>(in_range ? d.value : 0.0f);
                    });
    }
    // δ_L = g_L ⊙ σ′(p_L).
    {
      const Layer& l = a.layers[L - 1];
      for (int j = 0; j < l.out_pad / 16; ++j) {
        float g[8];
        load_grad_out(a, l, row0, j, g);
        emit_delta(a, mine, l, j, g, g0);
      }
    }
    reverse_sweep<S>(
        a, smem, wsm, mine, row0,
        [&](const Layer& l, int cur) {
          const Outer terms[1] = {outer_with_input<S>(a, l, cur)};
          accumulate_dw<S>(a, smem, l, terms, acc);
        },
        [&](const Layer&, int, Acc<S>&) {},
        [&](const Layer& l, int j, const float(&v)[8], S* dst) {
          emit_delta(a, mine, l, j, v, dst);
        });
    __syncthreads();  // the next tile overwrites a_k, which other warps' dW products read
  }
  end_partials(a, smem, acc, slot);
}

/// The layer's converted V (grad_grad_weight) in the workspace, [out_pad, in_pad].
template <class S>
__device__ FF_FORCE_INLINE const S* v_of(const Args& a, const Layer& l) {
  return static_cast<const S*>(a.weights) + l.v_ws;
}

/// The double backward (include/fieldfuse/mlp.h, steps 1–4) for the warp's 16 rows per tile:
/// forward (a_k 16-bit, p_k float32), first reverse sweep (δ_k 16-bit, s_k = σ″ g_k, σ′ replaces
/// p_k), tangent sweep (t_k 16-bit, s_k ← s_k u_k, grad_grad_out = t_L), then the second reverse
/// sweep (q_k in the ping-pong buffers) with dW_k += Σ (q_kᵀ a_k + δ_kᵀ t_k) and db_k += Σ q_k
/// after one block barrier per layer, as the backward.
template <class S>
__global__ void __launch_bounds__(32 * kMaxWarps, 1)
    double_backward_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  S* wsm = reinterpret_cast<S*>(smem);
  unsigned char* mine = smem + a.warp_base + warp_id() * a.warp_bytes;
  S* acts = reinterpret_cast<S*>(mine + a.acts);
  S* tans = reinterpret_cast<S*>(mine + a.tans);
  S* deltas = reinterpret_cast<S*>(mine + a.deltas);
  float* d1s = reinterpret_cast<float*>(mine + a.d1s);
  float* curvs = reinterpret_cast<float*>(mine + a.curvs);
  float* scratch = reinterpret_cast<float*>(mine + a.scratch);
  float* dbw = reinterpret_cast<float*>(mine + a.dbs);
  float* slot = a.partials + static_cast<int64_t>(blockIdx.x) * a.slot_len;
  float* acc = a.dw_in_smem ? reinterpret_cast<float*>(smem + a.dw_base) : slot;
  begin_partials(a, wsm, acc, dbw);
  const int L = a.num_layers;
  const int lane = lane_id();
  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    // Every warp runs every step (rows past the batch have x = v = g_L = 0, so δ = s = q = 0).
    const int64_t row0 = (tile * a.warps + warp_id()) * 16;
    // 1. Forward: a_{k+1} (16-bit) and p_k (float32, in d1s).
    load_input(a, a.x, a.x_sr, a.x_sc, row0, acts + a.layers[0].a_sm, a.layers[0].in_pad + kSkew);
    for (int k = 0; k < L; ++k) {
      const Layer& l = a.layers[k];
      const bool last = k + 1 == L;
      S* nxt = last ? nullptr : acts + a.layers[k + 1].a_sm;
      const int ldn = l.out_pad + kSkew;
      layer_forward(a, l, wsm, acts + l.a_sm, l.in_pad + kSkew, scratch,
                    [&](int col, int r, float p) {
                      d1s[l.d1_sm + r * l.out_pad + col] = p;
                      if (last) return;  // the output a_L itself is not needed
                      const float y = activation_derivs<float>(a.hidden, a.params, p).value;
                      nxt[r * ldn + col] = static_cast<S>(col < l.out ? y : 0.0f);
                    });
    }
    // 2. First reverse sweep: g_k (float32), δ_k = σ′ g_k, s_k = σ″ g_k, and σ′ replaces p_k.
    for (int k = L - 1; k >= 0; --k) {
      const Layer& l = a.layers[k];
      const Activation kind = k + 1 == L ? a.output : a.hidden;
      S* dl = deltas + l.dl_sm;
      const int ldd = l.out_pad + kSkew;
      for (int j = 0; j < l.out_pad / 16; ++j) {
        const int col = j * 16 + (lane & 15);
        float g[8];
        if (k + 1 == L) {
          load_grad_out(a, l, row0, j, g);
        } else {  // g_k = δ_{k+1} W_{k+1}, column tile j
          const Layer& n = a.layers[k + 1];
          int ldw = 0;
          const S* w = weight_of(a, n, wsm, ldw);
          Acc<S> c;
          warp_product<S, wmma::row_major>(c, deltas + n.dl_sm, n.out_pad + kSkew, w + j * 16, ldw,
                                           static_cast<int64_t>(16) * ldw, n.out_pad / 16);
          spill(c, scratch, g);
        }
        const bool in_range = col < l.out;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int r = row_of(i);
          const int idx = l.d1_sm + r * l.out_pad + col;
          const Derivs<float> d = activation_derivs<float>(kind, a.params, d1s[idx]);
          dl[r * ldd + col] = static_cast<S>(in_range ? g[i] * d.d1 : 0.0f);
          curvs[idx] = in_range ? g[i] * d.d2 : 0.0f;
          d1s[idx] = in_range ? d.d1 : 0.0f;
        }
      }
      __syncwarp();
    }
    // 3. Tangent sweep: u_k = t_k W_kᵀ + a_k V_kᵀ + c_k, s_k ← s_k ⊙ u_k, t_{k+1} = σ′ ⊙ u_k.
    load_input(a, a.grad_grad_x, a.ggx_sr, a.ggx_sc, row0, tans + a.layers[0].a_sm,
               a.layers[0].in_pad + kSkew);
    for (int k = 0; k < L; ++k) {
      const Layer& l = a.layers[k];
      const bool last = k + 1 == L;
      S* tn = last ? nullptr : tans + a.layers[k + 1].a_sm;
      const int ldn = l.out_pad + kSkew, ldi = l.in_pad + kSkew;
      int ldw = 0;
      const S* w = weight_of(a, l, wsm, ldw);
      for (int j = 0; j < l.out_pad / 16; ++j) {
        Acc<S> c;
        warp_product<S, wmma::col_major>(c, tans + l.a_sm, ldi, w + j * 16 * ldw, ldw, 16,
                                         l.in_pad / 16);
        if (l.has_v) {
          warp_product_add<S, wmma::col_major>(c, acts + l.a_sm, ldi,
                                               v_of<S>(a, l) + j * 16 * l.in_pad, l.in_pad, 16,
                                               l.in_pad / 16);
        }
        float u[8];
        spill(c, scratch, u);
        const int col = j * 16 + (lane & 15);
        const float cb = l.c != nullptr && col < l.out ? l.c[col * l.c_stride] : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int r = row_of(i);
          const int idx = l.d1_sm + r * l.out_pad + col;
          const float uu = u[i] + cb;
          curvs[idx] *= uu;
          const float t = d1s[idx] * uu;  // σ′ is 0 past `out`
          if (!last) {
            tn[r * ldn + col] = static_cast<S>(t);
          } else if (a.grad_grad_out != nullptr && row0 + r < a.batch && col < l.out) {
            a.grad_grad_out[(row0 + r) * l.out + col] = t;
          }
        }
      }
      __syncwarp();
    }
    // 4. Second reverse sweep: q_k = σ′ ⊙ r_k + s_k (r_L = 0), r_{k−1} = q_k W_k + δ_k V_k.
    {  // q_{L−1} = s_{L−1} into g0, where the reverse sweep starts

      const Layer& l = a.layers[L - 1];
      const float zero[8] = {};
      for (int j = 0; j < l.out_pad / 16; ++j)
        emit_q(a, mine, l, j, zero, reinterpret_cast<S*>(mine + a.g0));
    }
    reverse_sweep<S>(
        a, smem, wsm, mine, row0,
        [&](const Layer& l, int cur) {
          const Outer terms[2] = {
              outer_with_input<S>(a, l, cur),
              Outer{a.deltas + l.dl_sm * static_cast<int>(sizeof(S)), l.out_pad + kSkew,
                    a.tans + l.a_sm * static_cast<int>(sizeof(S)), l.in_pad + kSkew}};
          accumulate_dw<S>(a, smem, l, terms, acc);
        },
        [&](const Layer& l, int j, Acc<S>& c) {  // + δ_k V_k
          if (!l.has_v) return;
          warp_product_add<S, wmma::row_major>(c, deltas + l.dl_sm, l.out_pad + kSkew,
                                               v_of<S>(a, l) + j * 16, l.in_pad,
                                               static_cast<int64_t>(16) * l.in_pad, l.out_pad / 16);
        },
        [&](const Layer& l, int j, const float(&v)[8], S* dst) { emit_q(a, mine, l, j, v, dst); });
    __syncthreads();  // the next tile overwrites every warp's operands
  }
  end_partials(a, smem, acc, slot);
}

#else  // sm_75 and older: never launched (the plan requires sm_80), compiled empty.

template <class S>
__global__ void forward_kernel(const __grid_constant__ Args) {}
template <class S>
__global__ void backward_kernel(const __grid_constant__ Args) {}
template <class S>
__global__ void double_backward_kernel(const __grid_constant__ Args) {}

#endif

// ---------------------------------------------------------------------------------------------
// Host side: the plan (whether the fused path covers the problem, warps per block, where the
// weights and the dW accumulator live, grid, workspace layout) from metadata and device
// attributes only, so the workspace query and the call agree.
// ---------------------------------------------------------------------------------------------

enum class Pass { Forward, Backward, DoubleBackward };

struct Plan {
  bool ok = false;
  Args args{};
  std::size_t smem = 0;
  int grid = 0;
  std::size_t partials_offset = 0, total = 0;
};

/// The plan's kernel arguments with the call's x (and the backward entries' grad_out) filled in.
inline Args args_for(const Plan& plan, const MatrixView& x, const MatrixView* grad_out = nullptr) {
  Args a = plan.args;
  a.x = static_cast<const float*>(x.data);
  a.x_sr = x.stride_row;
  a.x_sc = x.stride_col;
  if (grad_out != nullptr) {
    a.grad_out = static_cast<const float*>(grad_out->data);
    a.go_sr = grad_out->stride_row;
    a.go_sc = grad_out->stride_col;
  }
  return a;
}

inline bool sigma_prime_is_01(Activation kind) {
  return kind == Activation::ReLU || kind == Activation::None;
}

template <class S>
Plan make_plan(const Problem& p, Pass pass) {
  Plan plan;
  if (p.num_layers < 1 || p.num_layers > kMaxLayers) return plan;
  const int device = p.device.index;
  int major = 0, sms = 1, optin = 48 * 1024;
  cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), p.op,
              "cudaDeviceGetAttribute(ComputeCapabilityMajor)");
  if (major < 8) return plan;  // bfloat16 WMMA (and this kernel's compiled body) needs sm_80
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), p.op,
              "cudaDeviceGetAttribute(MultiProcessorCount)");
  cuda::check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), p.op,
              "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  const bool backward = pass != Pass::Forward;  // parameter partials
  const bool twice = pass == Pass::DoubleBackward;
  Args& a = plan.args;
  a.num_layers = p.num_layers;
  a.batch = p.batch;
  a.hidden = p.activation;
  a.output = p.output_activation;
  a.params = p.params;
  int64_t maxw = 0, elems = 0, sm_elems = 0, act_elems = 0, d1_len = 0, db_len = 0, dw_len = 0,
          delta_elems = 0;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& v = p.layers[k];
    Layer& l = a.layers[k];
    const int64_t in_pad = pad16(v.in), out_pad = pad16(v.out);
    if (in_pad > kMaxWidth || out_pad > kMaxWidth) return plan;
    l.in = static_cast<int>(v.in);
    l.out = static_cast<int>(v.out);
    l.in_pad = static_cast<int>(in_pad);
    l.out_pad = static_cast<int>(out_pad);
    l.bias = static_cast<const float*>(v.bias);
    l.bias_stride = v.bias_stride;
    l.want_dw = v.grad_weight != nullptr;
    l.want_db = v.grad_bias != nullptr;
    l.has_v = v.grad_grad_weight != nullptr;
    l.c = static_cast<const float*>(v.grad_grad_bias);
    l.c_stride = v.grad_grad_bias_stride;
    l.dl_sm = static_cast<int>(delta_elems);
    delta_elems += 16 * (out_pad + kSkew);
    l.w_ws = elems;
    elems += out_pad * in_pad;
    l.w_sm = static_cast<int>(sm_elems);
    sm_elems += out_pad * (in_pad + kSkew);
    l.a_sm = static_cast<int>(act_elems);
    act_elems += 16 * (in_pad + kSkew);
    l.d1_sm = static_cast<int>(d1_len);
    d1_len += 16 * out_pad;
    l.db_sm = static_cast<int>(db_len);
    db_len += out_pad;
    l.dw_acc = dw_len;
    dw_len += out_pad * (in_pad + kDwSkew);
    maxw = std::max({maxw, in_pad, out_pad});
  }
  // The double backward's converted V copies follow the weights, in the same layout (always
  // reserved: the workspace query does not know which V are given).
  for (int k = 0; k < p.num_layers; ++k) a.layers[k].v_ws = elems + a.layers[k].w_ws;
  a.ld_g = static_cast<int>(maxw + kSkew);
  a.d1_16 = !twice && sigma_prime_is_01(p.activation) && sigma_prime_is_01(p.output_activation);
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t at = off;
    off += align128(bytes);
    return static_cast<int>(at);
  };
  a.g0 = take(16 * a.ld_g * sizeof(S));
  a.g1 = take(16 * a.ld_g * sizeof(S));
  a.scratch = take(16 * kScratchLd * sizeof(float));
  if (backward) {
    a.acts = take(act_elems * sizeof(S));
    a.d1s = take(d1_len * (a.d1_16 ? sizeof(__half) : sizeof(float)));
    a.dbs = take(db_len * sizeof(float));
  }
  if (twice) {
    a.tans = take(act_elems * sizeof(S));
    a.curvs = take(d1_len * sizeof(float));
    a.deltas = take(delta_elems * sizeof(S));
  }
  const std::size_t warp_bytes = off;
  const std::size_t weight_bytes = align128(sm_elems * sizeof(S));
  const std::size_t dw_bytes = align128(dw_len * sizeof(float));
  // Preference: more warps per block (more rows per dW product and per weight stage), then
  // resident weights, then a shared-memory dW accumulator.
  bool found = false;
  for (int warps = kMaxWarps; warps >= 1 && !found; warps /= 2) {
    for (int resident = 1; resident >= 0 && !found; --resident) {
      for (int dw_smem = backward ? 1 : 0; dw_smem >= 0 && !found; --dw_smem) {
        const std::size_t bytes =
            (resident ? weight_bytes : 0) + (dw_smem ? dw_bytes : 0) + warps * warp_bytes;
        if (bytes > static_cast<std::size_t>(optin)) continue;
        found = true;
        a.warps = warps;
        a.resident = resident;
        a.dw_in_smem = dw_smem;
        plan.smem = bytes;
      }
    }
  }
  if (!found) return plan;
  a.dw_base = static_cast<int>(a.resident ? weight_bytes : 0);
  a.warp_base = a.dw_base + static_cast<int>(a.dw_in_smem ? dw_bytes : 0);
  a.warp_bytes = static_cast<int>(warp_bytes);
  a.tiles = (p.batch + 16 * a.warps - 1) / (16 * a.warps);
  if (backward) {
    a.dw_len = dw_len;
    a.db_len = db_len;
    a.slot_len = static_cast<int64_t>((dw_len + db_len + 63) / 64 * 64);
    for (int k = 0; k < p.num_layers; ++k) a.layers[k].db_slot = dw_len + a.layers[k].db_sm;
  }
  const auto kernel =
      twice ? double_backward_kernel<S> : (backward ? backward_kernel<S> : forward_kernel<S>);
  cuda::DeviceGuard guard(device, p.op);
  cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(plan.smem)),
              p.op, "cudaFuncSetAttribute(fused mlp kernel)");
  int per_sm = 0;
  cuda::check(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * a.warps, plan.smem), p.op,
      "cudaOccupancyMaxActiveBlocksPerMultiprocessor(fused mlp kernel)");
  if (per_sm < 1) return plan;
  plan.grid = static_cast<int>(std::min<int64_t>(a.tiles, static_cast<int64_t>(sms) * per_sm));
  const int64_t copies = twice ? 2 : 1;  // W, and V in the double backward
  plan.partials_offset = (static_cast<std::size_t>(copies * elems) * sizeof(S) + 255) / 256 * 256;
  plan.total = plan.partials_offset +
               (backward ? static_cast<std::size_t>(plan.grid) * a.slot_len * sizeof(float) : 0);
  plan.total = std::max<std::size_t>(plan.total, 1);
  plan.ok = true;
  return plan;
}

/// Converts the weights into the workspace, runs the fused kernel and (backward) sums the
/// per-block partials into the parameter gradients. `a` is the plan's Args with the call's
/// pointers filled in.
template <class S>
void run(const Problem& p, const Plan& plan, Args a, void* workspace, Stream s, Pass pass) {
  cuda::ProfileRange range(p.op);
  cuda::DeviceGuard guard(p.device.index, p.op);
  const auto stream = static_cast<cudaStream_t>(s.handle);
  char* ws = static_cast<char*>(workspace);
  a.weights = ws;
  a.partials = reinterpret_cast<float*>(ws + plan.partials_offset);
  const bool backward = pass != Pass::Forward;
  if (a.tiles > 0) {
    for (int k = 0; k < p.num_layers; ++k) {
      const LayerView& v = p.layers[k];
      const Layer& l = a.layers[k];
      const int64_t count = static_cast<int64_t>(l.out_pad) * l.in_pad;
      const int blocks = static_cast<int>(std::min<int64_t>(cuda::ceil_div(count, 256), 1024));
      S* const converted = static_cast<S*>(static_cast<void*>(ws));
      convert_weights_kernel<S><<<blocks, 256, 0, stream>>>(
          static_cast<const float*>(v.weight), v.weight_stride_out, v.weight_stride_in, l.out, l.in,
          l.in_pad, count, converted + l.w_ws);
      cuda::check_launch(p.op, "convert_weights_kernel", stream);
      if (!l.has_v) continue;
      convert_weights_kernel<S><<<blocks, 256, 0, stream>>>(
          static_cast<const float*>(v.grad_grad_weight), v.grad_grad_weight_stride_out,
          v.grad_grad_weight_stride_in, l.out, l.in, l.in_pad, count, converted + l.v_ws);
      cuda::check_launch(p.op, "convert_weights_kernel(grad_grad_weight)", stream);
    }
    if (pass == Pass::DoubleBackward) {
      double_backward_kernel<S><<<plan.grid, 32 * a.warps, plan.smem, stream>>>(a);
      cuda::check_launch(p.op, "fused double_backward_kernel", stream);
    } else if (backward) {
      backward_kernel<S><<<plan.grid, 32 * a.warps, plan.smem, stream>>>(a);
      cuda::check_launch(p.op, "fused backward_kernel", stream);
    } else {
      forward_kernel<S><<<plan.grid, 32 * a.warps, plan.smem, stream>>>(a);
      cuda::check_launch(p.op, "fused forward_kernel", stream);
    }
  }
  if (!backward) return;
  const int blocks = a.tiles > 0 ? plan.grid : 0;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& v = p.layers[k];
    const Layer& l = a.layers[k];
    struct Part {
      void* out;
      int64_t offset, cols, ld, count;
    };
    const Part parts[2] = {
        {v.grad_weight, l.dw_acc, l.in, l.in_pad + kDwSkew, static_cast<int64_t>(l.out) * l.in},
        {v.grad_bias, l.db_slot, l.out, l.out, l.out}};
    for (const Part& part : parts) {
      if (part.out == nullptr) continue;
      const int rb = static_cast<int>(std::min<int64_t>(cuda::ceil_div(part.count, 256), 1024));
      reduce_padded_kernel<<<rb, 256, 0, stream>>>(a.partials, a.slot_len, blocks, part.offset,
                                                   part.cols, part.ld, part.count,
                                                   static_cast<float*>(part.out));
      cuda::check_launch(p.op, "reduce_padded_kernel", stream);
    }
  }
}

/// Runs the forward, backward or double backward entry on the fused plan `plan` (which must be
/// ok): fills the call's pointers in and calls run().
template <class S>
void launch_fused(const Plan& plan, const ForwardArgs& args) {
  Args a = args_for(plan, args.x);
  a.out = static_cast<float*>(args.out);
  run<S>(args.problem, plan, a, args.workspace, args.stream, Pass::Forward);
}

template <class S>
void launch_fused(const Plan& plan, const BackwardArgs& args) {
  Args a = args_for(plan, args.x, &args.grad_out);
  a.grad_x = static_cast<float*>(args.grad_x);
  run<S>(args.problem, plan, a, args.workspace, args.stream, Pass::Backward);
}

template <class S>
void launch_fused(const Plan& plan, const DoubleBackwardArgs& args) {
  Args a = args_for(plan, args.x, &args.grad_out);
  a.grad_grad_x = static_cast<const float*>(args.grad_grad_x.data);
  a.ggx_sr = args.grad_grad_x.stride_row;
  a.ggx_sc = args.grad_grad_x.stride_col;
  a.grad_grad_out = static_cast<float*>(args.grad_grad_out);
  a.grad_x = static_cast<float*>(args.grad_x);
  run<S>(args.problem, plan, a, args.workspace, args.stream, Pass::DoubleBackward);
}

/// The fused pass of a tile entry.
inline Pass pass_of(tile::Entry entry) {
  switch (entry) {
    case tile::Entry::Forward:
      return Pass::Forward;
    case tile::Entry::Backward:
      return Pass::Backward;
    default:
      return Pass::DoubleBackward;
  }
}

/// Whether an engine's problems may take the fused path: 16-bit or float32 operands (float64
/// keeps the tile kernels).
template <class Engine>
constexpr bool kFusable = !std::is_same_v<typename Engine::Operand, double>;

/// Workspace bytes of one entry: the fused plan's when it covers the problem, else the tile
/// kernels'.
template <class Engine>
std::size_t workspace_bytes(const Problem& p, tile::Entry entry) {
  if constexpr (kFusable<Engine>) {
    const Plan plan = make_plan<typename Engine::Operand>(p, pass_of(entry));
    if (plan.ok) return plan.total;
  }
  return tile::workspace_bytes<Engine>(p, entry);
}

/// Any entry of mlp_drivers.h (it follows from the argument struct): the fused kernels when their
/// plan covers the problem, else the tile kernels.
template <class Engine, class EntryArgs>
void launch(const EntryArgs& args) {
  if constexpr (kFusable<Engine>) {
    constexpr Pass pass = std::is_same_v<EntryArgs, ForwardArgs>    ? Pass::Forward
                          : std::is_same_v<EntryArgs, BackwardArgs> ? Pass::Backward
                                                                    : Pass::DoubleBackward;
    const Plan plan = make_plan<typename Engine::Operand>(args.problem, pass);
    if (plan.ok) return launch_fused<typename Engine::Operand>(plan, args);
  }
  tile::launch<Engine>(args);
}

}  // namespace fieldfuse::detail::mlp::fused
