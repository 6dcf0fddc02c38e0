// SPDX-License-Identifier: Apache-2.0
// The warp-fused tensor-core / FMA MLP double backward kernel (Note [mlp warp-fused kernel]).
#pragma once

#include "mlp/mlp_cuda_warp_fused.cuh"

namespace fieldfuse::detail::mlp::fused {

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

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
  float* acc = begin_partials<S>(a, smem);
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
          load_output_rows(a, a.grad_out, a.go_sr, a.go_sc, l, row0, j, g);
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
    // 4. Second reverse sweep: q_k = σ′ ⊙ r_k + s_k (r_L = grad_y, absent: 0),
    // r_{k−1} = q_k W_k + δ_k V_k.
    {  // q_{L−1} into g0, where the reverse sweep starts
      const Layer& l = a.layers[L - 1];
      for (int j = 0; j < l.out_pad / 16; ++j) {
        float r[8] = {};
        if (a.grad_y != nullptr) load_output_rows(a, a.grad_y, a.gy_sr, a.gy_sc, l, row0, j, r);
        emit_q(a, mine, l, j, r, reinterpret_cast<S*>(mine + a.g0));
      }
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
  end_partials(a, smem, acc);
}

#else  // sm_75 and older: never launched (the plan requires sm_80), compiled empty.

template <class S>
__global__ void double_backward_kernel(const __grid_constant__ Args) {}

#endif

}  // namespace fieldfuse::detail::mlp::fused
