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

  /// The z-independent factors at pixel (y, x) = divmod(pixel, X): P and the oblique factor ob.
  struct Sample {
    T pupil;
    T oblique;
  };

  FF_HOST_DEVICE Sample sample(int64_t pixel) const {
    const int64_t y = pixel / X, x = pixel - y * X;
    const T fy = fft_frequency(y, Y, step_y), fx = fft_frequency(x, X, step_x);
    const T fr2 = fy * fy + fx * fx;
    const T lm = medium_wavelength;
    const T cos2 = T(1) - lm * lm * fr2;
    return {sigmoid(steepness * (cutoff - std::sqrt(fr2))),
            (cos2 > T(0) ? std::sqrt(cos2) : T(0)) / lm};
  }

  /// The propagation kernel P·e^{i2πz·ob} of slice k at a pixel's sample.
  FF_HOST_DEVICE Complex<T> propagation_at(const Sample& s, int64_t k) const {
    return s.pupil * unit_phasor(T(2 * kPi) * z_at(k) * s.oblique);
  }

  /// The Green's function −i/(4π)·P·e^{i2πz·ob}/(ob + (1 − P) + 1e−15) from the propagation
  /// kernel of the same slice and pixel.
  FF_HOST_DEVICE Complex<T> greens_from(const Sample& s, const Complex<T>& propagation) const {
    const T scale = T(1) / (T(4 * kPi) * (s.oblique + (T(1) - s.pupil) + T(1e-15)));
    return Complex<T>(propagation.im * scale, -propagation.re * scale);
  }

  /// One pixel: its sample once, then every slice (consecutive pixels are consecutive threads,
  /// so each slice's stores are coalesced).
  FF_HOST_DEVICE void operator()(int64_t pixel) const {
    const int64_t yx = Y * X;
    const Sample s = sample(pixel);
    pupil[pixel] = s.pupil;
    for (int64_t k = 0; k < Zt; ++k) {
      const Complex<T> wave = propagation_at(s, k);
      propagation[k * yx + pixel] = wave;
      greens[k * yx + pixel] = greens_from(s, wave);
    }
  }
};

}  // namespace fieldfuse::detail::optics
