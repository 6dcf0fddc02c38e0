// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the layout copies: a tiled transpose through shared memory for layouts whose
// fastest direction is spatial (NCHW), and an element-per-thread copy for the rest.
#include <algorithm>
#include <cstdint>

#include "core/cuda_launch.cuh"
#include "core/layout_copy_drivers.h"

namespace fieldfuse::detail::layout {
namespace {

constexpr int kThreads = 256;
/// Elements one block stages per tile: 8 per thread, enough loads in flight per block to stream.
constexpr int kTileElems = 2048;
/// Widest channel slice of a tile; a warp's 32 lanes then write at least one full slice.
constexpr int kMaxTileChannels = 32;

// Note [transpose tiles]
// Per plane, the strided side is a [C, H·W] matrix read (or written) along its cells, and the
// dense side is the [H·W, C] matrix read (or written) along its channels. A tile holds
// tile_channels (TC, a power of two, the next one at or above C up to 32) channels of tile_cells
// (TS = kTileElems / TC, a multiple of 64) consecutive cells. The strided side is accessed with
// lane = cell, so a warp touches 32 consecutive cells of one channel: coalesced when cells are
// contiguous (NCHW). The dense side is accessed with lane = channel-minor linear index, so when
// the tile covers all C channels (C <= 32) the warp touches one contiguous run of the buffer; for
// C > 32 it writes runs of 32 channels (128 bytes for float32). Shared memory rows are TS + 32/TC
// elements apart: a dense-side warp reads TC channels of 32/TC cells, i.e. addresses
// c·(TS + 32/TC) + s, which fall on 32 distinct 4-byte banks since TS is a multiple of 32. That
// holds for 32-bit elements in tiles holding exactly TC channels; a C that is not a power of two
// (or the last 16 channels of C = 48) leaves 2- to 4-way conflicts, cheap next to DRAM traffic.
// A C above 32 that is a multiple of 16 but not of 32 (48, 80, ...) takes TC = 16, so every tile
// is full; full tiles split their linear index with shifts instead of two integer divisions per
// element, which had left the staging of the production config's planes (C = 48) at about half
// the copy bandwidth (H100: `kplanes` production forward 1.15× with NCHW planes, 2026-11-24).

struct TileShape {
  int64_t channel_tiles = 0, cell_tiles = 0;  ///< tiles per plane along C and along H·W
  int tile_channels = 0, tile_cells = 0, pitch = 0;
  int channels_log2 = 0, cells_log2 = 0;  ///< of tile_channels and tile_cells (powers of two)
  bool flat = false;                      ///< PlaneLayout::cell_offset without a division
};

int log2_of(int power_of_two) {
  int log2 = 0;
  while ((1 << log2) < power_of_two) ++log2;
  return log2;
}

TileShape tile_shape(const PlaneLayout& v) {
  TileShape t;
  t.tile_channels = 1;
  while (t.tile_channels < v.channels && t.tile_channels < kMaxTileChannels) t.tile_channels *= 2;
  if (v.channels > kMaxTileChannels && v.channels % kMaxTileChannels != 0 &&
      v.channels % (kMaxTileChannels / 2) == 0) {
    t.tile_channels = kMaxTileChannels / 2;  // full tiles (Note [transpose tiles])
  }
  t.tile_cells = kTileElems / t.tile_channels;
  t.channels_log2 = log2_of(t.tile_channels);
  t.cells_log2 = log2_of(t.tile_cells);
  t.pitch = t.tile_cells + kMaxTileChannels / t.tile_channels;
  t.channel_tiles = cuda::ceil_div(v.channels, t.tile_channels);
  t.cell_tiles = cuda::ceil_div(v.cells(), t.tile_cells);
  t.flat = v.rows_are_flat();
  return t;
}

/// i = major·inner + minor; by shifts when `inner` is the tile's full power-of-two extent.
__device__ FF_FORCE_INLINE void split(int i, int inner, int inner_log2, bool full, int& major,
                                      int& minor) {
  major = full ? i >> inner_log2 : i / inner;
  minor = i - major * inner;
}

/// Strided <-> dense transpose, one tile per block iteration (Note [transpose tiles]). `src` and
/// `dst` are the strided and dense sides in the order of the copy's direction.
template <bool kToChannelsLast, class S, class D, class Convert>
__global__ void __launch_bounds__(kThreads)
    transpose_kernel(PlaneLayout v, const S* __restrict__ src, D* __restrict__ dst, TileShape t,
                     int64_t num_tiles, Convert convert) {
  __shared__ D tile[kTileElems + kMaxTileChannels];  // TC rows of `pitch` elements
  const int64_t cells = v.cells(), channels = v.channels;
  const int64_t tiles_per_plane = t.channel_tiles * t.cell_tiles;
  for (int64_t b = blockIdx.x; b < num_tiles; b += gridDim.x) {
    const int64_t p = b / tiles_per_plane;
    const int64_t ct = (b - p * tiles_per_plane) / t.cell_tiles;
    const int64_t st = b - p * tiles_per_plane - ct * t.cell_tiles;
    const int64_t c0 = ct * t.tile_channels, s0 = st * t.tile_cells;
    const int nc = static_cast<int>(min(static_cast<int64_t>(t.tile_channels), channels - c0));
    const int ns = static_cast<int>(min(static_cast<int64_t>(t.tile_cells), cells - s0));
    const int n = nc * ns;
    const bool full_cells = ns == t.tile_cells, full_channels = nc == t.tile_channels;
    const int64_t strided_base = p * v.stride_p + c0 * v.stride_c;
    const int64_t dense_base = channels_last_index(p, c0, s0, cells, channels);
    if constexpr (kToChannelsLast) {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        int c, s;
        split(i, ns, t.cells_log2, full_cells, c, s);
        tile[c * t.pitch + s] =
            convert(src[strided_base + c * v.stride_c + v.cell_offset(s0 + s, t.flat)]);
      }
      __syncthreads();
      for (int i = threadIdx.x; i < n; i += kThreads) {
        int s, c;
        split(i, nc, t.channels_log2, full_channels, s, c);
        dst[dense_base + s * channels + c] = tile[c * t.pitch + s];
      }
    } else {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        int s, c;
        split(i, nc, t.channels_log2, full_channels, s, c);
        tile[c * t.pitch + s] = convert(src[dense_base + s * channels + c]);
      }
      __syncthreads();
      for (int i = threadIdx.x; i < n; i += kThreads) {
        int c, s;
        split(i, ns, t.cells_log2, full_cells, c, s);
        dst[strided_base + c * v.stride_c + v.cell_offset(s0 + s, t.flat)] = tile[c * t.pitch + s];
      }
    }
    __syncthreads();  // the next tile overwrites what this one's second loop reads
  }
}

/// One thread per dense element in dense order: coalesced on both sides when the strided side is
/// itself channels-innermost, and correct (if slower) for any other layout.
template <bool kToChannelsLast, class S, class D, class Convert>
__global__ void __launch_bounds__(kThreads)
    elementwise_kernel(PlaneLayout v, const S* __restrict__ src, D* __restrict__ dst, int64_t n,
                       bool flat, Convert convert) {
  const int64_t cells = v.cells();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t ps = i / v.channels, c = i - ps * v.channels;
    const int64_t p = ps / cells, s = ps - p * cells;
    const int64_t o = p * v.stride_p + c * v.stride_c + v.cell_offset(s, flat);
    if constexpr (kToChannelsLast) {
      dst[i] = convert(src[o]);
    } else {
      dst[o] = convert(src[i]);
    }
  }
}

/// The transpose pays off only when some spatial dim of the strided side is finer than its
/// channel stride; channels-innermost (or single-channel, or single-cell) layouts are already in
/// dense order along the lanes of the element-wise kernel.
bool wants_transpose(const PlaneLayout& v) {
  if (v.channels <= 1 || v.cells() <= 1) return false;
  int64_t finest_spatial = INT64_MAX;
  if (v.width > 1) finest_spatial = std::min(finest_spatial, v.stride_x);
  if (v.height > 1) finest_spatial = std::min(finest_spatial, v.stride_y);
  return finest_spatial < v.stride_c;
}

template <bool kToChannelsLast, class S, class D, class Convert>
void launch(const LayoutCopy& copy, cudaStream_t stream, Convert convert) {
  const PlaneLayout& v = copy.strided;
  const auto* src = static_cast<const S*>(kToChannelsLast ? copy.strided_data : copy.dense_data);
  auto* dst = static_cast<D*>(kToChannelsLast ? copy.dense_data : copy.strided_data);
  if (wants_transpose(v)) {
    const TileShape t = tile_shape(v);
    const int64_t num_tiles = v.planes * t.channel_tiles * t.cell_tiles;
    const auto grid = static_cast<unsigned>(std::min(num_tiles, cuda::kMaxGridX));
    transpose_kernel<kToChannelsLast, S, D>
        <<<grid, kThreads, 0, stream>>>(v, src, dst, t, num_tiles, convert);
    cuda::check_launch(copy.op, "transpose_kernel", stream);
  } else {
    const int64_t n = copy.numel();
    const auto grid = static_cast<unsigned>(std::min(cuda::ceil_div(n, kThreads), cuda::kMaxGridX));
    elementwise_kernel<kToChannelsLast, S, D>
        <<<grid, kThreads, 0, stream>>>(v, src, dst, n, v.rows_are_flat(), convert);
    cuda::check_launch(copy.op, "elementwise_kernel", stream);
  }
}

}  // namespace

void copy_cuda(const LayoutCopy& copy) {
  cuda::ProfileRange range(copy.to_channels_last ? "copy_to_channels_last"
                                                 : "copy_from_channels_last");
  cuda::DeviceGuard guard(copy.device.index, copy.op);
  const auto stream = static_cast<cudaStream_t>(copy.stream.handle);
  visit_copy_types(copy, [&](auto src_tag, auto dst_tag, auto convert) {
    using S = typename decltype(src_tag)::type;
    using D = typename decltype(dst_tag)::type;
    if (copy.to_channels_last) {
      launch<true, S, D>(copy, stream, convert);
    } else {
      launch<false, S, D>(copy, stream, convert);
    }
  });
}

int cuda_pointer_device(const void* ptr, const char* op) {
  cudaPointerAttributes attributes{};
  cuda::check(cudaPointerGetAttributes(&attributes, ptr), op, "cudaPointerGetAttributes");
  const bool on_device =
      attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  return on_device ? attributes.device : -1;
}

}  // namespace fieldfuse::detail::layout
