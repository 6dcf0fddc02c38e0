// SPDX-License-Identifier: Apache-2.0
// CUDA driver of optimize_tiles: the shared pipeline as kernels and cuFFT on the caller's stream,
// scratch from the stream-ordered allocator (freed in stream order too, so nothing synchronises).
#include <cuda_runtime.h>

#include "core/cuda_launch.cuh"
#include "core/dispatch.h"
#include "optics/exec_cuda.cuh"
#include "optics/tiles_drivers.h"
#include "optics/tiles_pipeline.h"

namespace fieldfuse::detail::optics {
namespace {

/// Device scratch for the call's scope, released with cudaFreeAsync on the same stream.
class StreamScratch {
 public:
  StreamScratch(const char* op, cudaStream_t stream) : op_(op), stream_(stream) {}
  ~StreamScratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  void* allocate(std::size_t bytes) {
    cuda::check(cudaMallocAsync(&data_, bytes, stream_), op_, "cudaMallocAsync of its scratch");
    return data_;
  }

 private:
  const char* op_;
  cudaStream_t stream_;
  void* data_ = nullptr;
};

}  // namespace

void optimize_tiles_cuda(const TilesCall& call) {
  cuda::DeviceGuard guard(call.device, call.op);
  dispatch_float_types(call.op, call.real_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CudaExec exec(call.op, call.stream);
    StreamScratch scratch(call.op, static_cast<cudaStream_t>(call.stream.handle));
    run_optimize_tiles<CudaExec, T>(exec, call,
                                    [&](std::size_t bytes) { return scratch.allocate(bytes); });
  });
}

}  // namespace fieldfuse::detail::optics
