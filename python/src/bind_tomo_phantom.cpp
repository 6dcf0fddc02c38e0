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

/// Binds `metric(estimate, reference, extra)` as `name`, its third argument named `extra`.
template <class Extra>
void def_metric(nb::module_& m, const char* name,
                double (*metric)(const TensorRef&, const TensorRef&, Extra), const char* extra,
                const char* doc) {
  m.def(
      name,
      [name, metric](const Array& estimate, const Array& reference, Extra value) {
        const TensorRef e = to_tensor_ref(estimate, name, "estimate"),
                        r = to_tensor_ref(reference, name, "reference");
        nb::gil_scoped_release release;
        return metric(e, r, value);
      },
      "estimate"_a.noconvert(), "reference"_a.noconvert(), nb::arg(extra), doc);
}

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
  def_metric<double>(m, "psnr", &psnr, "data_range",
                     "10·log10(data_range² / MSE) of two host arrays of one shape and dtype "
                     "(inf if equal).");
  def_metric<double>(m, "ssim_3d", &ssim_3d, "data_range",
                     "Mean 3-D SSIM of two host volumes [D, H, W] (Gaussian window sigma 1.5, "
                     "11 taps).");
  def_metric<int>(m, "profile_error", &profile_error, "axis",
                  "‖p(estimate) − p(reference)‖ / ‖p(reference)‖ of the mean profiles along "
                  "`axis` (0 = D, 1 = H, 2 = W) of two host volumes [D, H, W].");
}

}  // namespace fieldfuse::python
