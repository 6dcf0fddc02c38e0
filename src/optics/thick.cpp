// SPDX-License-Identifier: Apache-2.0
// The thick transfer function's front: validates every argument, computes the Nyquist upsampling
// factors, sizes the workspace and picks the CPU or CUDA driver.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "fieldfuse/optics.h"
#include "optics/optics_check.h"
#include "optics/thick_drivers.h"
#include "optics/thick_math.h"
#include "optics/transfer_pipeline.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::number_text;

constexpr const char* kOp = "thick_transfer_function";

/// Upper bound of each Nyquist factor: past it the upsampled grid (factor² or factor times the
/// output) is far beyond any microscope's sampling and most likely a unit mistake.
constexpr double kMaxFactor = 64.0;

/// Upper bound of the upsampled grid's complex elements per stack, so byte counts of the two
/// stacks stay far inside 64 bits (2^56 elements).
constexpr double kMaxUpsampledElements = 72057594037927936.0;

struct Factors {
  int z = 1, yx = 1;
};

void check_finite(const char* name, double value, bool positive) {
  if (!std::isfinite(value) || (positive && !(value > 0.0))) {
    fail(ErrorKind::Value, kOp,
         std::string("expected ") + name + " to be finite" + (positive ? " and > 0" : "") +
             ", but got " + number_text(value));
  }
}

int factor_at_most(double ratio, const char* what) {
  const double factor = std::ceil(ratio);
  if (!(factor <= kMaxFactor)) {
    fail(ErrorKind::Value, kOp,
         std::string("expected ") + what + " <= " + number_text(kMaxFactor) + ", but got " +
             number_text(factor));
  }
  return factor < 1.0 ? 1 : static_cast<int>(factor);
}

/// Every setting and geometry field, then the factors (waveorder's sampling: ceil of pixel size
/// over Nyquist spacing per axis, NAi unclamped) and the upsampled grid's size.
Factors check_call(const MicroscopeSettings& s, const ThickGeometry& g) {
  // The transverse pixel size travels as settings.pixel_size; name it as the public argument.
  check_finite("yx_pixel_size", s.pixel_size, true);
  detail::optics::check_microscope(kOp, s);
  if (g.Z < 0 || g.Y < 1 || g.X < 1) {
    fail(ErrorKind::Value, kOp,
         "expected zyx_shape (Z, Y, X) with Z >= 0 and Y, X >= 1, but got (" + std::to_string(g.Z) +
             ", " + std::to_string(g.Y) + ", " + std::to_string(g.X) + ")");
  }
  if (g.z_padding < 0) {
    fail(ErrorKind::Value, kOp, "expected z_padding >= 0, but got " + std::to_string(g.z_padding));
  }
  check_finite("z_pixel_size", g.z_pixel_size, true);
  check_finite("zenith", g.zenith, false);
  check_finite("azimuth", g.azimuth, false);
  Factors f;
  f.yx = factor_at_most(
      s.pixel_size /
          detail::optics::transverse_nyquist(s.wavelength, s.na_illumination, s.na_detection),
      "yx_pixel_size / (wavelength / (2·(na_detection + na_illumination))) (the transverse "
      "upsampling factor)");
  f.z = factor_at_most(
      g.z_pixel_size / detail::optics::axial_nyquist(s.wavelength, s.na_detection, s.index_medium),
      "z_pixel_size / the axial Nyquist spacing 1/(2·(n/λ − sqrt((n/λ)² − (NAd/λ)²))) (the axial "
      "upsampling factor)");
  const double elements =
      (static_cast<double>(g.Z) * f.z + 2.0 * static_cast<double>(g.z_padding)) *
      (static_cast<double>(g.Y) * f.yx) * (static_cast<double>(g.X) * f.yx);
  if (!(elements <= kMaxUpsampledElements)) {
    fail(ErrorKind::Value, kOp,
         "expected the upsampled grid (Z·fz + 2·z_padding) × Y·f × X·f to hold at most 2^56 "
         "elements, but it holds " +
             number_text(elements));
  }
  return f;
}

}  // namespace

namespace detail::optics {

std::size_t thick_pipeline_bytes(int64_t Zu, int64_t Yu, int64_t Xu, std::size_t real_size) {
  const std::size_t stack =
      static_cast<std::size_t>(Zu) * static_cast<std::size_t>(Yu) * static_cast<std::size_t>(Xu);
  // The fields (2 stacks of complex) then I; +1 so an empty grid still asks for a byte.
  return align_up(2 * 2 * real_size * stack) + align_up(real_size) + 1;
}

}  // namespace detail::optics

std::size_t thick_transfer_function_workspace_size(const MicroscopeSettings& settings,
                                                   const ThickGeometry& geometry, DType dtype) {
  const Factors f = check_call(settings, geometry);
  if (dtype != DType::Float32 && dtype != DType::Float64) {
    fail(ErrorKind::Type, kOp,
         std::string("expected dtype to be float32 or float64, but got ") + dtype_name(dtype));
  }
  return detail::optics::thick_pipeline_bytes(geometry.Z * f.z + 2 * geometry.z_padding,
                                              geometry.Y * f.yx, geometry.X * f.yx,
                                              dtype_size(dtype));
}

void thick_transfer_function(const MicroscopeSettings& settings, const ThickGeometry& geometry,
                             const TensorRef& real_potential_tf, const TensorRef& imag_potential_tf,
                             void* workspace, std::size_t workspace_bytes, Stream stream) {
  const Factors f = check_call(settings, geometry);
  const int64_t Zo = geometry.Z + 2 * geometry.z_padding;
  detail::check_storage(kOp, "real_potential_tf", real_potential_tf);
  detail::check_device_supported(kOp, "real_potential_tf", real_potential_tf);
  if (real_potential_tf.dtype != DType::Complex64 && real_potential_tf.dtype != DType::Complex128) {
    fail(ErrorKind::Type, kOp,
         std::string("expected real_potential_tf to be complex64 or complex128, but got ") +
             dtype_name(real_potential_tf.dtype));
  }
  detail::check_shape(kOp, "real_potential_tf", real_potential_tf, {Zo, geometry.Y, geometry.X},
                      "[Z + 2·z_padding, Y, X]");
  detail::check_contiguous(kOp, "real_potential_tf", real_potential_tf);
  detail::check_storage(kOp, "imag_potential_tf", imag_potential_tf);
  detail::check_same_device(kOp, "imag_potential_tf", imag_potential_tf, "real_potential_tf",
                            real_potential_tf);
  detail::check_dtype(kOp, "imag_potential_tf", imag_potential_tf, real_potential_tf.dtype,
                      "the dtype of real_potential_tf");
  detail::check_shape(kOp, "imag_potential_tf", imag_potential_tf, {Zo, geometry.Y, geometry.X},
                      "[Z + 2·z_padding, Y, X]");
  detail::check_contiguous(kOp, "imag_potential_tf", imag_potential_tf);
  detail::check_disjoint(kOp, "imag_potential_tf", imag_potential_tf, "real_potential_tf",
                         real_potential_tf);
  const DType real_dtype =
      real_potential_tf.dtype == DType::Complex128 ? DType::Float64 : DType::Float32;
  detail::check_workspace(kOp, workspace, workspace_bytes,
                          thick_transfer_function_workspace_size(settings, geometry, real_dtype));
  if (Zo == 0) return;  // nothing to write (Z = 0, no padding)

  detail::optics::ThickCall call;
  call.op = kOp;
  call.settings = settings;
  call.geometry = geometry;
  call.z_factor = f.z;
  call.yx_factor = f.yx;
  call.real_dtype = real_dtype;
  call.device = real_potential_tf.device.index;
  call.stream = stream;
  call.workspace = workspace;
  call.workspace_bytes = workspace_bytes;
  call.real_potential_tf = real_potential_tf.data;
  call.imag_potential_tf = imag_potential_tf.data;
#if FIELDFUSE_WITH_CUDA
  if (real_potential_tf.device.is_cuda()) {
    detail::optics::thick_transfer_cuda(call);
    return;
  }
#endif
  (void)stream;  // check_device_supported rejected CUDA tensors in a build without CUDA
  detail::optics::thick_transfer_cpu(call);
}

}  // namespace fieldfuse
