// SPDX-License-Identifier: Apache-2.0
// Python bindings of the analytic tomography phantom and the image-quality metrics
// (include/fieldfuse/tomo_phantom.h, include/fieldfuse/metrics.h): host arrays in through DLPack,
// the GIL released while they run. Names and arguments are those of the C++ functions.
#include <cstdint>

#include "fieldfuse/metrics.h"
#include "fieldfuse/tomo_phantom.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]

}  // namespace

void bind_tomo_phantom(nb::module_& m) {
  m.def(
      "tomo_phantom_volume",
      [](const Array& volume, int supersample) {
        const TensorRef v = to_tensor_ref(volume, "tomo_phantom_volume", "volume");
        nb::gil_scoped_release release;
        tomo_phantom_volume(v, supersample);
      },
      "volume"_a.noconvert(), "supersample"_a,
      "Writes the embedded phantom's density into the host array `volume [D, H, W]` (float32 or "
      "float64, contiguous), each voxel the mean of supersample^3 points (box units).");
  m.def(
      "tomo_phantom_projections",
      [](const Array& rotations, const Array& projections, int supersample) {
        const char* op = "tomo_phantom_projections";
        const TensorRef r = to_tensor_ref(rotations, op, "rotations"),
                        p = to_tensor_ref(projections, op, "projections");
        nb::gil_scoped_release release;
        tomo_phantom_projections(r, p, supersample);
      },
      "rotations"_a.noconvert(), "projections"_a.noconvert(), "supersample"_a,
      "Writes the phantom's exact line integrals for the poses `rotations [n, 3, 3]` (float64, "
      "host) into the host array `projections [n, Hd, Wd]` (float32 or float64, contiguous), "
      "averaged over supersample^2 rays per pixel (box units).");
  m.def(
      "psnr",
      [](const Array& estimate, const Array& reference, double data_range) {
        const TensorRef e = to_tensor_ref(estimate, "psnr", "estimate"),
                        r = to_tensor_ref(reference, "psnr", "reference");
        nb::gil_scoped_release release;
        return psnr(e, r, data_range);
      },
      "estimate"_a.noconvert(), "reference"_a.noconvert(), "data_range"_a,
      "10·log10(data_range² / MSE) of two host arrays of one shape and dtype (inf if equal).");
  m.def(
      "ssim_3d",
      [](const Array& estimate, const Array& reference, double data_range) {
        const TensorRef e = to_tensor_ref(estimate, "ssim_3d", "estimate"),
                        r = to_tensor_ref(reference, "ssim_3d", "reference");
        nb::gil_scoped_release release;
        return ssim_3d(e, r, data_range);
      },
      "estimate"_a.noconvert(), "reference"_a.noconvert(), "data_range"_a,
      "Mean 3-D SSIM of two host volumes [D, H, W] (Gaussian window sigma 1.5, 11 taps).");
  m.def(
      "profile_error",
      [](const Array& estimate, const Array& reference, int axis) {
        const TensorRef e = to_tensor_ref(estimate, "profile_error", "estimate"),
                        r = to_tensor_ref(reference, "profile_error", "reference");
        nb::gil_scoped_release release;
        return profile_error(e, r, axis);
      },
      "estimate"_a.noconvert(), "reference"_a.noconvert(), "axis"_a,
      "‖p(estimate) − p(reference)‖ / ‖p(reference)‖ of the mean profiles along `axis` "
      "(0 = D, 1 = H, 2 = W) of two host volumes [D, H, W].");
}

}  // namespace fieldfuse::python
