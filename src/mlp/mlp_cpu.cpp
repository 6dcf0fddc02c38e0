// SPDX-License-Identifier: Apache-2.0
// CPU driver of the MLP: OpenMP over fixed row chunks, each swept tile by tile through every layer
// with the tile's activations in cache; parameter gradients reduced per chunk, then over chunks in
// a fixed order (Note [mlp CPU chunks]).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

// Note [mlp CPU vector math]
// The activations' exp, log1p, tanh, sin and cos (mlp_math.h) were scalar libm calls, which made a
// Softplus forward 24× slower than a ReLU one (114 ms against 4.7 ms at 3 → 64×4 → 1, B = 65 536,
// 2 cores). Declared "simd" here, as glibc's own headers do under -ffast-math (which would also
// reorder sums, so it is not used), GCC calls glibc's vector variants (libmvec) from the `omp
// simd` loops of apply_activation: 16 floats a call in the AVX-512 build. Every element goes
// through the vector variant: a block's loop has a fixed count of kActivationBlock and a partial
// block is padded, so a result never depends on where an element sits or on alignment, and the
// same build gives the same bits on every call. The vector variants differ from scalar libm by
// at most a few ulp.
#if defined(FIELDFUSE_MLP_LIBMVEC)
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float) noexcept;
__attribute__((simd("notinbranch"))) float log1pf(float) noexcept;
__attribute__((simd("notinbranch"))) float tanhf(float) noexcept;
__attribute__((simd("notinbranch"))) float sinf(float) noexcept;
__attribute__((simd("notinbranch"))) float cosf(float) noexcept;
__attribute__((simd("notinbranch"))) double exp(double) noexcept;
__attribute__((simd("notinbranch"))) double log1p(double) noexcept;
__attribute__((simd("notinbranch"))) double tanh(double) noexcept;
__attribute__((simd("notinbranch"))) double sin(double) noexcept;
__attribute__((simd("notinbranch"))) double cos(double) noexcept;
}
#define FF_MLP_SIMD _Pragma("omp simd")
#else
#define FF_MLP_SIMD
#endif

#include "core/dispatch.h"
#include "core/macros.h"
#include "core/parallel.h"
#include "mlp/mlp_drivers.h"

namespace fieldfuse::detail::mlp {
namespace {

// Note [mlp CPU chunks]
// Rows are split into at most kMaxChunks chunks whose size depends only on the batch and the
// network (never on the thread count); each chunk owns a slice of the workspace (its tile scratch
// and, in the backward entries, its parameter-gradient partials), and a chunk walks its rows in
// tiles of kTileRows, running all layers on one tile before the next, so the tile's activations
// stay in L1/L2. Parameter gradients are summed over a chunk's rows in row order, then over chunks
// in chunk order, so results are the same bits for any number of threads. The chunk count is also
// capped so the partials of wide networks stay within kPartialBudget bytes.
//
// Every product is written in "axpy" form (the innermost loop runs along a contiguous output row
// and adds a scalar times a contiguous parameter row), so the compiler vectorises it without
// reassociating sums: each output element is accumulated in a fixed order. The packed weights
// (W as [out, in] and Wᵀ as [in, out], contiguous, in the workspace) make every such row
// contiguous whatever the strides of the caller's weights.
constexpr int64_t kTileRows = 32;
constexpr int64_t kMaxChunks = 32;
constexpr std::size_t kPartialBudget = std::size_t{64} << 20;

std::size_t align_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

int64_t param_count(const Problem& p) {
  int64_t n = 0;
  for (int k = 0; k < p.num_layers; ++k) n += p.layers[k].out * (p.layers[k].in + 1);
  return n;
}

int64_t width_sum(const Problem& p, bool inputs) {
  int64_t n = 0;
  for (int k = 0; k < p.num_layers; ++k) n += inputs ? p.layers[k].in : p.layers[k].out;
  return n;
}

int64_t max_width(const Problem& p) {
  int64_t w = 0;
  for (int k = 0; k < p.num_layers; ++k) w = std::max({w, p.layers[k].in, p.layers[k].out});
  return w;
}

enum class Entry { Forward, Backward, DoubleBackward };

/// Elements of one tile's scratch: per layer its input h_k, and the per-output arrays the entry
/// keeps (backward: σ′; double backward: σ′, δ, s), plus two ping-pong rows of the widest layer.
int64_t tile_elements(const Problem& p, Entry entry) {
  const int64_t per_out = entry == Entry::Forward ? 0 : entry == Entry::Backward ? 1 : 3;
  const int64_t per_in = entry == Entry::DoubleBackward ? 2 : 1;
  return kTileRows * (per_in * (width_sum(p, true) + p.out_features()) +
                      per_out * width_sum(p, false) + 2 * max_width(p));
}

/// How the rows and the workspace are divided (Note [mlp CPU chunks]).
struct Plan {
  int64_t chunks = 1, chunk_rows = kTileRows;
  int64_t params = 0, tile = 0;  ///< elements per chunk: partials, tile scratch
  std::size_t weights_bytes = 0, chunk_bytes = 0;

  Plan(const Problem& p, Entry entry, std::size_t element) {
    params = entry == Entry::Forward ? 0 : param_count(p);
    tile = tile_elements(p, entry);
    const int64_t tiles = std::max<int64_t>(1, (p.batch + kTileRows - 1) / kTileRows);
    int64_t cap = kMaxChunks;
    if (params > 0) {
      cap = std::min<int64_t>(
          cap, std::max<int64_t>(1, static_cast<int64_t>(kPartialBudget / (params * element))));
    }
    chunks = std::min(tiles, cap);
    chunk_rows = (tiles + chunks - 1) / chunks * kTileRows;
    // W, Wᵀ, b per layer; the double backward may also pack the upstream V, Vᵀ and c.
    weights_bytes = align_up((entry == Entry::DoubleBackward ? 4 : 2) * param_count(p) * element);
    chunk_bytes = align_up((params + tile) * element);
  }
  std::size_t bytes() const { return weights_bytes + chunks * chunk_bytes; }
};

/// The packed parameters of layer k in the workspace: W [out, in], Wᵀ [in, out], b [out] (zeros
/// when the layer has no bias); in the double backward also the upstream V [out, in], Vᵀ and c
/// [out] (null when not given: zero).
template <class T>
struct Packed {
  const T *w, *wt, *b;
  const T *v = nullptr, *vt = nullptr, *c = nullptr;
};

/// A strided [out, in] matrix as contiguous M and Mᵀ, and a strided vector (null: zeros) after
/// them; returns the end of what was written.
template <class T>
T* pack_layer(const void* matrix, int64_t stride_out, int64_t stride_in, const void* vector,
              int64_t stride, int64_t out, int64_t in, T* m, T** mt, T** vec) {
  const T* src = static_cast<const T*>(matrix);
  *mt = m + out * in;
  *vec = *mt + out * in;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const T value = src[o * stride_out + i * stride_in];
      m[o * in + i] = value;
      (*mt)[i * out + o] = value;
    }
    (*vec)[o] = vector != nullptr ? static_cast<const T*>(vector)[o * stride] : T(0);
  }
  return *vec + out;
}

template <class T>
std::vector<Packed<T>> pack_weights(const Problem& p, T* dst) {
  std::vector<Packed<T>> packed(static_cast<std::size_t>(p.num_layers));
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& l = p.layers[k];
    Packed<T>& pk = packed[static_cast<std::size_t>(k)];
    T *w = dst, *wt, *b;
    dst = pack_layer(l.weight, l.weight_stride_out, l.weight_stride_in, l.bias, l.bias_stride,
                     l.out, l.in, w, &wt, &b);
    pk.w = w, pk.wt = wt, pk.b = b;
    if (l.grad_grad_weight == nullptr && l.grad_grad_bias == nullptr) continue;
    // Upstream gradients of the weight gradients: a zero V where only c is given.
    T *v = dst, *vt, *c;
    if (l.grad_grad_weight != nullptr) {
      dst = pack_layer(l.grad_grad_weight, l.grad_grad_weight_stride_out,
                       l.grad_grad_weight_stride_in, l.grad_grad_bias, l.grad_grad_bias_stride,
                       l.out, l.in, v, &vt, &c);
      pk.v = v, pk.vt = vt;
    } else {
      c = dst;
      for (int64_t o = 0; o < l.out; ++o)
        c[o] = static_cast<const T*>(l.grad_grad_bias)[o * l.grad_grad_bias_stride];
      dst = c + l.out;
    }
    pk.c = c;
  }
  return packed;
}

// --- the three products, each over `rows` rows of a tile -----------------------------------
// All three are C[m, :] = C0[m, :] + Σ_k A(m, k)·B[k, :] with B row-major, A read through strides
// and each element of C summed over k in ascending order (see Note [mlp CPU chunks]). The kernel
// keeps an MR-row × NV-vector block of C in registers while it walks k, so each B vector is loaded
// once per MR rows of C and each A element once per NV vectors; leftover rows and columns take the
// same order with smaller blocks / scalar columns, so the block shape never changes a result bit.
//
// Note [mlp CPU blocks]
// With one 64-byte vector of C per row (MR = 4) a step of k costs 4 FMAs against 5 loads, so the
// products were load-bound (Zen 5, 2 cores: 29 ms for the 32 → 64×4 → 16 forward + backward at
// B = 65 536, 2.2× PyTorch eager; 21 ms with the blocks below). How many accumulators
// fit depends on the register file of the build (Note [mlp CPU clones]): AVX-512's 32 zmm
// registers hold 4 rows × 4 vectors (a whole 64-float row; 4 rows divide the 32-row tile, which 6
// did not) plus the B vectors; AVX2's 16 ymm registers 3 rows × 4 vectors of 8 floats; SSE2's 16
// xmm registers 3 rows × 2 vectors of 4 floats.

/// `Bytes` of T as one GCC/Clang vector, the width of the build's registers (16: SSE2, 32: AVX2,
/// 64: AVX-512): the register block's unit. Loop vectorisation of the block failed (strided A
/// reads), so the block is written with vectors directly. (A 64-byte vector in the AVX2 build ran
/// 5–10× slower than the SSE2 build: keep each build at its native width.)
template <class T, int Bytes>
struct Lanes {
  typedef T vec __attribute__((vector_size(Bytes)));
  static constexpr int64_t count = Bytes / sizeof(T);
  // Out-parameters rather than vector returns keep the baseline clone's ABI out of the picture.
  static FF_FORCE_INLINE void load(vec& v, const T* p) { __builtin_memcpy(&v, p, sizeof(v)); }
  static FF_FORCE_INLINE void store(T* p, const vec& v) { __builtin_memcpy(p, &v, sizeof(v)); }
};

/// Register blocks per build (Note [mlp CPU blocks]): the vector width, and the rows of C per
/// block for blocks of 4, 2 and 1 vectors (0: that width is not used).
template <int Bytes, int Rows4, int Rows2, int Rows1>
struct Blocks {
  static constexpr int kBytes = Bytes, kRows4 = Rows4, kRows2 = Rows2, kRows1 = Rows1;
};
using Avx512Blocks = Blocks<64, 4, 8, 8>;
using Avx2Blocks = Blocks<32, 3, 4, 4>;
using BaselineBlocks = Blocks<16, 0, 3, 4>;

// The block's loops must be unrolled for the accumulators to live in registers; GCC's -O2 left
// the AVX2 build's 3 × 4 block in memory on the stack (4.5× slower) until told.
#if defined(__GNUC__) && !defined(__clang__)
#define FF_MLP_UNROLL _Pragma("GCC unroll 16")
#else
#define FF_MLP_UNROLL
#endif

/// Rows [m0, m0 + MR) × vectors [n0, n0 + NV·count) of C: `init` null -> C += A·B (C holds the
/// start values), else C = init (a row vector broadcast over the rows; a zero vector when `zero`)
/// + A·B.
template <int Bytes, int MR, int NV, class T>
FF_FORCE_INLINE void product_block(int64_t m0, int64_t n0, int64_t k_count, int64_t n,
                                   const T* __restrict__ a, int64_t stride_am, int64_t stride_ak,
                                   const T* __restrict__ b, const T* __restrict__ init, bool zero,
                                   T* __restrict__ c) {
  using L = Lanes<T, Bytes>;
  using vec = typename L::vec;
  vec acc[MR][NV];
  FF_MLP_UNROLL for (int r = 0; r < MR; ++r) {
    FF_MLP_UNROLL for (int v = 0; v < NV; ++v) {
      const int64_t col = n0 + v * L::count;
      if (zero) {
        acc[r][v] = vec{};
      } else {
        L::load(acc[r][v], init != nullptr ? init + col : c + (m0 + r) * n + col);
      }
    }
  }
  for (int64_t k = 0; k < k_count; ++k) {
    vec bk[NV];
    FF_MLP_UNROLL for (int v = 0; v < NV; ++v) L::load(bk[v], b + k * n + n0 + v * L::count);
    FF_MLP_UNROLL for (int r = 0; r < MR; ++r) {
      const T ark = a[(m0 + r) * stride_am + k * stride_ak];
      FF_MLP_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] += ark * bk[v];
    }
  }
  FF_MLP_UNROLL for (int r = 0; r < MR; ++r) {
    FF_MLP_UNROLL for (int v = 0; v < NV; ++v)
        L::store(c + (m0 + r) * n + n0 + v * L::count, acc[r][v]);
  }
}

/// Every row of the column band [n0, n0 + NV·count): blocks of MR rows, then single rows.
template <int Bytes, int MR, int NV, class T>
FF_FORCE_INLINE void product_band(int64_t m_count, int64_t n0, int64_t k_count, int64_t n,
                                  const T* a, int64_t stride_am, int64_t stride_ak, const T* b,
                                  const T* init, bool zero, T* c) {
  int64_t m0 = 0;
  for (; m0 + MR <= m_count; m0 += MR)
    product_block<Bytes, MR, NV>(m0, n0, k_count, n, a, stride_am, stride_ak, b, init, zero, c);
  for (; m0 < m_count; ++m0)
    product_block<Bytes, 1, NV>(m0, n0, k_count, n, a, stride_am, stride_ak, b, init, zero, c);
}

template <class Bl, class T>
FF_FORCE_INLINE void product(int64_t m_count, int64_t k_count, int64_t n, const T* a,
                             int64_t stride_am, int64_t stride_ak, const T* b, const T* init,
                             bool zero, T* c) {
  constexpr int B = Bl::kBytes;
  constexpr int64_t w = Lanes<T, B>::count;
  int64_t n0 = 0;
  if constexpr (Bl::kRows4 > 0) {
    for (; n0 + 4 * w <= n; n0 += 4 * w)
      product_band<B, Bl::kRows4, 4>(m_count, n0, k_count, n, a, stride_am, stride_ak, b, init,
                                     zero, c);
  }
  if constexpr (Bl::kRows2 > 0) {
    for (; n0 + 2 * w <= n; n0 += 2 * w)
      product_band<B, Bl::kRows2, 2>(m_count, n0, k_count, n, a, stride_am, stride_ak, b, init,
                                     zero, c);
  }
  for (; n0 + w <= n; n0 += w)
    product_band<B, Bl::kRows1, 1>(m_count, n0, k_count, n, a, stride_am, stride_ak, b, init, zero,
                                   c);
  // Scalar columns past the last whole vector, in the same k order.
  for (int64_t m = 0; m < m_count; ++m) {
    for (int64_t j = n0; j < n; ++j) {
      T sum = zero ? T(0) : init != nullptr ? init[j] : c[m * n + j];
      for (int64_t k = 0; k < k_count; ++k) sum += a[m * stride_am + k * stride_ak] * b[k * n + j];
      c[m * n + j] = sum;
    }
  }
}

/// P = A Wᵀ + b over `rows` rows (b null: no bias): A [rows, in], Wᵀ [in, out].
template <class Bl, class T>
FF_FORCE_INLINE void affine_impl(int64_t rows, int64_t in, int64_t out, const T* a, const T* wt,
                                 const T* b, T* p) {
  product<Bl>(rows, in, out, a, in, 1, wt, b, b == nullptr, p);
}

/// P += A Vᵀ (the double backward's V_k a_{k−1} term): A [rows, in], Vᵀ [in, out].
template <class Bl, class T>
FF_FORCE_INLINE void affine_accumulate_impl(int64_t rows, int64_t in, int64_t out, const T* a,
                                            const T* vt, T* p) {
  product<Bl>(rows, in, out, a, in, 1, vt, static_cast<const T*>(nullptr), false, p);
}

/// G += D V (the double backward's V_kᵀ δ_k term): D [rows, out], V [out, in].
template <class Bl, class T>
FF_FORCE_INLINE void transpose_accumulate_impl(int64_t rows, int64_t in, int64_t out, const T* d,
                                               const T* v, T* g) {
  product<Bl>(rows, out, in, d, out, 1, v, static_cast<const T*>(nullptr), false, g);
}

/// G = D W: D [rows, out], W [out, in].
template <class Bl, class T>
FF_FORCE_INLINE void transpose_product_impl(int64_t rows, int64_t in, int64_t out, const T* d,
                                            const T* w, T* g) {
  product<Bl>(rows, out, in, d, out, 1, w, static_cast<const T*>(nullptr), true, g);
}

/// dW += Dᵀ A (rows in order) and db[o] += Σ_r D[r, o] where db is given.
template <class Bl, class T>
FF_FORCE_INLINE void outer_accumulate_impl(int64_t rows, int64_t in, int64_t out, const T* d,
                                           const T* a, T* dw, T* db) {
  product<Bl>(out, rows, in, d, 1, out, a, static_cast<const T*>(nullptr), false, dw);
  if (db == nullptr) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) db[o] += d[r * out + o];
}

/// Elements per vector-math block (Note [mlp CPU vector math]): a multiple of every build's
/// vector width.
constexpr int kActivationBlock = 16;

/// What forward_tile keeps of each pre-activation besides σ: nothing, σ′, or σ′ and σ″.
enum class Keep { Value, D1, D2 };

/// σ(p) into v, and σ′ into d1 / σ″ into d2 as `keep` says (the others are left alone).
template <Keep keep, class T, class Act>
FF_FORCE_INLINE void activate(const Act& act, T p, T& v, T& d1, T& d2) {
  if constexpr (keep == Keep::D2) {
    const Derivs<T> r = act.all(p);
    v = r.value, d1 = r.d1, d2 = r.d2;
  } else if constexpr (keep == Keep::D1) {
    d1 = act.d1(p);
    v = act.value(p);
  } else {
    v = act.value(p);
  }
}

/// pre ← σ(pre), and σ′ into d1 / σ″ into d2 as `keep` says, over n elements, block by block.
template <Keep keep, class T, class Act>
FF_FORCE_INLINE void activation_blocks(const Act& act, T* pre, T* d1, T* d2, int64_t n) {
  for (int64_t e0 = 0; e0 < n; e0 += kActivationBlock) {
    const int64_t m = std::min<int64_t>(kActivationBlock, n - e0);
    T p[kActivationBlock] = {}, v[kActivationBlock], a[kActivationBlock], b[kActivationBlock];
    std::copy(pre + e0, pre + e0 + m, p);
    FF_MLP_SIMD
    for (int i = 0; i < kActivationBlock; ++i) activate<keep>(act, p[i], v[i], a[i], b[i]);
    std::copy(v, v + m, pre + e0);
    if constexpr (keep != Keep::Value) std::copy(a, a + m, d1 + e0);
    if constexpr (keep == Keep::D2) std::copy(b, b + m, d2 + e0);
  }
}

/// The same as one plain loop, for activations without library calls (exact: the compiler's
/// vector body and scalar tail give the same bits), where the blocks' copies cost more than the
/// activation (ReLU's forward took 7.6 ms through them against 4.8 ms, same case as above).
template <Keep keep, class T, class Act>
FF_FORCE_INLINE void activation_loop(const Act& act, T* pre, T* d1, T* d2, int64_t n) {
  T unused = T(0);
  for (int64_t e = 0; e < n; ++e) {
    activate<keep>(act, pre[e], pre[e], keep == Keep::Value ? unused : d1[e],
                   keep == Keep::D2 ? d2[e] : unused);
  }
}

template <Keep keep, class T, class Act>
FF_FORCE_INLINE void activation_pass(Activation kind, const Act& act, T* pre, T* d1, T* d2,
                                     int64_t n) {
  if (kind == Activation::None || kind == Activation::ReLU || kind == Activation::LeakyReLU) {
    activation_loop<keep>(act, pre, d1, d2, n);
  } else {
    activation_blocks<keep>(act, pre, d1, d2, n);
  }
}

/// The activation of a layer over n pre-activations (forward_tile), σ′ kept where d1 is given and
/// σ″ where d2 is. Blocks unused: one signature with the products for the clone macro.
template <class Blocks, class T>
FF_FORCE_INLINE void apply_activation_impl(Activation kind, const ActivationParams& params, T* pre,
                                           T* d1, T* d2, int64_t n) {
  visit_activation<T>(kind, params, [&](auto act) {
    if (d2 != nullptr) {
      activation_pass<Keep::D2>(kind, act, pre, d1, d2, n);
    } else if (d1 != nullptr) {
      activation_pass<Keep::D1>(kind, act, pre, d1, d2, n);
    } else {
      activation_pass<Keep::Value>(kind, act, pre, d1, d2, n);
    }
  });
}

// Note [mlp CPU clones]: the library is built for baseline x86-64 (SSE2), where these products
// run 4 floats wide. Each is compiled again for x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512),
// each with its own register blocks (Note [mlp CPU blocks]), and the first call picks the best
// version the CPU supports, a 2–4× gain on current servers. Within one machine the same version
// always runs, so results stay deterministic.
// FIELDFUSE_MLP_CPU_ISA=baseline|avx2 caps the choice (tests run every build on one machine).
enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

Isa cpu_isa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const Isa isa = [] {
    __builtin_cpu_init();
    Isa best = Isa::kBaseline;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::kAvx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
      best = Isa::kAvx512;
    }
    const char* cap = std::getenv("FIELDFUSE_MLP_CPU_ISA");
    if (cap != nullptr && std::strcmp(cap, "baseline") == 0) return Isa::kBaseline;
    if (cap != nullptr && std::strcmp(cap, "avx2") == 0 && best == Isa::kAvx512) {
      return Isa::kAvx2;
    }
    return best;
  }();
  return isa;
#else
  return Isa::kBaseline;
#endif
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FF_MLP_CPU_AVX512 __attribute__((target("arch=x86-64-v4")))
#define FF_MLP_CPU_AVX2 __attribute__((target("arch=x86-64-v3")))
#else
#define FF_MLP_CPU_AVX512
#define FF_MLP_CPU_AVX2
#endif

/// One product for element type T in its three builds, and the entry point that picks one.
#define FF_MLP_CPU_PRODUCT(T, name, params, args)                                    \
  FF_MLP_CPU_AVX512 void name##_avx512 params { name##_impl<Avx512Blocks, T> args; } \
  FF_MLP_CPU_AVX2 void name##_avx2 params { name##_impl<Avx2Blocks, T> args; }       \
  void name##_baseline params { name##_impl<BaselineBlocks, T> args; }               \
  void name params {                                                                 \
    switch (cpu_isa()) {                                                             \
      case Isa::kAvx512:                                                             \
        return name##_avx512 args;                                                   \
      case Isa::kAvx2:                                                               \
        return name##_avx2 args;                                                     \
      default:                                                                       \
        return name##_baseline args;                                                 \
    }                                                                                \
  }

#define FF_MLP_CPU_PRODUCTS(T)                                                               \
  FF_MLP_CPU_PRODUCT(                                                                        \
      T, affine,                                                                             \
      (int64_t rows, int64_t in, int64_t out, const T* a, const T* wt, const T* b, T* p),    \
      (rows, in, out, a, wt, b, p))                                                          \
  FF_MLP_CPU_PRODUCT(T, transpose_product,                                                   \
                     (int64_t rows, int64_t in, int64_t out, const T* d, const T* w, T* g),  \
                     (rows, in, out, d, w, g))                                               \
  FF_MLP_CPU_PRODUCT(                                                                        \
      T, outer_accumulate,                                                                   \
      (int64_t rows, int64_t in, int64_t out, const T* d, const T* a, T* dw, T* db),         \
      (rows, in, out, d, a, dw, db))                                                         \
  FF_MLP_CPU_PRODUCT(T, affine_accumulate,                                                   \
                     (int64_t rows, int64_t in, int64_t out, const T* a, const T* vt, T* p), \
                     (rows, in, out, a, vt, p))                                              \
  FF_MLP_CPU_PRODUCT(T, transpose_accumulate,                                                \
                     (int64_t rows, int64_t in, int64_t out, const T* d, const T* v, T* g),  \
                     (rows, in, out, d, v, g))                                               \
  FF_MLP_CPU_PRODUCT(                                                                        \
      T, apply_activation,                                                                   \
      (Activation kind, const ActivationParams& params, T* pre, T* d1, T* d2, int64_t n),    \
      (kind, params, pre, d1, d2, n))
FF_MLP_CPU_PRODUCTS(float)
FF_MLP_CPU_PRODUCTS(double)
#undef FF_MLP_CPU_PRODUCTS
#undef FF_MLP_CPU_PRODUCT
#undef FF_MLP_CPU_AVX2
#undef FF_MLP_CPU_AVX512

/// A strided [B, cols] input's rows [row0, row0 + rows) into a contiguous tile.
template <class T>
void load_rows(const MatrixView& m, int64_t row0, int64_t rows, int64_t cols, T* dst) {
  const T* src = static_cast<const T*>(m.data);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = src[(row0 + r) * m.stride_row + c * m.stride_col];
}

template <class T>
void store_rows(const T* src, int64_t row0, int64_t rows, int64_t cols, void* out) {
  if (out == nullptr) return;
  std::memcpy(static_cast<T*>(out) + row0 * cols, src, sizeof(T) * rows * cols);
}

/// One tile's scratch, carved from the chunk's slice: h[k] = layer k's input (h[L] = output),
/// d1[k] = σ′(p_k), delta[k] = δ_k, s[k] = the curvature source, t[k] = the tangent entering layer
/// k, and two rows of the widest layer.
template <class T>
struct Tile {
  std::vector<T*> h, d1, delta, s, t;
  T *ping, *pong;

  Tile(const Problem& p, Entry entry, T* scratch) {
    const auto L = static_cast<std::size_t>(p.num_layers);
    h.resize(L + 1);
    d1.assign(L, nullptr);
    delta.assign(L, nullptr);
    s.assign(L, nullptr);
    t.assign(L + 1, nullptr);
    for (std::size_t k = 0; k <= L; ++k) {
      const int64_t width = k < L ? p.layers[k].in : p.out_features();
      h[k] = take(scratch, width);
      if (entry == Entry::DoubleBackward) t[k] = take(scratch, width);
      if (k == L || entry == Entry::Forward) continue;
      d1[k] = take(scratch, p.layers[k].out);
      if (entry == Entry::DoubleBackward) {
        delta[k] = take(scratch, p.layers[k].out);
        s[k] = take(scratch, p.layers[k].out);
      }
    }
    ping = take(scratch, max_width(p));
    pong = take(scratch, max_width(p));
  }
  static T* take(T*& scratch, int64_t width) {
    T* out = scratch;
    scratch += kTileRows * width;
    return out;
  }
};

/// The forward sweep over one tile: h[k+1] = σ_k(h[k] Wᵀ + b), with σ′ kept in d1 where present
/// and σ″ in s (double backward) where present. h[0] must hold the tile's x.
template <class T>
void forward_tile(const Problem& p, const std::vector<Packed<T>>& w, Tile<T>& tile, int64_t rows) {
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& l = p.layers[k];
    const auto ku = static_cast<std::size_t>(k);
    T* pre = tile.h[ku + 1];  // the pre-activation is formed in place of the layer's output
    affine(rows, l.in, l.out, tile.h[ku], w[ku].wt, w[ku].b, pre);
    apply_activation(p.activation_of(k), p.params, pre, tile.d1[ku], tile.s[ku], rows * l.out);
  }
}

/// A chunk's parameter-gradient partials, laid out per layer as dW [out, in] then db [out].
template <class T>
struct Partials {
  std::vector<T*> dw, db;
  Partials(const Problem& p, T* base, int64_t params) {
    std::fill(base, base + params, T(0));
    for (int k = 0; k < p.num_layers; ++k) {
      dw.push_back(base);
      base += p.layers[k].out * p.layers[k].in;
      db.push_back(base);
      base += p.layers[k].out;
    }
  }
};

/// Sums the chunks' partials in chunk order into the layers' gradient outputs.
template <class T>
void reduce_partials(const Problem& p, const Plan& plan, const char* base) {
  int64_t offset = 0;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& l = p.layers[k];
    const int64_t nw = l.out * l.in;
    void* outputs[2] = {l.grad_weight, l.grad_bias};
    const int64_t counts[2] = {nw, l.out};
    for (int part = 0; part < 2; ++part) {
      T* out = static_cast<T*>(outputs[part]);
      if (out != nullptr) {
        parallel_for(0, counts[part], plan.chunks, [&](int64_t e) {
          T sum = T(0);
          for (int64_t c = 0; c < plan.chunks; ++c) {
            sum += reinterpret_cast<const T*>(base + c * plan.chunk_bytes)[offset + e];
          }
          out[e] = sum;
        });
      }
      offset += counts[part];
    }
  }
}

/// Runs `tile_fn(tile, partials, row0, rows)` over every tile of every chunk, in parallel over
/// chunks; then reduces the partials (backward entries).
template <class T, class TileFn>
void run_chunks(const Problem& p, Entry entry, void* workspace, const TileFn& tile_fn) {
  const Plan plan(p, entry, sizeof(T));
  const std::vector<Packed<T>> w = pack_weights(p, static_cast<T*>(workspace));
  char* chunk_base = static_cast<char*>(workspace) + plan.weights_bytes;
  const int64_t work = plan.chunk_rows * (plan.params + plan.tile);
  parallel_for(0, plan.chunks, work, [&](int64_t c) {
    T* slice = reinterpret_cast<T*>(chunk_base + c * plan.chunk_bytes);
    Partials<T> partials(p, slice, plan.params);
    Tile<T> tile(p, entry, slice + plan.params);
    const int64_t end = std::min(p.batch, (c + 1) * plan.chunk_rows);
    for (int64_t row0 = c * plan.chunk_rows; row0 < end; row0 += kTileRows) {
      tile_fn(w, tile, partials, row0, std::min(kTileRows, end - row0));
    }
  });
  if (entry != Entry::Forward) reduce_partials<T>(p, plan, chunk_base);
}

template <class T>
void forward_typed(const ForwardArgs& args) {
  const Problem& p = args.problem;
  run_chunks<T>(p, Entry::Forward, args.workspace,
                [&](const std::vector<Packed<T>>& w, Tile<T>& tile, Partials<T>&, int64_t row0,
                    int64_t rows) {
                  load_rows(args.x, row0, rows, p.in_features(), tile.h[0]);
                  forward_tile(p, w, tile, rows);
                  store_rows(tile.h.back(), row0, rows, p.out_features(), args.out);
                });
}

/// The first reverse sweep from g = grad_out rows (in `tile.ping`): δ_k = g ⊙ σ′(p_k) in place,
/// parameter partials, g ← δ_k W_k. Returns the buffer holding g_0 when `want_input` (the last
/// product is skipped otherwise).
template <class T>
T* reverse_tile(const Problem& p, const std::vector<Packed<T>>& w, Tile<T>& tile,
                Partials<T>& partials, int64_t rows, bool want_input) {
  T* g = tile.ping;
  T* next = tile.pong;
  for (int k = p.num_layers - 1; k >= 0; --k) {
    const LayerView& l = p.layers[k];
    const auto ku = static_cast<std::size_t>(k);
    T* delta = g;
    const T* d1 = tile.d1[ku];
    for (int64_t e = 0; e < rows * l.out; ++e) delta[e] *= d1[e];
    if (l.grad_weight != nullptr || l.grad_bias != nullptr) {
      outer_accumulate(rows, l.in, l.out, delta, tile.h[ku], partials.dw[ku],
                       l.grad_bias != nullptr ? partials.db[ku] : nullptr);
    }
    if (k == 0 && !want_input) break;
    transpose_product(rows, l.in, l.out, delta, w[ku].w, next);
    std::swap(g, next);
  }
  return g;
}

template <class T>
void backward_typed(const BackwardArgs& args) {
  const Problem& p = args.problem;
  run_chunks<T>(p, Entry::Backward, args.workspace,
                [&](const std::vector<Packed<T>>& w, Tile<T>& tile, Partials<T>& partials,
                    int64_t row0, int64_t rows) {
                  load_rows(args.x, row0, rows, p.in_features(), tile.h[0]);
                  forward_tile(p, w, tile, rows);
                  store_rows(tile.h[static_cast<std::size_t>(p.num_layers)], row0, rows,
                             p.out_features(), args.out);
                  load_rows(args.grad_out, row0, rows, p.out_features(), tile.ping);
                  const T* g0 = reverse_tile(p, w, tile, partials, rows, args.grad_x != nullptr);
                  store_rows(g0, row0, rows, p.in_features(), args.grad_x);
                });
}

/// Steps 1–4 of the double backward for one tile (include/fieldfuse/mlp.h). After the forward
/// (σ′ in d1, σ″ in s) and the first reverse sweep (δ_k kept, s_k ← σ″ ⊙ g_k):
/// tangent sweep t[k+1] = σ′ ⊙ (t[k] Wᵀ), turning s_k into σ″ ⊙ g_k ⊙ u_k; then the second reverse
/// sweep q_k = σ′ ⊙ r_k + s_k with the parameter partials δ_k t_kᵀ + q_k h_kᵀ.
template <class T>
void double_backward_tile(const Problem& p, const std::vector<Packed<T>>& w, Tile<T>& tile,
                          Partials<T>& partials, int64_t rows, const DoubleBackwardArgs& args,
                          int64_t row0) {
  const int L = p.num_layers;
  load_rows(args.x, row0, rows, p.in_features(), tile.h[0]);
  forward_tile(p, w, tile, rows);
  load_rows(args.grad_out, row0, rows, p.out_features(), tile.ping);
  // First reverse sweep, keeping δ_k and turning σ″ into σ″ ⊙ g_k (no parameter partials: the
  // double backward's come from step 4 only).
  {
    T* g = tile.ping;
    T* next = tile.pong;
    for (int k = L - 1; k >= 0; --k) {
      const LayerView& l = p.layers[k];
      const auto ku = static_cast<std::size_t>(k);
      const int64_t n = rows * l.out;
      T* c = tile.s[ku];
      const T* d1 = tile.d1[ku];
      T* delta = tile.delta[ku];
      for (int64_t e = 0; e < n; ++e) {
        c[e] *= g[e];
        delta[e] = g[e] * d1[e];
      }
      if (k == 0) break;
      transpose_product(rows, l.in, l.out, delta, w[ku].w, next);
      std::swap(g, next);
    }
  }
  // Step 1 and 2: tangent sweep.
  load_rows(args.grad_grad_x, row0, rows, p.in_features(), tile.t[0]);
  for (int k = 0; k < L; ++k) {
    const LayerView& l = p.layers[k];
    const auto ku = static_cast<std::size_t>(k);
    T* u = tile.t[ku + 1];
    affine(rows, l.in, l.out, tile.t[ku], w[ku].wt, w[ku].c, u);  // + c_k (null: none)
    if (w[ku].vt != nullptr) affine_accumulate(rows, l.in, l.out, tile.h[ku], w[ku].vt, u);
    const T* d1 = tile.d1[ku];
    T* s = tile.s[ku];
    for (int64_t e = 0; e < rows * l.out; ++e) {
      s[e] *= u[e];
      u[e] *= d1[e];
    }
  }
  store_rows(tile.t[static_cast<std::size_t>(L)], row0, rows, p.out_features(), args.grad_grad_out);
  // Steps 3 and 4: second reverse sweep from r_L = grad_y; where that is absent (zero),
  // q_{L−1} = s_{L−1}.
  T* r = tile.ping;
  T* next = tile.pong;
  const bool has_grad_y = args.grad_y.data != nullptr;
  if (has_grad_y) load_rows(args.grad_y, row0, rows, p.out_features(), r);
  for (int k = L - 1; k >= 0; --k) {
    const LayerView& l = p.layers[k];
    const auto ku = static_cast<std::size_t>(k);
    const int64_t n = rows * l.out;
    T* q = tile.s[ku];
    const T* d1 = tile.d1[ku];
    if (k < L - 1 || has_grad_y) {
      for (int64_t e = 0; e < n; ++e) q[e] += d1[e] * r[e];
    }
    if (l.grad_weight != nullptr || l.grad_bias != nullptr) {
      T* db = l.grad_bias != nullptr ? partials.db[ku] : nullptr;
      outer_accumulate(rows, l.in, l.out, q, tile.h[ku], partials.dw[ku], db);
      outer_accumulate(rows, l.in, l.out, tile.delta[ku], tile.t[ku], partials.dw[ku],
                       static_cast<T*>(nullptr));
    }
    if (k == 0 && args.grad_x == nullptr) break;
    transpose_product(rows, l.in, l.out, q, w[ku].w, next);
    if (w[ku].v != nullptr) transpose_accumulate(rows, l.in, l.out, tile.delta[ku], w[ku].v, next);
    std::swap(r, next);
  }
  if (args.grad_x != nullptr) store_rows(r, row0, rows, p.in_features(), args.grad_x);
}

}  // namespace

std::size_t forward_workspace_cpu(const Problem& problem) {
  return dispatch_float_types(problem.op, problem.dtype, [&](auto tag) {
    return Plan(problem, Entry::Forward, sizeof(typename decltype(tag)::type)).bytes();
  });
}

std::size_t backward_workspace_cpu(const Problem& problem) {
  return dispatch_float_types(problem.op, problem.dtype, [&](auto tag) {
    return Plan(problem, Entry::Backward, sizeof(typename decltype(tag)::type)).bytes();
  });
}

std::size_t double_backward_workspace_cpu(const Problem& problem) {
  return dispatch_float_types(problem.op, problem.dtype, [&](auto tag) {
    return Plan(problem, Entry::DoubleBackward, sizeof(typename decltype(tag)::type)).bytes();
  });
}

void forward_cpu(const ForwardArgs& args) {
  dispatch_float_types(args.problem.op, args.problem.dtype,
                       [&](auto tag) { forward_typed<typename decltype(tag)::type>(args); });
}

void backward_cpu(const BackwardArgs& args) {
  dispatch_float_types(args.problem.op, args.problem.dtype,
                       [&](auto tag) { backward_typed<typename decltype(tag)::type>(args); });
}

void double_backward_cpu(const DoubleBackwardArgs& args) {
  dispatch_float_types(args.problem.op, args.problem.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_chunks<T>(args.problem, Entry::DoubleBackward, args.workspace,
                  [&](const std::vector<Packed<T>>& w, Tile<T>& tile, Partials<T>& partials,
                      int64_t row0, int64_t rows) {
                    double_backward_tile(args.problem, w, tile, partials, rows, args, row0);
                  });
  });
}

}  // namespace fieldfuse::detail::mlp
