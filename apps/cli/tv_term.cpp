// SPDX-License-Identifier: Apache-2.0
// The regulariser λ·TV(x) of the denoising objective, evaluated through the library's tv kernels.
#include "tv_term.h"

#include <cmath>
#include <limits>

#include "fieldfuse/tv.h"

namespace fieldfuse::cli {
namespace {

// ‖DᵀD‖ for forward differences along one axis is at most 4 (the second-difference stencil
// [−1, 2, −1]); three axes give 12.
constexpr double kDifferenceNormSquared = 12.0;

int scalar_count(TvKind kind) { return kind == TvKind::L1 ? 3 : 1; }

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
      corner_count_(depth > 1 && height > 1 && width > 1
                        ? static_cast<double>((depth - 1) * (height - 1) * (width - 1))
                        : 0.0) {
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

double TvTerm::value(float* x) {
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
      fieldfuse::tv_iso_3d_backward(volume(x), eps_, grad_out, volume(tv_gradient),
                                    backend_.stream());
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
      return 2.0 * lambda_ * kDifferenceNormSquared;
    case TvKind::Isotropic:
      // The Hessian of Σ sqrt(|Kx|² + eps) is at most KᵀK / sqrt(eps), with ‖KᵀK‖ <= 12.
      return lambda_ * kDifferenceNormSquared / std::sqrt(eps_);
    case TvKind::L1:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

}  // namespace fieldfuse::cli
