// SPDX-License-Identifier: Apache-2.0
// Core vocabulary of the fieldfuse C++ API: tensor views, dtypes, devices, streams and errors.
//
// This header is plain C++17. It includes no CUDA, OpenMP or PyTorch header, so any C++ program can
// use the library; CUDA streams cross the API as opaque handles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace fieldfuse {

/// Element types a TensorRef can describe. Each op documents the subset it accepts.
/// Complex64 and Complex128 are interleaved (real, imaginary) pairs of float32 / float64, as in
/// PyTorch, NumPy, cuFFT and C++'s std::complex.
enum class DType : int32_t {
  Float16,
  BFloat16,
  Float32,
  Float64,
  Int32,
  Int64,
  UInt8,
  Bool,
  Complex64,
  Complex128
};

/// Size of one element in bytes.
std::size_t dtype_size(DType dtype);
/// Lower-case name as PyTorch spells it ("float32", "bfloat16", ...), for messages.
const char* dtype_name(DType dtype);

enum class DeviceType : int32_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int32_t index = 0;  ///< CUDA ordinal; 0 for CPU.

  bool is_cuda() const { return type == DeviceType::CUDA; }
  /// CPU devices are all the same device, whatever their index.
  bool operator==(const Device& other) const {
    return type == other.type && (type == DeviceType::CPU || index == other.index);
  }
  bool operator!=(const Device& other) const { return !(*this == other); }
  /// "cpu" or "cuda:N", as PyTorch prints devices.
  std::string str() const;
};

/// A CUDA stream (`cudaStream_t`) as an opaque handle. fieldfuse enqueues CUDA work on exactly
/// this stream and never synchronises it. Pass the stream your work is ordered on (PyTorch:
/// `torch.cuda.current_stream().cuda_stream`); a default-constructed Stream is CUDA's legacy
/// default stream, which is what the `= {}` defaults give CPU callers. Ignored for CPU tensors.
struct Stream {
  void* handle = nullptr;
};

/// Most dimensions a TensorRef can carry.
constexpr int kMaxDims = 8;

/// A non-owning view of a strided tensor in host or device memory. Sizes and strides are in
/// elements (not bytes), as in PyTorch and DLPack. The library never frees or resizes what a
/// TensorRef points to; callers allocate outputs and workspace (see each op's `*_workspace_size`).
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Device device{};
  int32_t ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  /// A view with row-major (contiguous) strides.
  static TensorRef contiguous(void* data, DType dtype, Device device,
                              std::initializer_list<int64_t> sizes);

  int64_t size(int dim) const { return sizes[dim < 0 ? dim + ndim : dim]; }
  int64_t stride(int dim) const { return strides[dim < 0 ? dim + ndim : dim]; }
  int64_t numel() const;
  bool is_contiguous() const;
  /// "[2, 3, 4]", for messages.
  std::string shape_str() const;
};

/// Which Python exception an Error becomes; C++ callers can branch on it.
enum class ErrorKind : int32_t {
  Value,           ///< wrong shape, value, size or device (ValueError)
  Type,            ///< wrong dtype or argument type (TypeError)
  NotImplemented,  ///< a valid combination this build or device does not support
  Runtime,         ///< a CUDA or system failure (RuntimeError)
};

/// The one exception type fieldfuse throws. Messages start with the op name, say what was expected
/// and what was given, e.g. "tv_sq_3d(): expected vol to have at least 3 dims [..., D, H, W], but
/// got shape [2, 5]".
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

/// Build facts, for `fieldfuse.build_info()` and `fieldfuse --version`.
struct BuildInfo {
  bool cuda = false;               ///< CUDA drivers compiled in.
  std::string cuda_architectures;  ///< e.g. "90"; empty without CUDA.
  bool openmp = false;
  int openmp_max_threads = 1;
  std::string version;
};
BuildInfo build_info();

/// Number of CUDA devices visible at run time (0 in a CPU-only build or on a machine without one).
int cuda_device_count();

}  // namespace fieldfuse
