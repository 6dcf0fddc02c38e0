// SPDX-License-Identifier: Apache-2.0
// The thick transfer function's driver interface: one validated call description that the CPU and
// CUDA drivers run through the same pipeline (optics/thick_pipeline.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"
#include "fieldfuse/optics.h"

namespace fieldfuse::detail::optics {

struct ThickCall {
  const char* op = "";
  MicroscopeSettings settings{};  ///< pixel_size is the transverse (yx) pixel size
  ThickGeometry geometry{};
  int z_factor = 1, yx_factor = 1;  ///< Nyquist upsampling factors
  DType real_dtype = DType::Float32;
  int device = 0;
  Stream stream{};
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* real_potential_tf = nullptr;  ///< [Zo, Y, X] complex, contiguous
  void* imag_potential_tf = nullptr;

  int64_t z_up() const { return geometry.Z * z_factor + 2 * geometry.z_padding; }
  int64_t z_out() const { return geometry.Z + 2 * geometry.z_padding; }
};

/// Bytes of the pipeline's buffers: the two [Zu, Yu, Xu] complex field stacks and I.
std::size_t thick_pipeline_bytes(int64_t Zu, int64_t Yu, int64_t Xu, std::size_t real_size);

void thick_transfer_cpu(const ThickCall& call);
void thick_transfer_cuda(const ThickCall& call);

}  // namespace fieldfuse::detail::optics
