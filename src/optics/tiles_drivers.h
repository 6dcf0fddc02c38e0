// SPDX-License-Identifier: Apache-2.0
// optimize_tiles' driver interface: one validated call description that the CPU and CUDA drivers
// run through the same pipeline (optics/tiles_pipeline.h).
#pragma once

#include <cstdint>

#include "fieldfuse/core.h"
#include "fieldfuse/optics.h"
#include "optics/transfer_drivers.h"

namespace fieldfuse::detail::optics {

/// The three optimised parameters, in this order everywhere.
enum TileParameterIndex : int {
  kZOffset = 0,
  kZenith = 1,
  kAzimuth = 2,
  kNaIllumination = 3,
  kNaDetection = 4,
  kTileParameters = 5
};

struct TilesCall {
  const char* op = "optimize_tiles";
  MicroscopeSettings settings{};
  int factor = 1;
  double z_spacing = 0.0;
  int64_t B = 0, Z = 0, Y = 0, X = 0;
  DType real_dtype = DType::Float32;
  int device = 0;
  Stream stream{};
  TileOptimizerOptions options{};

  StridedInput tiles;  ///< [B, Z, Y, X]
  /// Per parameter: per-tile initial values ([B], stride in strides[0]) or null for `value`.
  StridedInput initial[kTileParameters];
  double initial_value[kTileParameters] = {};
  double learning_rate[kTileParameters] = {};

  void* parameters_out[kTileParameters] = {};  ///< [B] each (the apertures' may be null)
  void* loss_out = nullptr;                    ///< [B]
  void* iterations_out = nullptr;              ///< [B] int32
};

void optimize_tiles_cpu(const TilesCall& call);
void optimize_tiles_cuda(const TilesCall& call);

}  // namespace fieldfuse::detail::optics
