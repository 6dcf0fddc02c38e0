// SPDX-License-Identifier: Apache-2.0
// The interface between the tomo fronts (sirt.cpp, fbp.cpp), which validate and run the loop, and
// the CPU and CUDA drivers of their elementwise steps and of FBP's filtering.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"
#include "fieldfuse/tomo.h"

namespace fieldfuse::detail::tomo {

/// A strided 3-D view: the measured stack b [n, Hd, Wd] as the caller passed it.
struct View3 {
  const void* data = nullptr;
  int64_t sizes[3] = {};
  int64_t strides[3] = {};
};

/// Where and in what type one call's elementwise work runs.
struct Exec {
  const char* op = "";
  DType dtype = DType::Float32;
  Device device{};
  Stream stream{};
};

/// Fixed number of partial sums of a residual reduction (one per CUDA block, one per contiguous
/// CPU chunk), added in order on the host: the result does not depend on the thread count.
constexpr int64_t kResidualParts = 256;

/// The kResidualParts partial sums (host memory) added in index order.
inline double add_parts(const double* parts) {
  double total = 0.0;
  for (int64_t p = 0; p < kResidualParts; ++p) total += parts[p];
  return total;
}

/// The SIRT steps over `count` elements of contiguous buffers (dtype e.dtype; the volume, the
/// sums and the stack in the workspace).
struct SirtDriver {
  void (*fill)(const Exec& e, void* data, int64_t count, double value);
  /// data[i] = reciprocal_or_zero(data[i]).
  void (*invert)(const Exec& e, void* data, int64_t count);
  /// stack[i] = sirt_ratio(b[i], stack[i], inv_row[i]) (b read through its strides).
  void (*ratio)(const Exec& e, const View3& b, void* stack, const void* inv_row);
  /// x[i] = sirt_update(x[i], inv_col[i], back[i], relaxation, positivity).
  void (*update)(const Exec& e, void* x, const void* inv_col, const void* back, int64_t count,
                 double relaxation, bool positivity);
  /// partials[p] = Σ residual_term(b[i], projected[i]) over part p (projected null: 0), then the
  /// kResidualParts partials are added in order; returns the sum. Synchronises on CUDA.
  double (*residual)(const Exec& e, const View3& b, const void* projected, double* partials);
};

SirtDriver sirt_driver_cpu();
#if FIELDFUSE_WITH_CUDA
SirtDriver sirt_driver_cuda();
#endif

/// One FBP filtering pass (float32): everything up to the back projection.
struct FbpFilterArgs {
  Exec exec;
  View3 projections;                ///< [n, Hd, Wd], float32
  const void* rotations = nullptr;  ///< [n, 3, 3], float32
  int64_t rotation_strides[3] = {};
  int64_t volume_sizes[3] = {};
  FbpFilter filter = FbpFilter::Ramp;
  int64_t padded = 2;  ///< N, the FFT length (fbp_padded_length)
  double* angles;      ///< [n] tilt angles (workspace)
  double* scales;      ///< [n] fbp_projection_scale per projection (workspace)
  float* kernel;       ///< [N + 2] the circular kernel, then its spectrum (workspace)
  float* response;     ///< [N/2 + 1] the windowed filter response (workspace)
  float* columns;      ///< [n·Wd, N + 2] the padded columns, filtered in place (workspace)
};

/// Row stride (floats) of the in-place real-to-complex layout of one padded column: N/2 + 1
/// complex values.
inline int64_t fbp_column_stride(int64_t padded) { return padded + 2; }

/// Fills args.columns[(m·Wd + j)·(N + 2) + i], i < Hd, with the filtered, weighted column (m, j).
void fbp_filter_cpu(const FbpFilterArgs& args);
#if FIELDFUSE_WITH_CUDA
void fbp_filter_cuda(const FbpFilterArgs& args);
#endif

}  // namespace fieldfuse::detail::tomo
