// SPDX-License-Identifier: Apache-2.0
// The thick transfer function's pipeline, written once over an execution policy (the CPU and CUDA
// ones of transfer_pipeline.h) and included by the two drivers only:
//
//   fields     SPHz = S·P·Hz and PG = P·G per slice of the upsampled grid (one pass per pixel)
//   intensity  I = Σ_yx S·P²
//   FFT2       both stacks
//   product    w_z·conj(FFT2 SPHz)·FFT2 PG, over the first stack (the Hann window w along z is
//              applied here: IFFT2 is linear per slice, so windowing before or after it agrees)
//   IFFT2      of the product, then the FFT along z
//   write      the central [Zo, Y, X] frequencies of (H1 ± H2)/I·Δz_up, with H1 the transform
//              above divided by Yu·Xu and H2(k) = conj(H1(−k)) (k negated on all three axes)
//
// The identity: waveorder's H2 = FFT_z[w·IFFT2[Â·conj(B̂)]]. Per slice IFFT2[Â·conj(B̂)](k) =
// conj(IFFT2[conj(Â)·B̂](−k)); w is real, and the FFT along z of a slice-wise conjugate-reversed
// stack is the conjugate of the transform at −k_z. So H2 needs no transforms of its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/macros.h"
#include "optics/complex.h"
#include "optics/fft.h"
#include "optics/jet.h"
#include "optics/shared_optics_drivers.h"
#include "optics/thick_drivers.h"
#include "optics/thick_math.h"
#include "optics/transfer_pipeline.h"

namespace fieldfuse::detail::optics {

/// One pass per upsampled pixel over every slice: SPHz in the first stack, PG in the second,
/// each [Zu, Yu, Xu].
template <class T>
struct ThickFields {
  ThickModel<T> m;
  Complex<T>* fields;

  FF_HOST_DEVICE void operator()(int64_t pixel) const {
    const int64_t nu = m.pixels_up(), stack = m.Zu * nu;
    const auto s = m.optics.sample(pixel);
    const T illuminated_pupil = m.illumination_at(pixel) * s.pupil;
    for (int64_t z = 0; z < m.Zu; ++z) {
      const Complex<T> kernel = m.optics.propagation_at(s, z);
      fields[z * nu + pixel] = illuminated_pupil * kernel;
      fields[stack + z * nu + pixel] = s.pupil * m.optics.greens_from(s, kernel);
    }
  }
};

/// Adds pixel's term S·P² of the direct intensity (P is real, so P·conj(P) = P²).
template <class T>
struct ThickIntensity {
  ThickModel<T> m;

  FF_HOST_DEVICE void operator()(int64_t, int64_t pixel, T (&acc)[1]) const {
    const T p = m.optics.sample(pixel).pupil;
    acc[0] += m.illumination_at(pixel) * (p * p);
  }
};

/// w_z·conj(Â)·B̂ per (slice, frequency), written over Â.
template <class T>
struct ThickProduct {
  int64_t Zu, nu;
  Complex<T>* fields;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const T w = shifted_hann<T>(i / nu, Zu);
    fields[i] = w * (conj(fields[i]) * fields[Zu * nu + i]);
  }
};

/// Output element i of [Zo, Y, X]: reads the transform at its crop source s and at −s.
template <class T>
struct ThickWrite {
  using J = Jet<T, 0, 1>;
  using CJ = Jet<Complex<T>, 0, 1>;
  ThickModel<T> m;
  const Complex<T>* transform;  ///< [Zu, Yu, Xu], unnormalised
  const T* intensity;
  Complex<T>* real_tf;
  Complex<T>* imag_tf;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t yx = m.Y * m.X, kz = i / yx, k = i - kz * yx;
    const int64_t ky = k / m.X, kx = k - ky * m.X;
    const int64_t sz = central_crop_source(kz, m.Zo, m.Zu);
    const int64_t sy = central_crop_source(ky, m.Y, m.Yu), sx = central_crop_source(kx, m.X, m.Xu);
    const int64_t s = (sz * m.Yu + sy) * m.Xu + sx;
    const int64_t minus_s =
        (negated_index(sz, m.Zu) * m.Yu + negated_index(sy, m.Yu)) * m.Xu + negated_index(sx, m.Xu);
    CJ at_s, at_minus_s;
    at_s.c[0] = transform[s];
    at_minus_s.c[0] = transform[minus_s];
    // 1/(Yu·Xu) completes the inverse FFT2; Δz_up is waveorder's discretisation factor.
    const J factor = J::constant(m.z_pixel_size / (static_cast<T>(m.pixels_up()) * intensity[0]));
    const auto t = thin_transfer<T, CJ, J>(at_s, at_minus_s, factor);
    real_tf[i] = t.absorption.c[0];
    imag_tf[i] = t.phase.c[0];
  }
};

template <class T>
ThickModel<T> thick_model(const ThickCall& call) {
  const ThickGeometry& g = call.geometry;
  ThickModel<T> m;
  m.Zu = call.z_up();
  m.Yu = g.Y * call.yx_factor;
  m.Xu = g.X * call.yx_factor;
  m.Zo = call.z_out();
  m.Y = g.Y;
  m.X = g.X;
  m.zenith = static_cast<T>(g.zenith);
  m.azimuth = static_cast<T>(g.azimuth);
  const double z_up = g.z_pixel_size / call.z_factor;
  m.z_pixel_size = static_cast<T>(z_up);
  // The shared optics of the upsampled grid (padding not upsampled, as waveorder builds it).
  MicroscopeSettings up = call.settings;
  up.pixel_size = call.settings.pixel_size / call.yx_factor;
  ThickGeometry up_geometry = g;
  up_geometry.Z = g.Z * call.z_factor;
  up_geometry.Y = m.Yu;
  up_geometry.X = m.Xu;
  up_geometry.z_pixel_size = z_up;
  m.optics = shared_optics_functor<T>(up, up_geometry, TensorRef{}, TensorRef{}, TensorRef{});
  m.illumination = thin_model<T>(call.settings, call.yx_factor, 1, 0, g.Y, g.X);
  m.illumination.clamp_illumination = false;  // the thick model takes NAi as given
  return m;
}

/// Runs the whole pipeline; the workspace holds the two field stacks, then I.
template <class Exec, class T>
void run_thick_transfer(Exec& exec, const ThickCall& call) {
  const ThickModel<T> m = thick_model<T>(call);
  const int64_t nu = m.pixels_up(), stack = m.Zu * nu;
  auto* fields = static_cast<Complex<T>*>(call.workspace);
  auto* intensity = reinterpret_cast<T*>(static_cast<unsigned char*>(call.workspace) +
                                         align_up(2 * sizeof(Complex<T>) * stack));
  exec.for_each(nu, ThickFields<T>{m, fields});
  exec.template reduce<1>(1, nu, ThickIntensity<T>{m}, intensity);
  fft::FftLayout slices;
  slices.rank = 2;
  slices.n[0] = m.Yu;
  slices.n[1] = m.Xu;
  slices.batch = 2 * m.Zu;
  exec.fft(fields, slices, false);
  exec.for_each(stack, ThickProduct<T>{m.Zu, nu, fields});
  slices.batch = m.Zu;
  exec.fft(fields, slices, true);
  fft::FftLayout along_z;
  along_z.rank = 1;
  along_z.n[0] = m.Zu;
  along_z.inner = nu;
  exec.fft(fields, along_z, false);
  exec.for_each(m.Zo * m.Y * m.X, ThickWrite<T>{m, fields, intensity,
                                                static_cast<Complex<T>*>(call.real_potential_tf),
                                                static_cast<Complex<T>*>(call.imag_potential_tf)});
}

}  // namespace fieldfuse::detail::optics
