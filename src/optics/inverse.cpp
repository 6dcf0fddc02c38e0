// SPDX-License-Identifier: Apache-2.0
// The Tikhonov inverse fronts (include/fieldfuse/optics.h): tikhonov_filter, tikhonov_inverse and
// tikhonov_inverse_3d with their adjoints validate here, carve the workspace and run the drivers.
#include <cstdint>

#include "core/check.h"
#include "fieldfuse/optics.h"
#include "optics/inverse_check.h"
#include "optics/inverse_drivers.h"

namespace fieldfuse {
namespace {

using detail::is_absent;
using detail::optics::Carver;
using detail::optics::complex_size;
using detail::optics::view_of;
namespace opt = detail::optics;

constexpr const char* kData4 = "[B, Z, Y, X]";
constexpr const char* kPlanes = "[B, Y, X]";

opt::Shape shape4(const TensorRef& t) {
  if (t.ndim != 4) return {};
  return {t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3]};
}

/// The 2-D inverse's workspace: X̂ [B, Z, Y, X], Ŷ [B, 2, Y, X], two [B, Z] double sums.
std::size_t carve_inverse(const opt::Shape& s, DType dtype, void* base, opt::InverseArgs& a) {
  Carver c(base);
  const std::size_t cs = complex_size(dtype);
  a.spectra = c.take(s.B * s.Z * s.plane() * cs);
  a.outputs = c.take(s.B * 2 * s.plane() * cs);
  a.sums = static_cast<double*>(c.take(s.B * s.Z * sizeof(double)));
  a.sums2 = static_cast<double*>(c.take(s.B * s.Z * sizeof(double)));
  return c.total();
}

std::size_t carve_inverse_3d(const opt::Shape& s, DType dtype, bool backward, void* base,
                             opt::Inverse3dArgs& a) {
  Carver c(base);
  const std::size_t bytes = s.B * s.Z * s.plane() * complex_size(dtype);
  a.spectra = c.take(bytes);
  if (backward) a.grad_spectra = c.take(bytes);
  return c.total();
}

/// The checks tikhonov_inverse and its backward share; returns the validated call.
opt::InverseArgs inverse_args(const char* op, const TensorRef& data, const TensorRef& absorption_tf,
                              const TensorRef& phase_tf, double regularization, bool normalize,
                              Stream stream) {
  opt::check_real(op, "data", data, 4, kData4);
  const opt::Shape s = shape4(data);
  opt::InverseArgs a;
  a.shared_tf =
      opt::check_transfer_pair(op, data, "data", s.B, s.Z, s.Y, s.X, absorption_tf, phase_tf);
  opt::check_regularization(op, regularization);
  a.exec = {op, data.dtype, data.device, stream};
  a.shape = s;
  a.data = view_of(data, {0, 1, 2, 3});
  a.absorption_tf = view_of(absorption_tf, {0, 1, 2, 3}, true);
  a.phase_tf = view_of(phase_tf, {0, 1, 2, 3}, true);
  a.regularization = regularization;
  a.normalize = normalize;
  return a;
}

void check_real_output(const char* op, const char* arg, const TensorRef& t,
                       std::initializer_list<int64_t> shape, const char* layout,
                       const TensorRef& data) {
  opt::check_real(op, arg, t, static_cast<int>(shape.size()), layout);
  opt::check_same_real(op, arg, t, data.dtype, "data");
  opt::check_output(op, arg, t, shape, layout, "data", data);
}

}  // namespace

void tikhonov_filter(const TensorRef& absorption_tf, const TensorRef& phase_tf,
                     double regularization, const TensorRef& filter, Stream stream) {
  const char* op = "tikhonov_filter";
  detail::check_storage(op, "absorption_tf", absorption_tf);
  detail::check_device_supported(op, "absorption_tf", absorption_tf);
  if (absorption_tf.dtype != DType::Complex64 && absorption_tf.dtype != DType::Complex128) {
    detail::fail(ErrorKind::Type, op,
                 std::string("expected absorption_tf to be complex64 or complex128, but got ") +
                     dtype_name(absorption_tf.dtype));
  }
  const DType real = absorption_tf.dtype == DType::Complex128 ? DType::Float64 : DType::Float32;
  opt::check_complex(op, "absorption_tf", absorption_tf, 4, kData4, real, "absorption_tf",
                     absorption_tf);
  opt::check_complex(op, "phase_tf", phase_tf, 4, kData4, real, "absorption_tf", absorption_tf);
  detail::check_same_shape(op, "phase_tf", phase_tf, "absorption_tf", absorption_tf);
  opt::check_regularization(op, regularization);
  const opt::Shape s = shape4(absorption_tf);
  opt::check_complex(op, "filter", filter, 5, "[B, 2, Z, Y, X]", real, "absorption_tf",
                     absorption_tf);
  opt::check_output(op, "filter", filter, {s.B, 2, s.Z, s.Y, s.X}, "[B, 2, Z, Y, X]",
                    "absorption_tf", absorption_tf);
  detail::check_disjoint(op, "filter", filter, "phase_tf", phase_tf);
  opt::FilterArgs a;
  a.exec = {op, real, absorption_tf.device, stream};
  a.shape = s;
  a.absorption_tf = view_of(absorption_tf, {0, 1, 2, 3});
  a.phase_tf = view_of(phase_tf, {0, 1, 2, 3});
  a.regularization = regularization;
  a.filter = filter.data;
  if (filter.numel() > 0) opt::run_on_device(a);
}

std::size_t tikhonov_inverse_workspace_size(const TensorRef& data, const TensorRef& absorption_tf) {
  (void)absorption_tf;  // the scratch depends on the data's shape and dtype only
  opt::InverseArgs a;
  return carve_inverse(shape4(data), data.dtype, nullptr, a);
}

void tikhonov_inverse(const TensorRef& data, const TensorRef& absorption_tf,
                      const TensorRef& phase_tf, double regularization, bool normalize,
                      const TensorRef& absorption, const TensorRef& phase, void* workspace,
                      std::size_t workspace_bytes, Stream stream) {
  const char* op = "tikhonov_inverse";
  opt::InverseArgs a =
      inverse_args(op, data, absorption_tf, phase_tf, regularization, normalize, stream);
  const opt::Shape& s = a.shape;
  for (const auto& [arg, t] :
       {std::pair<const char*, const TensorRef&>{"absorption", absorption}, {"phase", phase}}) {
    check_real_output(op, arg, t, {s.B, s.Y, s.X}, kPlanes, data);
    detail::check_disjoint(op, arg, t, "absorption_tf", absorption_tf);
    detail::check_disjoint(op, arg, t, "phase_tf", phase_tf);
  }
  detail::check_disjoint(op, "phase", phase, "absorption", absorption);
  detail::check_workspace(op, workspace, workspace_bytes,
                          carve_inverse(s, data.dtype, workspace, a));
  a.absorption = absorption.data;
  a.phase = phase.data;
  if (s.B * s.plane() > 0) opt::run_on_device(a, false);
}

std::size_t tikhonov_inverse_backward_workspace_size(const TensorRef& data,
                                                     const TensorRef& absorption_tf) {
  return tikhonov_inverse_workspace_size(data, absorption_tf);
}

void tikhonov_inverse_backward(const TensorRef& data, const TensorRef& absorption_tf,
                               const TensorRef& phase_tf, double regularization, bool normalize,
                               const TensorRef& grad_absorption, const TensorRef& grad_phase,
                               const TensorRef& grad_data, const TensorRef& grad_absorption_tf,
                               const TensorRef& grad_phase_tf, void* workspace,
                               std::size_t workspace_bytes, Stream stream) {
  const char* op = "tikhonov_inverse_backward";
  opt::InverseArgs a =
      inverse_args(op, data, absorption_tf, phase_tf, regularization, normalize, stream);
  const opt::Shape& s = a.shape;
  for (const auto& [arg, t] :
       {std::pair<const char*, const TensorRef&>{"grad_absorption", grad_absorption},
        {"grad_phase", grad_phase}}) {
    if (is_absent(t)) continue;
    opt::check_real(op, arg, t, 3, kPlanes);
    opt::check_same_real(op, arg, t, data.dtype, "data");
    detail::check_same_device(op, arg, t, "data", data);
    detail::check_shape(op, arg, t, {s.B, s.Y, s.X}, kPlanes);
  }
  if (!is_absent(grad_data))
    check_real_output(op, "grad_data", grad_data, {s.B, s.Z, s.Y, s.X}, kData4, data);
  for (const auto& [arg, t] :
       {std::pair<const char*, const TensorRef&>{"grad_absorption_tf", grad_absorption_tf},
        {"grad_phase_tf", grad_phase_tf}}) {
    if (is_absent(t)) continue;
    opt::check_complex(op, arg, t, 4, kData4, data.dtype, "data", data);
    opt::check_output(op, arg, t, {absorption_tf.sizes[0], s.Z, s.Y, s.X},
                      "(absorption_tf's shape)", "data", data);
    detail::check_disjoint(op, arg, t, "absorption_tf", absorption_tf);
    detail::check_disjoint(op, arg, t, "phase_tf", phase_tf);
  }
  detail::check_workspace(op, workspace, workspace_bytes,
                          carve_inverse(s, data.dtype, workspace, a));
  a.grad_absorption = view_of(grad_absorption, {0, 2, 3});
  a.grad_phase = view_of(grad_phase, {0, 2, 3});
  a.grad_data = is_absent(grad_data) ? nullptr : grad_data.data;
  a.grad_absorption_tf = is_absent(grad_absorption_tf) ? nullptr : grad_absorption_tf.data;
  a.grad_phase_tf = is_absent(grad_phase_tf) ? nullptr : grad_phase_tf.data;
  const bool any = a.grad_data || a.grad_absorption_tf || a.grad_phase_tf;
  if (any && s.B * s.plane() > 0) opt::run_on_device(a, true);
}

std::size_t tikhonov_inverse_3d_workspace_size(const TensorRef& data,
                                               const TensorRef& transfer_function) {
  (void)transfer_function;
  opt::Inverse3dArgs a;
  return carve_inverse_3d(shape4(data), data.dtype, true, nullptr, a);
}

namespace {

opt::Inverse3dArgs inverse_3d_args(const char* op, const TensorRef& data,
                                   const TensorRef& transfer_function, double regularization,
                                   Stream stream) {
  opt::check_real(op, "data", data, 4, kData4);
  const opt::Shape s = shape4(data);
  opt::check_complex(op, "transfer_function", transfer_function, 3, "[Z, Y, X]", data.dtype, "data",
                     data);
  detail::check_shape(op, "transfer_function", transfer_function, {s.Z, s.Y, s.X},
                      "[Z, Y, X] (data's)");
  opt::check_regularization(op, regularization);
  opt::Inverse3dArgs a;
  a.exec = {op, data.dtype, data.device, stream};
  a.shape = s;
  a.data = view_of(data, {0, 1, 2, 3});
  a.transfer_function = view_of(transfer_function, {1, 2, 3});
  a.regularization = regularization;
  return a;
}

}  // namespace

void tikhonov_inverse_3d(const TensorRef& data, const TensorRef& transfer_function,
                         double regularization, const TensorRef& out, void* workspace,
                         std::size_t workspace_bytes, Stream stream) {
  const char* op = "tikhonov_inverse_3d";
  opt::Inverse3dArgs a = inverse_3d_args(op, data, transfer_function, regularization, stream);
  const opt::Shape& s = a.shape;
  check_real_output(op, "out", out, {s.B, s.Z, s.Y, s.X}, kData4, data);
  detail::check_disjoint(op, "out", out, "transfer_function", transfer_function);
  detail::check_workspace(op, workspace, workspace_bytes,
                          carve_inverse_3d(s, data.dtype, false, workspace, a));
  a.out = out.data;
  if (out.numel() > 0) opt::run_on_device(a, false);
}

void tikhonov_inverse_3d_backward(const TensorRef& data, const TensorRef& transfer_function,
                                  double regularization, const TensorRef& grad_out,
                                  const TensorRef& grad_data,
                                  const TensorRef& grad_transfer_function, void* workspace,
                                  std::size_t workspace_bytes, Stream stream) {
  const char* op = "tikhonov_inverse_3d_backward";
  opt::Inverse3dArgs a = inverse_3d_args(op, data, transfer_function, regularization, stream);
  const opt::Shape& s = a.shape;
  opt::check_real(op, "grad_out", grad_out, 4, kData4);
  opt::check_same_real(op, "grad_out", grad_out, data.dtype, "data");
  detail::check_same_device(op, "grad_out", grad_out, "data", data);
  detail::check_shape(op, "grad_out", grad_out, {s.B, s.Z, s.Y, s.X}, kData4);
  if (!is_absent(grad_data)) {
    check_real_output(op, "grad_data", grad_data, {s.B, s.Z, s.Y, s.X}, kData4, data);
    detail::check_disjoint(op, "grad_data", grad_data, "grad_out", grad_out);
  }
  if (!is_absent(grad_transfer_function)) {
    opt::check_complex(op, "grad_transfer_function", grad_transfer_function, 3, "[Z, Y, X]",
                       data.dtype, "data", data);
    opt::check_output(op, "grad_transfer_function", grad_transfer_function, {s.Z, s.Y, s.X},
                      "[Z, Y, X]", "transfer_function", transfer_function);
  }
  detail::check_workspace(op, workspace, workspace_bytes,
                          carve_inverse_3d(s, data.dtype, true, workspace, a));
  a.grad_out = view_of(grad_out, {0, 1, 2, 3});
  a.grad_data = is_absent(grad_data) ? nullptr : grad_data.data;
  a.grad_transfer_function =
      is_absent(grad_transfer_function) ? nullptr : grad_transfer_function.data;
  if (!a.grad_data && !a.grad_transfer_function) return;
  // With B = 0 the transfer function's gradient is an empty sum: the step still writes its zeros.
  if (s.Z * s.plane() > 0) opt::run_on_device(a, true);
}

}  // namespace fieldfuse
