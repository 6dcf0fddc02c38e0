// SPDX-License-Identifier: Apache-2.0
// The thin transfer functions' driver interface: one validated call description that the CPU and
// CUDA drivers run through the same pipeline (optics/transfer_pipeline.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"
#include "fieldfuse/optics.h"

namespace fieldfuse::detail::optics {

/// A strided [B] or [B, Z] input, or a [.., Y, X]-shaped gradient, as the drivers read it.
struct StridedInput {
  const void* data = nullptr;
  int64_t strides[4] = {};
};

struct ThinCall {
  const char* op = "";
  MicroscopeSettings settings{};
  int factor = 1;
  int64_t B = 0, Z = 0, Y = 0, X = 0;
  DType real_dtype = DType::Float32;
  int device = 0;
  Stream stream{};
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;

  StridedInput z_positions, zenith, azimuth;  ///< [B, Z], [B], [B]

  // Forward: outputs [B, Z, Y, X] complex contiguous (both set), else backward.
  void* absorption = nullptr;
  void* phase = nullptr;

  // Backward: output gradients [B, Z, Y, X] complex, strided; input gradients (null: skip).
  StridedInput grad_absorption, grad_phase;
  void* grad_z = nullptr;
  void* grad_zenith = nullptr;
  void* grad_azimuth = nullptr;
  void* grad_na_illumination = nullptr;
  void* grad_na_detection = nullptr;

  bool forward() const { return absorption != nullptr; }
};

/// Bytes of the pipeline's buffers for `directions` first-order directions.
std::size_t thin_pipeline_bytes(int64_t B, int64_t Z, int64_t Yu, int64_t Xu, int directions,
                                std::size_t real_size);

void thin_transfer_cpu(const ThinCall& call);
void thin_transfer_cuda(const ThinCall& call);

}  // namespace fieldfuse::detail::optics
