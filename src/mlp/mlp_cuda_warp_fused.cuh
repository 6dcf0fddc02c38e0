// SPDX-License-Identifier: Apache-2.0
// The warp-fused MLP kernels' design note, arguments and building blocks, and the forward and
// backward kernels: each warp owns 16 rows of its block's tile and runs every layer on them out of
// shared memory (WMMA for 16-bit operands, FMAs for float32).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cuda_launch.cuh"
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
  int64_t w_ws = 0;     ///< converted weight in the workspace, [out_pad, in_pad] (warp-fused)
  int w_sm = 0;         ///< resident weight in shared memory, [out_pad, in_pad + kSkew]
  int a_sm = 0;         ///< per-warp 16-bit input a_k, [16, in_pad + kSkew] (backward)
  int d1_sm = 0;        ///< per-warp σ′(p_k), [16, out_pad] (backward)
  int db_sm = 0;        ///< per-warp db partial, [out_pad] (backward)
  int64_t dw_acc = 0;   ///< dW accumulator, [out_pad, in_pad + kDwSkew] (backward)
  int64_t db_slot = 0;  ///< db partial in the block's slot, [out_pad] (backward)
  int64_t v_ws = 0;     ///< converted V in the workspace, [out_pad, in_pad] (warp-fused double)
  int dl_sm = 0;        ///< per-warp 16-bit δ_k, [16, out_pad + kSkew] (double backward)
  const float* bias = nullptr;
  int64_t bias_stride = 0;
  const float* c = nullptr;  ///< grad_grad_bias c_k (double backward), or null
  int64_t c_stride = 0;
  int want_dw = 0, want_db = 0, has_v = 0;
  /// Register backward kernels: the warp that takes the layer's first dW tile (Note [mlp register
  /// backward]), and which of the two δ buffers (g0, g1) the layer's δ goes to.
  int dw_first = 0, delta_buffer = 0;
  /// Register kernels: the float32 weight and V_k (or null), read through their strides as they
  /// are staged (Note [mlp staged conversion]).
  const float* w_src = nullptr;
  int64_t w_so = 0, w_si = 0;
  const float* v_src = nullptr;
  int64_t v_so = 0, v_si = 0;
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
  const float* grad_y = nullptr;  ///< r_L (double backward), or null: zero
  int64_t gy_sr = 0, gy_sc = 0;
  float* grad_grad_out = nullptr;  ///< t_L (double backward), or null
  float* out = nullptr;
  float* grad_x = nullptr;
  const void* weights = nullptr;  ///< the converted weights (type S) in the workspace (warp-fused)
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
  /// The register forward's widest padded width MW (Note [mlp register forward]), or 0.
  int register_width = 0;
  /// The register double backward's resident V copies (layout of the weights), or 0: none.
  int v_sm = 0;
  /// The register forward's and backward's staged biases (byte offset; [num_layers,
  /// register_width] float32, zero past each layer's `out`).
  int bias_sm = 0;
  /// The register backward takes a hidden softplus's σ′ from the stored a_{k+1} instead of
  /// recomputing p_k, the double backward σ″u_k from t_{k+1} instead of recomputing u_k (Note
  /// [mlp slope from the output]).
  int slope_from_output = 0;
  /// The register forward's staged input rows (byte offset of warp 0's two buffers; Note [mlp
  /// staged input rows]), or 0: x is read directly.
  int x_stage = 0;
};

/// One weight converted into the workspace: dst [out_pad, in_pad] (S) = the float32 weight
/// [out, in] read through its strides, zero padded.
struct ConvertPart {
  const float* src = nullptr;
  int64_t so = 0, si = 0;
  int out = 0, in = 0, in_pad = 0;
  int64_t dst = 0;    ///< element offset in the converted weights
  int64_t count = 0;  ///< out_pad · in_pad
};

/// A call's parts of one kind (ConvertPart, ReducePart), handled in one launch over their
/// concatenation.
template <class Part>
struct Parts {
  Part parts[2 * kMaxLayers];
  int num_parts = 0;
  int64_t total = 0;  ///< Σ count
  void add(const Part& part) {
    parts[num_parts++] = part;
    total += part.count;
  }
};

/// f(part, e) for every element e of every part, the grid striding over their concatenation.
template <class Part, class F>
__device__ FF_FORCE_INLINE void for_each_part_element(const Parts<Part>& list, const F& f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < list.total;
       i += stride) {
    int q = 0;
    int64_t e = i;
    while (e >= list.parts[q].count) e -= list.parts[q++].count;
    f(list.parts[q], e);
  }
}

/// Every weight (and V) of a call, converted in one launch: one launch per layer cost about
/// 16 µs of a 16-bit forward + backward of five layers on an H100, a launch gap each.
using ConvertParts = Parts<ConvertPart>;

template <class S>
__global__ void convert_weights_kernel(const __grid_constant__ ConvertParts c, S* dst) {
  for_each_part_element(c, [&](const ConvertPart& part, int64_t e) {
    const int64_t o = e / part.in_pad, k = e % part.in_pad;
    dst[part.dst + e] =
        static_cast<S>(o < part.out && k < part.in ? part.src[o * part.so + k * part.si] : 0.0f);
  });
}

/// One parameter gradient the per-block partials are summed into: out[e] = Σ_b partials[b·slot_len
/// + offset + (e / cols)·ld + e % cols] for e < count, blocks in order.
struct ReducePart {
  float* out = nullptr;
  int64_t offset = 0, cols = 1, ld = 1, count = 0;
};

/// Every wanted dW and db of a call: one launch instead of one per gradient (at 5 layers, ten
/// launches of a few microseconds each were a quarter of the 16-bit backward's budget).
using ReduceParts = Parts<ReducePart>;

static __global__ void reduce_parts_kernel(const __grid_constant__ ReduceParts r,
                                           const float* partials, int64_t slot_len, int blocks) {
  for_each_part_element(r, [&](const ReducePart& part, int64_t e) {
    const int64_t at = part.offset + (e / part.cols) * part.ld + e % part.cols;
    float sum = 0.0f;
    for (int b = 0; b < blocks; ++b) sum += partials[b * slot_len + at];
    part.out[e] = sum;
  });
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

// Note [mlp staged conversion]
// The warp-fused kernels read the 16-bit weights from the workspace, where a conversion launch
// (convert_weights_kernel) puts them first. The register kernels read each weight once per block,
// into shared memory, so they convert it there instead: every block reads the float32 parameter
// (from L2 after the first block) and rounds it as it stages it. That removes a launch and its
// gap per call (four in an Eikonal step) for 32 KB more of L2 reads per block at 64 wide. On an
// H100 (float16, B = 2^18, graph replay, same kernels otherwise): inference of 32 → 64×4 → 16
// 0.0631 → 0.0617–0.0631 ms, its forward + backward 0.347 → 0.346 ms, the Eikonal step of
// 3 → 64×4 → 1 2.42 → 2.38 ms. Their plans reserve no workspace for converted copies.

/// Elements c0 .. c0 + 16 / sizeof(S) of row o of the float32 matrix src [out, in] (strides so,
/// si) rounded to S, zero past `out` and `in`, as 16 bytes.
template <class S>
__device__ FF_FORCE_INLINE uint4 rounded_chunk(const float* src, int64_t so, int64_t si, int out,
                                               int in, int o, int c0) {
  constexpr int kVec = 16 / sizeof(S);
  S value[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int c = c0 + i;
    value[i] = static_cast<S>(o < out && c < in ? src[o * so + c * si] : 0.0f);
  }
  uint4 chunk;
  memcpy(&chunk, value, sizeof(chunk));
  return chunk;
}

/// Stages every weight (or, `grad_grad`, every layer's V) into shared memory (resident plans),
/// 16 bytes at a time: the converted copies from the workspace, or (kFromFloat, the register
/// kernels) the float32 parameters, rounded (Note [mlp staged conversion]).
template <bool kFromFloat, class S>
__device__ void stage_weights(const Args& a, S* wsm, bool grad_grad = false) {
  constexpr int kVec = 16 / sizeof(S);  // elements per 16 bytes
  for (int k = 0; k < a.num_layers; ++k) {
    const Layer& l = a.layers[k];
    if (grad_grad && !l.has_v) continue;
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const S*>(a.weights) +
                                                      (grad_grad ? l.v_ws : l.w_ws));
    const int per_row = l.in_pad / kVec;
    const int n = l.out_pad * per_row;
    for (int e = static_cast<int>(threadIdx.x); e < n; e += static_cast<int>(blockDim.x)) {
      const int o = e / per_row, c = e % per_row;
      uint4 chunk;
      if constexpr (!kFromFloat) {
        chunk = src[e];
      } else if (grad_grad) {
        chunk = rounded_chunk<S>(l.v_src, l.v_so, l.v_si, l.out, l.in, o, c * kVec);
      } else {
        chunk = rounded_chunk<S>(l.w_src, l.w_so, l.w_si, l.out, l.in, o, c * kVec);
      }
      *reinterpret_cast<uint4*>(wsm + l.w_sm + o * (l.in_pad + kSkew) + c * kVec) = chunk;
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
    stage_weights<false>(a, wsm);
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

/// This lane's 8 elements of column tile j of an upstream gradient of the output layer l
/// (grad_out g_L, or the double backward's grad_y r_L) at `src` (strides sr, sc), 0 past the
/// batch and past `out`.
__device__ FF_FORCE_INLINE void load_output_rows(const Args& a, const float* src, int64_t sr,
                                                 int64_t sc, const Layer& l, int64_t row0, int j,
                                                 float (&g)[8]) {
  const int col = j * 16 + (lane_id() & 15);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = row0 + row_of(i);
    g[i] = row < a.batch && col < l.out ? src[row * sr + col * sc] : 0.0f;
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

/// This block's slot of the per-block partials in the workspace.
__device__ FF_FORCE_INLINE float* block_slot(const Args& a) {
  return a.partials + static_cast<int64_t>(blockIdx.x) * a.slot_len;
}

/// Zeroes the block's dW accumulator (shared memory, or the block's slot) and the warp's db
/// partial and stages the resident weights (from float32 with kFromFloat, stage_weights), then a
/// block barrier. Returns the accumulator.
template <class S, bool kFromFloat = false>
__device__ FF_FORCE_INLINE float* begin_partials(const Args& a, unsigned char* smem) {
  float* acc = a.dw_in_smem ? reinterpret_cast<float*>(smem + a.dw_base) : block_slot(a);
  float* dbw = reinterpret_cast<float*>(smem + a.warp_base + warp_id() * a.warp_bytes + a.dbs);
  for (int64_t e = threadIdx.x; e < a.dw_len; e += blockDim.x) acc[e] = 0.0f;
  for (int e = lane_id(); e < a.db_len; e += 32) dbw[e] = 0.0f;
  if (a.resident) stage_weights<kFromFloat>(a, reinterpret_cast<S*>(smem));
  __syncthreads();
  return acc;
}

/// The block's partials after its last tile (and barrier): dW (copied from shared memory, or
/// already in the slot) and db (the warps' sums added in warp order).
__device__ FF_FORCE_INLINE void end_partials(const Args& a, const unsigned char* smem,
                                             const float* acc) {
  float* slot = block_slot(a);
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
  float* acc = begin_partials<S>(a, smem);
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
                      if (!last) {
                        nxt[r * ldn + col] = static_cast<S>(in_range ? d.value : 0.0f);
                      } else if (a.out != nullptr && in_range && row0 + r < a.batch) {
                        a.out[(row0 + r) * l.out + col] = d.value;  // y, where wanted
                      }
                    });
    }
    // δ_L = g_L ⊙ σ′(p_L).
    {
      const Layer& l = a.layers[L - 1];
      for (int j = 0; j < l.out_pad / 16; ++j) {
        float g[8];
        load_output_rows(a, a.grad_out, a.go_sr, a.go_sc, l, row0, j, g);
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
  end_partials(a, smem, acc);
}

#else  // sm_75 and older: never launched (the plan requires sm_80), compiled empty.

template <class S>
__global__ void forward_kernel(const __grid_constant__ Args) {}
template <class S>
__global__ void backward_kernel(const __grid_constant__ Args) {}

#endif

}  // namespace fieldfuse::detail::mlp::fused
