// SPDX-License-Identifier: Apache-2.0
// The thin transfer functions' front: validates every argument, sizes the workspace and picks the
// CPU or CUDA driver. All checks live here, so C++ and Python callers see the same messages.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "fieldfuse/optics.h"
#include "optics/optics_check.h"
#include "optics/transfer_drivers.h"
#include "optics/transfer_pipeline.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
using detail::optics::ThinCall;

constexpr const char* kForward = "thin_transfer_functions";
constexpr const char* kBackward = "thin_transfer_functions_backward";

/// Inputs [B, Z], [B], [B] of one real dtype on one device; returns B and Z.
void check_inputs(const char* op, const ThinTransferInputs& in, int64_t* B, int64_t* Z) {
  detail::check_storage(op, "z_positions", in.z_positions);
  detail::check_device_supported(op, "z_positions", in.z_positions);
  detail::optics::check_real_dtype(op, "z_positions", in.z_positions);
  detail::check_shape(op, "z_positions", in.z_positions, {-1, -1}, "[B, Z]");
  *B = in.z_positions.sizes[0];
  *Z = in.z_positions.sizes[1];
  const char* names[2] = {"zenith", "azimuth"};
  const TensorRef* tilts[2] = {&in.zenith, &in.azimuth};
  for (int i = 0; i < 2; ++i) {
    detail::check_storage(op, names[i], *tilts[i]);
    detail::check_same_device(op, names[i], *tilts[i], "z_positions", in.z_positions);
    detail::check_dtype(op, names[i], *tilts[i], in.z_positions.dtype, "the dtype of z_positions");
    detail::check_shape(op, names[i], *tilts[i], {*B}, "[B] (B from z_positions)");
  }
}

void check_transfer_tensor(const char* op, const char* arg, const TensorRef& t,
                           const TensorRef& z_positions, int64_t B, int64_t Z,
                           bool must_be_contiguous) {
  detail::check_storage(op, arg, t);
  detail::check_same_device(op, arg, t, "z_positions", z_positions);
  detail::check_dtype(op, arg, t, detail::optics::complex_partner(z_positions.dtype),
                      "the complex partner of z_positions' dtype");
  detail::check_shape(op, arg, t, {B, Z, -1, -1}, "[B, Z, Y, X]");
  if (must_be_contiguous) detail::check_contiguous(op, arg, t);
}

void check_grad(const char* op, const char* arg, const TensorRef& g, const TensorRef& like) {
  if (is_absent(g)) return;
  detail::check_storage(op, arg, g);
  detail::check_same_device(op, arg, g, "z_positions", like);
  detail::check_dtype(op, arg, g, like.dtype, "the dtype of z_positions");
  detail::check_contiguous(op, arg, g);
}

ThinCall make_call(const char* op, const MicroscopeSettings& settings, const ThinTransferInputs& in,
                   int64_t Y, int64_t X, void* workspace, std::size_t workspace_bytes,
                   Stream stream) {
  ThinCall call;
  call.op = op;
  call.settings = settings;
  call.factor = detail::optics::upsampling_factor(op, settings);
  call.B = in.z_positions.sizes[0];
  call.Z = in.z_positions.sizes[1];
  call.Y = Y;
  call.X = X;
  call.real_dtype = in.z_positions.dtype;
  call.device = in.z_positions.device.index;
  call.stream = stream;
  call.workspace = workspace;
  call.workspace_bytes = workspace_bytes;
  call.z_positions = {in.z_positions.data, {in.z_positions.strides[0], in.z_positions.strides[1]}};
  call.zenith = {in.zenith.data, {in.zenith.strides[0]}};
  call.azimuth = {in.azimuth.data, {in.azimuth.strides[0]}};
  return call;
}

void run(const ThinCall& call, const TensorRef& like) {
#if FIELDFUSE_WITH_CUDA
  if (like.device.is_cuda()) {
    detail::optics::thin_transfer_cuda(call);
    return;
  }
#endif
  (void)like;  // check_device_supported rejected CUDA tensors in a build without CUDA
  detail::optics::thin_transfer_cpu(call);
}

void check_sizes(const char* op, int64_t B, int64_t Z, int64_t Y, int64_t X) {
  if (B < 0 || Z < 0 || Y < 0 || X < 0) {
    fail(ErrorKind::Value, op,
         "expected non-negative sizes, but got B = " + std::to_string(B) + ", Z = " +
             std::to_string(Z) + ", Y = " + std::to_string(Y) + ", X = " + std::to_string(X));
  }
}

}  // namespace

namespace detail::optics {

int upsampling_factor(const char* op, const MicroscopeSettings& s) {
  check_microscope(op, s);
  const double nyquist = s.wavelength / (2.0 * (s.na_detection + s.na_illumination));
  const double factor = std::ceil(s.pixel_size / nyquist);
  if (!(factor <= 64.0)) {
    fail(ErrorKind::Value, op,
         "expected pixel_size / (wavelength / (2·(na_detection + na_illumination))) <= 64 (the "
         "upsampling factor of the thin model), but got " +
             detail::number_text(factor));
  }
  return factor < 1.0 ? 1 : static_cast<int>(factor);
}

}  // namespace detail::optics

int thin_upsampling_factor(const MicroscopeSettings& s) {
  return detail::optics::upsampling_factor("thin_upsampling_factor", s);
}

std::size_t thin_transfer_functions_workspace_size(const MicroscopeSettings& settings, int64_t B,
                                                   int64_t Z, int64_t Y, int64_t X, DType dtype) {
  check_sizes(kForward, B, Z, Y, X);
  const int f = detail::optics::upsampling_factor(kForward, settings);
  return detail::optics::thin_pipeline_bytes(B, Z, Y * f, X * f, 0, dtype_size(dtype));
}

std::size_t thin_transfer_functions_backward_workspace_size(const MicroscopeSettings& settings,
                                                            int64_t B, int64_t Z, int64_t Y,
                                                            int64_t X, DType dtype) {
  check_sizes(kBackward, B, Z, Y, X);
  const int f = detail::optics::upsampling_factor(kBackward, settings);
  return detail::optics::thin_pipeline_bytes(B, Z, Y * f, X * f, 5, dtype_size(dtype));
}

void thin_transfer_functions(const MicroscopeSettings& settings, const ThinTransferInputs& inputs,
                             const TensorRef& absorption_tf, const TensorRef& phase_tf,
                             void* workspace, std::size_t workspace_bytes, Stream stream) {
  detail::optics::check_microscope(kForward, settings);
  int64_t B = 0, Z = 0;
  check_inputs(kForward, inputs, &B, &Z);
  check_transfer_tensor(kForward, "absorption_tf", absorption_tf, inputs.z_positions, B, Z, true);
  check_transfer_tensor(kForward, "phase_tf", phase_tf, inputs.z_positions, B, Z, true);
  detail::check_same_shape(kForward, "phase_tf", phase_tf, "absorption_tf", absorption_tf);
  const int64_t Y = absorption_tf.sizes[2], X = absorption_tf.sizes[3];
  detail::check_workspace(
      kForward, workspace, workspace_bytes,
      thin_transfer_functions_workspace_size(settings, B, Z, Y, X, inputs.z_positions.dtype));
  ThinCall call = make_call(kForward, settings, inputs, Y, X, workspace, workspace_bytes, stream);
  call.absorption = absorption_tf.data;
  call.phase = phase_tf.data;
  run(call, inputs.z_positions);
}

void thin_transfer_functions_backward(const MicroscopeSettings& settings,
                                      const ThinTransferInputs& inputs,
                                      const TensorRef& grad_absorption_tf,
                                      const TensorRef& grad_phase_tf,
                                      const ThinTransferGrads& grads, void* workspace,
                                      std::size_t workspace_bytes, Stream stream) {
  detail::optics::check_microscope(kBackward, settings);
  int64_t B = 0, Z = 0;
  check_inputs(kBackward, inputs, &B, &Z);
  check_transfer_tensor(kBackward, "grad_absorption_tf", grad_absorption_tf, inputs.z_positions, B,
                        Z, false);
  check_transfer_tensor(kBackward, "grad_phase_tf", grad_phase_tf, inputs.z_positions, B, Z, false);
  detail::check_same_shape(kBackward, "grad_phase_tf", grad_phase_tf, "grad_absorption_tf",
                           grad_absorption_tf);
  const int64_t Y = grad_absorption_tf.sizes[2], X = grad_absorption_tf.sizes[3];
  check_grad(kBackward, "grads.z_positions", grads.z_positions, inputs.z_positions);
  if (!is_absent(grads.z_positions)) {
    detail::check_shape(kBackward, "grads.z_positions", grads.z_positions, {B, Z}, "[B, Z]");
  }
  const char* names[4] = {"grads.zenith", "grads.azimuth", "grads.na_illumination",
                          "grads.na_detection"};
  const TensorRef* per_tile[4] = {&grads.zenith, &grads.azimuth, &grads.na_illumination,
                                  &grads.na_detection};
  for (int i = 0; i < 4; ++i) {
    check_grad(kBackward, names[i], *per_tile[i], inputs.z_positions);
    if (!is_absent(*per_tile[i]))
      detail::check_shape(kBackward, names[i], *per_tile[i], {B}, "[B]");
  }
  detail::check_workspace(kBackward, workspace, workspace_bytes,
                          thin_transfer_functions_backward_workspace_size(
                              settings, B, Z, Y, X, inputs.z_positions.dtype));
  ThinCall call = make_call(kBackward, settings, inputs, Y, X, workspace, workspace_bytes, stream);
  for (int d = 0; d < 4; ++d) {
    call.grad_absorption.strides[d] = grad_absorption_tf.strides[d];
    call.grad_phase.strides[d] = grad_phase_tf.strides[d];
  }
  call.grad_absorption.data = grad_absorption_tf.data;
  call.grad_phase.data = grad_phase_tf.data;
  call.grad_z = grads.z_positions.data;
  call.grad_zenith = grads.zenith.data;
  call.grad_azimuth = grads.azimuth.data;
  call.grad_na_illumination = grads.na_illumination.data;
  call.grad_na_detection = grads.na_detection.data;
  run(call, inputs.z_positions);
}

namespace detail::optics {

std::size_t thin_pipeline_bytes(int64_t B, int64_t Z, int64_t Yu, int64_t Xu, int directions,
                                std::size_t real_size) {
  const std::size_t C = 1 + static_cast<std::size_t>(directions);
  const std::size_t planes = static_cast<std::size_t>(B * Z * Yu * Xu);
  return align_up(2 * real_size * 2 * C * planes) + align_up(real_size * B * C) +
         align_up(real_size * B * Z * static_cast<std::size_t>(directions)) + 1;
}

}  // namespace detail::optics
}  // namespace fieldfuse
