// SPDX-License-Identifier: Apache-2.0
// The tensor-core double backward with its sweeps in registers: one forward sweep of the primal
// and tangent together, then one reverse sweep of δ and q together.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mlp/mlp_cuda_fragments.cuh"
#include "mlp/mlp_cuda_register_backward.cuh"
#include "mlp/mlp_math.h"

namespace fieldfuse::detail::mlp::fused {

// Note [mlp register double backward]
// The double backward's four steps (include/fieldfuse/mlp.h) run as two sweeps, because the
// tangent sweep only goes forward and both reverse recurrences go top down:
// - forward sweep, k = 0 .. L−1: p_k = a_k W_kᵀ + b_k and u_k = t_k W_kᵀ + a_k V_kᵀ + c_k from
//   the A fragments of a_k and t_k (a_0 = x, t_0 = v), a_{k+1} = σ(p_k), t_{k+1} = σ′(p_k) u_k,
//   rounded to 16 bits into the next A fragments as in the register forward (Note [mlp register
//   forward]); t_L is grad_grad_out. Each layer's 16-bit a_k and t_k go to the block's buffers.
// - reverse sweep, k = L−1 .. 0, with g_k and r_k in float32 accumulator tiles (g_{L−1} =
//   grad_out, r_{L−1} = grad_y or 0): p_k and u_k are recomputed from the warp's stored rows of
//   a_k and t_k (as the register backward recomputes p_k, Note [mlp register backward]; a hidden
//   ReLU takes its gate from a_{k+1}, a hidden softplus in bfloat16 σ″u_k from t_{k+1}, Note [mlp
//   slope from the output], and where σ″ is 0 everywhere, u_k is not needed), then
//   δ_k = σ′ g_k, q_k = σ′ r_k + σ″ g_k u_k (the curvature s_k never stored), db_k += Σ q_k,
//   and, from their 16-bit A fragments, g_{k−1} = δ_k W_k and r_{k−1} = q_k W_k + δ_k V_k
//   (grad_x for k = 0).
// - dW_k += δ_kᵀ t_k + q_kᵀ a_k over the block's rows, as in the register backward. δ_k and q_k
//   (width out_pad_k = in_pad_{k+1}) go over a_{k+1} and t_{k+1} in the block's buffers, which
//   layer k+1's weight gradient was the last to read (a barrier first when it ran); the top
//   layer's go to two small buffers of their own. Two barriers a layer, and no ping-pong buffers:
//   at 3 → 64×4 → 1 the block keeps 8 warps' rows of a_k and t_k, where the warp-fused double
//   backward holds 2 warps in 72 KB each.
// V_k (grad_grad_weight) stays resident next to W_k when any layer has one; the plan sizes the
// workspace for the larger of the two layouts, since the workspace query does not know the V_k.
// The arithmetic is the warp-fused double backward's: 16-bit a_k, t_k, δ_k, q_k, W_k and V_k in
// every product, float32 accumulation, σ′, σ″, u_k and the elementwise sweeps in float32.
// The products that share a weight run together (p_k and u_k from a_k and t_k, r_{k−1} and
// g_{k−1} from q_k and δ_k: two row tiles of one product, so each weight fragment is loaded once
// for both), and the biases are staged in shared memory as in the register backward (they were
// two guarded global loads per column pair and sweep).

/// Warps per block: the kernel takes 254 registers a lane (no spill), which 8 warps fit in one
/// SM's register file.
constexpr int kRegisterDoubleWarps = 8;

/// σ″ = 0 everywhere (the curvature term vanishes).
FF_HOST_DEVICE inline bool is_piecewise_linear(Activation kind) {
  return kind == Activation::ReLU || kind == Activation::LeakyReLU || kind == Activation::None;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

/// c_k[col] (grad_grad_bias), 0 past `out` or when absent.
__device__ FF_FORCE_INLINE float tangent_bias_of(const Layer& l, int col) {
  return l.c != nullptr && col < l.out ? l.c[col * l.c_stride] : 0.0f;
}

/// PU[0] = P = a Wᵀ and, unless `primal_only`, PU[1] = U = t Wᵀ + a Vᵀ + c (the sweeps'
/// products, from AT = {a, t}; biases not added to P). P and U share each weight fragment load.
template <class S, int KT, int NT>
__device__ FF_FORCE_INLINE void tangent_products(const Layer& l, const S* wsm, const S* vsm,
                                                 const uint32_t (&AT)[2][KT][4], bool primal_only,
                                                 float (&PU)[2][NT][4]) {
  if (primal_only) {
    forward_product<S, 1, KT, NT>(l, wsm, row_tile(AT, 0), row_tile(PU, 0));
    return;
  }
  forward_product<S, 2, KT, NT>(l, wsm, AT, PU);
  if (l.has_v) forward_product_add<S, 1, KT, NT>(l, vsm, row_tile(AT, 0), row_tile(PU, 1));
  const int t = lane_id() & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float c0 = tangent_bias_of(l, 8 * j + 2 * t), c1 = tangent_bias_of(l, 8 * j + 2 * t + 1);
#pragma unroll
    for (int e = 0; e < 4; ++e) PU[1][j][e] += (e & 1) ? c1 : c0;
  }
}

/// The register double backward (Note [mlp register double backward]). Shared memory: the resident
/// weights, their V copies at `v_sm` (when any layer has one), the block's a_k at `acts` and t_k at
/// `tans` (layer k at element a_sm of each), the top layer's δ and q buffers at g0 / g1 (row pitch
/// ld_g), and each warp's db partial at warp_base + w·warp_bytes.
template <class S, int MW>
__global__ void __launch_bounds__(32 * kRegisterDoubleWarps, 1)
    register_double_backward_kernel(const __grid_constant__ Args a) {
  constexpr int KT = MW / 16, NT = MW / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const S* wsm = reinterpret_cast<const S*>(smem);
  const S* vsm = reinterpret_cast<const S*>(smem + a.v_sm);
  S* acts = reinterpret_cast<S*>(smem + a.acts);
  S* tans = reinterpret_cast<S*>(smem + a.tans);
  float* bsm = reinterpret_cast<float*>(smem + a.bias_sm);
  float* db = reinterpret_cast<float*>(smem + a.warp_base + warp_id() * a.warp_bytes + a.dbs);
  if (a.v_sm != 0) stage_weights<true>(a, reinterpret_cast<S*>(smem + a.v_sm), true);
  stage_biases<MW>(a, bsm);
  float* acc = begin_partials<S, true>(a, smem);  // its barrier also publishes V and the biases
  const int L = a.num_layers, rows = 16 * a.warps;
  const int local = 16 * warp_id();  // the warp's first row in the block's buffers
  const int g = lane_id() >> 2, t = lane_id() & 3;
  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    const int64_t row0 = tile * rows + local;
    // Forward sweep: a_k, t_k into the buffers, t_L into grad_grad_out.
    uint32_t AT[2][KT][4];  // a_k and t_k as A fragments
    auto& A = row_tile(AT, 0);
    auto& T = row_tile(AT, 1);
    load_input_fragments<S, 1, KT>(a, row0, A);
    load_input_fragments<S, 1, KT>(a, a.grad_grad_x, a.ggx_sr, a.ggx_sc, row0, T);
    for (int k = 0; k < L; ++k) {
      const Layer& l = a.layers[k];
      const int ld = l.in_pad + kSkew, ld_bytes = ld * static_cast<int>(sizeof(S));
      store_fragments(A[0], l.in_pad / 16, acts + l.a_sm + local * ld, ld_bytes);
      store_fragments(T[0], l.in_pad / 16, tans + l.a_sm + local * ld, ld_bytes);
      const bool last = k + 1 == L;
      if (last && a.grad_grad_out == nullptr) break;
      float PU[2][NT][4];
      tangent_products<S, KT, NT>(l, wsm, vsm, AT, false, PU);
      auto& P = row_tile(PU, 0);
      auto& U = row_tile(PU, 1);
      const int nt = l.out_pad / 8;
      // The last layer takes σ′ alone (its σ is not needed), so HiddenMath serves it too.
      visit_activation<float, HiddenMath>(last ? a.output : a.hidden, a.params, [&](auto act) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j >= nt) continue;
          const int c = 8 * j + 2 * t;
          const float2 b = *reinterpret_cast<const float2*>(bsm + k * MW + c);
          float y[4], tv[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c + (e & 1);
            const float p = P[0][j][e] + ((e & 1) ? b.y : b.x);
            const float d1 = act.d1(p);
            if (last) {
              const int64_t row = row0 + g + 8 * (e >> 1);
              if (row < a.batch && col < l.out)
                a.grad_grad_out[row * l.out + col] = d1 * U[0][j][e];
              continue;
            }
            y[e] = col < l.out ? act.value(p) : 0.0f;
            tv[e] = col < l.out ? d1 * U[0][j][e] : 0.0f;
          }
          if (last) continue;
          A[0][j / 2][2 * (j % 2)] = pack_pair<S>(y[0], y[1]);
          A[0][j / 2][2 * (j % 2) + 1] = pack_pair<S>(y[2], y[3]);
          T[0][j / 2][2 * (j % 2)] = pack_pair<S>(tv[0], tv[1]);
          T[0][j / 2][2 * (j % 2) + 1] = pack_pair<S>(tv[2], tv[3]);
        }
      });
    }
    __syncwarp();  // the warp reads its own rows back with ldmatrix
    // Reverse sweep: G holds g_k then δ_k, R holds r_k then q_k, over layer k's out_pad.
    float G[1][NT][4], R[1][NT][4];
    load_rows(a.grad_out, a.go_sr, a.go_sc, row0, a.batch, a.layers[L - 1].out, G[0]);
    if (a.grad_y != nullptr) {  // r_L = grad_y
      load_rows(a.grad_y, a.gy_sr, a.gy_sc, row0, a.batch, a.layers[L - 1].out, R[0]);
    } else {
#pragma unroll
      for (int j = 0; j < NT; ++j) R[0][j][0] = R[0][j][1] = R[0][j][2] = R[0][j][3] = 0.0f;
    }
    for (int k = L - 1; k >= 0; --k) {
      const Layer& l = a.layers[k];
      const int nt = l.out_pad / 8, ld = l.in_pad + kSkew;
      const S* a_k = acts + l.a_sm;
      const S* t_k = tans + l.a_sm;
      const bool top = k + 1 == L;
      const Activation kind = top ? a.output : a.hidden;
      if (kind == Activation::ReLU && !top) {  // σ′ = [a_{k+1} > 0], σ″ = 0
        const Layer& n = a.layers[k + 1];
        const int ldn = n.in_pad + kSkew;
        for_each_stored_value<S, KT, NT>(acts + n.a_sm + local * ldn, ldn, Runtime{nt},
                                         [&](int j, int e, float v) {
                                           if (v > 0.0f) return;
                                           G[0][j][e] = 0.0f;
                                           R[0][j][e] = 0.0f;
                                         });
      } else if (kind == Activation::Softplus && !top && a.slope_from_output) {
        // p_k recomputed, σ″u_k from the stored tangent t_{k+1} = σ′u_k (Note [mlp slope from the
        // output]): no u_k.
        load_fragments(a_k + local * ld, ld, l.in_pad / 16, A[0]);
        float P[1][NT][4];
        forward_product<S, 1, KT, NT>(l, wsm, A, P);
        const Layer& n = a.layers[k + 1];
        const int ldn = n.in_pad + kSkew;
        const Softplus<float, FastMath> act{static_cast<float>(a.params.softplus_beta)};
        for_each_stored_value<S, KT, NT>(
            tans + n.a_sm + local * ldn, ldn, Runtime{nt}, [&](int j, int e, float v) {
              const float s = act.d1(P[0][j][e] + bsm[k * MW + 8 * j + 2 * t + (e & 1)]);
              const float gk = G[0][j][e];
              G[0][j][e] = gk * s;
              R[0][j][e] = R[0][j][e] * s + gk * act.d2u_of_tangent(s, v);
            });
      } else if (kind != Activation::None) {  // p_k (and u_k) recomputed
        const bool linear = is_piecewise_linear(kind);
        load_fragments(a_k + local * ld, ld, l.in_pad / 16, A[0]);
        if (!linear) load_fragments(t_k + local * ld, ld, l.in_pad / 16, T[0]);
        float PU[2][NT][4];
        tangent_products<S, KT, NT>(l, wsm, vsm, AT, linear, PU);
        auto& P = row_tile(PU, 0);
        auto& U = row_tile(PU, 1);
        visit_activation<float, FastMath>(kind, a.params, [&](auto act) {
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            if (j >= nt) continue;
            const float2 b = *reinterpret_cast<const float2*>(bsm + k * MW + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const Derivs<float> d = act.all(P[0][j][e] + ((e & 1) ? b.y : b.x));
              const float gk = G[0][j][e];
              G[0][j][e] = gk * d.d1;
              R[0][j][e] = R[0][j][e] * d.d1 + (linear ? 0.0f : gk * d.d2 * U[0][j][e]);
            }
          }
        });
      }
      if (l.want_db) add_column_sums(R[0], Runtime{nt}, db + l.db_sm);
      uint32_t QD[2][KT][4];  // q_k and δ_k as A fragments
      auto& Q = row_tile(QD, 0);
      auto& D = row_tile(QD, 1);
      // Padding columns of δ and q are 0 already, as in the register backward: g and r are 0
      // there (grad_out, or the zero-padded weight columns of the layer above), and so is u.
      pack_fragments<S>(G[0], Runtime{nt}, D[0]);
      pack_fragments<S>(R[0], Runtime{nt}, Q[0]);
      if (k == 0 && a.grad_x != nullptr) {  // r_{−1} = q_0 W + δ_0 V is grad_x
        float N[1][NT][4];
        reverse_product<S, 1, KT, NT>(l, wsm, Q, N);
        if (l.has_v) reverse_product_add<S, 1, KT, NT>(l, vsm, D, N);
        store_rows(N, l.in_pad / 8, row0, a.batch, l.in, a.grad_x, l.in, [](float v) { return v; });
      } else if (k > 0) {
        // r_{k−1} = q_k W + δ_k V and g_{k−1} = δ_k W, one load of each W fragment for both
        float N[2][NT][4];
        reverse_product<S, 2, KT, NT>(l, wsm, QD, N);
        if (l.has_v) reverse_product_add<S, 1, KT, NT>(l, vsm, D, row_tile(N, 0));
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            R[0][j][e] = N[0][j][e];
            G[0][j][e] = N[1][j][e];
          }
        }
      }
      if (l.want_dw) {
        S* dl = reinterpret_cast<S*>(smem + a.g0);
        S* ql = reinterpret_cast<S*>(smem + a.g1);
        int ldd = a.ld_g;
        if (!top) {  // over a_{k+1} and t_{k+1}, once layer k+1's dW products are done
          const Layer& n = a.layers[k + 1];
          dl = acts + n.a_sm;
          ql = tans + n.a_sm;
          ldd = n.in_pad + kSkew;
          if (n.want_dw) {
            __syncthreads();
          } else {
            __syncwarp();  // this warp's ReLU gate read of a_{k+1} comes first
          }
        }
        const int ldd_bytes = ldd * static_cast<int>(sizeof(S));
        store_fragments(D[0], l.out_pad / 16, dl + local * ldd, ldd_bytes);
        store_fragments(Q[0], l.out_pad / 16, ql + local * ldd, ldd_bytes);
        __syncthreads();  // every warp's δ_k and q_k are in place
        const RowProduct<S> terms[2] = {{dl, ldd, t_k, ld}, {ql, ldd, a_k, ld}};
        accumulate_weight_gradient(l, rows, a.warps, terms, acc);
      }
    }
    __syncthreads();  // the next tile overwrites the buffers other warps just read
  }
  end_partials(a, smem, acc);
}

#else

template <class S, int MW>
__global__ void register_double_backward_kernel(const __grid_constant__ Args) {}

#endif

}  // namespace fieldfuse::detail::mlp::fused
