// SPDX-License-Identifier: Apache-2.0
// The regulariser λ·TV(x) of the denoising objective, evaluated through the library's tv kernels.
#include "tv_term.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fieldfuse/tv.h"

// Note [iso on size-1 axes]
// tv_iso_3d sums over corners (i, j, k) with i < D−1, j < H−1, k < W−1, so its public contract
// gives 0 as soon as any axis has size 1: a [1, H, W] image would "converge" at once, unchanged,
// while sq and l1 (sums per axis) denoise it. A 2-D image is a common input, so the app defines
// iso over the axes of size > 1: Σ over the corners of those axes of sqrt(Σ_axes Δ² + eps). The
// core op stays as it is; this term evaluates the definition through it by doubling every size-1
// axis: on the replicated volume the doubled axis has difference 0 everywhere and exactly one
// corner position, so tv_iso_3d's corners are the lower-dimensional ones with the same formula.
// The gradient with respect to the original voxels is the adjoint of the replication, the sum over
// each voxel's copies (FoldReplicasArgs). For a volume with no size-1 axis nothing changes.

namespace fieldfuse::cli {
namespace {

// ‖DᵀD‖ for forward differences along one axis is at most 4 (the second-difference stencil
// [−1, 2, −1]); axes of size 1 have no differences.
constexpr double kDifferenceNormSquaredPerAxis = 4.0;

int scalar_count(TvKind kind) { return kind == TvKind::L1 ? 3 : 1; }

int axes_with_differences(std::int64_t depth, std::int64_t height, std::int64_t width) {
  return (depth > 1) + (height > 1) + (width > 1);
}

}  // namespace

const char* tv_kind_name(TvKind kind) {
  switch (kind) {
    case TvKind::Squared:
      return "sq";
    case TvKind::Isotropic:
      return "iso";
    case TvKind::L1:
      break;
  }
  return "l1";
}

TvTerm::TvTerm(Backend& backend, TvKind kind, float* any_volume, std::int64_t depth,
               std::int64_t height, std::int64_t width, double lambda, double eps)
    : backend_(backend),
      kind_(kind),
      depth_(depth),
      height_(height),
      width_(width),
      lambda_(lambda),
      eps_(eps),
      difference_axes_(axes_with_differences(depth, height, width)) {
  if (kind_ == TvKind::Isotropic && difference_axes_ < 3) {
    replicated_ = true;
    replica_ = {depth,
                height,
                width,
                std::max<std::int64_t>(depth, 2),
                std::max<std::int64_t>(height, 2),
                std::max<std::int64_t>(width, 2)};
    depth_ = replica_.r_depth;
    height_ = replica_.r_height;
    width_ = replica_.r_width;
    replica_volume_ = backend_.allocate_floats(depth_ * height_ * width_);
    replica_gradient_ = backend_.allocate_floats(depth_ * height_ * width_);
    any_volume = replica_volume_.floats();
  }
  corner_count_ = static_cast<double>((depth_ - 1) * (height_ - 1) * (width_ - 1));
  const fieldfuse::TensorRef probe = volume(any_volume);
  std::size_t workspace_bytes = 1;
  switch (kind_) {
    case TvKind::Squared:
      workspace_bytes = fieldfuse::tv_sq_3d_workspace_size(probe);
      break;
    case TvKind::Isotropic:
      workspace_bytes = fieldfuse::tv_iso_3d_workspace_size(probe);
      break;
    case TvKind::L1:
      workspace_bytes = fieldfuse::tv_l1_3d_workspace_size(probe);
      break;
  }
  workspace_ = backend_.allocate(workspace_bytes);
  out_ = backend_.allocate_floats(scalar_count(kind_));
  grad_out_ = backend_.allocate_floats(scalar_count(kind_));
  const float upstream =
      static_cast<float>(kind_ == TvKind::Isotropic ? lambda_ * corner_count_ : lambda_);
  const float upstream_all[3] = {upstream, upstream, upstream};
  backend_.upload(grad_out_.data(), upstream_all, grad_out_.bytes());
}

fieldfuse::TensorRef TvTerm::volume(float* data) const {
  return backend_.volume_ref(data, depth_, height_, width_);
}

float* TvTerm::library_input(float* x) {
  if (!replicated_) return x;
  backend_.run(depth_ * height_ * width_, ReplicateArgs{x, replica_volume_.floats(), replica_});
  return replica_volume_.floats();
}

double TvTerm::value(float* x) {
  x = library_input(x);
  // A 1-D view of 1 or 3 elements: the library checks the element count, so it also serves as the
  // "0-d" output of tv_sq_3d and tv_iso_3d.
  const fieldfuse::TensorRef out = backend_.vector_ref(out_.floats(), scalar_count(kind_));
  switch (kind_) {
    case TvKind::Squared:
      fieldfuse::tv_sq_3d_forward(volume(x), out, workspace_.data(), workspace_.bytes(),
                                  backend_.stream());
      break;
    case TvKind::Isotropic:
      fieldfuse::tv_iso_3d_forward(volume(x), eps_, out, workspace_.data(), workspace_.bytes(),
                                   backend_.stream());
      break;
    case TvKind::L1:
      fieldfuse::tv_l1_3d_forward(volume(x), out, workspace_.data(), workspace_.bytes(),
                                  backend_.stream());
      break;
  }
  float scalars[3] = {};
  backend_.download(scalars, out_.data(), out_.bytes());
  double tv = 0.0;
  for (int i = 0; i < scalar_count(kind_); ++i) tv += scalars[i];
  return lambda_ * (kind_ == TvKind::Isotropic ? tv * corner_count_ : tv);
}

void TvTerm::gradient(float* x, float* tv_gradient) {
  const fieldfuse::TensorRef grad_out =
      backend_.vector_ref(grad_out_.floats(), scalar_count(kind_));
  switch (kind_) {
    case TvKind::Squared:
      fieldfuse::tv_sq_3d_backward(volume(x), grad_out, volume(tv_gradient), backend_.stream());
      break;
    case TvKind::Isotropic:
      if (replicated_) {
        fieldfuse::tv_iso_3d_backward(volume(library_input(x)), eps_, grad_out,
                                      volume(replica_gradient_.floats()), backend_.stream());
        backend_.run(replica_.depth * replica_.height * replica_.width,
                     FoldReplicasArgs{replica_gradient_.floats(), tv_gradient, replica_});
      } else {
        fieldfuse::tv_iso_3d_backward(volume(x), eps_, grad_out, volume(tv_gradient),
                                      backend_.stream());
      }
      break;
    case TvKind::L1:
      fieldfuse::tv_l1_3d_backward(volume(x), grad_out, volume(tv_gradient), backend_.stream());
      break;
  }
}

double TvTerm::gradient_lipschitz() const {
  switch (kind_) {
    case TvKind::Squared:
      // ∇(λ Σ(Dx)²) = 2λ DᵀD x.
      return 2.0 * lambda_ * kDifferenceNormSquaredPerAxis * difference_axes_;
    case TvKind::Isotropic:
      // The Hessian of Σ sqrt(|Kx|² + eps) is at most KᵀK / sqrt(eps), with ‖KᵀK‖ <= 4 per axis.
      return lambda_ * kDifferenceNormSquaredPerAxis * difference_axes_ / std::sqrt(eps_);
    case TvKind::L1:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace fieldfuse::cli
