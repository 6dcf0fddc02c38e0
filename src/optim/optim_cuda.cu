// SPDX-License-Identifier: Apache-2.0
// CUDA driver of adam_step: multi-tensor kernels over the chunks of every tensor (Note [adam
// chunks]). Three launches per call, all on the caller's stream and none reading host state that
// changes between calls, so a captured CUDA graph replays the step: per-chunk norm partials, one
// block that reduces them in a fixed order, advances the device step counter and stores the step's
// scalars, and the update, which reads those scalars from device memory.
#include <algorithm>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "core/cuda_launch.cuh"
#include "optim/optim_drivers.h"
#include "optim/optim_math.h"

namespace fieldfuse::detail::optim {
namespace {

constexpr int kBlockThreads = 256;
static_assert(kChunkElements % kBlockThreads == 0, "a chunk is whole rows of a block");
// A grid-stride loop over chunks beyond this many blocks: enough to fill any current GPU several
// times over, and each block's share stays a multiple of whole chunks.
constexpr int64_t kMaxBlocks = 16384;
// Tensors per launch. Their table travels by value in the kernel arguments (no host-to-device
// copy whose source a graph replay would read after it is gone); 48 entries keep it under
// 4 KiB, the parameter limit of every CUDA version we build with.
constexpr int kTensorsPerLaunch = 48;

/// Up to kTensorsPerLaunch non-empty tensors of one call, with their chunks numbered from
/// `chunk_base` (the call-wide number of this table's first chunk).
struct TensorTable {
  void* param[kTensorsPerLaunch];
  const void* grad[kTensorsPerLaunch];
  void* exp_avg[kTensorsPerLaunch];
  void* exp_avg_sq[kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  double lr[kTensorsPerLaunch];
  int64_t chunk_end[kTensorsPerLaunch];  ///< one past each tensor's last chunk, in this table
  int64_t chunk_base;
  int64_t chunks;
  int count;
};
static_assert(sizeof(TensorTable) <= 4000, "kernel parameters must stay under 4 KiB");

/// The tensor of table-local chunk c and the element range of that chunk in it.
struct ChunkRange {
  int tensor;
  int64_t begin, end;
};

__device__ FF_FORCE_INLINE ChunkRange locate(const TensorTable& table, int64_t c) {
  int tensor = 0;
  while (table.chunk_end[tensor] <= c) ++tensor;  // at most 48 uniform steps per chunk
  const int64_t first = tensor == 0 ? 0 : table.chunk_end[tensor - 1];
  const int64_t begin = (c - first) * kChunkElements;
  const int64_t end = min(begin + kChunkElements, table.numel[tensor]);
  return {tensor, begin, end};
}

using BlockSum = cub::BlockReduce<double, kBlockThreads>;

/// partials[chunk_base + c] = Σ grad² over chunk c, in float64. A fixed block shape fixes CUB's
/// reduction tree, so every partial is the same bits on every call.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    norm_kernel(const TensorTable table, double* __restrict__ partials) {
  __shared__ typename BlockSum::TempStorage temp;
  for (int64_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
    const ChunkRange r = locate(table, c);
    const T* grad = static_cast<const T*>(table.grad[r.tensor]);
    double sum = 0.0;
    for (int64_t i = r.begin + threadIdx.x; i < r.end; i += kBlockThreads) {
      const double g = static_cast<double>(grad[i]);
      sum += g * g;
    }
    const double total = BlockSum(temp).Sum(sum);
    if (threadIdx.x == 0) partials[table.chunk_base + c] = total;
    __syncthreads();  // temp is reused by the next chunk
  }
}

/// One block: norm = sqrt(Σ partials) in a fixed order, then the step's scalars from the device
/// counter t, and t ← t + 1. The update kernels run after this on the same stream, so they read
/// the scalars, never the counter.
__global__ void __launch_bounds__(kBlockThreads)
    finalize_kernel(const double* __restrict__ partials, int64_t chunks, AdamOptions options,
                    int64_t* __restrict__ step, void* grad_norm_out, bool norm_is_double,
                    StepScalars* __restrict__ scalars) {
  __shared__ typename BlockSum::TempStorage temp;
  double local = 0.0;
  for (int64_t i = threadIdx.x; i < chunks; i += kBlockThreads) local += partials[i];
  const double total = BlockSum(temp).Sum(local);
  if (threadIdx.x != 0) return;
  const double norm = sqrt(total);
  if (grad_norm_out != nullptr) {
    if (norm_is_double) {
      *static_cast<double*>(grad_norm_out) = norm;
    } else {
      *static_cast<float*>(grad_norm_out) = static_cast<float>(norm);
    }
  }
  const int64_t t = *step;
  *scalars = step_scalars(t, norm, options.beta1, options.beta2, options.max_grad_norm,
                          options.total_steps);
  *step = t + 1;
}

template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    update_kernel(const TensorTable table, AdamOptions options,
                  const StepScalars* __restrict__ scalars) {
  const StepScalars s = *scalars;
  for (int64_t c = blockIdx.x; c < table.chunks; c += gridDim.x) {
    const ChunkRange r = locate(table, c);
    const AdamCoefficients<T> k = adam_coefficients<T>(
        s, table.lr[r.tensor], options.beta1, options.beta2, options.eps, options.weight_decay);
    const T* __restrict__ grad = static_cast<const T*>(table.grad[r.tensor]);
    T* __restrict__ param = static_cast<T*>(table.param[r.tensor]);
    T* __restrict__ exp_avg = static_cast<T*>(table.exp_avg[r.tensor]);
    T* __restrict__ exp_avg_sq = static_cast<T*>(table.exp_avg_sq[r.tensor]);
#pragma unroll 4
    for (int64_t i = r.begin + threadIdx.x; i < r.end; i += kBlockThreads) {
      T p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
      adam_update(k, grad[i], p, m, v);
      param[i] = p;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
    }
  }
}

/// Calls f(table) for the call's non-empty tensors, kTensorsPerLaunch at a time, chunks
/// numbered call-wide (empty tensors have none).
template <class F>
void for_each_table(const AdamCall& call, F&& f) {
  TensorTable table{};
  int64_t chunk_base = 0;
  auto flush = [&] {
    if (table.count == 0) return;
    table.chunk_base = chunk_base;
    table.chunks = table.chunk_end[table.count - 1];
    f(table);
    chunk_base += table.chunks;
    table.count = 0;
  };
  for (int i = 0; i < call.count; ++i) {
    const AdamParam& p = call.params[i];
    const int64_t numel = p.param.numel();
    if (numel == 0) continue;
    const int j = table.count++;
    table.param[j] = p.param.data;
    table.grad[j] = p.grad.data;
    table.exp_avg[j] = p.exp_avg.data;
    table.exp_avg_sq[j] = p.exp_avg_sq.data;
    table.numel[j] = numel;
    table.lr[j] = p.lr;
    table.chunk_end[j] = (j == 0 ? 0 : table.chunk_end[j - 1]) + chunk_count(numel);
    if (table.count == kTensorsPerLaunch) flush();
  }
  flush();
}

template <class T>
void run(const AdamCall& call, cudaStream_t stream) {
  double* partials = call.workspace + kScalarSlots;
  auto* scalars = reinterpret_cast<StepScalars*>(call.workspace);
  static_assert(sizeof(StepScalars) <= kScalarSlots * sizeof(double), "scalar slots too small");
  const auto grid = [](int64_t chunks) {
    return static_cast<unsigned>(std::min(chunks, kMaxBlocks));
  };
  if (call.needs_norm) {
    for_each_table(call, [&](const TensorTable& table) {
      norm_kernel<T><<<grid(table.chunks), kBlockThreads, 0, stream>>>(table, partials);
      cuda::check_launch(call.op, "norm_kernel", stream);
    });
  }
  finalize_kernel<<<1, kBlockThreads, 0, stream>>>(partials, call.needs_norm ? call.chunks : 0,
                                                   call.options, call.step, call.grad_norm_out,
                                                   call.grad_norm_dtype == DType::Float64, scalars);
  cuda::check_launch(call.op, "finalize_kernel", stream);
  for_each_table(call, [&](const TensorTable& table) {
    update_kernel<T>
        <<<grid(table.chunks), kBlockThreads, 0, stream>>>(table, call.options, scalars);
    cuda::check_launch(call.op, "update_kernel", stream);
  });
}

}  // namespace

void adam_step_cuda(const AdamCall& call) {
  cuda::DeviceGuard guard(call.device.index, call.op);
  cuda::ProfileRange range(call.op);
  const auto stream = static_cast<cudaStream_t>(call.stream.handle);
  detail::dispatch_float_types(call.op, call.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run<T>(call, stream);
  });
}

}  // namespace fieldfuse::detail::optim
