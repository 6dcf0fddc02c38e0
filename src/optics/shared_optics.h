// SPDX-License-Identifier: Apache-2.0
// The thick model's shared optics as one per-pixel functor (specs/optics.md "Building blocks"):
// each pixel writes its detection pupil, then its propagation kernel and Green's function in every
// slice. Used by the CPU loop and the CUDA kernel alike.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "optics/complex.h"
#include "optics/jet.h"
#include "optics/transfer_math.h"

namespace fieldfuse::detail::optics {

template <class T>
struct SharedOptics3d {
  int64_t Zt, Y, X;
  T step_y, step_x;  ///< 1/(Y·ps), 1/(X·ps)
  T z_pixel_size;
  bool flip_z;  ///< invert_phase_contrast
  T cutoff;     ///< NAd/λ
  T steepness;
  T medium_wavelength;  ///< λ/n
  T* pupil;             ///< [Y, X]
  Complex<T>* propagation;
  Complex<T>* greens;

  /// z of slice k: ifftshift((j − Zt/2)·Δz), reversed when flipped.
  FF_HOST_DEVICE T z_at(int64_t k) const {
    const int64_t j = flip_z ? Zt - 1 - k : k;
    return static_cast<T>((j + Zt / 2) % Zt - Zt / 2) * z_pixel_size;
  }

  /// One pixel: its pupil and oblique factor once, then every slice (consecutive pixels are
  /// consecutive threads, so each slice's stores are coalesced).
  FF_HOST_DEVICE void operator()(int64_t pixel) const {
    const int64_t yx = Y * X, y = pixel / X, x = pixel - y * X;
    const T fy = fft_frequency(y, Y, step_y), fx = fft_frequency(x, X, step_x);
    const T fr2 = fy * fy + fx * fx;
    const T p = sigmoid(steepness * (cutoff - std::sqrt(fr2)));
    const T lm = medium_wavelength;
    const T cos2 = T(1) - lm * lm * fr2;
    const T oblique = (cos2 > T(0) ? std::sqrt(cos2) : T(0)) / lm;
    // −i/(4π)·P·e^{i2πz·ob}/(ob + (1 − P) + 1e−15) = scale·(−i)·e^{i2πz·ob}
    const T scale = p / (T(4 * kPi) * (oblique + (T(1) - p) + T(1e-15)));
    pupil[pixel] = p;
    for (int64_t k = 0; k < Zt; ++k) {
      const Complex<T> wave = unit_phasor(T(2 * kPi) * z_at(k) * oblique);
      propagation[k * yx + pixel] = p * wave;
      greens[k * yx + pixel] = Complex<T>(wave.im * scale, -wave.re * scale);
    }
  }
};

}  // namespace fieldfuse::detail::optics
