// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the TV family: z-marching tiles over the per-voxel math of tv_math.h, per-block
// partial sums in float64 and a fixed-order final reduction (deterministic, no atomics).
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "core/neighborhood.h"
#include "tv/tv_cuda_common.cuh"
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
// 32 planes per block measured best across 512³ and 256³ on an H200 (16: more first-plane
// reloads; 64 and 128: too few blocks to fill the GPU at 256³).
constexpr int kChunkD = 32;
constexpr int kBlockThreads = kTileW * kTileH;

struct TileGrid {
  int64_t tiles_w, tiles_h, chunks_d, batch;

  /// Tiles of kTileW · voxels_per_thread columns (see Note [quad path]).
  static TileGrid of(const VolumeView& v, int voxels_per_thread = 1) {
    return {cuda::ceil_div(v.width, int64_t{kTileW} * voxels_per_thread),
            cuda::ceil_div(v.height, kTileH), cuda::ceil_div(v.depth, kChunkD), v.batch};
  }
  __host__ __device__ int64_t blocks() const { return tiles_w * tiles_h * chunks_d * batch; }
};

/// The column a thread owns: slice n, depth range [a_begin, a_end), row b, column c.
struct Column {
  int64_t n, a_begin, a_end, b, c;
  bool inside;
};

/// With voxels_per_thread = V, a thread owns the V consecutive columns starting at c.
template <int V = 1>
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
  col.c = (tile_w * kTileW + threadIdx.x) * V;
  col.a_begin = chunk * kChunkD;
  col.a_end = min(col.a_begin + kChunkD, v.depth);
  col.inside = col.b < v.height && col.c < v.width;
  return col;
}

/// One voxel's forward terms, returned by value so several voxels can be in flight at once.
template <class T, int K>
struct Terms {
  T value[K];
};

/// Calls `consume(a, j, compute(nb, bounds))` (j = 0) for each voxel of the thread's column. The
/// column is split into `Streams` contiguous runs walked in lock step: every iteration computes one
/// voxel of each run before consuming any, so a thread has `Streams` independent sets of loads in
/// flight (the stores of a backward never sit between them). See Note [z-marching tiles].
template <int Streams, class S, class Compute, class Consume>
__device__ FF_FORCE_INLINE void march_column(const VolumeView& v, const S* data, const Column& col,
                                             const Compute& compute, const Consume& consume) {
  ClampedNeighborhood<compute_t<S>, S> nb;
  VoxelBounds at;
  clamped_offsets(col.b, v.height, v.stride_h, nb.off_h);
  clamped_offsets(col.c, v.width, v.stride_w, nb.off_w);
  at.has_prev_h = col.b > 0;
  at.has_next_h = col.b + 1 < v.height;
  at.has_prev_w = col.c > 0;
  at.has_next_w = col.c + 1 < v.width;
  const S* column = data + v.slice_offset(col.n) + col.b * v.stride_h + col.c * v.stride_w;
  const int64_t steps = (col.a_end - col.a_begin + Streams - 1) / Streams;
  for (int64_t i = 0; i < steps; ++i) {
    using Result = decltype(compute(nb, at));
    Result results[Streams];
#pragma unroll
    for (int s = 0; s < Streams; ++s) {
      // A run past the chunk's end recomputes the chunk's last voxel (valid memory), unconsumed.
      const int64_t a = min(col.a_begin + s * steps + i, col.a_end - 1);
      auto nb_a = nb;
      auto at_a = at;
      clamped_offsets(a, v.depth, v.stride_d, nb_a.off_d);
      at_a.has_prev_d = a > 0;
      at_a.has_next_d = a + 1 < v.depth;
      nb_a.center = column + a * v.stride_d;
      results[s] = compute(nb_a, at_a);
    }
#pragma unroll
    for (int s = 0; s < Streams; ++s) {
      const int64_t a = col.a_begin + s * steps + i;
      if (a < col.a_end) consume(a, std::integral_constant<int, 0>{}, results[s]);
    }
  }
}

// Note [quad path]
// For the common dense layout (unit w stride, W and every other stride a multiple of 4, storage
// aligned to 4 elements) a thread owns 4 consecutive columns. It loads, for each of the 3×3 (d, h)
// neighbour rows, a window of 6 values [c−1, c+4] as one 4-element vector load plus two edge
// elements, and evaluates the same tv_math.h policies on each of its 4 voxels through
// QuadNeighborhood, which reads the windows at compile-time indices. Rows a policy never reads are
// dead loads the compiler drops. Against one voxel per thread this cuts load instructions about
// fourfold, which is what the per-voxel path is bound by (instruction issue, not DRAM bytes), and
// puts every row's loads in flight before any arithmetic.

template <class T>
struct QuadWindows {
  T v[3][3][6];  // [dd + 1][dh + 1][1 + w offset from c], w offsets −1..4
};

/// The Neighborhood of voxel c + J, read from the windows (see Note [clamped neighbours]).
template <int J, class T>
struct QuadNeighborhood {
  const QuadWindows<T>& windows;
  __device__ FF_FORCE_INLINE T operator()(int dd, int dh, int dw) const {
    return windows.v[dd + 1][dh + 1][J + 1 + dw];
  }
};

/// Loads the 3×3 windows around voxels (a, b, c..c+3). `left`/`right` are the offsets of the
/// elements before and after the quad, clamped at the volume's w faces.
template <class T, class S>
__device__ FF_FORCE_INLINE void load_windows(const S* center, const int64_t (&off_d)[3],
                                             const int64_t (&off_h)[3], int64_t left, int64_t right,
                                             QuadWindows<T>& w) {
#pragma unroll
  for (int i = 0; i < 3; ++i) {
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      const S* row = center + off_d[i] + off_h[j];
      const Quad<S> q = load_quad(row);
      w.v[i][j][0] = load_as<T>(row + left);
#pragma unroll
      for (int k = 0; k < 4; ++k) w.v[i][j][1 + k] = static_cast<T>(q.v[k]);
      w.v[i][j][5] = load_as<T>(row + right);
    }
  }
}

/// Calls `consume(a, j, compute(nb, bounds))`, j an integral_constant, for the 4 voxels j of each
/// depth step of the thread's quad column.
template <class S, class Compute, class Consume>
__device__ FF_FORCE_INLINE void march_quad(const VolumeView& v, const S* data, const Column& col,
                                           const Compute& compute, const Consume& consume) {
  using T = compute_t<S>;
  int64_t off_d[3], off_h[3];
  clamped_offsets(col.b, v.height, v.stride_h, off_h);
  const int64_t left = col.c > 0 ? -1 : 0;
  const int64_t right = col.c + 4 < v.width ? 4 : 3;
  VoxelBounds at[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    at[j].has_prev_h = col.b > 0;
    at[j].has_next_h = col.b + 1 < v.height;
    at[j].has_prev_w = col.c + j > 0;
    at[j].has_next_w = col.c + j + 1 < v.width;
  }
  const S* column = data + v.slice_offset(col.n) + col.b * v.stride_h + col.c;
  for (int64_t a = col.a_begin; a < col.a_end; ++a) {
    clamped_offsets(a, v.depth, v.stride_d, off_d);
    QuadWindows<T> windows;
    load_windows(column + a * v.stride_d, off_d, off_h, left, right, windows);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      at[j].has_prev_d = a > 0;
      at[j].has_next_d = a + 1 < v.depth;
    }
    consume(a, std::integral_constant<int, 0>{}, compute(QuadNeighborhood<0, T>{windows}, at[0]));
    consume(a, std::integral_constant<int, 1>{}, compute(QuadNeighborhood<1, T>{windows}, at[1]));
    consume(a, std::integral_constant<int, 2>{}, compute(QuadNeighborhood<2, T>{windows}, at[2]));
    consume(a, std::integral_constant<int, 3>{}, compute(QuadNeighborhood<3, T>{windows}, at[3]));
  }
}

/// Marches the thread's column with the per-voxel path (V = 1, `Streams` runs in lock step) or the
/// quad path (V = 4).
template <int V, int Streams, class S, class Compute, class Consume>
__device__ FF_FORCE_INLINE void march(const VolumeView& v, const S* data, const Column& col,
                                      const Compute& compute, const Consume& consume) {
  if constexpr (V == 4) {
    march_quad(v, data, col, compute, consume);
  } else {
    march_column<Streams>(v, data, col, compute, consume);
  }
}

/// Per-block partial sums of the functional's terms, written to partials[k * blocks + block].
template <int V, int Streams, class S, class Policy>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_kernel(VolumeView v, const S* __restrict__ data, Policy policy, TileGrid grid,
                  double* __restrict__ partials) {
  using T = compute_t<S>;
  constexpr int K = Policy::kSums;
  const Column col = column_of_thread<V>(grid, v);
  double acc[K] = {};
  Terms<T, K> quad_sum;
  if (col.inside) {
    march<V, Streams>(
        v, data, col,
        [&](const auto& nb, const VoxelBounds& at) {
          Terms<T, K> terms;
          policy.template accumulate<T>(nb, at, terms.value);
          return terms;
        },
        [&](int64_t, auto j, const Terms<T, K>& terms) {
    // The quad path adds its 4 voxels in T first: one float64 conversion and add per sum
    // and step instead of four (float64 throughput is a fraction of float32's).
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if constexpr (V == 4) {
              constexpr int J = decltype(j)::value;
              quad_sum.value[k] = J == 0 ? terms.value[k] : quad_sum.value[k] + terms.value[k];
              if constexpr (J == 3) acc[k] += static_cast<double>(quad_sum.value[k]);
            } else {
              acc[k] += static_cast<double>(terms.value[k]);
            }
          }
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

/// grad[voxel] = policy.gradient(voxel) with coefficients from grad_out, read on the device so the
/// backward needs no host synchronisation. Every voxel of grad is written.
template <int V, int Streams, class S, class Policy>
__global__ void __launch_bounds__(kBlockThreads)
    gradient_kernel(VolumeView v, const S* __restrict__ data, Policy policy, TileGrid grid,
                    ReducePlan plan, const compute_t<S>* __restrict__ grad_out,
                    int64_t grad_out_stride, VolumeView gv, S* __restrict__ grad, bool accumulate) {
  using T = compute_t<S>;
  const Column col = column_of_thread<V>(grid, v);
  if (!col.inside) return;
  T coef[3];
  plan.coefficients(grad_out, grad_out_stride, coef);
  S* g = grad + gv.slice_offset(col.n) + col.b * gv.stride_h + col.c * gv.stride_w;
  T quad[4];  // the quad path's 4 results, stored as one vector
  march<V, Streams>(
      v, data, col,
      [&](const auto& nb, const VoxelBounds& at) {
        return policy.template gradient<T>(nb, at, coef);
      },
      [&](int64_t a, auto j, T value) {
        if constexpr (V == 4) {
          constexpr int J = decltype(j)::value;
          quad[J] = value;
          if constexpr (J == 3) {
            auto* dst = reinterpret_cast<Quad<S>*>(g + a * gv.stride_d);
            Quad<S> out;  // read back only when accumulating
            if (accumulate) out = *dst;
#pragma unroll
            for (int k = 0; k < 4; ++k) write_gradient(out.v + k, quad[k], accumulate);
            *dst = out;
          }
        } else {
          write_gradient(g + a * gv.stride_d, value, accumulate);
        }
      });
}

/// Whether the quad path applies to a view of S elements at `data` (Note [quad path]). Strides of
/// size-1 dims are never followed, so they may be anything.
template <class S>
bool quad_eligible(const VolumeView& v, const void* data) {
  const auto aligned = [](int64_t size, int64_t stride) { return size == 1 || stride % 4 == 0; };
  bool ok = v.stride_w == 1 && v.width % 4 == 0 && aligned(v.height, v.stride_h) &&
            aligned(v.depth, v.stride_d) &&
            reinterpret_cast<std::uintptr_t>(data) % (4 * sizeof(S)) == 0;
  for (int i = 0; i < v.lead_ndim; ++i) ok = ok && v.lead_strides[i] % 4 == 0;
  return ok;
}

TileGrid checked_grid(const char* op, const VolumeView& v, int voxels_per_thread) {
  const TileGrid grid = TileGrid::of(v, voxels_per_thread);
  if (grid.blocks() > cuda::kMaxGridX) {
    fail(ErrorKind::NotImplemented, op,
         "not implemented for volumes this large (" + std::to_string(v.numel()) +
             " voxels need more than 2^31 - 1 blocks)");
  }
  return grid;
}

}  // namespace

// One partial per block of the per-voxel grid, the larger of the two grids (the quad path uses a
// prefix of it).
std::size_t forward_workspace_cuda(const VolumeView& vol, Functional functional) {
  const std::size_t bytes =
      static_cast<std::size_t>(TileGrid::of(vol).blocks()) * num_sums(functional) * sizeof(double);
  return bytes > 0 ? bytes : 1;
}

void forward_cuda(const ForwardArgs& args) {
  cuda::ProfileRange range(args.op);
  cuda::DeviceGuard guard(args.device.index, args.op);
  const auto stream = static_cast<cudaStream_t>(args.stream.handle);
  auto* partials = static_cast<double*>(args.workspace);
  cuda::dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const bool quad = quad_eligible<S>(args.vol, args.vol_data);
    const TileGrid grid = checked_grid(args.op, args.vol, quad ? 4 : 1);
    visit_functional(args.functional, args.eps, [&](const auto& policy) {
      if (grid.blocks() == 0) return;
      const dim3 block(kTileW, kTileH);
      const auto blocks = static_cast<unsigned>(grid.blocks());
      const auto* data = static_cast<const S*>(args.vol_data);
      if (quad) {
        reduce_kernel<4, 1><<<blocks, block, 0, stream>>>(args.vol, data, policy, grid, partials);
      } else {
        reduce_kernel<1, 1><<<blocks, block, 0, stream>>>(args.vol, data, policy, grid, partials);
      }
      cuda::check_launch(args.op, "reduce_kernel", stream);
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
  cuda::dispatch_float_types(args.op, args.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const bool quad =
        quad_eligible<S>(args.vol, args.vol_data) && quad_eligible<S>(args.grad, args.grad_data);
    const TileGrid grid = checked_grid(args.op, args.vol, quad ? 4 : 1);
    visit_functional(args.functional, args.eps, [&](const auto& policy) {
      const dim3 block(kTileW, kTileH);
      const auto blocks = static_cast<unsigned>(grid.blocks());
      const auto* data = static_cast<const S*>(args.vol_data);
      const auto* grad_out = static_cast<const compute_t<S>*>(args.grad_out);
      auto* grad = static_cast<S*>(args.grad_data);
      // Two lock-step runs per thread measured fastest for the per-voxel backward (more loads in
      // flight); its forward gains nothing from them.
      if (quad) {
        gradient_kernel<4, 1><<<blocks, block, 0, stream>>>(args.vol, data, policy, grid, args.plan,
                                                            grad_out, args.grad_out_stride,
                                                            args.grad, grad, args.accumulate);
      } else {
        gradient_kernel<1, 2><<<blocks, block, 0, stream>>>(args.vol, data, policy, grid, args.plan,
                                                            grad_out, args.grad_out_stride,
                                                            args.grad, grad, args.accumulate);
      }
      cuda::check_launch(args.op, "gradient_kernel", stream);
    });
  });
}

}  // namespace fieldfuse::detail::tv
