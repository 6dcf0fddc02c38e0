// SPDX-License-Identifier: Apache-2.0
// Plain-C++ declarations of the few CUDA runtime services the app uses (defined in cuda_memory.cu).
//
// Keeping cuda_runtime.h out of this header lets host-only files use the GPU path without CUDA
// include paths. Everything here exists only in builds with FIELDFUSE_APP_CUDA; every failure
// throws fieldfuse::Error (Runtime) naming the call.
#pragma once

#include <cstddef>
#include <string>

namespace fieldfuse::cli::cuda_memory {

/// Makes `device_index` current and returns a new non-blocking stream on it.
void* create_stream(int device_index);
void destroy_stream(void* stream) noexcept;
void synchronize(void* stream);

void* allocate(std::size_t bytes);
void release(void* device_pointer) noexcept;

void copy_host_to_device(void* dst, const void* src, std::size_t bytes, void* stream);
/// Returns once the bytes are on the host.
void copy_device_to_host(void* dst, const void* src, std::size_t bytes, void* stream);
void copy_device_to_device(void* dst, const void* src, std::size_t bytes, void* stream);

/// e.g. "NVIDIA H100 80GB HBM3".
std::string device_name(int device_index);

}  // namespace fieldfuse::cli::cuda_memory
