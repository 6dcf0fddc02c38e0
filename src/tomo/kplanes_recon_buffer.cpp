// SPDX-License-Identifier: Apache-2.0
// The reconstruction's owned memory: host vectors on the CPU, cudaMalloc'd blocks on CUDA.
#include <cstring>
#include <utility>

#include "core/check.h"
#include "tomo/kplanes_recon_drivers.h"

namespace fieldfuse::detail::tomo {

Buffer::Buffer(Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
  if (device.is_cuda()) {
#if FIELDFUSE_WITH_CUDA
    // One byte at least, so every buffer has a distinct non-null address.
    data_ = cuda_allocate(bytes > 0 ? bytes : 1, device.index);
#else
    // The reconstruction's constructor rejects CUDA devices in a CPU-only build first.
    fail(ErrorKind::NotImplemented, "kplanes_reconstruct", "this build has no CUDA support");
#endif
  } else {
    host_.assign((bytes + sizeof(double) - 1) / sizeof(double) + 1, 0.0);
    data_ = host_.data();
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    bytes_ = other.bytes_;
    host_ = std::move(other.host_);
    data_ = device_.is_cuda() ? other.data_ : host_.data();
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() noexcept {
#if FIELDFUSE_WITH_CUDA
  if (device_.is_cuda() && data_ != nullptr) cuda_free(data_);
#endif
  data_ = nullptr;
  host_.clear();
}

void Buffer::zero(Stream stream) {
  if (bytes_ == 0) return;
#if FIELDFUSE_WITH_CUDA
  if (device_.is_cuda()) {
    cuda_zero_async(data_, bytes_, stream);
    return;
  }
#endif
  (void)stream;
  std::memset(data_, 0, bytes_);
}

void Buffer::upload(const void* host, Stream stream) {
  if (bytes_ == 0) return;
#if FIELDFUSE_WITH_CUDA
  if (device_.is_cuda()) {
    cuda_copy_from_host(data_, host, bytes_, stream);
    return;
  }
#endif
  (void)stream;
  std::memcpy(data_, host, bytes_);
}

void Buffer::download(void* host, Stream stream) const {
  if (bytes_ == 0) return;
#if FIELDFUSE_WITH_CUDA
  if (device_.is_cuda()) {
    cuda_copy_to_host(host, data_, bytes_, stream);
    return;
  }
#endif
  (void)stream;
  std::memcpy(host, data_, bytes_);
}

}  // namespace fieldfuse::detail::tomo
