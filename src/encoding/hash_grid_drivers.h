// SPDX-License-Identifier: Apache-2.0
// The interface between the hash-grid front (hash_grid.cpp), which validates and lays out the
// problem, and the CPU and CUDA drivers, which only iterate, gather and scatter.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/macros.h"
#include "encoding/hash_grid_math.h"
#include "fieldfuse/core.h"

namespace fieldfuse::detail::hash_grid {

/// A strided `[rows, cols]` matrix (element strides); data null = absent (all zero).
struct MatrixView {
  const void* data = nullptr;
  int64_t stride_row = 0, stride_col = 0;
};

/// A validated problem: the points, the table and every level's geometry.
struct Problem {
  const char* op = "";
  DType dtype = DType::Float32;        ///< x, features, x-gradients: the compute type
  DType param_dtype = DType::Float32;  ///< params and their gradients
  Device device{};
  int dims = 3;      ///< D
  int features = 2;  ///< F
  int levels = 0;    ///< L
  bool smoothstep = false;
  int64_t batch = 0;  ///< B
  int64_t rows = 0;   ///< Σ_l rows_l
  MatrixView x;       ///< [B, D]
  MatrixView params;  ///< [rows, F]
  LevelInfo level[kMaxLevels];

  FF_HOST_DEVICE int64_t out_cols() const { return static_cast<int64_t>(levels) * features; }
};

/// Backward and double backward. Outputs are contiguous (null = not wanted); inputs strided.
struct GradArgs {
  Problem problem;
  MatrixView grad_out;            ///< [B, L·F], compute type
  MatrixView grad_grad_x;         ///< double backward seed [B, D], compute type (may be absent)
  MatrixView grad_grad_params;    ///< double backward seed [rows, F], params dtype (may be absent)
  void* grad_grad_out = nullptr;  ///< double backward output [B, L·F]
  void* grad_x = nullptr;         ///< [B, D]
  void* grad_params = nullptr;    ///< [rows, F]
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Stream stream{};
};

// CPU (hash_grid_cpu.cpp).
void forward_cpu(const Problem& pb, void* out);
void backward_cpu(const GradArgs& args);
void double_backward_cpu(const GradArgs& args);

// CUDA (hash_grid_cuda.cu).
#if FIELDFUSE_WITH_CUDA
std::size_t grad_workspace_cuda(const Problem& pb, bool wants_grad_params);
void forward_cuda(const Problem& pb, void* out, Stream stream);
void backward_cuda(const GradArgs& args);
void double_backward_cuda(const GradArgs& args);
#endif

}  // namespace fieldfuse::detail::hash_grid
