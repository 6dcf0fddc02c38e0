// SPDX-License-Identifier: Apache-2.0
// Where the solver's arrays live (host or CUDA memory) and how its element-wise steps run there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fieldfuse/core.h"
#include "vector_ops.h"

namespace fieldfuse::cli {

/// Move-only owner of one allocation; `release` matches how it was allocated (host or device).
class Buffer {
 public:
  using ReleaseFn = void (*)(void*) noexcept;

  Buffer() = default;
  Buffer(void* data, std::size_t bytes, ReleaseFn release)
      : data_(data), bytes_(bytes), release_(release) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = other.data_;
      bytes_ = other.bytes_;
      release_ = other.release_;
      other.data_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (data_ != nullptr) release_(data_);
    data_ = nullptr;
  }

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  ReleaseFn release_ = nullptr;
};

enum class DeviceChoice { Auto, Cpu, Cuda };

class Backend {
 public:
  /// Auto picks CUDA when this build has it and fieldfuse::cuda_device_count() > 0. Asking for
  /// CUDA where it cannot run is a runtime CliError that says why.
  static Backend create(DeviceChoice choice);
  /// True when this binary was built with the CUDA path.
  static bool built_with_cuda();

  Backend(Backend&& other) noexcept;
  Backend& operator=(Backend&&) = delete;
  Backend(const Backend&) = delete;
  ~Backend();

  bool on_cuda() const { return device_.is_cuda(); }
  fieldfuse::Device device() const { return device_; }
  fieldfuse::Stream stream() const { return {launch_.stream}; }
  /// "cpu (2 threads)" or "cuda:0 (NVIDIA H100 80GB HBM3)", for the report.
  const std::string& description() const { return description_; }

  Buffer allocate(std::size_t bytes);
  Buffer allocate_floats(std::int64_t count) {
    return allocate(static_cast<std::size_t>(count) * sizeof(float));
  }
  void upload(void* dst, const void* host_src, std::size_t bytes);
  /// Returns once the bytes are on the host (waits for work queued before it).
  void download(void* host_dst, const void* src, std::size_t bytes);
  void copy(void* dst, const void* src, std::size_t bytes);
  void synchronize();

  /// Applies an element-wise step (vector_ops.h) and returns its sums.
  template <class Args>
  PairSum run(std::int64_t count, const Args& args) {
#if FIELDFUSE_APP_CUDA
    if (on_cuda()) return cuda::run(count, args, launch_);
#endif
    return cpu::run(count, args);
  }

  /// A contiguous [D, H, W] float32 view of `data` on this backend's device, for the TV calls.
  fieldfuse::TensorRef volume_ref(float* data, std::int64_t depth, std::int64_t height,
                                  std::int64_t width) const;
  /// A contiguous 1-D float32 view of `count` elements.
  fieldfuse::TensorRef vector_ref(float* data, std::int64_t count) const;

 private:
  Backend() = default;

  fieldfuse::Device device_{};
  std::string description_;
  CudaLaunch launch_;  // stream and reduction scratch; unused on the CPU
  Buffer partials_;
};

}  // namespace fieldfuse::cli
