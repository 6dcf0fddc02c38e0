// SPDX-License-Identifier: Apache-2.0
// Argument checks, views and workspace carving shared by the optics inverse, loss and
// forward-model fronts (inverse.cpp, loss.cpp, forward_model.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"
#include "optics/inverse_drivers.h"

namespace fieldfuse::detail::optics {

/// A real input or output: storage, a device this build runs on, float32 or float64 (TypeError
/// otherwise), exactly `dims` dims named by `layout`.
void check_real(const char* op, const char* arg, const TensorRef& t, int dims, const char* layout);

/// `t` has dtype `real`, the dtype of `real_arg` (a second real tensor of the call).
void check_same_real(const char* op, const char* arg, const TensorRef& t, DType real,
                     const char* real_arg);

/// A complex tensor of `dims` dims whose dtype is the complex partner of `real` (complex64 for
/// float32, complex128 for float64), on `ref`'s device.
void check_complex(const char* op, const char* arg, const TensorRef& t, int dims,
                   const char* layout, DType real, const char* real_arg, const TensorRef& ref);

/// An output: contiguous, the expected shape, on `ref`'s device, no overlap with `ref`.
void check_output(const char* op, const char* arg, const TensorRef& t,
                  std::initializer_list<int64_t> shape, const char* layout, const char* ref_arg,
                  const TensorRef& ref);

/// λ finite and > 0.
void check_regularization(const char* op, double regularization);

/// The two 2-D transfer functions of a [B, Z, Y, X] call: [B, Z, Y, X] or [1, Z, Y, X] (shared),
/// complex partners of data's dtype, the same shape. Returns whether they are shared over B > 1.
bool check_transfer_pair(const char* op, const TensorRef& data, const char* data_arg, int64_t B,
                         int64_t Z, int64_t Y, int64_t X, const TensorRef& absorption_tf,
                         const TensorRef& phase_tf);

/// A View of `t` whose dims fill the slots `slots` of [B, Z, Y, X] (e.g. {0, 2, 3} for [B, Y, X]).
/// With `broadcast_batch`, a size-1 dim in slot 0 gets stride 0 (shared over B). Absent tensors
/// give an empty view (read as zeros where a driver allows it).
View view_of(const TensorRef& t, std::initializer_list<int> slots, bool broadcast_batch = false);

/// Cuts a workspace into blocks aligned to 256 bytes (null base: only counts the bytes).
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  void* take(std::size_t bytes);
  /// Bytes taken (>= 1, so callers need no special case for empty calls).
  std::size_t total() const { return at_ > 0 ? at_ : 1; }

 private:
  char* base_;
  std::size_t at_ = 0;
};

/// Bytes of one complex element for a real dtype (8 or 16).
std::size_t complex_size(DType real);

/// Runs the CPU or CUDA driver on the call's device.
template <class Args, class... Rest>
void run_on_device(const Args& a, Rest... rest) {
#if FIELDFUSE_WITH_CUDA
  if (a.exec.device.is_cuda()) {
    run_cuda(a, rest...);
    return;
  }
#endif
  run_cpu(a, rest...);
}

}  // namespace fieldfuse::detail::optics
