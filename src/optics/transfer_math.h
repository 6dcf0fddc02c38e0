// SPDX-License-Identifier: Apache-2.0
// The optics formulas of specs/optics.md, once, for the CPU drivers and the CUDA kernels: Fourier
// grids, the detection and tilted illumination pupils, the propagation factor, the central
// Fourier crop, and the thin model's per-pixel fields and per-frequency transfer functions.
// Templated on the Jet type (optics/jet.h) so the same lines give values and exact derivatives.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "optics/complex.h"
#include "optics/jet.h"

namespace fieldfuse::detail::optics {

constexpr double kPi = 3.14159265358979323846;

/// numpy's fftfreq(n, d)[k] with step = 1/(n·d): k·step for k < ⌈n/2⌉, (k − n)·step after.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE T fft_frequency(int64_t k, int64_t n, T step) {
  return static_cast<T>(k < (n + 1) / 2 ? k : k - n) * step;
}

/// Index into an unshifted axis of length `n_source` of the frequency kept at index k of the
/// central crop to length n (waveorder's nd_fourier_central_cuboid: fftshift, keep the window
/// starting at (n_source − n)/2, ifftshift).
FF_HOST_DEVICE FF_FORCE_INLINE int64_t central_crop_source(int64_t k, int64_t n, int64_t n_source) {
  const int64_t start = (n_source - n) / 2;
  const int64_t shifted = start + (k + n / 2) % n;  // position in the fftshifted source
  return ((shifted - n_source / 2) % n_source + n_source) % n_source;
}

/// The index of −k on an unshifted axis of length n.
FF_HOST_DEVICE FF_FORCE_INLINE int64_t negated_index(int64_t k, int64_t n) {
  return k == 0 ? 0 : n - k;
}

/// Constants of the thin model's upsampled grid and microscope, computed once on the host.
template <class T>
struct ThinModel {
  int64_t B = 0, Z = 0;      ///< tiles, slices
  int64_t Y = 0, X = 0;      ///< output grid
  int64_t Yu = 0, Xu = 0;    ///< upsampled grid (factor·Y, factor·X)
  T step_y = 0, step_x = 0;  ///< frequency steps 1/(Yu·ps_u), 1/(Xu·ps_u)
  T wavelength = 0;          ///< λ (vacuum)
  T medium_wavelength = 0;   ///< λm = λ/n
  T index_medium = 1;        ///< n
  T ewald_radius = 0;        ///< K = n/λ
  T steepness = 0;           ///< s of the detection pupil
  T illumination_slope = 0;  ///< 4/Δf of the tilted pupil
  T na_illumination = 0, na_detection = 0;
  /// The thin model's rule: where NAi >= NAd, NAi is replaced by 0.9·NAd (false: NAi as given).
  bool clamp_illumination = true;
  T z_sign = 1;        ///< −1 with invert_phase_contrast
  T z_derivative = 1;  ///< ∂z/∂(the z direction's parameter)

  FF_HOST_DEVICE int64_t pixels_up() const { return Yu * Xu; }
};

/// Which Jet direction each input feeds (−1: none).
struct ThinDirections {
  int z = -1, zenith = -1, azimuth = -1, na_illumination = -1, na_detection = -1;
};

/// The illumination pupil S and the detection pupil P at upsampled pixel `pixel` of a tile with
/// tilt (zenith, azimuth) — the two factors that do not depend on z.
template <class T, class J>
struct Pupils {
  J illumination;
  J detection;
};

template <class T, class J>
FF_HOST_DEVICE FF_FORCE_INLINE Pupils<T, J> thin_pupils(const ThinModel<T>& m,
                                                        const ThinDirections& dir, T zenith,
                                                        T azimuth, T na_illumination,
                                                        T na_detection, int64_t pixel) {
  const int64_t y = pixel / m.Xu, x = pixel - y * m.Xu;
  const T fy = fft_frequency(y, m.Yu, m.step_y), fx = fft_frequency(x, m.Xu, m.step_x);
  const T fr2 = fy * fy + fx * fx;

  // Detection pupil P = σ(s·(NAd/λ − |f|)).
  const J na_det = J::variable(na_detection, dir.na_detection);
  const J detection = sigmoid(scale(m.steepness / m.wavelength, na_det) -
                              J::constant(m.steepness * std::sqrt(fr2)));

  // Tilted illumination pupil on the Ewald sphere (zero outside it).
  const T fz2 = m.ewald_radius * m.ewald_radius - fr2;
  J illumination = J::constant(T(0));
  if (fz2 >= T(0)) {
    const J na_ill = m.clamp_illumination && na_illumination >= na_detection
                         ? scale(T(0.9), na_det)
                         : J::variable(na_illumination, dir.na_illumination);
    const J ratio = scale(T(1) / m.index_medium, na_ill);
    const J cos_alpha = sqrt_clamped(J::constant(T(1)) - ratio * ratio);
    const J theta = J::variable(zenith, dir.zenith), phi = J::variable(azimuth, dir.azimuth);
    const J sin_theta = sin(theta);
    const J dot = scale(fx, sin_theta * cos(phi)) + scale(fy, sin_theta * sin(phi)) +
                  scale(std::sqrt(fz2), cos(theta));
    illumination = sigmoid(scale(m.illumination_slope, dot - scale(m.ewald_radius, cos_alpha)));
  }
  return {illumination, detection};
}

/// The same with the model's (shared) apertures.
template <class T, class J>
FF_HOST_DEVICE FF_FORCE_INLINE Pupils<T, J> thin_pupils(const ThinModel<T>& m,
                                                        const ThinDirections& dir, T zenith,
                                                        T azimuth, int64_t pixel) {
  return thin_pupils<T, J>(m, dir, zenith, azimuth, m.na_illumination, m.na_detection, pixel);
}

/// D = P·(P·e^{i2πz·ob}) at upsampled pixel `pixel` and defocus z (the detection pupil enters
/// twice: once as the pupil, once inside the propagation kernel).
template <class T, class J, class CJ>
FF_HOST_DEVICE FF_FORCE_INLINE CJ thin_defocus_field(const ThinModel<T>& m,
                                                     const ThinDirections& dir, const J& detection,
                                                     T z, int64_t pixel) {
  const int64_t y = pixel / m.Xu, x = pixel - y * m.Xu;
  const T fy = fft_frequency(y, m.Yu, m.step_y), fx = fft_frequency(x, m.Xu, m.step_x);
  const T lm = m.medium_wavelength;
  const T cos2 = T(1) - lm * lm * (fy * fy + fx * fx);
  const T oblique = (cos2 > T(0) ? std::sqrt(cos2) : T(0)) / lm;
  const J zj = J::variable(m.z_sign * z, dir.z, m.z_sign * m.z_derivative);
  return (detection * detection) * unit_phasor(scale(T(2 * kPi) * oblique, zj));
}

/// The thin transfer functions at output frequency (ky, kx) from the correlation
/// C = IFFT2[conj(Â)·B̂] (unnormalised, Nu = Yu·Xu points) read at the source frequency s and at
/// −s, and the direct intensity I0: H1 = C(s)/Nu, H2 = conj(C(−s))/Nu, Hu = (H1 + H2)/I0,
/// Hp = i·(H1 − H2)/I0.
template <class T, class CJ, class J>
struct ThinTransfer {
  CJ absorption;
  CJ phase;
};

template <class T, class CJ, class J>
FF_HOST_DEVICE FF_FORCE_INLINE ThinTransfer<T, CJ, J> thin_transfer(const CJ& at_s,
                                                                    const CJ& at_minus_s,
                                                                    const J& inverse_intensity) {
  const CJ h2 = conj(at_minus_s);
  const CJ absorption = (at_s + h2) * inverse_intensity;
  const CJ phase = times_i(at_s - h2) * inverse_intensity;
  return {absorption, phase};
}

}  // namespace fieldfuse::detail::optics
