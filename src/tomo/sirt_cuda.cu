// SPDX-License-Identifier: Apache-2.0
// CUDA driver of SIRT's elementwise steps (tomo_math.h formulas, one thread per element in a
// grid-stride loop) and of its residual: a fixed grid of kResidualParts blocks, each reducing its
// grid-stride share in a fixed tree order, so the sum is deterministic.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_launch.cuh"
#include "tomo/tomo_cuda.cuh"
#include "tomo/tomo_drivers.h"
#include "tomo/tomo_math.h"

namespace fieldfuse::detail::tomo {
namespace {

cudaStream_t stream_of(const Exec& e) { return static_cast<cudaStream_t>(e.stream.handle); }

template <class T>
struct Fill {
  T* data;
  T value;
  __device__ void operator()(int64_t i) const { data[i] = value; }
};

template <class T>
struct Invert {
  T* data;
  __device__ void operator()(int64_t i) const { data[i] = reciprocal_or_zero(data[i]); }
};

template <class T>
struct Ratio {
  View3 b;
  T* stack;
  const T* inv_row;
  __device__ void operator()(int64_t i) const {
    const T measured = static_cast<const T*>(b.data)[strided_offset3(i, b.sizes, b.strides)];
    stack[i] = sirt_ratio(measured, stack[i], inv_row[i]);
  }
};

template <class T>
struct Update {
  T* x;
  const T* inv_col;
  const T* back;
  T relaxation;
  bool positivity;
  __device__ void operator()(int64_t i) const {
    x[i] = sirt_update(x[i], inv_col[i], back[i], relaxation, positivity);
  }
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    residual_kernel(View3 b, const T* projected, int64_t count, double* partials) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  const T* measured = static_cast<const T*>(b.data);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += kResidualParts * kThreads) {
    sum += residual_term(measured[strided_offset3(i, b.sizes, b.strides)],
                         projected == nullptr ? T(0) : projected[i]);
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

void fill(const Exec& e, void* data, int64_t count, double value) {
  cuda::DeviceGuard guard(e.device.index, e.op);
  detail::dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each(e.op, "sirt_fill", count, stream_of(e),
             Fill<T>{static_cast<T*>(data), static_cast<T>(value)});
  });
}

void invert(const Exec& e, void* data, int64_t count) {
  cuda::DeviceGuard guard(e.device.index, e.op);
  detail::dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each(e.op, "sirt_invert", count, stream_of(e), Invert<T>{static_cast<T*>(data)});
  });
}

void ratio(const Exec& e, const View3& b, void* stack, const void* inv_row) {
  cuda::DeviceGuard guard(e.device.index, e.op);
  detail::dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each(e.op, "sirt_ratio", b.sizes[0] * b.sizes[1] * b.sizes[2], stream_of(e),
             Ratio<T>{b, static_cast<T*>(stack), static_cast<const T*>(inv_row)});
  });
}

void update(const Exec& e, void* x, const void* inv_col, const void* back, int64_t count,
            double relaxation, bool positivity) {
  cuda::DeviceGuard guard(e.device.index, e.op);
  detail::dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each(e.op, "sirt_update", count, stream_of(e),
             Update<T>{static_cast<T*>(x), static_cast<const T*>(inv_col),
                       static_cast<const T*>(back), static_cast<T>(relaxation), positivity});
  });
}

double residual(const Exec& e, const View3& b, const void* projected, double* partials) {
  cuda::DeviceGuard guard(e.device.index, e.op);
  const cudaStream_t stream = stream_of(e);
  const int64_t count = b.sizes[0] * b.sizes[1] * b.sizes[2];
  if (count == 0) return 0.0;
  detail::dispatch_float_types(e.op, e.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    residual_kernel<T><<<static_cast<unsigned>(kResidualParts), kThreads, 0, stream>>>(
        b, static_cast<const T*>(projected), count, partials);
    cuda::check_launch(e.op, "sirt_residual", stream);
  });
  double host[kResidualParts];
  cuda::check(cudaMemcpyAsync(host, partials, sizeof(host), cudaMemcpyDeviceToHost, stream), e.op,
              "copying the residual to the host");
  cuda::check(cudaStreamSynchronize(stream), e.op, "waiting for the residual");
  return add_parts(host);
}

}  // namespace

SirtDriver sirt_driver_cuda() { return {fill, invert, ratio, update, residual}; }

}  // namespace fieldfuse::detail::tomo
