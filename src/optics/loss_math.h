// SPDX-License-Identifier: Apache-2.0
// Formulas of the optics sharpness losses: the unshifted frequency grid and the mid-band annulus,
// and the amplitude's derivative, shared by the CPU and CUDA drivers.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "optics/inverse_math.h"

namespace fieldfuse::detail::optics {

/// fftfreq(n, pixel_size)[k]: k/(n·ps) for k < ceil(n/2), else (k − n)/(n·ps).
FF_HOST_DEVICE inline double fft_frequency(int64_t k, int64_t n, double pixel_size) {
  const int64_t signed_k = k < (n + 1) / 2 ? k : k - n;
  return static_cast<double>(signed_k) / (static_cast<double>(n) * pixel_size);
}

/// The annulus in squared radial frequency, low² < |f|² < high² (strict on both sides; the
/// bounds are band·2NAd/λ, squared once on the host).
struct MidbandAnnulus {
  double pixel_size;
  double low_squared, high_squared;

  FF_HOST_DEVICE bool contains(int64_t ky, int64_t kx, int64_t Y, int64_t X) const {
    const double fy = fft_frequency(ky, Y, pixel_size), fx = fft_frequency(kx, X, pixel_size);
    const double r2 = fy * fy + fx * fx;
    return r2 > low_squared && r2 < high_squared;
  }
};

/// |F| and its gradient scale: the gradient of g·|F| with respect to F is g·F/|F| (0 at F = 0).
template <class T>
FF_HOST_DEVICE inline Cx<T> amplitude_grad(Cx<T> f, T g) {
  const T magnitude = std::sqrt(norm2(f));
  return magnitude > T(0) ? (g / magnitude) * f : Cx<T>{T(0), T(0)};
}

}  // namespace fieldfuse::detail::optics
