// SPDX-License-Identifier: Apache-2.0
// optimize_tiles over an execution policy (see optics/transfer_pipeline.h). Every iteration is
// device work only (no host synchronisation):
//
//   z positions from the offsets -> thin correlation planes with Jets along the free parameters
//   -> per frequency, the Tikhonov phase spectrum Ŷ (closed form, exact Jets) -> per tile, the
//   mid-band loss −mean|F|, F the spectrum of real(IFFT2[Ŷ]) -> per tile, the update.
//
// Jets carry the gradient (Adam, NAdam) and, for Newton, the diagonal second derivatives; each
// tile's loss depends only on its own parameters, so these are exactly its own derivatives.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "optics/tiles_drivers.h"
#include "optics/tiles_math.h"
#include "optics/transfer_pipeline.h"

namespace fieldfuse::detail::optics {

/// The optimiser's device state, [B] arrays unless noted.
template <class T>
struct TileState {
  T* params;  ///< [kTileParameters][B] current
  T* good;    ///< [kTileParameters][B] the last parameters whose loss and derivatives were finite
  T* good_loss;   ///< loss at `good`
  T* m;           ///< [kTileParameters][B] first moments
  T* v;           ///< [kTileParameters][B] second moments
  T* mu_product;  ///< NAdam's Π μ
  T* last_loss;   ///< previous finite loss (early stopping)
  int32_t* active;
  int32_t* stalls;
  int32_t* updates;
};

/// Constants of an optimisation, by value in every kernel.
template <class T>
struct TileSetup {
  int64_t B, Z, Y, X;
  T z_spacing;
  T regularization;
  T band_low, band_high;  ///< in cycles per length: fraction·2NAd/λ
  T step_y, step_x;       ///< tile-grid frequency steps 1/(Y·ps), 1/(X·ps)
  T inverse_mask_count;   ///< 1/n_mask (0 for an empty annulus)
  TileOptimizerOptions options;
  T learning_rate[kTileParameters];
};

template <class T>
struct TileInit {
  TileSetup<T> s;
  TileState<T> st;
  const T* initial[kTileParameters];
  int64_t initial_stride[kTileParameters];
  T initial_value[kTileParameters];

  FF_HOST_DEVICE void operator()(int64_t b) const {
    for (int p = 0; p < kTileParameters; ++p) {
      const T value = initial[p] != nullptr ? initial[p][b * initial_stride[p]] : initial_value[p];
      st.params[p * s.B + b] = value;
      st.good[p * s.B + b] = value;
      st.m[p * s.B + b] = T(0);
      st.v[p * s.B + b] = T(0);
    }
    st.good_loss[b] = T(NAN);
    st.mu_product[b] = T(1);
    st.last_loss[b] = T(INFINITY);
    st.active[b] = 1;
    st.stalls[b] = 0;
    st.updates[b] = 0;
  }
};

/// Per-slice mean of the tiles ([B·Z] rows).
template <class T>
struct SliceSum {
  const T* tiles;
  int64_t strides[4];
  int64_t Z, X;

  FF_HOST_DEVICE void operator()(int64_t row, int64_t k, T (&acc)[1]) const {
    const int64_t b = row / Z, z = row - b * Z, y = k / X, x = k - y * X;
    acc[0] += tiles[b * strides[0] + z * strides[1] + y * strides[2] + x * strides[3]];
  }
};

/// x̃ = x / max(mean, 1e−12) − 1 as complex values, ready for the FFT.
template <class T>
struct NormalizeSlices {
  const T* tiles;
  int64_t strides[4];
  int64_t Z, Y, X;
  const T* sums;  ///< [B·Z]
  Complex<T>* out;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t yx = Y * X, row = i / yx, k = i - row * yx;
    const int64_t b = row / Z, z = row - b * Z, y = k / X, x = k - y * X;
    T mean = sums[row] / T(yx);
    if (!(mean >= T(1e-12))) mean = mean != mean ? mean : T(1e-12);  // NaN stays NaN
    const T value = tiles[b * strides[0] + z * strides[1] + y * strides[2] + x * strides[3]];
    out[i] = Complex<T>(value / mean - T(1));
  }
};

/// z_k = (⌊Z/2⌋ − k + offset)·Δz; the sign of invert_phase_contrast is applied by the model.
template <class T>
struct ZPositions {
  int64_t B, Z;
  T z_spacing;
  const T* offsets;
  T* z;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / Z, k = i - b * Z;
    z[i] = (static_cast<T>(Z / 2 - k) + offsets[b]) * z_spacing;
  }
};

/// Ŷ jets of tile b at tile frequency k: the Tikhonov phase spectrum.
template <class T, int P, int O>
struct PhaseSpectrum {
  using J = Jet<T, P, O>;
  using CJ = Jet<Complex<T>, P, O>;
  static constexpr int C = J::kComponents;
  ThinTransferReader<T, P, O> reader;
  const Complex<T>* data_spectrum;  ///< [B, Z, Y·X]
  T regularization;
  Complex<T>* spectrum;  ///< [C][B][Y·X]

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const ThinModel<T>& m = reader.m;
    const int64_t yx = m.Y * m.X, b = i / yx, k = i - b * yx;
    TikhonovSums<J, CJ> sums{J::constant(T(0)), J::constant(T(0)), CJ::constant(Complex<T>()),
                             CJ::constant(Complex<T>()), CJ::constant(Complex<T>())};
    for (int64_t z = 0; z < m.Z; ++z) {
      const auto t = reader.at(b, z, k);
      const CJ data = CJ::constant(data_spectrum[(b * m.Z + z) * yx + k]);
      tikhonov_accumulate(sums, t.absorption, t.phase, data);
    }
    const CJ phase = tikhonov_phase<T>(sums, regularization);
    for (int c = 0; c < C; ++c) spectrum[(c * m.B + b) * yx + k] = phase.c[c];
  }
};

/// Σ over the annulus of |F(k)| jets for tile b.
template <class T, int P, int O>
struct MidbandSum {
  using J = Jet<T, P, O>;
  using CJ = Jet<Complex<T>, P, O>;
  static constexpr int C = J::kComponents;
  TileSetup<T> s;
  const Complex<T>* spectrum;

  FF_HOST_DEVICE void operator()(int64_t b, int64_t k, T (&acc)[C]) const {
    if (!in_midband(k, s.Y, s.X, s.step_y, s.step_x, s.band_low, s.band_high)) return;
    const int64_t yx = s.Y * s.X, ky = k / s.X, kx = k - ky * s.X;
    const int64_t minus_k = negated_index(ky, s.Y) * s.X + negated_index(kx, s.X);
    CJ at_k, at_minus_k;
    for (int c = 0; c < C; ++c) {
      at_k.c[c] = spectrum[(c * s.B + b) * yx + k];
      at_minus_k.c[c] = spectrum[(c * s.B + b) * yx + minus_k];
    }
    const J amplitude = real_image_amplitude<T, J, CJ>(at_k, at_minus_k);
    for (int c = 0; c < C; ++c) acc[c] += amplitude.c[c];
  }
};

/// Which parameter each Jet direction is (slot -> parameter index), for the free ones.
struct FreeParameters {
  int count = 0;
  int parameter[kTileParameters] = {};
};

/// One update per active tile from its loss Jets (loss = −sum/n_mask).
template <class T, int P, int O>
struct TileUpdate {
  static constexpr int C = 1 + P * O;
  TileSetup<T> s;
  TileState<T> st;
  FreeParameters free;
  const T* sums;  ///< [B][C]

  FF_HOST_DEVICE void operator()(int64_t b) const {
    if (!st.active[b]) return;
    const T scale = -s.inverse_mask_count;
    const T loss = scale * sums[b * C];
    bool finite = std::isfinite(loss);
    T grad[kTileParameters > P ? kTileParameters : P] = {};
    T curvature[kTileParameters > P ? kTileParameters : P] = {};
    for (int q = 0; q < P; ++q) {
      grad[q] = scale * sums[b * C + 1 + q];
      curvature[q] = O == 2 ? scale * sums[b * C + 1 + P + q] : T(0);
      finite = finite && std::isfinite(grad[q]) && std::isfinite(curvature[q]);
    }
    if (!finite) {  // back to the last good parameters, and stop
      for (int p = 0; p < kTileParameters; ++p) st.params[p * s.B + b] = st.good[p * s.B + b];
      st.active[b] = 0;
      return;
    }
    for (int p = 0; p < kTileParameters; ++p) st.good[p * s.B + b] = st.params[p * s.B + b];
    st.good_loss[b] = loss;
    const TileOptimizerOptions& o = s.options;
    if (o.tolerance > 0.0) {
      const T improvement = st.last_loss[b] - loss;
      st.stalls[b] = improvement < T(o.tolerance) * std::fabs(loss) ? st.stalls[b] + 1 : 0;
      st.last_loss[b] = loss;
      if (st.stalls[b] >= o.patience) {
        st.active[b] = 0;
        return;
      }
    }
    const int t = ++st.updates[b];
    T mu_product = st.mu_product[b];
    if (o.method == TileOptimizerMethod::NAdam) {
      mu_product *= nadam_mu(t, T(o.beta1), T(o.momentum_decay));
      st.mu_product[b] = mu_product;
    }
    for (int q = 0; q < P; ++q) {
      const int p = free.parameter[q];
      const int64_t at = p * s.B + b;
      const T lr = s.learning_rate[p];
      T step;
      if (o.method == TileOptimizerMethod::Newton) {
        step = newton_step(grad[q], curvature[q], lr);
      } else if (o.method == TileOptimizerMethod::Adam) {
        step = adam_step(grad[q], st.m[at], st.v[at], t, lr, T(o.beta1), T(o.beta2), T(o.eps));
      } else {
        step = nadam_step(grad[q], st.m[at], st.v[at], t, mu_product, lr, T(o.beta1), T(o.beta2),
                          T(o.eps), T(o.momentum_decay));
      }
      st.params[at] += step;
    }
  }
};

/// The results: parameters and loss at the end (the last good ones where the final evaluation is
/// not finite), and the number of updates.
template <class T>
struct TileFinish {
  TileSetup<T> s;
  TileState<T> st;
  const T* sums;  ///< [B][1] of the final evaluation
  T* out[kTileParameters];
  T* loss;
  int32_t* iterations;

  FF_HOST_DEVICE void operator()(int64_t b) const {
    const T final_loss = -s.inverse_mask_count * sums[b];
    const bool finite = std::isfinite(final_loss);
    for (int p = 0; p < kTileParameters; ++p) {
      if (out[p] != nullptr) out[p][b] = finite ? st.params[p * s.B + b] : st.good[p * s.B + b];
    }
    loss[b] = finite ? final_loss : st.good_loss[b];
    iterations[b] = st.updates[b];
  }
};

/// Scratch of the pipeline, carved from one allocation.
template <class T>
struct TileBuffers {
  TileState<T> state;
  T* z;                  ///< [B·Z]
  T* sums;               ///< [B·Z] slice sums, then [B][C] loss sums
  Complex<T>* data;      ///< [B·Z·Y·X] spectra of the normalised tiles
  Complex<T>* spectrum;  ///< [C][B][Y·X]
  ThinBuffers<T> thin;   ///< fields [2][C][B][Z][Nu], intensity [B][C]
};

/// Carves the buffers from `base` in one fixed order (each region aligned to 256 bytes) and
/// returns the bytes they span in `*bytes`. With base = null only the size is computed (the
/// pointers stay null), so the size and the layout cannot disagree.
template <class T>
TileBuffers<T> carve_tile_buffers(char* base, int64_t B, int64_t Z, int64_t Y, int64_t X,
                                  int64_t Nu, int C, std::size_t* bytes) {
  std::size_t offset = 0;
  auto take = [&](std::size_t size) {
    char* p = base != nullptr ? base + offset : nullptr;
    offset += align_up(size);
    return p;
  };
  const std::size_t t = sizeof(T), c = 2 * sizeof(T), i = sizeof(int32_t);
  TileBuffers<T> buf;
  TileState<T>& st = buf.state;
  st.params = reinterpret_cast<T*>(take(t * kTileParameters * B));
  st.good = reinterpret_cast<T*>(take(t * kTileParameters * B));
  st.m = reinterpret_cast<T*>(take(t * kTileParameters * B));
  st.v = reinterpret_cast<T*>(take(t * kTileParameters * B));
  st.good_loss = reinterpret_cast<T*>(take(t * B));
  st.mu_product = reinterpret_cast<T*>(take(t * B));
  st.last_loss = reinterpret_cast<T*>(take(t * B));
  st.active = reinterpret_cast<int32_t*>(take(i * B));
  st.stalls = reinterpret_cast<int32_t*>(take(i * B));
  st.updates = reinterpret_cast<int32_t*>(take(i * B));
  buf.z = reinterpret_cast<T*>(take(t * B * Z));
  buf.sums = reinterpret_cast<T*>(take(t * (B * Z > B * C ? B * Z : B * C)));
  buf.data = reinterpret_cast<Complex<T>*>(take(c * B * Z * Y * X));
  buf.spectrum = reinterpret_cast<Complex<T>*>(take(c * C * B * Y * X));
  buf.thin.fields = reinterpret_cast<Complex<T>*>(take(c * 2 * C * B * Z * Nu));
  buf.thin.intensity = reinterpret_cast<T*>(take(t * B * C));
  *bytes = offset;
  return buf;
}

/// One evaluation of every tile's loss Jets at the current parameters into buf.sums [B][C].
template <int P, int O, class Exec, class T>
void evaluate_tiles(Exec& exec, const ThinModel<T>& m, const ThinDirections& dir,
                    const TileSetup<T>& s, const TileBuffers<T>& buf) {
  constexpr int C = 1 + P * O;
  exec.for_each(s.B * s.Z, ZPositions<T>{s.B, s.Z, s.z_spacing, buf.state.params, buf.z});
  TileInputs<T> in;
  in.z = buf.z;
  in.z_stride_b = s.Z;
  in.z_stride_z = 1;
  in.zenith = buf.state.params + kZenith * s.B;
  in.zenith_stride = 1;
  in.azimuth = buf.state.params + kAzimuth * s.B;
  in.azimuth_stride = 1;
  in.na_illumination = buf.state.params + kNaIllumination * s.B;
  in.na_detection = buf.state.params + kNaDetection * s.B;
  thin_correlation<P, O>(exec, m, dir, in, buf.thin);
  exec.for_each(
      s.B * s.Y * s.X,
      PhaseSpectrum<T, P, O>{
          {m, buf.thin.fields, buf.thin.intensity}, buf.data, s.regularization, buf.spectrum});
  exec.template reduce<C>(s.B, s.Y * s.X, MidbandSum<T, P, O>{s, buf.spectrum}, buf.sums);
}

template <int P, int O, class Exec, class T>
void iterate_tiles(Exec& exec, const ThinModel<T>& base, const FreeParameters& free,
                   const TileSetup<T>& s, const TileBuffers<T>& buf) {
  ThinModel<T> m = base;
  m.z_derivative = s.z_spacing;
  ThinDirections dir;
  for (int q = 0; q < free.count; ++q) {
    const int p = free.parameter[q];
    int* slot = p == kZOffset          ? &dir.z
                : p == kZenith         ? &dir.zenith
                : p == kAzimuth        ? &dir.azimuth
                : p == kNaIllumination ? &dir.na_illumination
                                       : &dir.na_detection;
    *slot = q;
  }
  for (int it = 0; it < s.options.iterations; ++it) {
    evaluate_tiles<P, O>(exec, m, dir, s, buf);
    exec.for_each(s.B, TileUpdate<T, P, O>{s, buf.state, free, buf.sums});
  }
}

template <int O, class Exec, class T>
void iterate_tiles_with(Exec& exec, const ThinModel<T>& m, const FreeParameters& free,
                        const TileSetup<T>& s, const TileBuffers<T>& buf) {
  switch (free.count) {
    case 1:
      return iterate_tiles<1, O>(exec, m, free, s, buf);
    case 2:
      return iterate_tiles<2, O>(exec, m, free, s, buf);
    case 3:
      return iterate_tiles<3, O>(exec, m, free, s, buf);
    case 4:
      return iterate_tiles<4, O>(exec, m, free, s, buf);
    default:
      return iterate_tiles<5, O>(exec, m, free, s, buf);
  }
}

/// The whole optimisation; `allocate(bytes)` returns scratch owned by the caller's scope.
template <class Exec, class T, class Allocate>
void run_optimize_tiles(Exec& exec, const TilesCall& call, Allocate&& allocate) {
  const int64_t B = call.B, Z = call.Z, Y = call.Y, X = call.X;
  if (B == 0) return;
  const ThinModel<T> m = thin_model<T>(call.settings, call.factor, B, Z, Y, X);
  const TileOptimizerOptions& o = call.options;

  FreeParameters free;
  for (int p = 0; p < kTileParameters; ++p) {
    if (call.learning_rate[p] > 0.0) free.parameter[free.count++] = p;
  }
  const int C = 1 + free.count * (o.method == TileOptimizerMethod::Newton ? 2 : 1);
  std::size_t bytes = 0;
  carve_tile_buffers<T>(nullptr, B, Z, Y, X, m.pixels_up(), C, &bytes);
  const TileBuffers<T> buf = carve_tile_buffers<T>(static_cast<char*>(allocate(bytes)), B, Z, Y, X,
                                                   m.pixels_up(), C, &bytes);

  TileSetup<T> s;
  s.B = B;
  s.Z = Z;
  s.Y = Y;
  s.X = X;
  s.z_spacing = static_cast<T>(call.z_spacing);
  s.regularization = static_cast<T>(o.regularization);
  const double cutoff = 2.0 * call.settings.na_detection / call.settings.wavelength;
  s.band_low = static_cast<T>(o.band.low * cutoff);
  s.band_high = static_cast<T>(o.band.high * cutoff);
  s.step_y = static_cast<T>(1.0 / (static_cast<double>(Y) * call.settings.pixel_size));
  s.step_x = static_cast<T>(1.0 / (static_cast<double>(X) * call.settings.pixel_size));
  int64_t mask_count = 0;
  for (int64_t k = 0; k < Y * X; ++k) {
    mask_count += in_midband(k, Y, X, s.step_y, s.step_x, s.band_low, s.band_high) ? 1 : 0;
  }
  s.inverse_mask_count = mask_count > 0 ? T(1) / static_cast<T>(mask_count) : T(0);
  s.options = o;
  for (int p = 0; p < kTileParameters; ++p)
    s.learning_rate[p] = static_cast<T>(call.learning_rate[p]);
  TileInit<T> init{s, buf.state, {}, {}, {}};
  for (int p = 0; p < kTileParameters; ++p) {
    init.initial[p] = static_cast<const T*>(call.initial[p].data);
    init.initial_stride[p] = call.initial[p].strides[0];
    init.initial_value[p] = static_cast<T>(call.initial_value[p]);
  }
  exec.for_each(B, init);

  // The data's spectra, once.
  const T* tiles = static_cast<const T*>(call.tiles.data);
  SliceSum<T> slice_sum{tiles, {}, Z, X};
  NormalizeSlices<T> normalize{tiles, {}, Z, Y, X, buf.sums, buf.data};
  for (int d = 0; d < 4; ++d) {
    slice_sum.strides[d] = call.tiles.strides[d];
    normalize.strides[d] = call.tiles.strides[d];
  }
  exec.template reduce<1>(B * Z, Y * X, slice_sum, buf.sums);
  exec.for_each(B * Z * Y * X, normalize);
  fft::FftLayout layout;
  layout.rank = 2;
  layout.n[0] = Y;
  layout.n[1] = X;
  layout.batch = B * Z;
  exec.fft(buf.data, layout, false);

  if (free.count > 0 && o.iterations > 0) {
    if (o.method == TileOptimizerMethod::Newton) {
      iterate_tiles_with<2>(exec, m, free, s, buf);
    } else {
      iterate_tiles_with<1>(exec, m, free, s, buf);
    }
  }
  ThinModel<T> final_model = m;
  final_model.z_derivative = s.z_spacing;
  evaluate_tiles<0, 1>(exec, final_model, ThinDirections{}, s, buf);
  TileFinish<T> finish{s,
                       buf.state,
                       buf.sums,
                       {},
                       static_cast<T*>(call.loss_out),
                       static_cast<int32_t*>(call.iterations_out)};
  for (int p = 0; p < kTileParameters; ++p) finish.out[p] = static_cast<T*>(call.parameters_out[p]);
  exec.for_each(B, finish);
}

}  // namespace fieldfuse::detail::optics
