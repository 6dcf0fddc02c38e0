// SPDX-License-Identifier: Apache-2.0
// CUDA driver of the optics inverses, loss and forward model: inverse_pipeline.h over the family's
// CUDA policy (exec_cuda.cuh: grid-stride elementwise kernels, one-block-per-row ordered sums, the
// cached cuFFT plans), and the block-cooperative kernel of the closed-form filter.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_launch.cuh"
#include "optics/exec_cuda.cuh"
#include "optics/inverse_drivers.h"
#include "optics/inverse_pipeline.h"

namespace fieldfuse::detail::optics {
namespace {

constexpr int kThreads = 256;

// Note [filter block]
// tikhonov_filter reads M and writes G, 2·Z complex numbers each per frequency, and must run at
// memory speed. One thread per frequency holding its 2·Z values (to read M once) needs too many
// registers for Z ≈ 20; reading M twice costs a third more traffic. So a block of 256 threads
// takes 32 consecutive frequencies of one tile: warp g (of 8) loads slices g, g + 8, g + 16, g + 24
// (coalesced: a warp reads 32 consecutive frequencies of one slice), keeps them in registers, and
// adds their Gram terms; the 8 partial Grams meet in shared memory in a fixed order; then each
// warp writes G for its slices. Slices beyond 32 are read a second time.
//
// Each thread walks its slices from one base pointer by a fixed step (SliceWalk): indexing each
// slice through the view's 64-bit strides (ZLine) costs enough registers at 4 blocks per SM to
// spill, and measured 46 µs against 34 µs for the walk on an H100 (115 000 frequencies, Z = 21).
constexpr int kFilterFrequencies = 32, kFilterGroups = kThreads / kFilterFrequencies;
constexpr int kFilterCached = 4;  ///< slices per thread kept in registers (Z <= 32 read once)

/// Slices first, first + kFilterGroups, ... of a [B, Z, Y, X] view at one (tile, frequency).
template <class T>
struct SliceWalk {
  const Cx<T>* first;
  int64_t step;
  __device__ SliceWalk(const View& v, int64_t b, int64_t f, int64_t X, int group)
      : first(static_cast<const Cx<T>*>(v.data) + b * v.strides[0] + group * v.strides[1] +
              (f / X) * v.strides[2] + (f % X) * v.strides[3]),
        step(kFilterGroups * v.strides[1]) {}
  /// The k-th slice of this thread (slice group + k·kFilterGroups).
  __device__ Cx<T> operator[](int k) const { return first[k * step]; }
};

template <class T>
__global__ void __launch_bounds__(kThreads, 4)
    tikhonov_filter_kernel(View hu, View hp, Shape s, T lambda, Cx<T>* out) {
  __shared__ T partial[4][kFilterGroups][kFilterFrequencies];
  const int lane = threadIdx.x % kFilterFrequencies, group = threadIdx.x / kFilterFrequencies;
  const int64_t F = s.plane(), blocks_per_tile = (F + kFilterFrequencies - 1) / kFilterFrequencies;
  const int64_t b = blockIdx.x / blocks_per_tile;
  const int64_t f = (blockIdx.x - b * blocks_per_tile) * kFilterFrequencies + lane;
  const bool valid = f < F;
  // This thread's slices: group, group + 8, ... (none for a frequency past the end).
  const int slices = valid && group < s.Z
                         ? static_cast<int>((s.Z - group + kFilterGroups - 1) / kFilterGroups)
                         : 0;
  const SliceWalk<T> u(hu, b, valid ? f : 0, s.X, group), p(hp, b, valid ? f : 0, s.X, group);
  Cx<T> mu[kFilterCached], mp[kFilterCached];
  Gram<T> gram;
#pragma unroll
  for (int k = 0; k < kFilterCached; ++k) {
    if (k < slices) {
      mu[k] = u[k];
      mp[k] = p[k];
      gram.add(mu[k], mp[k]);
    }
  }
  for (int k = kFilterCached; k < slices; ++k) gram.add(u[k], p[k]);
  partial[0][group][lane] = gram.n00;
  partial[1][group][lane] = gram.n11;
  partial[2][group][lane] = gram.n01.re;
  partial[3][group][lane] = gram.n01.im;
  __syncthreads();
  Gram<T> total;
  for (int g = 0; g < kFilterGroups; ++g) {
    total.n00 += partial[0][g][lane];
    total.n11 += partial[1][g][lane];
    total.n01 = total.n01 + Cx<T>{partial[2][g][lane], partial[3][g][lane]};
  }
  if (!valid) return;
  const TikhonovInverse<T> inv(total, lambda);
  // G is [B, 2, Z, Y, X] contiguous: rows 0 and 1 of this thread's first slice, then a fixed step.
  Cx<T>* row0 = out + (2 * b * s.Z + group) * F + f;
  Cx<T>* row1 = row0 + s.Z * F;
  const int64_t out_step = kFilterGroups * F;
#pragma unroll
  for (int k = 0; k < kFilterCached; ++k) {
    if (k < slices) {
      row0[k * out_step] = inv.row0(mu[k], mp[k]);
      row1[k * out_step] = inv.row1(mu[k], mp[k]);
    }
  }
  for (int k = kFilterCached; k < slices; ++k) {
    const Cx<T> mu_k = u[k], mp_k = p[k];
    row0[k * out_step] = inv.row0(mu_k, mp_k);
    row1[k * out_step] = inv.row1(mu_k, mp_k);
  }
}

template <class Args, class Run>
void dispatch(const Args& a, const Run& run) {
  const Exec& x = a.exec;
  cuda::DeviceGuard guard(x.device.index, x.op);
  cuda::ProfileRange range(x.op);
  CudaExec e(x.op, x.stream);
  detail::dispatch_float_types(x.op, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run(e, T{});
  });
}

}  // namespace

void run_cuda(const FilterArgs& a) {
  dispatch(a, [&](CudaExec& e, auto t) {
    using T = decltype(t);
    const Shape& s = a.shape;
    const int64_t blocks = s.B * ((s.plane() + kFilterFrequencies - 1) / kFilterFrequencies);
    if (blocks == 0) return;
    if (blocks > cuda::kMaxGridX) {
      fail(ErrorKind::NotImplemented, e.op(),
           "not implemented for more than 2^31 - 1 blocks of 32 frequencies");
    }
    tikhonov_filter_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, e.native()>>>(
        a.absorption_tf, a.phase_tf, s, static_cast<T>(a.regularization),
        static_cast<Cx<T>*>(a.filter));
    cuda::check_launch(e.op(), "tikhonov_filter_kernel", e.native());
  });
}

void run_cuda(const InverseArgs& a, bool backward) {
  dispatch(a, [&](CudaExec& e, auto t) {
    if (backward) {
      run_inverse_backward<decltype(t)>(e, a);
    } else {
      run_inverse<decltype(t)>(e, a);
    }
  });
}

void run_cuda(const Inverse3dArgs& a, bool backward) {
  dispatch(a, [&](CudaExec& e, auto t) { run_inverse_3d<decltype(t)>(e, a, backward); });
}

void run_cuda(const MidbandArgs& a, bool backward) {
  dispatch(a, [&](CudaExec& e, auto t) { run_midband<decltype(t)>(e, a, backward); });
}

void run_cuda(const ForwardModelArgs& a) {
  dispatch(a, [&](CudaExec& e, auto t) { run_forward_model<decltype(t)>(e, a); });
}

}  // namespace fieldfuse::detail::optics
