// SPDX-License-Identifier: Apache-2.0
// The thin forward model's front (include/fieldfuse/optics.h): validates thin_forward_model,
// carves its workspace and runs the drivers (inverse_pipeline.h, run_forward_model).
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "fieldfuse/optics.h"
#include "optics/inverse_check.h"
#include "optics/inverse_drivers.h"

namespace fieldfuse {
namespace {

namespace opt = detail::optics;

/// Objects [B, 2, Y, X] and the data spectra [B, Z, Y, X].
std::size_t carve_model(const TensorRef& absorption, const TensorRef& absorption_tf, void* base,
                        opt::ForwardModelArgs& a) {
  opt::Carver c(base);
  const int64_t B = absorption.ndim == 3 ? absorption.sizes[0] : 0;
  const int64_t F = absorption.ndim == 3 ? absorption.sizes[1] * absorption.sizes[2] : 0;
  const int64_t Z = absorption_tf.ndim == 4 ? absorption_tf.sizes[1] : 0;
  const std::size_t cs = opt::complex_size(absorption.dtype);
  a.objects = c.take(B * 2 * F * cs);
  a.spectra = c.take(B * Z * F * cs);
  return c.total();
}

}  // namespace

std::size_t thin_forward_model_workspace_size(const TensorRef& absorption,
                                              const TensorRef& absorption_tf) {
  opt::ForwardModelArgs a;
  return carve_model(absorption, absorption_tf, nullptr, a);
}

void thin_forward_model(const TensorRef& absorption, const TensorRef& phase,
                        const TensorRef& absorption_tf, const TensorRef& phase_tf,
                        double background, const TensorRef& data, void* workspace,
                        std::size_t workspace_bytes, Stream stream) {
  const char* op = "thin_forward_model";
  const char* planes = "[B, Y, X]";
  opt::check_real(op, "absorption", absorption, 3, planes);
  opt::check_real(op, "phase", phase, 3, planes);
  opt::check_same_real(op, "phase", phase, absorption.dtype, "absorption");
  detail::check_same_device(op, "phase", phase, "absorption", absorption);
  detail::check_same_shape(op, "phase", phase, "absorption", absorption);
  const int64_t B = absorption.sizes[0], Y = absorption.sizes[1], X = absorption.sizes[2];
  detail::check_storage(op, "absorption_tf", absorption_tf);
  const int64_t Z = absorption_tf.ndim == 4 ? absorption_tf.sizes[1] : 0;
  opt::check_transfer_pair(op, absorption, "absorption", B, Z, Y, X, absorption_tf, phase_tf);
  if (!std::isfinite(background)) {
    detail::fail(ErrorKind::Value, op,
                 "expected background to be finite, but got " + detail::number_text(background));
  }
  opt::check_real(op, "data", data, 4, "[B, Z, Y, X]");
  opt::check_same_real(op, "data", data, absorption.dtype, "absorption");
  opt::check_output(op, "data", data, {B, Z, Y, X}, "[B, Z, Y, X]", "absorption", absorption);
  detail::check_disjoint(op, "data", data, "phase", phase);
  detail::check_disjoint(op, "data", data, "absorption_tf", absorption_tf);
  detail::check_disjoint(op, "data", data, "phase_tf", phase_tf);
  opt::ForwardModelArgs a;
  detail::check_workspace(op, workspace, workspace_bytes,
                          carve_model(absorption, absorption_tf, workspace, a));
  a.exec = {op, absorption.dtype, absorption.device, stream};
  a.shape = {B, Z, Y, X};
  a.absorption = opt::view_of(absorption, {0, 2, 3});
  a.phase = opt::view_of(phase, {0, 2, 3});
  a.absorption_tf = opt::view_of(absorption_tf, {0, 1, 2, 3}, true);
  a.phase_tf = opt::view_of(phase_tf, {0, 1, 2, 3}, true);
  a.background = background;
  a.data = data.data;
  if (data.numel() > 0) opt::run_on_device(a);
}

}  // namespace fieldfuse
