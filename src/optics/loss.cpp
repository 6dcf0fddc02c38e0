// SPDX-License-Identifier: Apache-2.0
// The sharpness-loss fronts (include/fieldfuse/optics.h): midband_power and its backward validate
// here, count the annulus on the host and run the drivers.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "fieldfuse/optics.h"
#include "optics/inverse_check.h"
#include "optics/inverse_drivers.h"
#include "optics/loss_math.h"

namespace fieldfuse {
namespace {

namespace opt = detail::optics;
using detail::fail;
using detail::number_text;

constexpr const char* kImages = "[B, Y, X]";

std::size_t carve_midband(const TensorRef& images, void* base, opt::MidbandArgs& a) {
  opt::Carver c(base);
  const int64_t B = images.ndim == 3 ? images.sizes[0] : 0;
  const int64_t F = images.ndim == 3 ? images.sizes[1] * images.sizes[2] : 0;
  a.spectra = c.take(B * F * opt::complex_size(images.dtype));
  a.sums = static_cast<double*>(c.take(B * sizeof(double)));
  return c.total();
}

void check_positive(const char* op, const char* arg, double value) {
  if (!(std::isfinite(value) && value > 0.0)) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg + " to be finite and > 0, but got " + number_text(value));
  }
}

/// The checks both directions share, the annulus and its size on the fftfreq grid.
opt::MidbandArgs midband_args(const char* op, const TensorRef& images, double pixel_size,
                              double wavelength, double na_detection, MidbandBand band,
                              Stream stream) {
  opt::check_real(op, "images", images, 3, kImages);
  check_positive(op, "pixel_size", pixel_size);
  check_positive(op, "wavelength", wavelength);
  check_positive(op, "na_detection", na_detection);
  if (!(std::isfinite(band.low) && std::isfinite(band.high) && band.low >= 0.0 &&
        band.low < band.high)) {
    fail(ErrorKind::Value, op,
         "expected band to satisfy 0 <= low < high (finite), but got (" + number_text(band.low) +
             ", " + number_text(band.high) + ")");
  }
  opt::MidbandArgs a;
  a.exec = {op, images.dtype, images.device, stream};
  a.shape = {images.sizes[0], 1, images.sizes[1], images.sizes[2]};
  a.images = opt::view_of(images, {0, 2, 3});
  const double cutoff = 2.0 * na_detection / wavelength;
  a.pixel_size = pixel_size;
  a.low_squared = band.low * cutoff * band.low * cutoff;
  a.high_squared = band.high * cutoff * band.high * cutoff;
  const opt::MidbandAnnulus annulus{pixel_size, a.low_squared, a.high_squared};
  const opt::Shape& s = a.shape;
  for (int64_t f = 0; f < s.plane(); ++f)
    a.mask_count += annulus.contains(f / s.X, f % s.X, s.Y, s.X);
  return a;
}

}  // namespace

std::size_t midband_power_workspace_size(const TensorRef& images) {
  opt::MidbandArgs a;
  return carve_midband(images, nullptr, a);
}

void midband_power(const TensorRef& images, double pixel_size, double wavelength,
                   double na_detection, MidbandBand band, const TensorRef& out, void* workspace,
                   std::size_t workspace_bytes, Stream stream) {
  const char* op = "midband_power";
  opt::MidbandArgs a = midband_args(op, images, pixel_size, wavelength, na_detection, band, stream);
  opt::check_real(op, "out", out, 1, "[B]");
  opt::check_same_real(op, "out", out, images.dtype, "images");
  opt::check_output(op, "out", out, {a.shape.B}, "[B]", "images", images);
  detail::check_workspace(op, workspace, workspace_bytes, carve_midband(images, workspace, a));
  a.out = out.data;
  if (a.shape.B > 0) opt::run_on_device(a, false);
}

std::size_t midband_power_backward_workspace_size(const TensorRef& images) {
  return midband_power_workspace_size(images);
}

void midband_power_backward(const TensorRef& images, double pixel_size, double wavelength,
                            double na_detection, MidbandBand band, const TensorRef& grad_out,
                            const TensorRef& grad_images, void* workspace,
                            std::size_t workspace_bytes, Stream stream) {
  const char* op = "midband_power_backward";
  opt::MidbandArgs a = midband_args(op, images, pixel_size, wavelength, na_detection, band, stream);
  const opt::Shape& s = a.shape;
  opt::check_real(op, "grad_out", grad_out, 1, "[B]");
  opt::check_same_real(op, "grad_out", grad_out, images.dtype, "images");
  detail::check_same_device(op, "grad_out", grad_out, "images", images);
  detail::check_shape(op, "grad_out", grad_out, {s.B}, "[B]");
  opt::check_real(op, "grad_images", grad_images, 3, kImages);
  opt::check_same_real(op, "grad_images", grad_images, images.dtype, "images");
  opt::check_output(op, "grad_images", grad_images, {s.B, s.Y, s.X}, kImages, "images", images);
  detail::check_disjoint(op, "grad_images", grad_images, "grad_out", grad_out);
  detail::check_workspace(op, workspace, workspace_bytes, carve_midband(images, workspace, a));
  a.grad_out = opt::view_of(grad_out, {0});
  a.grad_images = grad_images.data;
  if (grad_images.numel() > 0) opt::run_on_device(a, true);
}

}  // namespace fieldfuse
