// SPDX-License-Identifier: Apache-2.0
// The few CUDA runtime services the app uses: streams, device memory and copies, all checked.
#include "core/cuda_launch.cuh"
#include "cuda_memory.h"

namespace fieldfuse::cli::cuda_memory {
namespace {

constexpr const char* kOp = "fieldfuse::cli::cuda_memory";

std::string mebibytes(std::size_t bytes) {
  return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB";
}

// The core's check, with the call description built as a string (sizes in the message).
void check_cuda(cudaError_t status, const std::string& call) {
  fieldfuse::detail::cuda::check(status, kOp, call.c_str());
}

}  // namespace

void* create_stream(int device_index) {
  check_cuda(cudaSetDevice(device_index), "cudaSetDevice(" + std::to_string(device_index) + ")");
  cudaStream_t stream = nullptr;
  // Non-blocking: the app never relies on the legacy default stream's implicit synchronisation.
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags");
  return stream;
}

void destroy_stream(void* stream) noexcept {
  // Called from destructors, possibly while an error unwinds: report nothing, throw nothing.
  if (stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

void synchronize(void* stream) {
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

void* allocate(std::size_t bytes) {
  void* pointer = nullptr;
  check_cuda(cudaMalloc(&pointer, bytes), "cudaMalloc(" + mebibytes(bytes) + ")");
  return pointer;
}

void release(void* device_pointer) noexcept {
  if (device_pointer != nullptr) cudaFree(device_pointer);
}

void copy_host_to_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  check_cuda(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
      "cudaMemcpyAsync(host to device, " + mebibytes(bytes) + ")");
  // The host source may be a temporary; wait so it can go away safely.
  synchronize(stream);
}

void copy_device_to_host(void* dst, const void* src, std::size_t bytes, void* stream) {
  check_cuda(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)),
      "cudaMemcpyAsync(device to host, " + mebibytes(bytes) + ")");
  synchronize(stream);
}

void copy_device_to_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  check_cuda(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
      "cudaMemcpyAsync(device to device, " + mebibytes(bytes) + ")");
}

std::string device_name(int device_index) {
  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, device_index), "cudaGetDeviceProperties");
  return properties.name;
}

}  // namespace fieldfuse::cli::cuda_memory
