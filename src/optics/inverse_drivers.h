// SPDX-License-Identifier: Apache-2.0
// The interface between the optics inverse/loss/forward-model fronts, which validate and carve the
// workspace, and the CPU and CUDA drivers, which run the pipelines of inverse_pipeline.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/macros.h"
#include "fieldfuse/core.h"

namespace fieldfuse::detail::optics {

/// One call's execution context: op name (for errors), real dtype, device and stream.
struct Exec {
  const char* op = "";
  DType dtype = DType::Float32;  ///< the real dtype (float32 or float64)
  Device device{};
  Stream stream{};
};

/// A strided read-only view of up to 4 dims [B, Z, Y, X] (elements; complex views count complex
/// elements). A missing dim has size 1 and stride 0; shared transfer functions have stride_b = 0.
struct View {
  const void* data = nullptr;
  int64_t strides[4] = {0, 0, 0, 0};
};

struct Shape {
  int64_t B = 0, Z = 0, Y = 0, X = 0;
  FF_HOST_DEVICE int64_t plane() const { return Y * X; }
};

struct FilterArgs {
  Exec exec;
  Shape shape;
  View absorption_tf, phase_tf;
  double regularization = 0;
  void* filter = nullptr;  ///< [B, 2, Z, Y, X] complex, contiguous
};

/// tikhonov_inverse (forward and backward). Workspace blocks are complex unless noted.
struct InverseArgs {
  Exec exec;
  Shape shape;
  View data, absorption_tf, phase_tf;
  double regularization = 0;
  bool normalize = true;
  // forward outputs [B, Y, X] (contiguous, real); backward: grads of the outputs (absent: null)
  void* absorption = nullptr;
  void* phase = nullptr;
  View grad_absorption, grad_phase;
  // backward outputs (null: not computed), contiguous
  void* grad_data = nullptr;           ///< [B, Z, Y, X] real
  void* grad_absorption_tf = nullptr;  ///< [B, Z, Y, X] or [1, Z, Y, X] (shared) complex
  void* grad_phase_tf = nullptr;
  bool shared_tf = false;
  // workspace
  void* spectra = nullptr;  ///< [B, Z, Y, X]
  void* outputs = nullptr;  ///< [B, 2, Y, X]
  double* sums = nullptr;   ///< [B, Z] per-slice sums
  double* sums2 = nullptr;  ///< [B, Z] backward: per-slice Σ g·x
};

struct Inverse3dArgs {
  Exec exec;
  Shape shape;  ///< data [B, Z, Y, X]; transfer function [Z, Y, X]
  View data, transfer_function, grad_out;
  double regularization = 0;
  void* out = nullptr;                     ///< forward: [B, Z, Y, X] real
  void* grad_data = nullptr;               ///< backward (null: not computed)
  void* grad_transfer_function = nullptr;  ///< backward (null: not computed), [Z, Y, X] complex
  void* spectra = nullptr;                 ///< [B, Z, Y, X]
  void* grad_spectra = nullptr;            ///< backward: [B, Z, Y, X]
};

struct MidbandArgs {
  Exec exec;
  Shape shape;  ///< images [B, Y, X] (Z = 1)
  View images, grad_out;
  double pixel_size = 0, low_squared = 0, high_squared = 0;
  int64_t mask_count = 0;
  void* out = nullptr;          ///< forward: [B] real
  void* grad_images = nullptr;  ///< backward: [B, Y, X] real
  void* spectra = nullptr;      ///< [B, Y, X]
  double* sums = nullptr;       ///< [B]
};

struct ForwardModelArgs {
  Exec exec;
  Shape shape;  ///< outputs [B, Z, Y, X]
  View absorption, phase, absorption_tf, phase_tf;
  double background = 0;
  void* data = nullptr;     ///< [B, Z, Y, X] real
  void* objects = nullptr;  ///< [B, 2, Y, X]
  void* spectra = nullptr;  ///< [B, Z, Y, X]
};

void run_cpu(const FilterArgs& a);
void run_cpu(const InverseArgs& a, bool backward);
void run_cpu(const Inverse3dArgs& a, bool backward);
void run_cpu(const MidbandArgs& a, bool backward);
void run_cpu(const ForwardModelArgs& a);

#if FIELDFUSE_WITH_CUDA
void run_cuda(const FilterArgs& a);
void run_cuda(const InverseArgs& a, bool backward);
void run_cuda(const Inverse3dArgs& a, bool backward);
void run_cuda(const MidbandArgs& a, bool backward);
void run_cuda(const ForwardModelArgs& a);
#endif

}  // namespace fieldfuse::detail::optics
