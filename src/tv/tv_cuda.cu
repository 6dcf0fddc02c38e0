// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the TV family: z-marching tiles over the per-voxel math of tv_math.h, per-block
// partial sums in float64 and a fixed-order final reduction (deterministic, no atomics).
#include <cub/block/block_reduce.cuh>

#include "core/cuda_launch.cuh"
#include "core/neighborhood.h"
#include "tv/tv_drivers.h"

namespace fieldfuse::detail::tv {
namespace {

using cuda::compute_t;

// Note [z-marching tiles]
// A block owns a kTileH × kTileW patch of (h, w) columns of one slice and marches it through
// kChunkD depth planes. A warp spans 32 consecutive w, so every load of a plane row is one
// coalesced 128-byte line. Each voxel is read from DRAM once: its w and h neighbours are lines the
// same block loads in the same step (L1 hits), and its d neighbours are the planes the block loaded
// in the step before or will load in the step after (L1 hits again). The only L2 traffic beyond
// that is the halo row below the tile and the first plane of each chunk (1/kTileH and 1/kChunkD).
constexpr int kTileW = 32;
constexpr int kTileH = 8;
constexpr int kChunkD = 32;
constexpr int kBlockThreads = kTileW * kTileH;
// One block combines the per-block partials; 256 threads read them fully coalesced.
constexpr int kFinalThreads = 256;

struct TileGrid {
  int64_t tiles_w, tiles_h, chunks_d, batch;

  static TileGrid of(const VolumeView& v) {
    return {cuda::ceil_div(v.width, kTileW), cuda::ceil_div(v.height, kTileH),
            cuda::ceil_div(v.depth, kChunkD), v.batch};
  }
  __host__ __device__ int64_t blocks() const { return tiles_w * tiles_h * chunks_d * batch; }
};

/// The column a thread owns: slice n, depth range [a_begin, a_end), row b, column c.
struct Column {
  int64_t n, a_begin, a_end, b, c;
  bool inside;
};

__device__ FF_FORCE_INLINE Column column_of_thread(const TileGrid& grid, const VolumeView& v) {
  int64_t block = blockIdx.x;
  const int64_t tile_w = block % grid.tiles_w;
  block /= grid.tiles_w;
  const int64_t tile_h = block % grid.tiles_h;
  block /= grid.tiles_h;
  const int64_t chunk = block % grid.chunks_d;
  Column col;
  col.n = block / grid.chunks_d;
  col.b = tile_h * kTileH + threadIdx.y;
  col.c = tile_w * kTileW + threadIdx.x;
  col.a_begin = chunk * kChunkD;
  col.a_end = min(col.a_begin + kChunkD, v.depth);
  col.inside = col.b < v.height && col.c < v.width;
  return col;
}

/// Calls `visit(nb, bounds, a)` for each voxel of the thread's column, front to back.
template <class S, class Visit>
__device__ FF_FORCE_INLINE void march_column(const VolumeView& v, const S* data, const Column& col,
                                             const Visit& visit) {
  ClampedNeighborhood<compute_t<S>, S> nb;
  VoxelBounds at;
  clamped_offsets(col.b, v.height, v.stride_h, nb.off_h);
  clamped_offsets(col.c, v.width, v.stride_w, nb.off_w);
  at.has_prev_h = col.b > 0;
  at.has_next_h = col.b + 1 < v.height;
  at.has_prev_w = col.c > 0;
  at.has_next_w = col.c + 1 < v.width;
  const S* p = data + v.slice_offset(col.n) + col.a_begin * v.stride_d + col.b * v.stride_h +
               col.c * v.stride_w;
#pragma unroll 4
  for (int64_t a = col.a_begin; a < col.a_end; ++a, p += v.stride_d) {
    clamped_offsets(a, v.depth, v.stride_d, nb.off_d);
    at.has_prev_d = a > 0;
    at.has_next_d = a + 1 < v.depth;
    nb.center = p;
    visit(nb, at, a);
  }
}

/// Per-block partial sums of the functional's terms, written to partials[k * blocks + block].
template <class S, class Policy>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_kernel(VolumeView v, const S* __restrict__ data, Policy policy, TileGrid grid,
                  double* __restrict__ partials) {
  using T = compute_t<S>;
  constexpr int K = Policy::kSums;
  const Column col = column_of_thread(grid, v);
  double acc[K] = {};
  if (col.inside) {
    march_column(v, data, col, [&](const auto& nb, const VoxelBounds& at, int64_t) {
      T terms[K];
      policy.template accumulate<T>(nb, at, terms);
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += static_cast<double>(terms[k]);
    });
  }
  // A fixed block shape fixes CUB's reduction tree, so the partials are the same bits every run.
  using BlockReduce = cub::BlockReduce<double, kTileW, cub::BLOCK_REDUCE_WARP_REDUCTIONS, kTileH>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t blocks = grid.blocks();
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const double total = BlockReduce(temp).Sum(acc[k]);
    if (threadIdx.x == 0 && threadIdx.y == 0) partials[k * blocks + blockIdx.x] = total;
    __syncthreads();  // temp is reused by the next sum
  }
}

/// Combines the per-block partials in a fixed order and writes the op's outputs.
template <class Out>
__global__ void __launch_bounds__(kFinalThreads)
    finalize_kernel(const double* __restrict__ partials, int64_t blocks, ReducePlan plan,
                    Out* __restrict__ out, int64_t out_stride) {
  using BlockReduce = cub::BlockReduce<double, kFinalThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  double sums[3] = {};
  for (int k = 0; k < plan.num_sums; ++k) {
    double local = 0.0;
    for (int64_t i = threadIdx.x; i < blocks; i += kFinalThreads) local += partials[k * blocks + i];
    sums[k] = BlockReduce(temp).Sum(local);  // valid in thread 0
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    for (int k = 0; k < plan.num_outputs; ++k)
      out[k * out_stride] = static_cast<Out>(plan.output(sums, k));
  }
}

/// grad[voxel] = policy.gradient(voxel) with coefficients from grad_out, read on the device so the
/// backward needs no host synchronisation. Every voxel of grad is written.
template <class S, class Policy>
__global__ void __launch_bounds__(kBlockThreads)
    gradient_kernel(VolumeView v, const S* __restrict__ data, Policy policy, TileGrid grid,
                    ReducePlan plan, const compute_t<S>* __restrict__ grad_out,
                    int64_t grad_out_stride, VolumeView gv, S* __restrict__ grad) {
  using T = compute_t<S>;
  const Column col = column_of_thread(grid, v);
  if (!col.inside) return;
  T upstream[3] = {};
  for (int k = 0; k < plan.num_outputs; ++k) upstream[k] = grad_out[k * grad_out_stride];
  T coef[3] = {};
  for (int k = 0; k < plan.num_sums; ++k) coef[k] = plan.coefficient(upstream, k);
  S* g = grad + gv.slice_offset(col.n) + col.b * gv.stride_h + col.c * gv.stride_w;
  march_column(v, data, col, [&](const auto& nb, const VoxelBounds& at, int64_t a) {
    g[a * gv.stride_d] = static_cast<S>(policy.template gradient<T>(nb, at, coef));
  });
}

TileGrid checked_grid(const char* op, const VolumeView& v) {
  const TileGrid grid = TileGrid::of(v);
  if (grid.blocks() > cuda::kMaxGridX) {
    fail(ErrorKind::NotImplemented, op,
         "not implemented for volumes this large (" + std::to_string(v.numel()) +
             " voxels need more than 2^31 - 1 blocks)");
  }
  return grid;
}

}  // namespace

std::size_t forward_workspace_cuda(const VolumeView& vol, Functional functional) {
  const std::size_t bytes =
      static_cast<std::size_t>(TileGrid::of(vol).blocks()) * num_sums(functional) * sizeof(double);
  return bytes > 0 ? bytes : 1;
}

void forward_cuda(const ForwardArgs& args) {
  cuda::ProfileRange range(args.op);
  cuda::DeviceGuard guard(args.device.index, args.op);
  const auto stream = static_cast<cudaStream_t>(args.stream.handle);
  const TileGrid grid = checked_grid(args.op, args.vol);
  auto* partials = static_cast<double*>(args.workspace);
  cuda::dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    visit_functional(args.functional, args.eps, [&](const auto& policy) {
      if (grid.blocks() > 0) {
        reduce_kernel<<<static_cast<unsigned>(grid.blocks()), dim3(kTileW, kTileH), 0, stream>>>(
            args.vol, static_cast<const S*>(args.vol_data), policy, grid, partials);
        cuda::check_launch(args.op, "reduce_kernel", stream);
      }
    });
    finalize_kernel<<<1, kFinalThreads, 0, stream>>>(
        partials, grid.blocks(), args.plan, static_cast<compute_t<S>*>(args.out), args.out_stride);
    cuda::check_launch(args.op, "finalize_kernel", stream);
  });
}

void backward_cuda(const BackwardArgs& args) {
  if (args.vol.numel() == 0) return;
  cuda::ProfileRange range(args.op);
  cuda::DeviceGuard guard(args.device.index, args.op);
  const auto stream = static_cast<cudaStream_t>(args.stream.handle);
  const TileGrid grid = checked_grid(args.op, args.vol);
  cuda::dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    visit_functional(args.functional, args.eps, [&](const auto& policy) {
      gradient_kernel<<<static_cast<unsigned>(grid.blocks()), dim3(kTileW, kTileH), 0, stream>>>(
          args.vol, static_cast<const S*>(args.vol_data), policy, grid, args.plan,
          static_cast<const compute_t<S>*>(args.grad_out), args.grad_out_stride, args.grad,
          static_cast<S*>(args.grad_data));
      cuda::check_launch(args.op, "gradient_kernel", stream);
    });
  });
}

}  // namespace fieldfuse::detail::tv
