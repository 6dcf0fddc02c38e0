// SPDX-License-Identifier: Apache-2.0
// The thin model's pipeline, written once over an execution policy `Exec` that the CPU driver
// (OpenMP loops, Eigen FFT) and the CUDA driver (kernels, cuFFT) provide:
//
//   exec.for_each(n, f)            calls f(i) for i in [0, n)
//   exec.template reduce<W>(rows, n, f, out)
//                                  out[row·W + w] = Σ_i of what f(row, i, acc) adds into acc[W],
//                                  in an order fixed by the shapes
//   exec.fft(data, layout, inverse)
//
// Buffers hold every Jet component as its own plane so one batched FFT transforms values and
// derivatives alike: plane (c, b, z) of Nu = Yu·Xu points at ((c·B + b)·Z + z)·Nu.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "fieldfuse/optics.h"
#include "optics/complex.h"
#include "optics/fft.h"
#include "optics/jet.h"
#include "optics/transfer_math.h"

namespace fieldfuse::detail::optics {

/// The per-tile inputs as the pipeline reads them: z [B, Z] and tilt [B], strided.
template <class T>
struct TileInputs {
  const T* z = nullptr;
  int64_t z_stride_b = 0, z_stride_z = 0;
  const T* zenith = nullptr;
  int64_t zenith_stride = 0;
  const T* azimuth = nullptr;
  int64_t azimuth_stride = 0;

  FF_HOST_DEVICE T z_at(int64_t b, int64_t z_index) const {
    return z[b * z_stride_b + z_index * z_stride_z];
  }
  FF_HOST_DEVICE T zenith_at(int64_t b) const { return zenith[b * zenith_stride]; }
  FF_HOST_DEVICE T azimuth_at(int64_t b) const { return azimuth[b * azimuth_stride]; }
  /// Per-tile apertures (the optimiser's); null: the model's.
  const T* na_illumination = nullptr;
  const T* na_detection = nullptr;
  FF_HOST_DEVICE T na_illumination_at(int64_t b, T shared) const {
    return na_illumination != nullptr ? na_illumination[b] : shared;
  }
  FF_HOST_DEVICE T na_detection_at(int64_t b, T shared) const {
    return na_detection != nullptr ? na_detection[b] : shared;
  }
};

/// Where each Jet component of D is stored among the D planes (−1: structurally zero). D depends
/// on z and NAd only, so its components along the tilt directions are zero and are neither
/// stored nor transformed (a quarter to a half of the forward FFT work when optimising the tilt).
template <int C>
struct DefocusPlanes {
  int plane[C];
  int count;
};

template <int P, int O>
DefocusPlanes<1 + P * O> defocus_planes(const ThinDirections& dir) {
  DefocusPlanes<1 + P * O> d{};
  d.count = 0;
  for (int c = 0; c < 1 + P * O; ++c) {
    const int direction = c == 0 ? -1 : (c - 1) % (P > 0 ? P : 1);
    const bool nonzero = c == 0 || direction == dir.z || direction == dir.na_detection;
    d.plane[c] = nonzero ? d.count++ : -1;
  }
  return d;
}

/// Scratch of the pipeline: the S·D planes followed by the nonzero D planes (one FFT over both),
/// and the direct intensity I0 per tile and component.
template <class T>
struct ThinBuffers {
  Complex<T>* fields = nullptr;  ///< [C + Dn][B][Z][Nu]: S·D, then D's nonzero components
  T* intensity = nullptr;        ///< [B][C]
};

template <class T, int P, int O>
struct ThinFields {
  using J = Jet<T, P, O>;
  using CJ = Jet<Complex<T>, P, O>;
  static constexpr int C = J::kComponents;
  ThinModel<T> m;
  ThinDirections dir;
  TileInputs<T> in;
  DefocusPlanes<C> d_planes;
  Complex<T>* fields;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t nu = m.pixels_up();
    const int64_t b = i / nu, pixel = i - b * nu;
    const Pupils<T, J> pupils = thin_pupils<T, J>(m, dir, in.zenith_at(b), in.azimuth_at(b),
                                                  in.na_illumination_at(b, m.na_illumination),
                                                  in.na_detection_at(b, m.na_detection), pixel);
    const int64_t plane_stride = m.B * m.Z * nu;  // between components
    Complex<T>* sd = fields + (b * m.Z) * nu + pixel;
    Complex<T>* d = sd + C * plane_stride;
    for (int64_t z = 0; z < m.Z; ++z) {
      const CJ field = thin_defocus_field<T, J, CJ>(m, dir, pupils.detection, in.z_at(b, z), pixel);
      const CJ illuminated = pupils.illumination * field;
      for (int c = 0; c < C; ++c) {
        sd[c * plane_stride + z * nu] = illuminated.c[c];
        if (d_planes.plane[c] >= 0) d[d_planes.plane[c] * plane_stride + z * nu] = field.c[c];
      }
    }
  }
};

/// Adds tile b's term S·P⁴ (= S·|D|², which does not depend on z) of the direct intensity.
template <class T, int P, int O>
struct ThinIntensity {
  using J = Jet<T, P, O>;
  static constexpr int C = J::kComponents;
  ThinModel<T> m;
  ThinDirections dir;
  TileInputs<T> in;

  FF_HOST_DEVICE void operator()(int64_t b, int64_t pixel, T (&acc)[C]) const {
    const Pupils<T, J> p = thin_pupils<T, J>(m, dir, in.zenith_at(b), in.azimuth_at(b),
                                             in.na_illumination_at(b, m.na_illumination),
                                             in.na_detection_at(b, m.na_detection), pixel);
    const J p2 = p.detection * p.detection;
    const J term = p.illumination * (p2 * p2);
    for (int c = 0; c < C; ++c) acc[c] += term.c[c];
  }
};

/// conj(Â)·B̂ per frequency, written over Â.
template <class T, int P, int O>
struct ThinProduct {
  using CJ = Jet<Complex<T>, P, O>;
  static constexpr int C = CJ::kComponents;
  int64_t plane_stride;  ///< B·Z·Nu
  DefocusPlanes<C> d_planes;
  Complex<T>* fields;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    CJ a, d;
    for (int c = 0; c < C; ++c) {
      a.c[c] = fields[c * plane_stride + i];
      const int plane = d_planes.plane[c];
      d.c[c] = plane >= 0 ? fields[(C + plane) * plane_stride + i] : Complex<T>();
    }
    const CJ product = conj(a) * d;
    for (int c = 0; c < C; ++c) fields[c * plane_stride + i] = product.c[c];
  }
};

/// Reads the transfer-function jets of tile b, slice z at output frequency k from the correlation
/// planes: the crop's source index, its negation, and 1/(Nu·I0).
template <class T, int P, int O>
struct ThinTransferReader {
  using J = Jet<T, P, O>;
  using CJ = Jet<Complex<T>, P, O>;
  static constexpr int C = J::kComponents;
  ThinModel<T> m;
  const Complex<T>* correlation;  ///< [C][B][Z][Nu]
  const T* intensity;             ///< [B][C]

  FF_HOST_DEVICE ThinTransfer<T, CJ, J> at(int64_t b, int64_t z, int64_t k) const {
    const int64_t ky = k / m.X, kx = k - ky * m.X;
    const int64_t sy = central_crop_source(ky, m.Y, m.Yu), sx = central_crop_source(kx, m.X, m.Xu);
    const int64_t s = sy * m.Xu + sx;
    const int64_t minus_s = negated_index(sy, m.Yu) * m.Xu + negated_index(sx, m.Xu);
    const int64_t nu = m.pixels_up();
    const int64_t plane_stride = m.B * m.Z * nu;
    const Complex<T>* plane = correlation + (b * m.Z + z) * nu;
    CJ at_s, at_minus_s;
    J i0;
    for (int c = 0; c < C; ++c) {
      at_s.c[c] = plane[c * plane_stride + s];
      at_minus_s.c[c] = plane[c * plane_stride + minus_s];
      i0.c[c] = intensity[b * C + c];
    }
    return thin_transfer<T, CJ, J>(at_s, at_minus_s, reciprocal(scale(T(nu), i0)));
  }
};

/// Workspace regions, each aligned to 256 bytes.
inline std::size_t align_up(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

template <class T>
ThinModel<T> thin_model(const MicroscopeSettings& s, int factor, int64_t B, int64_t Z, int64_t Y,
                        int64_t X) {
  ThinModel<T> m;
  m.B = B;
  m.Z = Z;
  m.Y = Y;
  m.X = X;
  m.Yu = Y * factor;
  m.Xu = X * factor;
  const double ps_up = s.pixel_size / factor;
  m.step_y = static_cast<T>(1.0 / (static_cast<double>(m.Yu) * ps_up));
  m.step_x = static_cast<T>(1.0 / (static_cast<double>(m.Xu) * ps_up));
  m.wavelength = static_cast<T>(s.wavelength);
  m.medium_wavelength = static_cast<T>(s.wavelength / s.index_medium);
  m.index_medium = static_cast<T>(s.index_medium);
  m.ewald_radius = static_cast<T>(s.index_medium / s.wavelength);
  m.steepness = static_cast<T>(s.pupil_steepness);
  m.illumination_slope = static_cast<T>(4.0 * static_cast<double>(m.Xu) * ps_up);  // 4/Δf
  m.na_illumination = static_cast<T>(s.na_illumination);
  m.na_detection = static_cast<T>(s.na_detection);
  m.z_sign = s.invert_phase_contrast ? T(-1) : T(1);
  m.z_derivative = T(1);
  return m;
}

/// Fills the S·D and D planes and I0, then turns the planes into the correlation planes
/// C = IFFT2[conj(FFT2[S·D])·FFT2[D]] (unnormalised) in the first C·B·Z planes.
template <int P, int O, class Exec, class T>
void thin_correlation(Exec& exec, const ThinModel<T>& m, const ThinDirections& dir,
                      const TileInputs<T>& in, const ThinBuffers<T>& buf) {
  constexpr int C = Jet<T, P, O>::kComponents;
  const int64_t nu = m.pixels_up();
  const DefocusPlanes<C> d_planes = defocus_planes<P, O>(dir);
  exec.for_each(m.B * nu, ThinFields<T, P, O>{m, dir, in, d_planes, buf.fields});
  exec.template reduce<C>(m.B, nu, ThinIntensity<T, P, O>{m, dir, in}, buf.intensity);
  fft::FftLayout layout;
  layout.rank = 2;
  layout.n[0] = m.Yu;
  layout.n[1] = m.Xu;
  layout.batch = (C + d_planes.count) * m.B * m.Z;
  exec.fft(buf.fields, layout, false);
  exec.for_each(m.B * m.Z * nu, ThinProduct<T, P, O>{m.B * m.Z * nu, d_planes, buf.fields});
  layout.batch = C * m.B * m.Z;
  exec.fft(buf.fields, layout, true);
}

}  // namespace fieldfuse::detail::optics
