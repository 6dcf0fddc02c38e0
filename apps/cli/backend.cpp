// SPDX-License-Identifier: Apache-2.0
// Where the solver's arrays live (host or CUDA memory) and how its element-wise steps run there.
#include "backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "cli_error.h"
#include "cuda_memory.h"

namespace fieldfuse::cli {
namespace {

void release_host(void* pointer) noexcept { std::free(pointer); }

#if FIELDFUSE_APP_CUDA
void release_device(void* pointer) noexcept { cuda_memory::release(pointer); }
#endif

}  // namespace

bool Backend::built_with_cuda() {
#if FIELDFUSE_APP_CUDA
  return true;
#else
  return false;
#endif
}

Backend Backend::create(DeviceChoice choice) {
  // --device cpu never touches the CUDA driver (whose start-up alone reserves gigabytes of
  // address space and takes a second).
  const bool cuda_usable =
      choice != DeviceChoice::Cpu && built_with_cuda() && fieldfuse::cuda_device_count() > 0;
  if (choice == DeviceChoice::Cuda && !built_with_cuda()) {
    throw runtime_error("--device cuda: this fieldfuse was built without CUDA support");
  }
  if (choice == DeviceChoice::Cuda && !cuda_usable) {
    throw runtime_error("--device cuda: no CUDA device is visible");
  }
  Backend backend;
  if (choice == DeviceChoice::Cpu || !cuda_usable) {
    const BuildInfo info = fieldfuse::build_info();
    const int threads = info.openmp ? info.openmp_max_threads : 1;
    backend.description_ =
        "cpu (" + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
    return backend;
  }
#if FIELDFUSE_APP_CUDA
  constexpr int kDeviceIndex = 0;  // the app drives one GPU; CUDA_VISIBLE_DEVICES picks which
  backend.device_ = fieldfuse::Device{fieldfuse::DeviceType::CUDA, kDeviceIndex};
  backend.launch_.stream = cuda_memory::create_stream(kDeviceIndex);
  backend.description_ =
      backend.device_.str() + " (" + cuda_memory::device_name(kDeviceIndex) + ")";
  backend.partials_ =
      backend.allocate(static_cast<std::size_t>(kMaxReductionBlocks) * sizeof(PairSum));
  backend.launch_.partials = static_cast<PairSum*>(backend.partials_.data());
#endif
  return backend;
}

Backend::Backend(Backend&& other) noexcept
    : device_(other.device_),
      description_(std::move(other.description_)),
      launch_(other.launch_),
      partials_(std::move(other.partials_)) {
  other.launch_ = CudaLaunch{};
}

Backend::~Backend() {
#if FIELDFUSE_APP_CUDA
  if (launch_.stream != nullptr) {
    partials_ = Buffer();  // free before the stream goes
    cuda_memory::destroy_stream(launch_.stream);
  }
#endif
}

Buffer Backend::allocate(std::size_t bytes) {
  // Zero-byte requests still get a distinct pointer, so callers need no special case.
  const std::size_t size = bytes == 0 ? 1 : bytes;
#if FIELDFUSE_APP_CUDA
  if (on_cuda()) return Buffer(cuda_memory::allocate(size), bytes, release_device);
#endif
  void* pointer = std::malloc(size);
  if (pointer == nullptr) {
    throw runtime_error("out of host memory allocating " + std::to_string(size >> 20) + " MiB");
  }
  return Buffer(pointer, bytes, release_host);
}

void Backend::upload(void* dst, const void* host_src, std::size_t bytes) {
#if FIELDFUSE_APP_CUDA
  if (on_cuda()) return cuda_memory::copy_host_to_device(dst, host_src, bytes, launch_.stream);
#endif
  std::memcpy(dst, host_src, bytes);
}

void Backend::download(void* host_dst, const void* src, std::size_t bytes) {
#if FIELDFUSE_APP_CUDA
  if (on_cuda()) return cuda_memory::copy_device_to_host(host_dst, src, bytes, launch_.stream);
#endif
  std::memcpy(host_dst, src, bytes);
}

void Backend::copy(void* dst, const void* src, std::size_t bytes) {
#if FIELDFUSE_APP_CUDA
  if (on_cuda()) return cuda_memory::copy_device_to_device(dst, src, bytes, launch_.stream);
#endif
  std::memcpy(dst, src, bytes);
}

void Backend::synchronize() {
#if FIELDFUSE_APP_CUDA
  if (on_cuda()) cuda_memory::synchronize(launch_.stream);
#endif
}

fieldfuse::TensorRef Backend::volume_ref(float* data, std::int64_t depth, std::int64_t height,
                                         std::int64_t width) const {
  return fieldfuse::TensorRef::contiguous(data, DType::Float32, device_, {depth, height, width});
}

fieldfuse::TensorRef Backend::vector_ref(float* data, std::int64_t count) const {
  return fieldfuse::TensorRef::contiguous(data, DType::Float32, device_, {count});
}

}  // namespace fieldfuse::cli
