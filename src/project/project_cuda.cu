// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the project family. Forward: one thread per detector pixel, a block being eight
// warps on rows of 32 neighbouring pixels of one projection (32 rows, in four passes), the pose
// turned into geometry once per block. Back projection: a block is a 32 (x) × 8 (y) × 8 (z) voxel
// tile, a thread the eight y voxels of one (x, z); the geometry of 128 projections at a time is
// computed into shared memory, and for tilt series (Note [corner runs]) the row and column runs of
// a few projections at a time. Both run the routines of project_math.h; nothing uses atomics, so
// every result is deterministic.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "core/cuda_launch.cuh"
#include "project/project_drivers.h"
#include "project/project_math.h"

namespace fieldfuse::detail::project {
namespace {

constexpr int kWarp = 32;
/// Forward: eight rows of 32 pixels per block (a warp reads neighbouring voxels of a slice row).
constexpr int kRayRows = 8;
constexpr int kRayThreads = kWarp * kRayRows;
/// Forward: resident blocks per SM the register budget must allow (64 registers a thread). The
/// slice loop waits on four gathers per sample and needs about 40 registers, so warps in flight
/// should matter more than the ~100 bytes ptxas spills at this cap (sm_90), which the per-block
/// and per-pixel set-up around the loop can absorb. A guess to be measured against 3 (80).
constexpr int kRayMinBlocks = 4;
/// Forward: passes of kRayRows rows a block makes over one projection, so the pose is turned into
/// geometry (one thread, a few microseconds of float64 work while the block waits) once per
/// 32 × 32 pixels rather than per 32 × 8.
constexpr int kRayPasses = 4;
/// Back projection: a 32 (x) × 8 (y) × 8 (z) voxel tile per block, a warp per z, each thread the
/// eight y voxels of its x (Note [corner runs]: a row run serves a warp, a column run a thread's
/// eight voxels).
constexpr int kVoxelRows = 8;  ///< warps, one z each
constexpr int kTileRows = 8;   ///< y voxels of a thread
constexpr int kVoxelThreads = kWarp * kVoxelRows;
/// Back projection: resident blocks per SM (64 registers a thread; the shared memory, 31 KiB in
/// float32, 45 KiB in float64, allows 7 or 5).
constexpr int kVoxelMinBlocks = 4;
/// Poses per shared-memory chunk of the back projection, one per thread of the first quarter of
/// the block: the geometry costs a thread a few microseconds of float64 work while the block
/// waits, so it is built for many projections at once.
constexpr int kChunk = 64;
/// Rows of row values a block keeps per projection (Note [corner runs]): its 8 (z) × 8 (y) voxels
/// reach at most 7·(|cos| + |sin|)·1.25 + 3 < 16 detector rows in a `runs` projection (detectors
/// at most 1.25 times finer); a projection whose rows do not fit takes the direct sum.
constexpr int kWindowRows = 20;
/// Projections per chunk of corner runs and row values: as many as keep the block's static
/// shared memory (the chunk's geometry; per projection the runs of 8 × 8 rows and 32 columns,
/// the window's first row and size, and kWindowRows × 32 row values) under 46 KiB, at most one
/// per warp (a warp finds a projection's window): 8 in float32, 3 in float64.
template <class T, class I>
struct RunChunk {
  static constexpr int fit =
      static_cast<int>((46 * 1024 - sizeof(Geometry<T>) * kChunk) /
                       (sizeof(CornerRun<T, I>) * (kVoxelRows * kTileRows + kWarp) + sizeof(I) +
                        sizeof(int) + sizeof(T) * kWindowRows * kWarp));
  static constexpr int value = fit < kVoxelRows ? fit : kVoxelRows;
  static_assert(value >= 1, "no room for corner runs");
};

/// Sizes and strides of a 3-D view in the kernels' index type I.
template <class I>
struct Layout {
  I sizes[3];
  I strides[3];
};

template <class I>
Layout<I> layout_of(const Strided3& t) {
  Layout<I> l;
  for (int d = 0; d < 3; ++d) {
    l.sizes[d] = static_cast<I>(t.sizes[d]);
    l.strides[d] = static_cast<I>(t.strides[d]);
  }
  return l;
}

/// Whether every element offset of the view, and every size, fits int32: the kernels then index
/// in 32 bits, which is the fast path (a 64-bit multiply is several instructions).
bool fits_int32(const Strided3& t) {
  double reach = 0.0;
  for (int d = 0; d < 3; ++d) {
    if (t.sizes[d] > INT32_MAX) return false;
    if (t.sizes[d] > 0) {
      reach += static_cast<double>(t.sizes[d] - 1) * std::fabs(static_cast<double>(t.strides[d]));
    }
  }
  return reach <= static_cast<double>(INT32_MAX);
}

/// v[q] for an axis q known only at run time, without indexing an array dynamically (which would
/// put it in local memory).
template <class I>
__device__ FF_FORCE_INLINE I pick(const I (&v)[3], int q) {
  return q == 0 ? v[0] : (q == 1 ? v[1] : v[2]);
}

template <class T, class I>
__global__ void __launch_bounds__(kRayThreads, kRayMinBlocks)
    project_kernel(const __grid_constant__ ProjectArgs a, const Layout<I> vol, const Layout<I> out,
                   int64_t row_tiles, int64_t blocks) {
  __shared__ Geometry<T> shared;
  const T* __restrict__ volume = static_cast<const T*>(a.volume.data);
  T* __restrict__ projections = static_cast<T*>(a.projections.data);
  const int64_t height = a.height(), width = a.width();
  const bool empty_volume = vol.sizes[0] == 0 || vol.sizes[1] == 0 || vol.sizes[2] == 0;
  // Projections vary fastest across blocks: the blocks resident together cover nearby poses of one
  // detector patch, whose rays cross much the same voxels, so those stay in L2.
  for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const int64_t m = block % a.count, tile = block / a.count;
    if (!empty_volume) {  // uniform over the block
      __syncthreads();    // every thread is done with the previous block's geometry
      if (threadIdx.x == 0) {
        shared = make_geometry<T>(load_pose<T>(a, m), a.volume.sizes, height, width);
      }
      __syncthreads();
    }
    const int64_t j = (tile / row_tiles) * kWarp + threadIdx.x % kWarp;
    // The block's rows in kRayPasses passes of kRayRows, one geometry for all of them.
    for (int pass = 0; pass < kRayPasses; ++pass) {
      const int64_t i = ((tile % row_tiles) * kRayPasses + pass) * kRayRows + threadIdx.x / kWarp;
      if (i >= height || j >= width) continue;
      T value = T(0);  // an empty volume integrates to 0
      if (!empty_volume) {
        const Geometry<T> g = shared;  // in registers for the slice loop
        int b, c;
        in_slice_axes(g.axis, b, c);
        const I sa = pick(vol.strides, g.axis), sb = pick(vol.strides, b);
        const I sc = pick(vol.strides, c);
        value = ray_sum<T, I>(g, static_cast<I>(i), static_cast<I>(j),
                              slice_range(g, i, j, a.volume.sizes), pick(vol.sizes, b),
                              pick(vol.sizes, c), sa, sb, sc,
                              [&](I offset) { return __ldg(volume + offset); });
      }
      projections[static_cast<I>(m) * out.strides[0] + static_cast<I>(i) * out.strides[1] +
                  static_cast<I>(j) * out.strides[2]] = value;
    }
  }
}

/// The general back projection of one projection onto one voxel, out of line: the kernel calls it
/// for each of its eight voxels, and eight inlined copies of voxel_sum's loops would only grow the
/// code of a path that tilt series do not take.
template <class T, class I>
__device__ __noinline__ T general_voxel_sum(const Geometry<T>& g, I k, I ib, I ic, int64_t height,
                                            int64_t width, const T* p, I row_stride,
                                            I column_stride) {
  return voxel_sum<T, I>(g, k, ib, ic, height, width,
                         [&](I i, I j) { return __ldg(p + (i * row_stride + j * column_stride)); });
}

template <class T, class I>
__global__ void __launch_bounds__(kVoxelThreads, kVoxelMinBlocks)
    backproject_kernel(const __grid_constant__ ProjectArgs a, const Layout<I> vol,
                       const Layout<I> in, int64_t x_tiles, int64_t y_tiles, int64_t blocks) {
  constexpr int kRuns = RunChunk<T, I>::value;
  __shared__ Geometry<T> shared[kChunk];
  // Note [corner runs]: the row runs of the block's 8 × 8 (z, y) voxels and the column runs of its
  // 32 x voxels, then the window of rows those row runs reach, and its row values, for kRuns
  // projections at a time.
  __shared__ CornerRun<T, I> row_runs[kRuns][kVoxelRows][kTileRows];
  __shared__ CornerRun<T, I> column_runs[kRuns][kWarp];
  __shared__ I window_first[kRuns];
  __shared__ int window_rows[kRuns];  ///< 0: no row reached; > kWindowRows: no window, direct sums
  __shared__ T row_values[kRuns][kWindowRows][kWarp];
  const T* __restrict__ projections = static_cast<const T*>(a.projections.data);
  T* __restrict__ volume = static_cast<T*>(a.volume.data);
  const int64_t height = a.height(), width = a.width();
  // No pixel to spread (an empty detector): every voxel is 0, and no geometry is needed.
  const int64_t count = height == 0 || width == 0 ? 0 : a.count;
  const int lane = static_cast<int>(threadIdx.x) % kWarp,
            warp = static_cast<int>(threadIdx.x) / kWarp;
  // x tiles vary fastest: resident blocks cover neighbouring voxels, which read neighbouring
  // pixels of the same projection at about the same time.
  for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const int64_t x0 = (block % x_tiles) * kWarp;
    const int64_t rest = block / x_tiles;
    const int64_t y0 = (rest % y_tiles) * kTileRows;
    const int64_t z = (rest / y_tiles) * kVoxelRows + warp;
    const int64_t x = x0 + lane;
    const bool x_inside = x < vol.sizes[2];
    const bool z_inside = z < vol.sizes[0];  // uniform over the warp
    // The thread's y voxels inside the volume, as an int for cheap uniform tests.
    const int rows =
        vol.sizes[1] - y0 < kTileRows ? static_cast<int>(vol.sizes[1] - y0) : kTileRows;
    T total[kTileRows];
    for (int r = 0; r < kTileRows; ++r) total[r] = T(0);
    for (int64_t first = 0; first < count; first += kChunk) {
      const int chunk = count - first < kChunk ? static_cast<int>(count - first) : kChunk;
      __syncthreads();  // every thread is done with the previous chunk
      if (static_cast<int>(threadIdx.x) < chunk) {
        shared[threadIdx.x] =
            make_geometry<T>(load_pose<T>(a, first + threadIdx.x), a.volume.sizes, height, width);
      }
      for (int sub = 0; sub < chunk; sub += kRuns) {
        const int last = chunk - sub < kRuns ? chunk - sub : kRuns;
        __syncthreads();  // the geometry is written, the previous runs and row values are used
        // The runs of this sub-chunk's projections, shared out over the block's threads.
        for (int t = static_cast<int>(threadIdx.x); t < kRuns * (kVoxelRows * kTileRows + kWarp);
             t += kVoxelThreads) {
          const int e = t % kRuns, item = t / kRuns;
          if (e >= last) continue;
          const Geometry<T>& g = shared[sub + e];
          if (!g.runs) continue;
          if (item < kVoxelRows * kTileRows) {
            const int w = item / kTileRows, r = item % kTileRows;
            I k, ib, ic;
            along_axes<I>(g.axis, static_cast<I>((rest / y_tiles) * kVoxelRows + w),
                          static_cast<I>(y0 + r), I(0), k, ib, ic);
            row_runs[e][w][r] = row_run<T, I>(g, static_cast<T>(k), static_cast<T>(ib), height);
          } else {
            const int l = item - kVoxelRows * kTileRows;
            column_runs[e][l] = column_run<T, I>(g, static_cast<T>(x0 + l), width);
          }
        }
        __syncthreads();
        // Warp e finds the window of rows projection e's row runs reach (two runs a lane).
        if (warp < last && shared[sub + warp].runs) {
          const CornerRun<T, I>* runs = &row_runs[warp][0][0];
          I low = 0, high = 0;  // [low, high): rows reached; empty while low == high == 0
          bool any = false;
          for (int s = lane; s < kVoxelRows * kTileRows; s += kWarp) {
            const CornerRun<T, I> run = runs[s];
            if (run.count == 0) continue;
            low = any ? min(low, run.first) : run.first;
            high = any ? max(high, static_cast<I>(run.first + run.count)) : run.first + run.count;
            any = true;
          }
          for (int offset = kWarp / 2; offset > 0; offset /= 2) {
            const I other_low = __shfl_xor_sync(0xffffffffu, low, offset);
            const I other_high = __shfl_xor_sync(0xffffffffu, high, offset);
            const bool other_any = __shfl_xor_sync(0xffffffffu, any, offset);
            if (other_any) {
              low = any ? min(low, other_low) : other_low;
              high = any ? max(high, other_high) : other_high;
              any = true;
            }
          }
          if (lane == 0) {
            window_first[warp] = low;
            window_rows[warp] = any ? static_cast<int>(high - low) : 0;
          }
        }
        __syncthreads();
        // The row values of every window row and x voxel (Note [corner runs]).
        for (int t = static_cast<int>(threadIdx.x); t < kRuns * kWindowRows * kWarp;
             t += kVoxelThreads) {
          const int l = t % kWarp, row = (t / kWarp) % kWindowRows, e = t / (kWarp * kWindowRows);
          if (e >= last || !shared[sub + e].runs || row >= window_rows[e] ||
              window_rows[e] > kWindowRows || x0 + l >= vol.sizes[2]) {
            continue;
          }
          const T* p = projections + static_cast<I>(first + sub + e) * in.strides[0];
          row_values[e][row][l] = column_sum(
              column_runs[e][l], static_cast<I>(window_first[e] + row),
              [&](I i, I j) { return __ldg(p + (i * in.strides[1] + j * in.strides[2])); });
        }
        __syncthreads();
        if (!z_inside || !x_inside) continue;
        for (int e = 0; e < last; ++e) {  // projections in order m = 0 … n − 1
          const Geometry<T>& g = shared[sub + e];
          const T* p = projections + static_cast<I>(first + sub + e) * in.strides[0];
          if (g.runs) {  // uniform over the block: Note [tilt path]
            const T delta = g.delta;
            if (window_rows[e] <= kWindowRows) {
              const I origin = window_first[e];
              const auto row_value = [&](I i) { return row_values[e][i - origin][lane]; };
#pragma unroll
              for (int r = 0; r < kTileRows; ++r) {
                if (r < rows) total[r] += delta * row_sum(row_runs[e][warp][r], row_value);
              }
            } else {
              const CornerRun<T, I> columns = column_runs[e][lane];
              const auto load = [&](I i, I j) {
                return __ldg(p + (i * in.strides[1] + j * in.strides[2]));
              };
#pragma unroll
              for (int r = 0; r < kTileRows; ++r) {
                if (r < rows) total[r] += delta * run_sum(row_runs[e][warp][r], columns, load);
              }
            }
          } else {
#pragma unroll
            for (int r = 0; r < kTileRows; ++r) {
              if (r < rows) {
                I k, ib, ic;
                along_axes<I>(g.axis, static_cast<I>(z), static_cast<I>(y0 + r), static_cast<I>(x),
                              k, ib, ic);
                total[r] += general_voxel_sum<T, I>(g, k, ib, ic, height, width, p, in.strides[1],
                                                    in.strides[2]);
              }
            }
          }
        }
      }
    }
    if (z_inside && x_inside) {
#pragma unroll
      for (int r = 0; r < kTileRows; ++r) {
        if (r < rows) {
          volume[static_cast<I>(z) * vol.strides[0] + static_cast<I>(y0 + r) * vol.strides[1] +
                 static_cast<I>(x) * vol.strides[2]] = total[r];
        }
      }
    }
  }
}

/// Blocks to launch for `blocks` tiles: all of them up to CUDA's grid limit, the kernels' block
/// loops cover the rest.
unsigned grid_for(int64_t blocks) {
  return static_cast<unsigned>(blocks < cuda::kMaxGridX ? blocks : cuda::kMaxGridX);
}

/// Calls f(TypeTag<T>{}, TypeTag<I>{}) for the dtype and the narrowest index type that holds
/// every offset of both views.
template <class F>
void dispatch(const ProjectArgs& a, const F& f) {
  detail::dispatch_float_types(a.op, a.dtype, [&](auto tag) {
    // 32-bit indices also floor with full-rate instructions, which needs every volume size below
    // kFastFloorLimit (Note [integer floors]).
    const bool small = a.volume.sizes[0] < kFastFloorLimit && a.volume.sizes[1] < kFastFloorLimit &&
                       a.volume.sizes[2] < kFastFloorLimit;
    if (small && fits_int32(a.volume) && fits_int32(a.projections)) {
      f(tag, TypeTag<int32_t>{});
    } else {
      f(tag, TypeTag<int64_t>{});
    }
  });
}

}  // namespace

void project_forward_cuda(const ProjectArgs& a) {
  const int64_t height = a.height(), width = a.width();
  if (a.count == 0 || height == 0 || width == 0) return;
  cuda::ProfileRange range(a.op);
  cuda::DeviceGuard guard(a.device.index, a.op);
  const auto stream = static_cast<cudaStream_t>(a.stream.handle);
  const int64_t row_tiles = cuda::ceil_div(height, kRayRows * kRayPasses);
  const int64_t blocks = a.count * row_tiles * cuda::ceil_div(width, kWarp);
  dispatch(a, [&](auto type, auto index) {
    using T = typename decltype(type)::type;
    using I = typename decltype(index)::type;
    project_kernel<T, I><<<grid_for(blocks), kRayThreads, 0, stream>>>(
        a, layout_of<I>(a.volume), layout_of<I>(a.projections), row_tiles, blocks);
    cuda::check_launch(a.op, "project_kernel", stream);
  });
}

void backproject_forward_cuda(const ProjectArgs& a) {
  const Strided3& v = a.volume;
  if (v.sizes[0] == 0 || v.sizes[1] == 0 || v.sizes[2] == 0) return;
  cuda::ProfileRange range(a.op);
  cuda::DeviceGuard guard(a.device.index, a.op);
  const auto stream = static_cast<cudaStream_t>(a.stream.handle);
  const int64_t x_tiles = cuda::ceil_div(v.sizes[2], kWarp);
  const int64_t y_tiles = cuda::ceil_div(v.sizes[1], kTileRows);
  const int64_t blocks = cuda::ceil_div(v.sizes[0], kVoxelRows) * y_tiles * x_tiles;
  dispatch(a, [&](auto type, auto index) {
    using T = typename decltype(type)::type;
    using I = typename decltype(index)::type;
    backproject_kernel<T, I><<<grid_for(blocks), kVoxelThreads, 0, stream>>>(
        a, layout_of<I>(a.volume), layout_of<I>(a.projections), x_tiles, y_tiles, blocks);
    cuda::check_launch(a.op, "backproject_kernel", stream);
  });
}

}  // namespace fieldfuse::detail::project
