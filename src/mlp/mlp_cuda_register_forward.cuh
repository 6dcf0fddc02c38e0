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
// M = 2 row tiles (32 rows) at once when every padded width is <= 64, so each B fragment feeds two
// products, else M = 1 up to width kRegisterMaxWidth; wider problems keep the warp-fused forward.
// The products run k-tile by k-tile over all output tiles (consecutive mma.sync feed different
// accumulators), and the activation is chosen once per layer (visit_activation), not per element:
// with the products ordered tile by tile and a switch per element, the forward of 32 → 64×4 → 16
// at B = 2^18 in float16 took 0.34 ms on an H100, no faster than the warp-fused kernel; now about
// 0.118 ms (graph replay), against the issue's 0.05 ms. Its fragment code is shared with the
// register backward (mlp_cuda_fragments.cuh); loading its B fragments with ldmatrix, as the
// backward's transposed operands are, doubled its time (0.235 ms), so they stay 32-bit loads.
// The arithmetic is the warp-fused forward's (x and every hidden activation rounded to 16 bits,
// float32 accumulation over k in the same 16-wide steps, bias and σ in float32).
// Nsight Compute on that case: 19 instructions issued per mma.sync, an instruction every 2.5 cycles
// per scheduler with 3 warps each (no eligible warp 61 % of cycles). Starting the accumulators from
// the biases (staged in shared memory), dropping the padding test and 8-byte input loads did not
// change the time (0.133 ms), so they are not in; a deeper pipeline (the next tile's x in flight,
// two tiles interleaved) is the next thing to try.

/// Warps per block: about 160 registers a lane allow 12 warps per SM, and one block of 12 shares
/// one staged copy of the weights (119 KB at width 128, which fits only once per SM). On an H100
/// at B = 2^18, 32 → W×4 → 16 float16: W = 64 took 0.126 ms with 4 or 12 warps a block, W = 128
/// 0.955 ms with 4, 0.533 with 8 and 0.397 with 12.
constexpr int kRegisterWarps = 12;
constexpr int kRegisterMaxWidth = 128;

/// Row tiles of 16 a warp holds for padded widths up to MW.
template <int MW>
FF_HOST_DEVICE constexpr int register_row_tiles() {
  return MW <= 64 ? 2 : 1;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

template <class S, int MW>
__global__ void __launch_bounds__(32 * kRegisterWarps, 1)
    register_forward_kernel(const __grid_constant__ Args a) {
  constexpr int M = register_row_tiles<MW>();
  constexpr int KT = MW / 16, NT = MW / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  S* wsm = reinterpret_cast<S*>(smem);
  stage_weights(a, wsm);
  __syncthreads();
  const int g = lane_id() >> 2, t = lane_id() & 3;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * a.warps;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * a.warps + warp_id(); tile < a.tiles;
       tile += warps) {
    const int64_t row0 = tile * 16 * M;
    uint32_t A[M][KT][4];
    load_input_fragments<S, M, KT>(a, row0, A);
    for (int k = 0; k < a.num_layers; ++k) {
      const Layer& l = a.layers[k];
      float C[M][NT][4];
      forward_product<S, M, KT, NT>(l, wsm, A, C);
      const int nt = l.out_pad / 8;
      if (k + 1 < a.num_layers) {
        // Padding columns stay 0 for the next product (σ(0) need not be 0).
        visit_activation<float, FastMath>(a.hidden, a.params, [&](auto act) {
          to_fragments<S>(
              C, nt, l.out, &l, [&](float p) { return act.value(p); }, A);
        });
        continue;
      }
      visit_activation<float, FastMath>(a.output, a.params, [&](auto act) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j >= nt) continue;
          const int c = 8 * j + 2 * t;
          const float b0 = bias_of(l, c), b1 = bias_of(l, c + 1);
#pragma unroll
          for (int m = 0; m < M; ++m) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int64_t row = row0 + 16 * m + g + 8 * (e >> 1);
              const int col = c + (e & 1);
              if (row < a.batch && col < l.out) {
                a.out[row * l.out + col] = act.value(C[m][j][e] + ((e & 1) ? b1 : b0));
              }
            }
          }
        }
      });
    }
  }
}

#else

template <class S, int MW>
__global__ void register_forward_kernel(const __grid_constant__ Args) {}

#endif

}  // namespace fieldfuse::detail::mlp::fused
