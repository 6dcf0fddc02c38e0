// SPDX-License-Identifier: Apache-2.0
// mma.sync m16n8k16 fragments for the register MLP kernels: the tensor-core product, the
// ldmatrix loads of its operands from shared memory, and the layer products of the forward
// (a · Wᵀ) and of the reverse sweep (δ · W) with the weights resident in shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "mlp/mlp_cuda_warp_fused.cuh"

namespace fieldfuse::detail::mlp::fused {

// The fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4g + t:
// - a 16×8 float32 accumulator tile holds rows g and g + 8, columns 2t and 2t + 1 (c[0..1] row g,
//   c[2..3] row g + 8);
// - a 16×16 A fragment (16-bit, row-major) holds four 32-bit pairs: rows g / g + 8 (a[0] / a[1])
//   at columns 2t, 2t + 1, and the same rows at columns 2t + 8, 2t + 9 (a[2] / a[3]);
// - a 16×8 B fragment ("col") holds rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1) of column g.
// ldmatrix.x4 loads four 8×8 16-bit matrices, lanes 8q .. 8q + 7 giving the row addresses of
// matrix q; lane (g, t) receives row g, columns 2t and 2t + 1 of each, or with .trans row 2t and
// 2t + 1 of column g. Every operand in shared memory is row-major with a row pitch of 16 bytes
// mod 128 (a multiple of 16 elements plus kSkew), so the 8 rows a matrix reads hit 8 distinct
// 16-byte bank groups.

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

// Note [mlp fast math]
// The register kernels (16-bit operands only) evaluate the exp-based activations (softplus,
// sigmoid, SiLU, exp) with the GPU's approximate exp2 / log2 / reciprocal instructions instead of
// libdevice's expf, log1pf and IEEE division: every σ, σ′ and σ″ they produce is either rounded to
// 16 bits for the next product or multiplies float32 values that came out of 16-bit products, so
// an error of a few 2^-24 is a hundred times below the 2^-11 (float16) or 2^-8 (bfloat16) the
// operands carry. Worst cases: __expf(x) has a relative error of about 2^-22 + |x|·2^-24 (the
// rounding of x·log2 e; softplus only takes |x| <= 20 there), log1p below 2^-4 is its alternating
// series to x^7 (truncation below 2^-28 relative), above it __logf(1 + x) (about 2^-18 relative at
// 2^-4, falling as x grows), __fdividef(a, b) a relative error of 2 ulp (0 for |b| > 2^126, where
// every quotient here is below 2^-126 anyway). On an H100, the float16 Eikonal step of
// 3 → 64×4 → 1 Softplus at B = 2^18 went from 3.93 to 3.31 ms of kernels with it, and to 2.94 ms
// once log1p selected between its two forms instead of branching (forward 0.37 → 0.23, the two
// backwards 1.64 → 1.21, the double backward 1.81 → 1.38 ms); the same step with ReLU takes
// 1.73 ms: softplus also pays for the tangent product and the recomputed p_k a layer that ReLU
// skips.
// A hidden layer's σ, whose value only ever enters the next product rounded to 16 bits, takes
// HiddenMath (below): log1p as __logf(1 + x) alone, without the series; on an H200 the float16
// Eikonal step's forward took 0.126 ms with it (0.142 on an H100 before, with FastMath).
// Precise math stays everywhere else: float32 and float64 compute, the CPU, and the warp-fused
// and tile kernels.
struct FastMath {
  static __device__ FF_FORCE_INLINE float exp(float x) { return __expf(x); }
  static __device__ FF_FORCE_INLINE float div(float a, float b) { return __fdividef(a, b); }
  /// Both forms, then a select: a branch here diverges within a warp and serialises the
  /// elements a lane would otherwise interleave.
  static __device__ FF_FORCE_INLINE float log1p(float x) {
    const float direct = __logf(1.0f + x);
    float s = 1.0f / 7.0f;  // x·(1 − x/2 + x²/3 − … + x⁶/7), Horner from the top
#pragma unroll
    for (int n = 6; n >= 1; --n)
      s = fmaf(s, x, (n % 2 == 1 ? 1.0f : -1.0f) / static_cast<float>(n));
    return fabsf(x) < 0.0625f ? s * x : direct;  // NaN and inf take `direct`
  }
};

/// FastMath for a hidden layer's σ, whose value the next product takes rounded to 16 bits: log1p
/// is __logf(1 + x) alone. Near 0 that is accurate to an absolute 2^-21.4 (CUDA's bound for
/// __logf on [0.5, 2], plus the rounding of 1 + x) rather than relatively: a softplus of a very
/// negative βp comes out a few 1e-7/β too large or small, a hundred times below the 16-bit
/// rounding of the activations of order 1 it is summed with in the next product. Only σ's value
/// uses log1p, so derivatives are FastMath's to the bit; the output layer's σ, written in
/// float32, keeps FastMath.
struct HiddenMath : FastMath {
  static __device__ FF_FORCE_INLINE float log1p(float x) { return __logf(1.0f + x); }
};

/// The 32-bit pair (lo, hi) of 16-bit operands, lo in the low half (the lower column).
template <class S>
__device__ FF_FORCE_INLINE uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<S, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

/// The two 16-bit operands of a 32-bit pair as float32 (low half first).
template <class S>
__device__ FF_FORCE_INLINE float2 unpack_pair(uint32_t v) {
  if constexpr (std::is_same_v<S, __half>) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  } else {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  }
}

/// c += a·b on one 16×8×16 tile, float32 accumulation.
template <class S>
__device__ FF_FORCE_INLINE void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same_v<S, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// The shared-memory address of a generic pointer into shared memory.
__device__ FF_FORCE_INLINE uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Four 8×8 16-bit matrices from shared memory; `at` is this lane's row address (see above).
/// volatile: the loads must stay after the barriers that publish what they read.
__device__ FF_FORCE_INLINE void ldmatrix_x4(uint32_t (&r)[4], uint32_t at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

/// The same, each matrix transposed.
__device__ FF_FORCE_INLINE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

__device__ FF_FORCE_INLINE void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  ldmatrix_x4(r, smem_address(row));
}

__device__ FF_FORCE_INLINE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  ldmatrix_x4_trans(r, smem_address(row));
}

/// This lane's row address in a 16×16 block at `base` (row pitch ld) when the four matrices are
/// ordered (rows 0–7, cols 0–7), (rows 8–15, cols 0–7), (rows 0–7, cols 8–15), (rows 8–15,
/// cols 8–15): an A fragment without .trans, two B fragments (columns 0–7, 8–15) with .trans.
template <class S>
__device__ FF_FORCE_INLINE const S* rows_then_cols(const S* base, int ld) {
  const int lane = lane_id();
  return base + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
}

/// The other order, (rows 0–7, cols 0–7), (rows 0–7, cols 8–15), (rows 8–15, cols 0–7), (rows
/// 8–15, cols 8–15): two B fragments (rows 0–7, 8–15 of W) without .trans, an A fragment of the
/// transposed block with .trans.
template <class S>
__device__ FF_FORCE_INLINE const S* cols_then_rows(const S* base, int ld) {
  const int lane = lane_id();
  return base + ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}

/// src[row, col] of a [batch, in] float32 matrix read through its strides (x, or v in the double
/// backward), 0 past the batch or the input width, and everywhere for a null src.
__device__ FF_FORCE_INLINE float input_at(const Args& a, const float* src, int64_t sr, int64_t sc,
                                          int64_t row, int col) {
  return src != nullptr && row < a.batch && col < a.layers[0].in ? src[row * sr + col * sc] : 0.0f;
}

/// A[m] for the 16·M rows of a warp tile of an input-shaped matrix, from pair(tile_row, col):
/// the 32-bit pair of columns col, col + 1 of that row; k-tiles past the first layer's in_pad are
/// zero.
template <class S, int M, int KT, class Pair>
__device__ FF_FORCE_INLINE void input_fragments(const Args& a, uint32_t (&A)[M][KT][4],
                                                const Pair& pair) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
  const int kt = a.layers[0].in_pad / 16;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int r = 16 * m + g;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      if (kk >= kt) {
        A[m][kk][0] = A[m][kk][1] = A[m][kk][2] = A[m][kk][3] = 0u;
        continue;
      }
      const int c = 16 * kk + 2 * t;
      A[m][kk][0] = pair(r, c);
      A[m][kk][1] = pair(r + 8, c);
      A[m][kk][2] = pair(r, c + 8);
      A[m][kk][3] = pair(r + 8, c + 8);
    }
  }
}

/// The A fragments of rows row0 .. row0 + 16M of the input-shaped matrix src (16-bit, zeros past
/// the batch, past `in` and in k-tiles past in_pad). A lane's elements come in column pairs
/// (2t, 2t + 1): when the pairs are adjacent and 8-byte aligned in memory, each pair is one 8-byte
/// load behind one row and one column test, else every element is read and tested on its own.
template <class S, int M, int KT>
__device__ FF_FORCE_INLINE void load_input_fragments(const Args& a, const float* src, int64_t sr,
                                                     int64_t sc, int64_t row0,
                                                     uint32_t (&A)[M][KT][4]) {
  const int in = a.layers[0].in;
  const bool pairs = src != nullptr && sc == 1 && sr % 2 == 0 && in % 2 == 0 &&
                     reinterpret_cast<uintptr_t>(src) % 8 == 0;
  input_fragments<S, M, KT>(a, A, [&](int tile_row, int c) {
    const int64_t r = row0 + tile_row;
    if (pairs) {
      const float2 v = r < a.batch && c < in ? *reinterpret_cast<const float2*>(src + r * sr + c)
                                             : make_float2(0.0f, 0.0f);
      return pack_pair<S>(v.x, v.y);
    }
    return pack_pair<S>(input_at(a, src, sr, sc, r, c), input_at(a, src, sr, sc, r, c + 1));
  });
}

/// The same for x.
template <class S, int M, int KT>
__device__ FF_FORCE_INLINE void load_input_fragments(const Args& a, int64_t row0,
                                                     uint32_t (&A)[M][KT][4]) {
  load_input_fragments<S, M, KT>(a, a.x, a.x_sr, a.x_sc, row0, A);
}

/// An int known at compile time (std::integral_constant converts to int in host code only).
template <int N>
struct Constant {
  static constexpr int value = N;
};

/// An int known at run time only, with Constant's interface: code generic over the two folds its
/// loops and tests where the count is a Constant.
struct Runtime {
  int value;
};

/// The compile-time value of a Constant, 0 for a Runtime.
template <class Count>
constexpr int kStaticValue = 0;
template <int N>
constexpr int kStaticValue<Constant<N>> = N;

/// f(Constant<N>{}) when n == N, else f(Runtime{n}).
template <int N, class F>
__device__ FF_FORCE_INLINE void with_count(int n, const F& f) {
  if (n == N) {
    f(Constant<N>{});
  } else {
    f(Runtime{n});
  }
}

/// f(Constant<i>{}) for i = First, First + Step, … below Last.
template <int First, int Last, int Step, class F>
__device__ FF_FORCE_INLINE void static_for(const F& f) {
  if constexpr (First < Last) {
    f(Constant<First>{});
    static_for<First + Step, Last, Step>(f);
  }
}

/// Which tile counts of a layer product pick_tiles may pick at compile time.
enum PickTiles : unsigned { kPickK = 1, kPickN = 2, kPickBoth = 3 };

/// f(kt, nt) for a layer product of kt k-tiles (16 wide) and nt output tiles (8 wide), each a
/// Constant where it is picked at compile time (Note [mlp register forward layers]): where every
/// output tile is there (nt == NT), the k-tile count, picked from 1 .. KT (kPickK); else where
/// every k-tile is (kt == KT), the output tile count, picked from 2, 4, … NT (kPickN);
/// Constant<0> ("read from the layer") otherwise. The register forward picks the k-tiles of its
/// hidden layers and the output tiles of its last: picking both there spilled another
/// 0.7 KB at MW = 128.
template <int KT, int NT, unsigned kPick, class F>
__device__ FF_FORCE_INLINE void pick_tiles(int kt, int nt, const F& f) {
  if ((kPick & kPickK) != 0 && nt == NT) {
    static_for<1, KT + 1, 1>([&](auto k) {
      if (kt == k.value) f(k, Constant<NT>{});
    });
  } else if ((kPick & kPickN) != 0 && kt == KT) {
    static_for<2, NT + 1, 2>([&](auto n) {
      if (nt == n.value) f(Constant<KT>{}, n);
    });
  } else {
    f(Constant<0>{}, Constant<0>{});
  }
}

/// d = a·b + c on one 16×8×16 tile, float32 accumulation, with c in other registers than d.
template <class S>
__device__ FF_FORCE_INLINE void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1, const float (&c)[4]) {
  if constexpr (std::is_same_v<S, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
  }
}

/// The forward product over the layer's padded widths with the weight resident in shared memory
/// at `wsm` + l.w_sm ([out_pad, in_pad + kSkew]): C[m] += A[m] · W_lᵀ, or with kBias C[m] = bias
/// + A[m] · W_lᵀ, `bias` a layer's staged biases (stage_biases), which enter as the first
/// product's addend. B fragments are two 32-bit loads each (ldmatrix here made the register
/// forward twice as slow on an H100, and one 64-bit load from a layout with each lane's four
/// elements side by side 3 % slower, Note [mlp register forward shape]). k outermost:
/// consecutive products go to different accumulators, so none waits on the one before it.
/// FixedKT / FixedNT (0: read from the layer) are in_pad / 16 and out_pad / 8 when the caller has
/// checked them, so that the loops have compile-time bounds and the loads fixed offsets (Note
/// [mlp register forward layers]).
template <class S, int M, int KT, int NT, int FixedKT = 0, int FixedNT = 0, bool kBias = false>
__device__ FF_FORCE_INLINE void forward_product_add(const Layer& l, const S* wsm,
                                                    const uint32_t (&A)[M][KT][4],
                                                    float (&C)[M][NT][4],
                                                    const float* bias = nullptr) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
  const int kt = FixedKT != 0 ? FixedKT : l.in_pad / 16;
  const int nt = FixedNT != 0 ? FixedNT : l.out_pad / 8;
  const int ldw = (FixedKT != 0 ? 16 * FixedKT : l.in_pad) + kSkew;
  const S* w = wsm + l.w_sm + g * ldw + 2 * t;
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    if (kk >= kt) continue;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (j >= nt) continue;
      const S* b = w + 8 * j * ldw + 16 * kk;
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(b);
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(b + 8);
      if (kBias && kk == 0) {
        const float2 v = *reinterpret_cast<const float2*>(bias + 8 * j + 2 * t);
        const float start[4] = {v.x, v.y, v.x, v.y};
#pragma unroll
        for (int m = 0; m < M; ++m) mma_16816<S>(C[m][j], A[m][kk], b0, b1, start);
      } else {
#pragma unroll
        for (int m = 0; m < M; ++m) mma_16816<S>(C[m][j], A[m][kk], b0, b1);
      }
    }
  }
}

/// Stages every layer's bias as float32 [num_layers, MW] at `bsm`, zero past each layer's `out`.
template <int MW>
__device__ FF_FORCE_INLINE void stage_biases(const Args& a, float* bsm) {
  for (int e = static_cast<int>(threadIdx.x); e < a.num_layers * MW;
       e += static_cast<int>(blockDim.x)) {
    bsm[e] = bias_of(a.layers[e / MW], e % MW);
  }
}

/// C[m] = bias + A[m] · W_lᵀ with the tile counts picked (pick_tiles).
template <class S, int M, int KT, int NT, unsigned kPick>
__device__ FF_FORCE_INLINE void layer_product(const Layer& l, const S* wsm,
                                              const uint32_t (&A)[M][KT][4], float (&C)[M][NT][4],
                                              const float* bias) {
  pick_tiles<KT, NT, kPick>(l.in_pad / 16, l.out_pad / 8, [&](auto kt, auto nt) {
    forward_product_add<S, M, KT, NT, decltype(kt)::value, decltype(nt)::value, true>(l, wsm, A, C,
                                                                                      bias);
  });
}

/// C[m] = A[m] · W_lᵀ.
template <class S, int M, int KT, int NT>
__device__ FF_FORCE_INLINE void forward_product(const Layer& l, const S* wsm,
                                                const uint32_t (&A)[M][KT][4],
                                                float (&C)[M][NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int m = 0; m < M; ++m) C[m][j][0] = C[m][j][1] = C[m][j][2] = C[m][j][3] = 0.0f;
  }
  forward_product_add<S, M, KT, NT>(l, wsm, A, C);
}

/// C[m] += D[m] · W_l over the layer's padded widths (the reverse sweep's product: D[m]
/// [16, out_pad] a δ as A fragments, C[m] [16, in_pad]), B fragments by ldmatrix.trans from the
/// weight resident at `wsm` + l.w_sm, each loaded once for the M products (the double backward's
/// q_k W and δ_k W). FixedKT / FixedNT (0: read from the layer) are out_pad / 16 and in_pad / 8
/// when the caller has checked them, as in forward_product_add.
template <class S, int M, int KT, int NT, int FixedKT = 0, int FixedNT = 0>
__device__ FF_FORCE_INLINE void reverse_product_add(const Layer& l, const S* wsm,
                                                    const uint32_t (&D)[M][KT][4],
                                                    float (&C)[M][NT][4]) {
  const int kt = FixedKT != 0 ? FixedKT : l.out_pad / 16;
  const int nt = FixedNT != 0 ? FixedNT : l.in_pad / 8;
  const int ldw = (FixedNT != 0 ? 8 * FixedNT : l.in_pad) + kSkew;
  const S* w = rows_then_cols(wsm + l.w_sm, ldw);
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    if (kk >= kt) continue;
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      if (j >= nt) continue;
      uint32_t b[4];
      ldmatrix_x4_trans(b, w + 16 * kk * ldw + 8 * j);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma_16816<S>(C[m][j], D[m][kk], b[0], b[1]);
        mma_16816<S>(C[m][j + 1], D[m][kk], b[2], b[3]);
      }
    }
  }
}

/// C[m] = D[m] · W_l.
template <class S, int M, int KT, int NT>
__device__ FF_FORCE_INLINE void reverse_product(const Layer& l, const S* wsm,
                                                const uint32_t (&D)[M][KT][4],
                                                float (&C)[M][NT][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int j = 0; j < NT; ++j) C[m][j][0] = C[m][j][1] = C[m][j][2] = C[m][j][3] = 0.0f;
  }
  reverse_product_add<S, M, KT, NT>(l, wsm, D, C);
}

/// Row tile m of a fragment or accumulator array [M][N][4] as an array of one row tile, the
/// shape the one-tile products take.
template <class T, int M, int N>
__device__ FF_FORCE_INLINE T (&row_tile(T (&x)[M][N][4], int m))[1][N][4] {
  return *reinterpret_cast<T(*)[1][N][4]>(&x[m]);
}

/// The same for an array of one row tile's fragments [N][4].
template <class T, int N>
__device__ FF_FORCE_INLINE T (&row_tile(T (&x)[N][4]))[1][N][4] {
  return *reinterpret_cast<T(*)[1][N][4]>(&x);
}

/// C = D · W_l with the tile counts picked (pick_tiles).
template <class S, int KT, int NT>
__device__ FF_FORCE_INLINE void reverse_layer_product(const Layer& l, const S* wsm,
                                                      const uint32_t (&D)[KT][4],
                                                      float (&C)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) C[j][0] = C[j][1] = C[j][2] = C[j][3] = 0.0f;
  pick_tiles<KT, NT, kPickBoth>(l.out_pad / 16, l.in_pad / 8, [&](auto kt, auto nt) {
    reverse_product_add<S, 1, KT, NT, decltype(kt)::value, decltype(nt)::value>(l, wsm, row_tile(D),
                                                                                row_tile(C));
  });
}

/// Accumulator tiles j (16×8, over `cols` columns) as the A fragments of the next product, which
/// they are element for element: tiles 2kk and 2kk + 1 are k-tile kk. Each element becomes
/// value(c) (biases are in C already: the register kernels add the staged biases in the
/// product); columns from `cols` on become 0.
template <class S, int M, int KT, int NT, class Value>
__device__ FF_FORCE_INLINE void to_fragments(const float (&C)[M][NT][4], int nt, int cols,
                                             const Value& value, uint32_t (&A)[M][KT][4]) {
  const int t = lane_id() & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j >= nt) continue;
    const int c = 8 * j + 2 * t;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float y[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) y[e] = c + (e & 1) < cols ? value(C[m][j][e]) : 0.0f;
      A[m][j / 2][2 * (j % 2)] = pack_pair<S>(y[0], y[1]);
      A[m][j / 2][2 * (j % 2) + 1] = pack_pair<S>(y[2], y[3]);
    }
  }
}

/// Accumulator tiles j < nt (a Constant or Runtime count) as A fragments, rounded to 16 bits as
/// they stand: for values whose padding columns are 0 already.
template <class S, int NT, int KT, class Count>
__device__ FF_FORCE_INLINE void pack_fragments(const float (&C)[NT][4], Count nt,
                                               uint32_t (&A)[KT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j >= nt.value) continue;
    A[j / 2][2 * (j % 2)] = pack_pair<S>(C[j][0], C[j][1]);
    A[j / 2][2 * (j % 2) + 1] = pack_pair<S>(C[j][2], C[j][3]);
  }
}

/// Writes A fragments (k-tiles below kt) as 16 rows of a row-major 16-bit matrix at `dst`.
template <int KT>
__device__ FF_FORCE_INLINE void store_fragments(const uint32_t (&A)[KT][4], int kt, void* dst,
                                                int ld_bytes) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
  unsigned char* row = static_cast<unsigned char*>(dst) + g * ld_bytes + 4 * t;
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    if (kk >= kt) continue;
    unsigned char* at = row + 32 * kk;  // 16 elements of 2 bytes
    *reinterpret_cast<uint32_t*>(at) = A[kk][0];
    *reinterpret_cast<uint32_t*>(at + 8 * ld_bytes) = A[kk][1];
    *reinterpret_cast<uint32_t*>(at + 16) = A[kk][2];
    *reinterpret_cast<uint32_t*>(at + 8 * ld_bytes + 16) = A[kk][3];
  }
}

/// Reads A fragments (k-tiles below kt) from 16 rows of a row-major 16-bit matrix.
template <class S, int KT>
__device__ FF_FORCE_INLINE void load_fragments(const S* src, int ld, int kt, uint32_t (&A)[KT][4]) {
  const S* row = rows_then_cols(src, ld);
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    if (kk < kt) ldmatrix_x4(A[kk], row + 16 * kk);
  }
}

/// Whether column pairs (2t, 2t + 1) of a float32 matrix with these strides and `cols` columns
/// are adjacent and 8-byte aligned, so that each moves as one 8-byte access.
__device__ FF_FORCE_INLINE bool pairs_adjacent(const float* base, int64_t sr, int64_t sc,
                                               int cols) {
  return sc == 1 && sr % 2 == 0 && cols % 2 == 0 && reinterpret_cast<uintptr_t>(base) % 8 == 0;
}

/// G = the accumulator tiles of rows row0 .. row0 + 15 of the float32 matrix src [batch, cols]
/// read through its strides (grad_out), 0 past the batch and past `cols`.
template <int NT>
__device__ FF_FORCE_INLINE void load_rows(const float* src, int64_t sr, int64_t sc, int64_t row0,
                                          int64_t batch, int cols, float (&G)[NT][4]) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
  const bool pairs = pairs_adjacent(src, sr, sc, cols);
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows g, g + 8
    const int64_t row = row0 + g + 8 * h;
    const float* at = src + row * sr;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int c = 8 * j + 2 * t;
      float2 v = make_float2(0.0f, 0.0f);
      if (row < batch && c < cols) {
        if (pairs) {
          v = *reinterpret_cast<const float2*>(at + c);
        } else {
          v.x = at[c * sc];
          if (c + 1 < cols) v.y = at[(c + 1) * sc];
        }
      }
      G[j][2 * h] = v.x;
      G[j][2 * h + 1] = v.y;
    }
  }
}

/// Writes value(C[m][j][e]) into rows row0 .. row0 + 16M of the row-major float32 matrix dst
/// [batch, cols] (row pitch ld), tiles j < nt, nothing past the batch or `cols`.
template <int M, int NT, class Value>
__device__ FF_FORCE_INLINE void store_rows(const float (&C)[M][NT][4], int nt, int64_t row0,
                                           int64_t batch, int cols, float* dst, int64_t ld,
                                           const Value& value) {
  const int g = lane_id() >> 2, t = lane_id() & 3;
  const bool pairs = pairs_adjacent(dst, ld, 1, cols);
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g, g + 8
      const int64_t row = row0 + 16 * m + g + 8 * h;
      if (row >= batch) continue;
      float* at = dst + row * ld;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int c = 8 * j + 2 * t;
        if (j >= nt || c >= cols) continue;
        const float y0 = value(C[m][j][2 * h]), y1 = value(C[m][j][2 * h + 1]);
        if (pairs) {
          *reinterpret_cast<float2*>(at + c) = make_float2(y0, y1);
        } else {
          at[c] = y0;
          if (c + 1 < cols) at[c + 1] = y1;
        }
      }
    }
  }
}

#endif

}  // namespace fieldfuse::detail::mlp::fused
