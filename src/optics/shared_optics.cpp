// SPDX-License-Identifier: Apache-2.0
// shared_optics_3d's front and CPU driver (the CUDA driver is shared_optics_cuda.cu).
#include "optics/shared_optics.h"

#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/dispatch.h"
#include "fieldfuse/optics.h"
#include "optics/exec_cpu.h"
#include "optics/optics_check.h"
#include "optics/shared_optics_drivers.h"

namespace fieldfuse {
namespace detail::optics {

template <class T>
SharedOptics3d<T> shared_optics_functor(const MicroscopeSettings& s, const ThickGeometry& g,
                                        const TensorRef& pupil, const TensorRef& propagation,
                                        const TensorRef& greens) {
  const int64_t Zt = g.Z + 2 * g.z_padding;
  return {Zt,
          g.Y,
          g.X,
          static_cast<T>(1.0 / (static_cast<double>(g.Y) * s.pixel_size)),
          static_cast<T>(1.0 / (static_cast<double>(g.X) * s.pixel_size)),
          static_cast<T>(g.z_pixel_size),
          s.invert_phase_contrast,
          static_cast<T>(s.na_detection / s.wavelength),
          static_cast<T>(s.pupil_steepness),
          static_cast<T>(s.wavelength / s.index_medium),
          static_cast<T*>(pupil.data),
          static_cast<Complex<T>*>(propagation.data),
          static_cast<Complex<T>*>(greens.data)};
}

void shared_optics_3d_cpu(const MicroscopeSettings& s, const ThickGeometry& g,
                          const TensorRef& pupil, const TensorRef& propagation,
                          const TensorRef& greens) {
  dispatch_float_types("shared_optics_3d", pupil.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SharedOptics3d<T> f = shared_optics_functor<T>(s, g, pupil, propagation, greens);
    CpuExec{}.for_each(f.Y * f.X, f);
  });
}

template SharedOptics3d<float> shared_optics_functor<float>(const MicroscopeSettings&,
                                                            const ThickGeometry&, const TensorRef&,
                                                            const TensorRef&, const TensorRef&);
template SharedOptics3d<double> shared_optics_functor<double>(const MicroscopeSettings&,
                                                              const ThickGeometry&,
                                                              const TensorRef&, const TensorRef&,
                                                              const TensorRef&);

}  // namespace detail::optics

void shared_optics_3d(const MicroscopeSettings& settings, const ThickGeometry& g,
                      const TensorRef& detection_pupil, const TensorRef& propagation_kernel,
                      const TensorRef& greens_function, Stream stream) {
  constexpr const char* op = "shared_optics_3d";
  detail::optics::check_microscope(op, settings);
  if (g.Z < 0 || g.Y < 1 || g.X < 1 || g.z_padding < 0) {
    detail::fail(
        ErrorKind::Value, op,
        "expected Z >= 0, Y >= 1, X >= 1 and z_padding >= 0, but got Z = " + std::to_string(g.Z) +
            ", Y = " + std::to_string(g.Y) + ", X = " + std::to_string(g.X) +
            ", z_padding = " + std::to_string(g.z_padding));
  }
  if (!(g.z_pixel_size > 0.0 && g.z_pixel_size < 1e300)) {
    detail::fail(ErrorKind::Value, op,
                 "expected z_pixel_size to be finite and > 0, but got " +
                     detail::number_text(g.z_pixel_size));
  }
  const int64_t Zt = g.Z + 2 * g.z_padding;
  detail::check_storage(op, "detection_pupil", detection_pupil);
  detail::check_device_supported(op, "detection_pupil", detection_pupil);
  detail::optics::check_real_dtype(op, "detection_pupil", detection_pupil);
  detail::check_shape(op, "detection_pupil", detection_pupil, {g.Y, g.X}, "[Y, X]");
  detail::check_contiguous(op, "detection_pupil", detection_pupil);
  const DType complex_dtype = detail::optics::complex_partner(detection_pupil.dtype);
  const char* names[2] = {"propagation_kernel", "greens_function"};
  const TensorRef* outs[2] = {&propagation_kernel, &greens_function};
  for (int i = 0; i < 2; ++i) {
    detail::check_storage(op, names[i], *outs[i]);
    detail::check_same_device(op, names[i], *outs[i], "detection_pupil", detection_pupil);
    detail::check_dtype(op, names[i], *outs[i], complex_dtype,
                        "the complex partner of detection_pupil's dtype");
    detail::check_shape(op, names[i], *outs[i], {Zt, g.Y, g.X}, "[Z + 2·z_padding, Y, X]");
    detail::check_contiguous(op, names[i], *outs[i]);
  }
#if FIELDFUSE_WITH_CUDA
  if (detection_pupil.device.is_cuda()) {
    detail::optics::shared_optics_3d_cuda(settings, g, detection_pupil, propagation_kernel,
                                          greens_function, stream);
    return;
  }
#endif
  (void)stream;
  detail::optics::shared_optics_3d_cpu(settings, g, detection_pupil, propagation_kernel,
                                       greens_function);
}

}  // namespace fieldfuse
