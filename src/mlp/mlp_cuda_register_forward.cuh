// SPDX-License-Identifier: Apache-2.0
// The tensor-core forward with every layer's activations in registers: mma.sync m16n8k16 whose
// accumulator tiles, after bias and σ, are the next product's A fragments as they stand.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "mlp/mlp_cuda_fragments.cuh"
#include "mlp/mlp_cuda_staged_rows.cuh"
#include "mlp/mlp_math.h"

namespace fieldfuse::detail::mlp::fused {

// Note [mlp register forward]
// The warp-fused forward (Note [mlp warp-fused kernel]) sends every 16×16 product tile through a
// shared-memory scratch tile (a WMMA accumulator's register layout is unspecified) and writes the
// next layer's input back to shared memory: at 32 → 64×4 → 16 that traffic, not the tensor cores,
// set its time. With the PTX mma.sync.m16n8k16 the layouts are specified, and lane (g, t) =
// (lane / 4, lane % 4) holds:
// - of a 16×8 float32 accumulator tile j: rows g and g + 8, columns 8j + 2t and 8j + 2t + 1;
// - of a 16×16 A fragment (16-bit, row-major) k-tile kk: rows g and g + 8, columns 16kk + 2t,
//   16kk + 2t + 1, 16kk + 8 + 2t and 16kk + 9 + 2t, as four 32-bit pairs.
// So accumulator tiles 2kk and 2kk + 1 of a layer are, element for element, k-tile kk of the next
// layer's A: bias, σ (float32) and the rounding to 16 bits happen in registers and no activation
// leaves the register file. B fragments are two 32-bit loads from the weights staged in shared
// memory (row pitch in_pad + kSkew: the 8 × 4 lanes of a load hit 32 distinct banks). A warp runs
// 16 rows at a time (Note [mlp register forward shape]) up to width kRegisterMaxWidth; wider
// problems keep the warp-fused forward.
// The products run k-tile by k-tile over all output tiles (consecutive mma.sync feed different
// accumulators), and the activation is chosen once per layer (visit_activation; once per kernel at
// MW <= 64, Note [mlp register forward shape]), not per element:
// with the products ordered tile by tile and a switch per element, the forward of 32 → 64×4 → 16
// at B = 2^18 in float16 took 0.34 ms on an H100, no faster than the warp-fused kernel; with them
// 0.118 ms (graph replay; 0.049 ms after the notes below), against the issue's 0.05 ms. Its
// fragment code (mlp_cuda_fragments.cuh) and its layer code (hidden_layer, below) are shared
// with the register backward; loading its B fragments with ldmatrix, as the
// backward's transposed operands are, doubled its time (0.235 ms), so they stay 32-bit loads.
// The arithmetic is the warp-fused forward's (x and every hidden activation rounded to 16 bits,
// float32 accumulation over k in the same 16-wide steps, bias and σ in float32).
// Nsight Compute on that case: 19 instructions issued per mma.sync, an instruction every 2.5 cycles
// per scheduler with 3 warps each (no eligible warp 61 % of cycles); Note [mlp register forward
// layers] and Note [mlp staged input rows] are what came of that.

/// Warps per block of the register backward, and of the register forward at MW = 128: about 160
/// registers a lane allow 12 warps per SM, and one block of 12 shares one staged copy of the
/// weights (119 KB at width 128, which fits only once per SM). On an H100 at B = 2^18,
/// 32 → W×4 → 16 float16: W = 128 took 0.955 ms with 4, 0.533 with 8 and 0.397 with 12.
constexpr int kRegisterWarps = 12;
constexpr int kRegisterMaxWidth = 128;

// Note [mlp register forward shape]
// A warp of the width-64 forward used to hold two row tiles (32 rows, each B fragment feeding two
// products) at 8 warps a block and 254 registers a lane: two warps per scheduler, latency-bound
// (Nsight Compute: no eligible warp 72 % of cycles). Graph replay of 32 → 64×4 → 16 ReLU at
// B = 2^18 in float16 on an H100, one call, variants built side by side (bench/RESULTS.md,
// twelfth session, has every row):
// - 32 rows, 8 warps: 0.0617 ms; 32 rows, 12 warps (168 registers, spills): 0.0617; 16 rows,
//   12 warps: 0.0623; 16 rows, 16 warps (128 registers): 0.0540;
// - the hidden activation picked once for the whole kernel (visit_activation around the tile
//   loop) instead of after every layer's product, where the switch between a layer's products
//   and its activation kept the scheduler from overlapping them, and from starting the next
//   layer's loads: 16 rows at 16 warps 0.0499–0.0512 ms, at 12 warps 0.0561, 32 rows at 8 warps
//   0.0659 (spills);
// - each lane's B fragment as one 64-bit load, from a layout holding its four elements side by
//   side at a pitch chosen for conflict-free 64-bit loads: 0.0527 (16 rows, 16 warps, picked
//   once).
// So at MW <= 64 a warp holds 16 rows, a block 16 warps, and the activation is picked once per
// kernel: nine copies of the tile loop, about 60 s of compile per 16-bit type. With the product's
// bias flag known at compile time as well (forward_product_add's kBias) the call takes 0.049 ms.
// MW = 128 keeps 12 warps and the choice per layer: picked once, it compiled in about 200 s per
// instantiation, and it was not measured. The fragment helpers keep their row-tile count M as a
// template parameter; every caller now passes 1.

/// The register forward's shape for padded widths up to MW: the warps of a block, and whether
/// the hidden activation is picked once per kernel (kHoisted) rather than after every layer's
/// product (Note [mlp register forward shape]). A warp holds 16 rows.
template <int MW>
struct ForwardShape {
  static constexpr int kWarps = MW <= 64 ? 16 : kRegisterWarps;
  static constexpr bool kHoisted = MW <= 64;
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

// Note [mlp register forward layers]
// Nsight Compute's instruction counts per warp tile (32 rows at the time) of 32 → 64×4 → 16 at B =
// 2^18 showed the register forward issuing about 22 instructions per mma.sync, most of them outside
// the products: each layer's bias was 16 global loads behind null, column and stride arithmetic
// (about 270 instructions a layer), the loops over runtime tile counts made every output tile a
// branch with its two B-fragment loads right before its mma.sync, and every activation tested
// its column against `out`. So:
// - the biases are staged once per block in shared memory ([layer, MW] float32, zero past `out`)
//   and enter as the first product's addend (no copies into the accumulators);
// - a hidden layer whose padded output is MW wide (every hidden layer of a uniform network, the
//   first included) runs its product with compile-time tile counts (its k-tile count picked from
//   1 .. MW/16), and its activation without column tests when `out` is MW as well; the last
//   layer's product does so when its input is MW wide (its output tile count picked from 2, 4,
//   … MW/8); other shapes keep the runtime bounds (pick_tiles);
// - the input and the output move as column pairs, one 8-byte access each when aligned.
// With the first and last layers picked too, the executed instructions per warp tile fell from
// about 4.6 k (19 per mma.sync) to 1.9 k. Graph replay on an H100, float16: 0.119 ms before;
// 0.094 ms with the staged biases and compile-time hidden layers; 0.080 ms with the first and last
// layers picked and the input rows staged (Note [mlp staged input rows]); 0.076 ms at 8 warps a
// block without the picking of the first and last layers (32 rows a warp then); 0.067 ms at
// 8 warps with it, and 0.063 ms once the weights were converted in one launch (both measured
// as a whole graphed call, conversion included); 0.049 ms at the shape of Note [mlp register
// forward shape].

/// A = act(C) rounded to 16 bits: a hidden layer's accumulator tiles as the next product's A
/// fragments. Padding columns stay 0 for the next product (σ(0) need not be 0).
template <class S, int M, int MW, class Act>
__device__ FF_FORCE_INLINE void activate_into(const Layer& l, const float (&C)[M][MW / 8][4],
                                              const Act& act, uint32_t (&A)[M][MW / 16][4]) {
  const auto value = [&](float p) { return act.value(p); };
  if (l.out_pad == MW && l.out == MW) {
    to_fragments<S>(C, MW / 8, MW, value, A);
  } else {
    to_fragments<S>(C, l.out_pad / 8, l.out, value, A);
  }
}

/// Hidden layer l of the register sweeps on the 16·M rows in A with the activation policy `act`:
/// A = σ(bias + A · W_lᵀ), rounded to 16 bits in place (`bias`: the layer's row of the staged
/// biases).
template <class S, int M, int MW, class Act>
__device__ FF_FORCE_INLINE void hidden_layer(const Layer& l, const S* wsm, const float* bias,
                                             uint32_t (&A)[M][MW / 16][4], const Act& act) {
  float C[M][MW / 8][4];
  layer_product<S, M, MW / 16, MW / 8, kPickK>(l, wsm, A, C, bias);
  activate_into<S, M, MW>(l, C, act, A);
}

/// The same with the hidden activation picked at run time, after the product.
template <class S, int M, int MW>
__device__ FF_FORCE_INLINE void hidden_layer(const Args& a, const Layer& l, const S* wsm,
                                             const float* bias, uint32_t (&A)[M][MW / 16][4]) {
  float C[M][MW / 8][4];
  layer_product<S, M, MW / 16, MW / 8, kPickK>(l, wsm, A, C, bias);
  visit_activation<float, HiddenMath>(
      a.hidden, a.params, [&](const auto& act) { activate_into<S, M, MW>(l, C, act, A); });
}

/// The hidden activation as a kernel's tile loop takes it when it is picked after every layer's
/// product (hidden_layer with Args) rather than once per kernel (an activation policy).
struct RuntimeHidden {};

template <class S, int MW>
__global__ void __launch_bounds__(32 * ForwardShape<MW>::kWarps, 1)
    register_forward_kernel(const __grid_constant__ Args a) {
  constexpr int M = 1;  // row tiles of 16 a warp holds
  constexpr int KT = MW / 16, NT = MW / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  S* wsm = reinterpret_cast<S*>(smem);
  float* bsm = reinterpret_cast<float*>(smem + a.bias_sm);
  stage_weights<true>(a, wsm);
  stage_biases<MW>(a, bsm);
  __syncthreads();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * a.warps;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * a.warps + warp_id();
  // Two buffers of staged rows (Note [mlp staged input rows]), or none.
  const int pitch = staged_pitch(a.layers[0].in_pad);
  float* const staged =
      a.x_stage == 0 ? nullptr
                     : reinterpret_cast<float*>(smem + a.x_stage) + warp_id() * 2 * 16 * M * pitch;
  if (staged != nullptr && first < a.tiles) stage_rows<16 * M>(a, first * 16 * M, staged, pitch);
  const auto tile_loop = [&](const auto& hidden) {
    int buffer = 0;
    for (int64_t tile = first; tile < a.tiles; tile += warps, buffer ^= 1) {
      const int64_t row0 = tile * 16 * M;
      uint32_t A[M][KT][4];
      if (staged != nullptr) {
        float* const next = staged + (buffer ^ 1) * 16 * M * pitch;
        if (tile + warps < a.tiles) {
          stage_rows<16 * M>(a, row0 + warps * 16 * M, next, pitch);
        } else {
          cp_async_commit();
        }
        cp_async_wait_all_but_one();
        staged_fragments<S, M, KT>(a, staged + buffer * 16 * M * pitch, pitch, A);
        __syncwarp();  // every lane has read the buffer before it is refilled
      } else {
        load_input_fragments<S, M, KT>(a, row0, A);
      }
      for (int k = 0; k + 1 < a.num_layers; ++k) {
        if constexpr (std::is_same_v<std::decay_t<decltype(hidden)>, RuntimeHidden>) {
          hidden_layer<S, M, MW>(a, a.layers[k], wsm, bsm + k * MW, A);
        } else {
          hidden_layer<S, M, MW>(a.layers[k], wsm, bsm + k * MW, A, hidden);
        }
      }
      const int last = a.num_layers - 1;
      const Layer& l = a.layers[last];
      float C[M][NT][4];
      layer_product<S, M, KT, NT, kPickN>(l, wsm, A, C, bsm + last * MW);
      visit_activation<float, FastMath>(a.output, a.params, [&](auto act) {
        store_rows(C, l.out_pad / 8, row0, a.batch, l.out, a.out, l.out,
                   [&](float p) { return act.value(p); });
      });
    }
  };
  if constexpr (ForwardShape<MW>::kHoisted) {
    visit_activation<float, HiddenMath>(a.hidden, a.params, tile_loop);
  } else {
    tile_loop(RuntimeHidden{});
  }
}

#else

template <class S, int MW>
__global__ void register_forward_kernel(const __grid_constant__ Args) {}

#endif

}  // namespace fieldfuse::detail::mlp::fused
