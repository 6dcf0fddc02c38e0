// SPDX-License-Identifier: Apache-2.0
// The tensor-core backward with the reverse sweep in registers: δ_k stays in mma.sync fragments
// from one layer to the next, and the block computes dW_k over all its rows at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mlp/mlp_cuda_fragments.cuh"
#include "mlp/mlp_cuda_register_forward.cuh"
#include "mlp/mlp_math.h"

namespace fieldfuse::detail::mlp::fused {

// Note [mlp register backward]
// The warp-fused backward (Note [mlp warp-fused kernel]) keeps every layer's a_k and σ′(p_k) per
// warp in shared memory and sends each 16×16 product through a scratch tile, which at 64 wide
// leaves room for 4 warps a block. This kernel does the first-order backward the way the register
// forward does the forward (Note [mlp register forward]), for 16-bit operands and padded widths
// up to 64. A block of `warps` warps owns a tile of R = 16·warps rows, 16 per warp:
// - forward: the register forward on the warp's rows, writing every layer's 16-bit input a_k to
//   the block's activation buffer ([R, in_pad + kSkew] per layer; the a_L of the output layer is
//   not needed);
// - reverse sweep, k = L−1 .. 0: the warp recomputes p_k = a_k W_kᵀ + b_k from its rows of a_k
//   (one more forward product per layer instead of R·Σ out_k floats of σ′ in shared memory, which
//   would halve the rows a block holds; a hidden ReLU needs no product, its gate p_k > 0 is
//   a_{k+1} > 0, which differs only where float16 rounds a p_k below 2^-25 to 0, and there the
//   forward went on with 0 as well), forms δ_k = g_k ⊙ σ′(p_k) in float32 (g_{L−1} is
//   grad_out; db_k sums this δ: per warp, rows and then lanes in a fixed order), rounds it into A
//   fragments, and g_{k−1} = δ_k W_k is the next product, B fragments by ldmatrix.trans from the
//   same resident weights (grad_x for k = 0);
// - dW_k += δ_kᵀ a_k over the block's R rows: δ_k goes to one of two 16-bit buffers, one block
//   barrier, then each warp takes 16×16 tiles of dW_k (round robin) and runs the R/16 products
//   with both operands by ldmatrix.trans, adding the float32 result to the block's slot in the
//   workspace by a reduction in L2 (add_to_slot; each tile owned by one warp, so the order of
//   the adds is fixed; the slots are summed in block order afterwards, as for the warp-fused
//   kernels). The two buffers let the next layer's δ be written while other warps still read
//   this one, so one barrier per layer suffices.
// The arithmetic is the warp-fused backward's: 16-bit a_k, δ_k and weights in every product,
// float32 accumulation, σ′ and δ in float32, db from the float32 δ.
//
// Nsight Compute on 32 → 64×4 → 16 ReLU at B = 2^18 (float16) counted about 8.2 k instructions
// per warp tile of 16 rows for 360 mma.sync, as in the register forward before Note [mlp register
// forward layers]; what cut them:
// - the forward and every recomputed p_k go through the register forward's layer code (staged
//   biases as the first product's addend, tile counts picked at compile time: hidden_layer,
//   layer_product), and the reverse sweep runs each layer with its output tile count as a
//   compile-time NT when the layer is full width (with_count), so its loops, gates and stores
//   carry no column tests;
// - db by a reduce-scatter butterfly (add_column_sums: 14 shuffles for 8 tiles, was 48 with
//   the branches around them);
// - dW tiles round robin over the whole sweep (Layer::dw_first, set by the plan: restarting at
//   warp 0 every layer left warp 0 with 8 of the 60 tiles and warp 11 with 3, and every barrier
//   waited on warp 0), and the loop over rows stepping shared addresses;
// - grad_out and grad_x as 8-byte column pairs.
// 4.8 k instructions a tile remained, and on an H100 the kernel went from 0.41 to 0.283 ms
// (torch.profiler, forward + backward of that network), then to 0.274 ms once the plan set each
// layer's first dW warp and δ buffer (Layer::dw_first, delta_buffer), which the sweep had carried
// in local memory. Its stalls then: long scoreboard 24 %, fixed-latency waits 21 %, shared memory
// 19 %, barriers 9 %; the ReLU gates, db butterflies and δ stores of the full-width layers are the
// largest block left (23 % of the instructions).
// What the register forward's shape change (Note [mlp register forward shape]) did not do here,
// forward + backward of the same network graphed: 8 warps a block instead of 12, 0.358 ms
// against 0.349; the hidden activation picked once per kernel, 0.518 ms at 12 warps and 0.460 at
// 8 (432 and 200 bytes of spills). At 12 warps the kernel uses 231 424 of the H100's 232 448
// bytes of shared memory a block, so staging the biases at twice the size (one 16-byte load per
// addend) sent it to 8 warps: 0.40 ms.

// Note [mlp slope from the output]
// The reverse sweep needs σ′(p_k) of every hidden layer, and recomputing p_k = a_k W_kᵀ + b_k costs
// the layer's product again. Where σ′ follows from the stored output a_{k+1} = σ(p_k), the sweep
// reads the warp's rows of a_{k+1} instead:
// - ReLU: σ′ = [a_{k+1} > 0] (Note [mlp register backward]);
// - softplus: e^{βa} = 1 + e^{βp}, so σ′ = 1 − e^{−βa_{k+1}} (Softplus::d1_of_value).
// The forward rounded a_{k+1} to 16 bits, so σ′ carries that rounding: a relative error of at most
// u, since βa·e^{−βa}/(1 − e^{−βa}) ≤ 1, the size of the rounding of δ_k to 16 bits for the next
// product; plus an absolute error near 2^-21 where βa is small (βp below about −10), from the
// hidden layers' log1p as __logf(1 + x) (Note [mlp fast math]) and from 1 − e^{−βa} in float32.
// On 3 → 64×4 → 1 softplus it spares 104 of the 16-row tile's products.
// The double backward needs σ″u_k too. Taking σ′ and σ″u_k = βe^{−βa_{k+1}}·t_{k+1} from the
// stored a_{k+1} and t_{k+1} took its kernel from 0.94 to 0.70 ms on an H100 (float16 Eikonal step
// of 3 → 64×4 → 1 Softplus β = 100, B = 2^18), but σ″ needs 1 − σ′ = e^{−βa}, whose relative
// error from the rounding of a is βa·u (3u at βa = 3, where σ″ is still a fifth of its peak),
// and the step's error against float64 went from 2.7e-2 to 5.1e-2 in float16 (PyTorch under
// autocast: 2.6e-2), 1.8e-3 to 3.0e-3 in bfloat16. So the double backward recomputes p_k (σ′ and
// 1 − σ′ exact) and takes only σ″u_k = β(1 − σ′)·t_{k+1} from the stored tangent t_{k+1} = σ′u_k
// (Softplus::d2u_of_tangent): an error of u on that term, and no u_k product.
// Measured on an H100 (2026-12-07, bench_mlp.py, same step, errors of the output and every
// gradient against float64): in bfloat16 this leaves the error where it was (1.7e-3 through
// mlp_value_and_input_grad, 3.0e-3 through autograd) and takes the step from 1.26 to 1.09 ms
// graphed; in float16 the error still rose, from 1.4e-2 to 4.5e-2 (1.9e-2 to 2.4e-2 through
// autograd). That benchmark's loss is a mean over 2^18 rows, so its upstream gradients (about
// 2^-18) are float16 subnormals, and a float64 emulation of its 16-bit operands
// (bench/mlp_16bit_emulation.py) puts most of float16's error there: 2.4e-2 as it is, 2.5e-4 with
// the loss scaled by 2^16 (torch.amp.GradScaler's default), and under that scale the slopes from
// the outputs leave it at 2.5e-4 (2.4e-2 → 2.9e-2 unscaled; bfloat16 2.5e-3 either way). Not yet
// measured on a GPU under a loss scale, so only bfloat16 takes the slopes from the outputs
// (slope_from_output_is_accurate); float16 and the exact paths (float32, float64, the CPU)
// recompute p_k and u_k.
// Sigmoid and tanh could be inverted too (σ′ = a(1 − a), 1 − a²), but near saturation that
// cancels to nothing in 16 bits, so they keep the product.

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

/// db += the column sums of δ over the warp's 16 rows, accumulator tiles j < nt (a Constant or a
/// Runtime count; the tiles from nt on must be 0). Each lane adds its rows g and g + 8, then the
/// 8 lanes of a column group (same t) reduce-scatter their column pairs: each butterfly step
/// sends half of the pairs a lane still holds and adds the half it receives, so after three steps
/// lane (g, t) holds one pair's whole sum (where there are 2 or 4 pairs, the last steps sum the
/// one pair left, which 4 or 2 lanes then hold alike, and the one with the lowest g writes it).
/// That is 14 shuffles for 8 tiles; a separate all-reduce per tile took 48.
template <int NT, class Count>
__device__ FF_FORCE_INLINE void add_column_sums(const float (&D)[NT][4], Count nt, float* db) {
  constexpr int kKnown = kStaticValue<Count>;
  constexpr int kTiles = kKnown != 0 ? kKnown : NT;
  constexpr int kPairs = kTiles <= 2 ? 2 : kTiles <= 4 ? 4 : 8;  // a power of two
  constexpr int kSplits = kPairs == 2 ? 1 : kPairs == 4 ? 2 : 3;
  static_assert(NT <= 8 && kPairs <= NT,
                "at most 8 tiles (one pair per lane of a column group), a power of two of them");
  const int lane = lane_id(), g = lane >> 2, t = lane & 3;
  float2 v[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    v[j] = j < kTiles ? make_float2(D[j][0] + D[j][2], D[j][1] + D[j][3]) : make_float2(0.0f, 0.0f);
  }
  static_for<0, 3, 1>([&](auto step) {
    constexpr int mask = 16 >> step.value;            // lane bits 4, 3, 2: g's bits 2, 1, 0
    constexpr int held = kPairs >> (step.value + 1);  // pairs kept after this step
    const bool upper = (lane & mask) != 0;
    if constexpr (held >= 1) {
#pragma unroll
      for (int i = 0; i < held; ++i) {
        const float2 send = upper ? v[i] : v[i + held];
        const float2 keep = upper ? v[i + held] : v[i];
        v[i].x = keep.x + __shfl_xor_sync(0xffffffffu, send.x, mask);
        v[i].y = keep.y + __shfl_xor_sync(0xffffffffu, send.y, mask);
      }
    } else {
      v[0].x += __shfl_xor_sync(0xffffffffu, v[0].x, mask);
      v[0].y += __shfl_xor_sync(0xffffffffu, v[0].y, mask);
    }
  });
  // The kept half was the upper one where the lane bit was set: the pair index is g's top bits.
  const int j = g >> (3 - kSplits);
  if ((g & ((1 << (3 - kSplits)) - 1)) == 0 && j < nt.value) {
    float2* at = reinterpret_cast<float2*>(db + 8 * j + 2 * t);
    const float2 old = *at;
    *at = make_float2(old.x + v[0].x, old.y + v[0].y);
  }
}

/// One term δᵀ a of a weight gradient over the block's rows: δ [R, ld_left] and a [R, ld_right],
/// 16-bit, row-major in shared memory.
template <class S>
struct RowProduct {
  const S* left;
  int ld_left;
  const S* right;
  int ld_right;
};

/// Adds (x, y) to the float pair at `at` of the block's dW slot in global memory, which no other
/// lane adds to: a reduction carried out in L2, which the lane does not wait for (it used to load
/// the old pair, a round trip to L2 per tile, and store the sum). The adds of one lane to one
/// address take effect in its program order, so every sum keeps its order and its bits.
__device__ FF_FORCE_INLINE void add_to_slot(float* at, float x, float y) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(at), make_float2(x, y));
#else
  atomicAdd(at, x);
  atomicAdd(at + 1, y);
#endif
}

/// dW_l += Σ_terms δᵀ a over the block's R rows, 16×16 tiles of dW split across the warps, the
/// sum added to the block's float32 accumulator [out_pad, in_pad + kDwSkew] at `acc` (global
/// memory, add_to_slot). The tiles go round robin from warp l.dw_first, which the plan moves on
/// by each layer's tile count, so that over the layers of a sweep every warp gets its share
/// (starting each layer at warp 0 gave warp 0 eight of the 60 tiles of 32 → 64×4 → 16 and warp
/// 11 three).
template <class S, int N>
__device__ FF_FORCE_INLINE void accumulate_weight_gradient(const Layer& l, int rows, int warps,
                                                           const RowProduct<S> (&terms)[N],
                                                           float* acc) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
  const int nt = l.in_pad / 16, tiles = l.out_pad / 16 * nt;
  const int ld = l.in_pad + kDwSkew;
  int tile = warp_id() - l.dw_first;
  if (tile < 0) tile += warps;
  for (; tile < tiles; tile += warps) {
    const int o0 = tile / nt * 16, i0 = tile % nt * 16;
    float c[2][4] = {};  // columns 0–7, 8–15
#pragma unroll
    for (int q = 0; q < N; ++q) {
      const RowProduct<S>& term = terms[q];
      // Shared addresses that step by 16 rows: one add per operand and step.
      uint32_t left = smem_address(cols_then_rows(term.left + o0, term.ld_left));
      uint32_t right = smem_address(rows_then_cols(term.right + i0, term.ld_right));
      const uint32_t left_step = 16 * term.ld_left * sizeof(S);
      const uint32_t right_step = 16 * term.ld_right * sizeof(S);
#pragma unroll 4
      for (int r0 = 0; r0 < rows; r0 += 16, left += left_step, right += right_step) {
        uint32_t af[4], bf[4];
        ldmatrix_x4_trans(af, left);
        ldmatrix_x4_trans(bf, right);
        mma_16816<S>(c[0], af, bf[0], bf[1]);
        mma_16816<S>(c[1], af, bf[2], bf[3]);
      }
    }
    float* at = acc + l.dw_acc + (o0 + g) * ld + i0 + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // columns i0 + 8h + 2t, +1; rows g and g + 8
      add_to_slot(at + 8 * h, c[h][0], c[h][1]);
      add_to_slot(at + 8 * ld + 8 * h, c[h][2], c[h][3]);
    }
  }
}

/// Calls visit(j, e, v) for this lane's elements (j, e) of accumulator tiles j < nt (a Constant or
/// Runtime count), v being that element of the warp's 16 stored 16-bit rows at `rows` (pitch ld),
/// in float32: how a reverse sweep reads a_{k+1} (or t_{k+1}) where a slope of layer k follows from
/// it without recomputing p_k (a hidden ReLU's gate, Note [mlp slope from the output]). One
/// fragment is live at a time: loading all of them up front made the register backward spill (292
/// bytes of spill loads at 168 registers, none now).
template <class S, int KT, int NT, class Count, class Visit>
__device__ FF_FORCE_INLINE void for_each_stored_value(const S* rows, int ld, Count nt,
                                                      const Visit& visit) {
  static_assert(2 * KT == NT, "two accumulator tiles to a fragment's 16 columns");
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {  // one fragment live at a time
    if (2 * kk >= nt.value) continue;
    uint32_t Y[4];
    ldmatrix_x4(Y, rows_then_cols(rows, ld) + 16 * kk);
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // tile j = 2kk + r / 2, rows g + 8·(r % 2)
      const float2 y = unpack_pair<S>(Y[r]);
      const int j = 2 * kk + r / 2, e = 2 * (r % 2);
      visit(j, e, y.x);
      visit(j, e + 1, y.y);
    }
  }
}

/// The register backward (Note [mlp register backward]). Shared memory: the resident weights,
/// then (byte offsets in Args) the staged biases at bias_sm ([layer, MW] float32), the block's
/// activations at `acts` (layer k at element a_sm), the two δ buffers at g0 / g1 (row pitch ld_g),
/// and each warp's db partial at warp_base + w·warp_bytes.
template <class S, int MW>
__global__ void __launch_bounds__(32 * kRegisterWarps, 1)
    register_backward_kernel(const __grid_constant__ Args a) {
  constexpr int KT = MW / 16, NT = MW / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const S* wsm = reinterpret_cast<const S*>(smem);
  float* bsm = reinterpret_cast<float*>(smem + a.bias_sm);
  S* acts = reinterpret_cast<S*>(smem + a.acts);
  float* db = reinterpret_cast<float*>(smem + a.warp_base + warp_id() * a.warp_bytes + a.dbs);
  stage_biases<MW>(a, bsm);
  float* acc = begin_partials<S, true>(a, smem);  // its barrier also publishes the biases
  const int L = a.num_layers, rows = 16 * a.warps, ldd = a.ld_g;
  const int local = 16 * warp_id();  // the warp's first row in the block's buffers
  // Only the dW products read other warps' rows; without them (an input gradient alone, Note
  // [gradients the pass uses]) the warps need not wait for each other between tiles.
  bool shared_rows = false;
  for (int k = 0; k < L; ++k) shared_rows = shared_rows || a.layers[k].want_dw;
  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    const int64_t row0 = tile * rows + local;
    // Forward: a_0 .. a_{L−1} into the activation buffer; A ends holding a_{L−1}.
    uint32_t A[1][KT][4];
    load_input_fragments<S, 1, KT>(a, row0, A);
    for (int k = 0;; ++k) {
      const Layer& l = a.layers[k];
      const int ld = l.in_pad + kSkew;
      store_fragments(A[0], l.in_pad / 16, acts + l.a_sm + local * ld,
                      ld * static_cast<int>(sizeof(S)));
      if (k + 1 == L) break;
      hidden_layer<S, 1, MW>(a, l, wsm, bsm + k * MW, A);
    }
    __syncwarp();    // the warp reads its own rows of a_k back with ldmatrix
    float G[NT][4];  // g_k, then δ_k, over layer k's out_pad; 0 past it
    load_rows(a.grad_out, a.go_sr, a.go_sc, row0, a.batch, a.layers[L - 1].out, G);
    for (int k = L - 1; k >= 0; --k) {
      const Layer& l = a.layers[k];
      const int ld = l.in_pad + kSkew;
      const S* a_k = acts + l.a_sm;
      const Activation kind = k + 1 == L ? a.output : a.hidden;
      // The layer's output tile count, a compile-time NT for a full-width layer.
      with_count<NT>(l.out_pad / 8, [&](auto nt) {
        const bool from_output =  // Note [mlp slope from the output]
            k + 1 < L &&
            (kind == Activation::ReLU || (kind == Activation::Softplus && a.slope_from_output));
        if (from_output) {  // σ′(p_k) from a_{k+1}
          const Layer& n = a.layers[k + 1];
          const int ldn = n.in_pad + kSkew;
          const S* const next = acts + n.a_sm + local * ldn;
          if (kind == Activation::ReLU) {  // σ′ = [a_{k+1} > 0]
            for_each_stored_value<S, KT, NT>(next, ldn, nt, [&](int j, int e, float v) {
              if (!(v > 0.0f)) G[j][e] = 0.0f;
            });
          } else {
            const Softplus<float, FastMath> act{static_cast<float>(a.params.softplus_beta)};
            for_each_stored_value<S, KT, NT>(
                next, ldn, nt, [&](int j, int e, float v) { G[j][e] *= act.d1_of_value(v); });
          }
        } else if (kind != Activation::None || (k + 1 == L && a.out != nullptr)) {
          // δ = g ⊙ σ′(p_k), p_k recomputed; at the top, y = σ(p_{L−1}) where the call wants it
          if (k + 1 < L) load_fragments(a_k + local * ld, ld, l.in_pad / 16, A[0]);
          float P[1][NT][4];
          layer_product<S, 1, KT, NT, kPickBoth>(l, wsm, A, P, bsm + k * MW);
          visit_activation<float, FastMath>(kind, a.params, [&](auto act) {
            if (k + 1 == L && a.out != nullptr) {
              store_rows(P, nt.value, row0, a.batch, l.out, a.out, l.out,
                         [&](float p) { return act.value(p); });
            }
            if (kind == Activation::None) return;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              if (j >= nt.value) continue;
#pragma unroll
              for (int e = 0; e < 4; ++e) G[j][e] *= act.d1(P[0][j][e]);
            }
          });
        }
        // Padding columns of δ are 0 already: g is 0 there (grad_out, or the zero-padded weight
        // columns of the layer above), and σ′ multiplies it.
        if (l.want_db) add_column_sums(G, nt, db + l.db_sm);
        uint32_t D[KT][4];
        pack_fragments<S>(G, nt, D);
        // The layers with a dW product alternate between the δ buffers (l.delta_buffer): the δ
        // written into one after the next barrier is read only before that barrier.
        S* delta = reinterpret_cast<S*>(smem + (l.delta_buffer == 0 ? a.g0 : a.g1));
        if (l.want_dw) {
          store_fragments(D, nt.value / 2, delta + local * ldd, ldd * static_cast<int>(sizeof(S)));
        }
        if (k > 0 || a.grad_x != nullptr) {
          float N[1][NT][4];
          reverse_layer_product<S, KT, NT>(l, wsm, D, N[0]);
          if (k == 0) {
            store_rows(N, l.in_pad / 8, row0, a.batch, l.in, a.grad_x, l.in,
                       [](float v) { return v; });
          }
#pragma unroll
          for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) G[j][e] = N[0][j][e];
          }
        }
        if (l.want_dw) {
          __syncthreads();  // every warp's δ_k is in its buffer
          const RowProduct<S> terms[1] = {{delta, ldd, a_k, ld}};
          accumulate_weight_gradient(l, rows, a.warps, terms, acc);
        }
      });
    }
    if (shared_rows) __syncthreads();  // the next tile overwrites rows other warps just read
  }
  if (!shared_rows) __syncthreads();  // end_partials sums every warp's db partial
  end_partials(a, smem, acc);
}

#else

template <class S, int MW>
__global__ void register_backward_kernel(const __grid_constant__ Args) {}

#endif

}  // namespace fieldfuse::detail::mlp::fused
