// SPDX-License-Identifier: Apache-2.0
// The regulariser λ·TV(x) of the denoising objective, evaluated through the library's tv kernels.
#pragma once

#include <cstdint>
#include <string>

#include "backend.h"

namespace fieldfuse::cli {

enum class TvKind {
  Squared,  ///< Σ squared forward differences (tv_sq_3d): smooth, blurs edges
  /// Σ_corners sqrt(Δd² + Δh² + Δw² + eps) (tv_iso_3d, sum form): smooth for eps > 0. Over the
  /// axes of size > 1 only: a [1, H, W] image gets Σ sqrt(Δh² + Δw² + eps) over its (H−1)(W−1)
  /// corners (Note [iso on size-1 axes] in tv_term.cpp).
  Isotropic,
  L1,  ///< Σ |Δd| + |Δh| + |Δw| (tv_l1_3d): anisotropic, non-smooth
};

/// "sq", "iso" or "l1": the --tv spelling.
const char* tv_kind_name(TvKind kind);

/// λ·TV over a [D, H, W] volume on `backend`'s device. Owns the workspace and the small scalar
/// buffers the kernels read and write there.
class TvTerm {
 public:
  /// `any_volume` is any [depth, height, width] array on the backend's device: the workspace
  /// queries validate a real tensor view but read no data.
  TvTerm(Backend& backend, TvKind kind, float* any_volume, std::int64_t depth, std::int64_t height,
         std::int64_t width, double lambda, double eps);

  /// λ·TV(x). Waits for the scalar to reach the host.
  double value(float* x);
  /// tv_gradient = λ·∇TV(x) (λ·Dᵀsign(Dx) with sign(0) = 0 for L1). Enqueued; does not wait.
  void gradient(float* x, float* tv_gradient);
  /// A Lipschitz constant of λ·∇TV, for the step size of the smooth kinds; infinite for L1.
  /// Counts only the axes of size > 1 (‖DᵀD‖ <= 4 per axis).
  double gradient_lipschitz() const;

 private:
  /// The view the library's TV calls get: the volume itself, or its replicated copy.
  fieldfuse::TensorRef volume(float* data) const;
  /// x, or its replicated copy (filled now) when the iso term needs one.
  float* library_input(float* x);

  Backend& backend_;
  TvKind kind_;
  // The shape the library sees: the volume's, or for iso with size-1 axes the replicated shape.
  std::int64_t depth_, height_, width_;
  bool replicated_ = false;
  ReplicaShape replica_{};
  Buffer replica_volume_;    // the replicated x, when replicated_
  Buffer replica_gradient_;  // the gradient on the replicated volume, folded back into x's shape
  double lambda_;
  double eps_;
  int difference_axes_;  // axes of size > 1
  // tv_iso_3d returns the mean over corners; the objective uses the sum, so scale by their count.
  double corner_count_ = 0.0;
  Buffer workspace_;
  Buffer out_;       // the forward's 1 or 3 scalars
  Buffer grad_out_;  // the backward's upstream gradient(s), set once: λ (times corner_count_)
};

}  // namespace fieldfuse::cli
