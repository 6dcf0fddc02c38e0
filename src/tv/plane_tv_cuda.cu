// SPDX-License-Identifier: Apache-2.0
// CUDA row kernels of plane_tv (Note [plane_tv rows]): one thread per 4 (or 1) consecutive elements
// of a level read as dense rows, the formulas of plane_tv_math.h, per-block float64 partial sums
// and a fixed-order final reduction (deterministic, no atomics).
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "core/neighborhood.h"
#include "tv/plane_tv_drivers.h"
#include "tv/plane_tv_math.h"
#include "tv/tv_cuda_common.cuh"

namespace fieldfuse::detail::tv {
namespace {

using cuda::compute_t;

// Note [plane_tv rows]
// A level whose planes are dense rows (channels-last: H rows of W·C values; NCHW: H rows of W per
// channel) is one flat range of elements, so a warp reads 32 consecutive quads (512 contiguous
// bytes for float) and every load is coalesced whatever C is; the H and W neighbours are the same
// lines one row or `step` elements on, which the neighbouring warps of the block read too (L1/L2
// hits). The volume view of Note [plane_tv layout] instead puts threadIdx.x along C = 8 for a
// channels-last level, leaving most of each warp idle, and for NCHW also loads the channel
// neighbours its weight-0 sum never uses. Each thread owns kQuadsPerThread quads of a block's
// range, kRowThreads quads apart, so the block count, and with it the reduction order, depends
// only on the level's sizes.
constexpr int kRowThreads = 256;
constexpr int kQuadsPerThread = 4;  // 16 elements per thread: ~2,000 blocks for a 300² level
constexpr int64_t kBlockElements = int64_t{kRowThreads} * kQuadsPerThread * 4;

/// How a thread reads its elements: one at a time (any layout), or as a 4-element vector whose W
/// neighbours are the next elements (step 1, NCHW) or the vectors `step` elements away (step a
/// multiple of 4, channels-last with 4 | C).
enum class RowMode { Scalar, QuadUnit, QuadStep };

/// Where an element sits: its slab's offset in memory and in the slab, and its column in its row.
struct RowPosition {
  int64_t slab, j, col;
};

__device__ FF_FORCE_INLINE RowPosition position_of(const PlaneRows& r, int64_t e) {
  const int64_t slab_size = r.slab_size();
  RowPosition p;
  p.slab = e / slab_size;
  p.j = e - p.slab * slab_size;
  p.col = p.j % r.row_length;
  return p;
}

/// The element index of item i (quad or element) of this thread.
template <RowMode M>
__device__ FF_FORCE_INLINE int64_t item_element(int i) {
  constexpr int kWidth = M == RowMode::Scalar ? 1 : 4;
  return blockIdx.x * kBlockElements + (int64_t{i} * kRowThreads + threadIdx.x) * kWidth;
}

/// The four in-plane neighbours of the thread's 4 (or 1) elements at p, missing ones replaced by
/// the element itself (Note [clamped neighbours]), in the compute type T.
template <class T>
struct Neighbours {
  T v[4], up[4], down[4], left[4], right[4];
};

/// Loads 4 values of a quad-mode row into T.
template <class T, class S>
__device__ FF_FORCE_INLINE void to_compute(const Quad<S>& q, T (&out)[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) out[k] = static_cast<T>(q.v[k]);
}

/// Loads the neighbours a pass needs (`wants_up_left`: the backward also reads up and left).
template <RowMode M, bool WantsUpLeft, class T, class S>
__device__ FF_FORCE_INLINE void load_neighbours(const PlaneRows& r, const S* p,
                                                const RowPosition& at, Neighbours<T>& n) {
  const bool has_up = at.j >= r.row_length, has_down = at.j + r.row_length < r.slab_size();
  if constexpr (M == RowMode::Scalar) {
    const T v = load_as<T>(p);
    n.v[0] = v;
    n.down[0] = has_down ? load_as<T>(p + r.row_length) : v;
    n.right[0] = at.col + r.step < r.row_length ? load_as<T>(p + r.step) : v;
    if constexpr (WantsUpLeft) {
      n.up[0] = has_up ? load_as<T>(p - r.row_length) : v;
      n.left[0] = at.col >= r.step ? load_as<T>(p - r.step) : v;
    }
  } else {
    // A quad never straddles a row (4 | row_length), so the row tests hold for all 4 elements.
    const Quad<S> c = load_quad(p);
    to_compute(c, n.v);
    to_compute(has_down ? load_quad(p + r.row_length) : c, n.down);
    if constexpr (WantsUpLeft) to_compute(has_up ? load_quad(p - r.row_length) : c, n.up);
    if constexpr (M == RowMode::QuadStep) {
      // 4 | step and 4 | col: col + step < row_length holds for the 4 elements or for none.
      to_compute(at.col + r.step < r.row_length ? load_quad(p + r.step) : c, n.right);
      if constexpr (WantsUpLeft) to_compute(at.col >= r.step ? load_quad(p - r.step) : c, n.left);
    } else {
#pragma unroll
      for (int k = 0; k < 3; ++k) n.right[k] = n.v[k + 1];
      n.right[3] = at.col + 4 < r.row_length ? load_as<T>(p + 4) : n.v[3];
      if constexpr (WantsUpLeft) {
        n.left[0] = at.col > 0 ? load_as<T>(p - 1) : n.v[0];
#pragma unroll
        for (int k = 1; k < 4; ++k) n.left[k] = n.v[k - 1];
      }
    }
  }
}

/// Per-block partial sums ΣΔH² and ΣΔW², written to partials[k·gridDim.x + block].
template <RowMode M, class S>
__global__ void __launch_bounds__(kRowThreads)
    rows_reduce_kernel(PlaneRows r, const S* __restrict__ data, double* __restrict__ partials) {
  using T = compute_t<S>;
  constexpr int kWidth = M == RowMode::Scalar ? 1 : 4;
  constexpr int kItems = kQuadsPerThread * 4 / kWidth;
  const int64_t n = r.numel();
  double acc_h = 0.0, acc_w = 0.0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t e = item_element<M>(i);
    if (e >= n) break;  // later items of the thread lie further on
    const RowPosition at = position_of(r, e);
    Neighbours<T> nb;
    load_neighbours<M, false>(r, data + at.slab * r.slab_stride + at.j, at, nb);
    // The 4 elements of a quad are added in T first: one float64 add per sum and quad.
    T h = T(0), w = T(0);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      h += sq_axis_term(nb.v[k], nb.down[k]);
      w += sq_axis_term(nb.v[k], nb.right[k]);
    }
    acc_h += static_cast<double>(h);
    acc_w += static_cast<double>(w);
  }
  // A fixed block size fixes CUB's reduction tree, so the partials are the same bits every run.
  using BlockReduce = cub::BlockReduce<double, kRowThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const double total_h = BlockReduce(temp).Sum(acc_h);
  __syncthreads();  // temp is reused by the second sum
  const double total_w = BlockReduce(temp).Sum(acc_w);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = total_h;
    partials[gridDim.x + blockIdx.x] = total_w;
  }
}

/// grad = grad_out·∂level/∂planes for every element (added to grad when accumulating); each element
/// gathers from its own neighbours, so no two threads write one element and no atomics are needed.
template <RowMode M, class S>
__global__ void __launch_bounds__(kRowThreads)
    rows_gradient_kernel(PlaneRows r, const S* __restrict__ data, ReducePlan plan,
                         const compute_t<S>* __restrict__ grad_out, int64_t grad_slab_stride,
                         S* __restrict__ grad, bool accumulate) {
  using T = compute_t<S>;
  constexpr int kWidth = M == RowMode::Scalar ? 1 : 4;
  constexpr int kItems = kQuadsPerThread * 4 / kWidth;
  const int64_t n = r.numel();
  T coef[3];
  plan.coefficients(grad_out, 0, coef);  // coef[0]: H, coef[1]: W (level_rows_plan)
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t e = item_element<M>(i);
    if (e >= n) break;
    const RowPosition at = position_of(r, e);
    Neighbours<T> nb;
    load_neighbours<M, true>(r, data + at.slab * r.slab_stride + at.j, at, nb);
    T values[kWidth];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      values[k] = plane_tv_gradient(nb.v[k], nb.up[k], nb.down[k], nb.left[k], nb.right[k], coef[0],
                                    coef[1]);
    }
    S* g = grad + at.slab * grad_slab_stride + at.j;
    if constexpr (M == RowMode::Scalar) {
      write_gradient(g, values[0], accumulate);
    } else {
      auto* dst = reinterpret_cast<Quad<S>*>(g);
      Quad<S> out;  // read back only when accumulating
      if (accumulate) out = *dst;
#pragma unroll
      for (int k = 0; k < 4; ++k) write_gradient(out.v + k, values[k], accumulate);
      *dst = out;
    }
  }
}

/// The read mode for a level of S elements at `data` (and its gradient at `grad`, when given).
template <class S>
RowMode row_mode(const PlaneRows& r, const void* data, int64_t slab_stride_b = 0,
                 const void* grad = nullptr) {
  const auto aligned = [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % (4 * sizeof(S)) == 0;
  };
  // Slab strides are followed only between slabs; every level has 3T >= 3 of them.
  const bool quads = r.row_length % 4 == 0 && r.slab_stride % 4 == 0 && slab_stride_b % 4 == 0 &&
                     aligned(data) && (grad == nullptr || aligned(grad));
  if (!quads) return RowMode::Scalar;
  if (r.step == 1) return RowMode::QuadUnit;
  return r.step % 4 == 0 ? RowMode::QuadStep : RowMode::Scalar;
}

/// Calls `launch(kernel-mode tag)` for the mode chosen at run time.
template <class Launch>
void visit_mode(RowMode mode, const Launch& launch) {
  switch (mode) {
    case RowMode::QuadUnit:
      return launch(std::integral_constant<RowMode, RowMode::QuadUnit>{});
    case RowMode::QuadStep:
      return launch(std::integral_constant<RowMode, RowMode::QuadStep>{});
    case RowMode::Scalar:
      return launch(std::integral_constant<RowMode, RowMode::Scalar>{});
  }
}

int64_t row_blocks(const PlaneRows& r) { return cuda::ceil_div(r.numel(), kBlockElements); }

}  // namespace

bool rows_supported_cuda(const PlaneRows& rows) { return row_blocks(rows) <= cuda::kMaxGridX; }

std::size_t rows_forward_workspace_cuda(const PlaneRows& rows) {
  const std::size_t bytes = static_cast<std::size_t>(row_blocks(rows)) * 2 * sizeof(double);
  return bytes > 0 ? bytes : 1;
}

void rows_forward_cuda(const RowsForwardArgs& args) {
  cuda::ProfileRange range(args.op);
  cuda::DeviceGuard guard(args.device.index, args.op);
  const auto stream = static_cast<cudaStream_t>(args.stream.handle);
  auto* partials = static_cast<double*>(args.workspace);
  const int64_t blocks = row_blocks(args.rows);
  cuda::dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const auto* data = static_cast<const S*>(args.data);
    if (blocks > 0) {
      visit_mode(row_mode<S>(args.rows, data), [&](auto mode) {
        rows_reduce_kernel<decltype(mode)::value>
            <<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(args.rows, data, partials);
      });
      cuda::check_launch(args.op, "rows_reduce_kernel", stream);
    }
    // Also with no blocks: an empty level's term is written (0).
    finalize_kernel<<<1, kFinalThreads, 0, stream>>>(partials, blocks, args.plan,
                                                     static_cast<compute_t<S>*>(args.out), 0);
    cuda::check_launch(args.op, "finalize_kernel", stream);
  });
}

void rows_backward_cuda(const RowsBackwardArgs& args) {
  const int64_t blocks = row_blocks(args.rows);
  if (blocks == 0) return;
  cuda::ProfileRange range(args.op);
  cuda::DeviceGuard guard(args.device.index, args.op);
  const auto stream = static_cast<cudaStream_t>(args.stream.handle);
  cuda::dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const auto* data = static_cast<const S*>(args.data);
    auto* grad = static_cast<S*>(args.grad_data);
    const auto* grad_out = static_cast<const compute_t<S>*>(args.grad_out);
    visit_mode(row_mode<S>(args.rows, data, args.grad_slab_stride, grad), [&](auto mode) {
      rows_gradient_kernel<decltype(mode)::value>
          <<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(
              args.rows, data, args.plan, grad_out, args.grad_slab_stride, grad, args.accumulate);
    });
    cuda::check_launch(args.op, "rows_gradient_kernel", stream);
  });
}

}  // namespace fieldfuse::detail::tv
