// SPDX-License-Identifier: Apache-2.0
// The thick (3-D) model's own formulas, once, for the CPU and CUDA drivers: the Nyquist
// upsampling factors, the axial Hann window, and the constants of the upsampled grid. The pupils,
// kernels and the H1/H2 combination come from shared_optics.h and transfer_math.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "optics/shared_optics.h"
#include "optics/transfer_math.h"

namespace fieldfuse::detail::optics {

/// Transverse Nyquist spacing λ / (2·(NAd + NAi)) (waveorder's sampling.transverse_nyquist).
inline double transverse_nyquist(double wavelength, double na_illumination, double na_detection) {
  return wavelength / (2.0 * (na_detection + na_illumination));
}

/// Axial Nyquist spacing 1 / (2·(n/λ − sqrt((n/λ)² − (NAd/λ)²))) (waveorder's
/// sampling.axial_nyquist); needs NAd < n.
inline double axial_nyquist(double wavelength, double na_detection, double index_medium) {
  const double n_on_lambda = index_medium / wavelength;
  const double na_on_lambda = na_detection / wavelength;
  return 1.0 /
         (2.0 * (n_on_lambda - std::sqrt(n_on_lambda * n_on_lambda - na_on_lambda * na_on_lambda)));
}

/// Element k of ifftshift(hann_window(n, periodic=False)): 0.5 − 0.5·cos(2πj/(n − 1)) with
/// j = (k + ⌊n/2⌋) mod n; a one-point window is 1 (PyTorch's convention).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T shifted_hann(int64_t k, int64_t n) {
  if (n == 1) return T(1);
  const int64_t j = (k + n / 2) % n;
  return T(0.5) - T(0.5) * std::cos(T(2 * kPi) * static_cast<T>(j) / static_cast<T>(n - 1));
}

/// The thick model on its upsampled grid [Zu, Yu, Xu] (Zu = Z·fz + 2·z_padding, the padding not
/// upsampled; Yu = Y·f, Xu = X·f) and its output grid [Zo, Y, X] (Zo = Z + 2·z_padding).
/// `optics` holds the shared optics of the upsampled grid (its output pointers unused) and
/// `illumination` the tilted pupil's constants (its B, Z and output sizes unused).
template <class T>
struct ThickModel {
  int64_t Zu = 0, Yu = 0, Xu = 0;
  int64_t Zo = 0, Y = 0, X = 0;
  T zenith = 0, azimuth = 0;
  T z_pixel_size = 0;  ///< of the upsampled grid: the transfer functions' discretisation factor
  SharedOptics3d<T> optics;
  ThinModel<T> illumination;

  FF_HOST_DEVICE int64_t pixels_up() const { return Yu * Xu; }

  /// The tilted illumination pupil S at upsampled pixel `pixel` (NAi not clamped: the thick
  /// model uses it as given).
  FF_HOST_DEVICE T illumination_at(int64_t pixel) const {
    using J = Jet<T, 0, 1>;
    return thin_pupils<T, J>(illumination, ThinDirections{}, zenith, azimuth, pixel)
        .illumination.c[0];
  }
};

}  // namespace fieldfuse::detail::optics
