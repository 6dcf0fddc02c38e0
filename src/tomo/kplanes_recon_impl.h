// SPDX-License-Identifier: Apache-2.0
// The state of a KPlanesReconstruction (shared by its training, export and checkpoint files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fieldfuse/mlp.h"
#include "fieldfuse/tomo_kplanes.h"
#include "tomo/kplanes_recon_drivers.h"

namespace fieldfuse {

/// The op name every error of the reconstruction starts with (the Python entry's name).
constexpr const char* kKPlanesReconOp = "kplanes_reconstruct";

/// One learnable tensor, its gradient and its two Adam moments (all `numel` elements of the
/// compute dtype), with its logical shape and strides (planes are channels-last).
struct ReconParam {
  std::string name;
  std::vector<int64_t> sizes, strides;
  double lr = 0.0;
  bool trained = true;  ///< handed to Adam (pose tensors only with pose refinement)
  detail::tomo::Buffer value, grad, exp_avg, exp_avg_sq;

  int64_t numel() const;
  TensorRef view(const detail::tomo::Buffer& buffer, DType dtype) const;
  TensorRef flat(const detail::tomo::Buffer& buffer, DType dtype) const;
};

struct KPlanesReconstruction::Impl {
  KPlanesReconOptions options;
  Device device{};
  Stream stream{};
  DType dtype = DType::Float32;
  int64_t projections = 0, height = 0, width = 0;
  int64_t rays = 0, capacity = 0, taps = 0;  ///< R, S (padded samples per ray), N
  int64_t levels = 0, features = 0, decoder_layers = 0;
  int64_t total_iterations = 0, reference = 0, host_steps = 0;
  double ds = 0.0, h = 0.0, scale = 1.0;
  std::vector<double> angles;

  // Parameters, in Adam's order: planes.l, decoder.weight.k, decoder.bias.k, rotations, z1, z3,
  // shifts.
  std::vector<ReconParam> params;
  int64_t first_decoder = 0, rotations_index = 0, z1_index = 0, z3_index = 0, shifts_index = 0;

  detail::tomo::Buffer stack, tilt, step_counter;
  detail::tomo::Buffer pose, pose_dz1, pose_dz3, field_rotations, grad_field_rotations;
  detail::tomo::Buffer origins, directions, targets, points, delta_ts, valid, offsets, tap_points;
  detail::tomo::Buffer feature_rows, raw, rho, pred, terms, plane_tv, plane_tv_weights, scalars,
      loss_value;
  detail::tomo::Buffer grad_pred, grad_values, grad_delta_ts, grad_raw, grad_features, grad_points,
      grad_origins, grad_directions, pose_terms;
  detail::tomo::Buffer kplanes_forward_ws, kplanes_backward_ws, mlp_forward_ws, mlp_backward_ws,
      plane_tv_ws, adam_ws;
  std::size_t kplanes_forward_bytes = 0, kplanes_backward_bytes = 0, mlp_forward_bytes = 0,
              mlp_backward_bytes = 0, plane_tv_bytes = 0, adam_bytes = 0;
  detail::tomo::CudaGraph graph;
  bool graph_failed = false;

  MLPOptions mlp_options() const;
  TensorRef tensor(const detail::tomo::Buffer& buffer, std::initializer_list<int64_t> sizes,
                   DType type) const;
  TensorRef tensor(const detail::tomo::Buffer& buffer, std::initializer_list<int64_t> sizes) const {
    return tensor(buffer, sizes, dtype);
  }
  std::vector<TensorRef> plane_views(bool gradients) const;
  std::vector<TensorRef> decoder_views(bool biases, bool gradients) const;

  /// Forward, loss and backward of one step's draw; then the Adam update when `update`.
  void enqueue_step(bool update);
  template <class T>
  void enqueue_step_typed(bool update);
  void enqueue_adam();
};

}  // namespace fieldfuse
