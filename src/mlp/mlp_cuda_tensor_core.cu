// SPDX-License-Identifier: Apache-2.0
// CUDA tensor-core driver of the MLP family (compute_dtype float16/bfloat16 on float32 masters):
// the warp-fused kernels of mlp_cuda_warp_fused*.cuh where their plan fits, else the row-tile
// kernels of mlp_cuda_tile.cuh over a WMMA engine with float32 accumulation.
#include <mma.h>

#include <string>
#include <type_traits>

#include "mlp/mlp_cuda_tile.cuh"
#include "mlp/mlp_cuda_warp_fused_plan.cuh"
#include "mlp/mlp_drivers.h"

namespace fieldfuse::detail::mlp {
namespace {

namespace wmma = nvcuda::wmma;
using tile::align_up;
using tile::tid;

// Note [tensor-core engine]
// A 64×64 result tile per block of 8 warps: warp w owns the 16-row band w / 2 and two 16×16
// accumulator fragments (columns 2(w % 2) and 2(w % 2) + 1), float32. Each 32-wide chunk of K is
// staged as 16-bit (X row-major with a row pitch of 40, Y row-major with 72: multiples of 8 as
// WMMA needs, padded off the 64-element bank period) and multiplied in two 16-deep steps. The
// accumulators go through a float32 shared tile to the epilogue (bias, σ, sums in float32).
// bfloat16 WMMA needs sm_80: on older GPUs the same layout is multiplied by FMAs in float32 from
// the same bfloat16 operands (identical rounding of the operands, float32 accumulation), so a
// multi- architecture build that includes sm_75 compiles and runs there too. float16 WMMA exists on
// sm_70+.
template <class S>
struct WmmaEngine {
  using Value = float;
  using Operand = S;
  using Result = float;
  static constexpr int kPreferredRows = 128;
  static constexpr int kTileM = 64, kTileN = 64, kTileK = 32;
  static constexpr int kLdx = kTileK + 8, kLdy = kTileN + 8, kLdc = kTileN + 4;
  static constexpr std::size_t kXsOffset = 0;
  static constexpr std::size_t kYsOffset = align_up(sizeof(S) * kTileM * kLdx, 128);
  static constexpr std::size_t kCsOffset = kYsOffset + align_up(sizeof(S) * kTileK * kLdy, 128);
  static constexpr std::size_t kStageBytes =
      kCsOffset + align_up(sizeof(float) * kTileM * kLdc, 128);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  static constexpr bool kHasMma = std::is_same_v<S, __half>;
#else
  static constexpr bool kHasMma = true;
#endif

  using Fragment = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  struct MmaAcc {
    Fragment c[2];
  };
  struct FmaAcc {
    float v[4][4];
  };
  using Acc = std::conditional_t<kHasMma, MmaAcc, FmaAcc>;

  __device__ static FF_FORCE_INLINE S to_operand(float v) { return static_cast<S>(v); }

  __device__ static FF_FORCE_INLINE void zero(Acc& acc) {
    if constexpr (kHasMma) {
      wmma::fill_fragment(acc.c[0], 0.0f);
      wmma::fill_fragment(acc.c[1], 0.0f);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc.v[i][j] = 0.0f;
    }
  }

  __device__ static FF_FORCE_INLINE void step(Acc& acc, const S* xs, const S* ys) {
    if constexpr (kHasMma) {
      mma_body(acc, xs, ys);
    } else {
      const int ty = tid() / 16, tx = tid() % 16;
#pragma unroll 4
      for (int k = 0; k < kTileK; ++k) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = static_cast<float>(xs[(ty * 4 + i) * kLdx + k]);
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = static_cast<float>(ys[k * kLdy + tx * 4 + j]);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc.v[i][j] += a[i] * b[j];
      }
    }
  }

  __device__ static FF_FORCE_INLINE void store(const Acc& acc, float* cs) {
    if constexpr (kHasMma) {
      const int warp = tid() / 32, wm = warp / 2, wn = (warp % 2) * 2;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::store_matrix_sync(cs + wm * 16 * kLdc + (wn + j) * 16, acc.c[j], kLdc,
                                wmma::mem_row_major);
      }
    } else {
      const int ty = tid() / 16, tx = tid() % 16;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) cs[(ty * 4 + i) * kLdc + tx * 4 + j] = acc.v[i][j];
    }
  }

 private:
  template <class A>
  __device__ static FF_FORCE_INLINE void mma_body(A& acc, const S* xs, const S* ys) {
    const int warp = tid() / 32, wm = warp / 2, wn = (warp % 2) * 2;
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, S, wmma::row_major> a;
      wmma::load_matrix_sync(a, xs + wm * 16 * kLdx + kk, kLdx);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, S, wmma::row_major> b;
        wmma::load_matrix_sync(b, ys + kk * kLdy + (wn + j) * 16, kLdy);
        wmma::mma_sync(acc.c[j], a, b, acc.c[j]);
      }
    }
  }
};

template <class F>
decltype(auto) dispatch(const Problem& p, const F& f) {
  switch (p.compute_dtype) {
    case DType::Float16:
      return f(WmmaEngine<__half>{});
    case DType::BFloat16:
      return f(WmmaEngine<__nv_bfloat16>{});
    default:
      fail(ErrorKind::NotImplemented, p.op,
           std::string("the tensor-core path takes compute_dtype float16 or bfloat16, not ") +
               dtype_name(p.compute_dtype));
  }
}

}  // namespace

std::size_t forward_workspace_cuda_tensor_core(const Problem& problem) {
  return dispatch(problem, [&](auto engine) {
    return fused::workspace_bytes<decltype(engine)>(problem, tile::Entry::Forward);
  });
}

std::size_t backward_workspace_cuda_tensor_core(const Problem& problem) {
  return dispatch(problem, [&](auto engine) {
    return fused::workspace_bytes<decltype(engine)>(problem, tile::Entry::Backward);
  });
}

std::size_t double_backward_workspace_cuda_tensor_core(const Problem& problem) {
  return dispatch(problem, [&](auto engine) {
    return fused::workspace_bytes<decltype(engine)>(problem, tile::Entry::DoubleBackward);
  });
}

void forward_cuda_tensor_core(const ForwardArgs& args) {
  dispatch(args.problem, [&](auto engine) { fused::launch<decltype(engine)>(args); });
}

void backward_cuda_tensor_core(const BackwardArgs& args) {
  dispatch(args.problem, [&](auto engine) { fused::launch<decltype(engine)>(args); });
}

void double_backward_cuda_tensor_core(const DoubleBackwardArgs& args) {
  dispatch(args.problem, [&](auto engine) { fused::launch<decltype(engine)>(args); });
}

}  // namespace fieldfuse::detail::mlp
