// SPDX-License-Identifier: Apache-2.0
// How the reconstruction runs its glue stages (kplanes_recon_math.h) and the memory it owns: a
// CPU loop or a CUDA kernel per stage, the loss reduction, and a small RAII buffer type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "fieldfuse/core.h"
#include "tomo/kplanes_recon_math.h"

namespace fieldfuse::detail::tomo {

// --- CUDA services (kplanes_recon_cuda.cu; only in builds with CUDA) -----------------------------

void* cuda_allocate(std::size_t bytes, int device);
void cuda_free(void* pointer) noexcept;
/// Asynchronous on `stream` (device to device, or from host memory that outlives the copy).
void cuda_copy_async(void* dst, const void* src, std::size_t bytes, Stream stream);
/// Returns once the bytes are on the host.
void cuda_copy_to_host(void* dst, const void* src, std::size_t bytes, Stream stream);
void cuda_copy_from_host(void* dst, const void* src, std::size_t bytes, Stream stream);
void cuda_zero_async(void* pointer, std::size_t bytes, Stream stream);
void cuda_synchronize(Stream stream);

/// Runs `stage(i)` for i in [0, count) on `stream`, one thread per index.
template <class Stage>
void cuda_for_each(int64_t count, const Stage& stage, Stream stream);

/// One block: the sums of accumulate_terms over items 0..items-1 in a fixed order, then
/// finish_loss.
template <class T>
void cuda_reduce_loss(const T* terms, int64_t items, const T* plane_tv, const LossWeights& weights,
                      double* scalars, T* loss, Stream stream);

void cuda_graph_destroy(void* graph, void* exec) noexcept;

/// A CUDA graph of the work enqueued on a stream between begin and end (never made on the CPU).
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph() {
#if FIELDFUSE_WITH_CUDA
    cuda_graph_destroy(graph_, exec_);
#endif
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void begin_capture(Stream stream);
  void end_capture(Stream stream);
  void launch(Stream stream);
  bool ready() const { return exec_ != nullptr; }

 private:
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};

// --- dispatch ------------------------------------------------------------------------------------

/// Runs a stage over [0, count) on the device: OpenMP on the CPU, a kernel on CUDA. `work` is
/// the rough cost of one index (parallel_for's threshold).
template <class Stage>
void for_each(Device device, int64_t count, int64_t work, const Stage& stage, Stream stream) {
  if (count <= 0) return;
  if (device.is_cuda()) {
#if FIELDFUSE_WITH_CUDA
    cuda_for_each(count, stage, stream);
#endif
    return;
  }
  (void)stream;  // CPU work runs to completion on the calling thread
  parallel_for(0, count, work, [&](int64_t i) { stage(i); });
}

template <class T>
void reduce_loss(Device device, const T* terms, int64_t items, const T* plane_tv,
                 const LossWeights& weights, double* scalars, T* loss, Stream stream) {
  if (device.is_cuda()) {
#if FIELDFUSE_WITH_CUDA
    cuda_reduce_loss(terms, items, plane_tv, weights, scalars, loss, stream);
#endif
    return;
  }
  (void)stream;
  double acc[kNumSums] = {0, 0, 0, 0};
  for (int64_t i = 0; i < items; ++i) accumulate_terms(terms, i, weights.rays, acc);
  finish_loss(acc, plane_tv, weights, scalars, loss);
}

// --- owned memory --------------------------------------------------------------------------------

/// Bytes on the host (8-byte aligned) or on a CUDA device, freed on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void zero(Stream stream);
  /// Copies `bytes()` from / to host memory (synchronous on the host side).
  void upload(const void* host, Stream stream);
  void download(void* host, Stream stream) const;

 private:
  void release() noexcept;
  Device device_{};
  std::size_t bytes_ = 0;
  void* data_ = nullptr;
  std::vector<double> host_;  ///< the storage of a CPU buffer
};

}  // namespace fieldfuse::detail::tomo
