// SPDX-License-Identifier: Apache-2.0
// The optics inverse, loss and forward-model pipelines, written once over an executor: elementwise
// steps (functors calling inverse_math.h / loss_math.h) between batched FFTs. inverse_cpu.cpp
// instantiates them with parallel_for and Eigen's FFT, inverse_cuda.cu with kernels and cuFFT.
//
// The executor is the optics family's execution policy (exec_cpu.h, exec_cuda.cuh): for_each with
// a cost hint, the fixed-order per-row reduce behind slice_sums below, and the FFT layer of fft.h
// (unnormalised both ways).
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "optics/fft.h"
#include "optics/inverse_drivers.h"
#include "optics/inverse_math.h"
#include "optics/loss_math.h"

namespace fieldfuse::detail::optics {

template <class T>
FF_HOST_DEVICE inline T read_real(const View& v, int64_t b, int64_t z, int64_t f, int64_t X) {
  if (v.data == nullptr) return T(0);  // an absent gradient reads as zeros
  return static_cast<const T*>(v.data)[b * v.strides[0] + z * v.strides[1] +
                                       (f / X) * v.strides[2] + (f % X) * v.strides[3]];
}

template <class T>
FF_HOST_DEVICE inline Cx<T> read_cx(const View& v, int64_t b, int64_t z, int64_t f, int64_t X) {
  return static_cast<const Cx<T>*>(v.data)[b * v.strides[0] + z * v.strides[1] +
                                           (f / X) * v.strides[2] + (f % X) * v.strides[3]];
}

/// Adds term(s, i) into a one-wide row sum (the reduce of the execution policies).
template <class Term>
struct SumOfTerms {
  Term term;
  FF_HOST_DEVICE void operator()(int64_t s, int64_t i, double (&acc)[1]) const {
    acc[0] += term(s, i);
  }
};

/// out[s] = Σ_{i < length} term(s, i) in double, in the policy's fixed order (deterministic).
template <class E, class Term>
void slice_sums(const E& e, int64_t slices, int64_t length, const Term& term, double* out) {
  e.template reduce<1>(slices, length, SumOfTerms<Term>{term}, out);
}

/// The elements along z of a complex [B, Z, Y, X] view at one (tile, frequency), with the
/// (tile, y, x) offset computed once (a per-frequency loop over z then costs one multiply-add per
/// element, and consecutive frequencies of a contiguous view are consecutive in memory).
template <class T>
struct ZLine {
  const Cx<T>* base;
  int64_t stride;
  FF_HOST_DEVICE ZLine(const View& v, int64_t b, int64_t f, int64_t X)
      : base(static_cast<const Cx<T>*>(v.data) + b * v.strides[0] + (f / X) * v.strides[2] +
             (f % X) * v.strides[3]),
        stride(v.strides[1]) {}
  FF_HOST_DEVICE Cx<T> operator[](int64_t z) const { return base[z * stride]; }
};

/// dst[b, z, f] = x̃ (x normalised per slice when `sums`, the slices' Σx, is given), as complex.
template <class T>
struct GatherReal {
  View src;
  Shape s;
  const double* sums;
  Cx<T>* dst;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), bz = i / F, f = i % F;
    T v = read_real<T>(src, bz / s.Z, bz % s.Z, f, s.X);
    if (sums != nullptr) {
      v = static_cast<T>(v / normalization_divisor(sums[bz] / static_cast<double>(F)) - 1.0);
    }
    dst[i] = {v, T(0)};
  }
};

/// dst[b, 0, f] = first[b, f], dst[b, 1, f] = second[b, f] (absent views read as 0).
template <class T>
struct GatherPair {
  View first, second;
  Shape s;
  Cx<T>* dst;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), b = i / F, f = i % F;
    dst[2 * b * F + f] = {read_real<T>(first, b, 0, f, s.X), T(0)};
    dst[(2 * b + 1) * F + f] = {read_real<T>(second, b, 0, f, s.X), T(0)};
  }
};

/// The closed-form filter G = (M·Mᴴ + λI)⁻¹·M of one (tile, frequency): pass 1 accumulates N,
/// pass 2 writes G column by column (no per-thread arrays, whatever Z).
template <class T>
struct FilterStep {
  View hu, hp;
  Shape s;
  T lambda;
  Cx<T>* out;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), b = i / F, f = i % F;
    const ZLine<T> u(hu, b, f, s.X), p(hp, b, f, s.X);
    Gram<T> gram;
    for (int64_t z = 0; z < s.Z; ++z) gram.add(u[z], p[z]);
    const TikhonovInverse<T> inv(gram, lambda);
    Cx<T>* row0 = out + 2 * b * s.Z * F + f;
    Cx<T>* row1 = row0 + s.Z * F;
    for (int64_t z = 0; z < s.Z; ++z) {
      row0[z * F] = inv.row0(u[z], p[z]);
      row1[z * F] = inv.row1(u[z], p[z]);
    }
  }
};

/// One pass over z of a (tile, frequency): N = M·Mᴴ and M·X̂ (the right-hand side of Ŷ).
template <class T>
FF_HOST_DEVICE inline void project(const View& hu, const View& hp, const Shape& s,
                                   const Cx<T>* spectra, int64_t b, int64_t f, Gram<T>& gram,
                                   Cx<T>& v0, Cx<T>& v1) {
  const int64_t F = s.plane();
  const ZLine<T> u(hu, b, f, s.X), p(hp, b, f, s.X);
  for (int64_t z = 0; z < s.Z; ++z) {
    const Cx<T> x = spectra[(b * s.Z + z) * F + f];
    gram.add(u[z], p[z]);
    v0 = v0 + u[z] * x;
    v1 = v1 + p[z] * x;
  }
}

/// Ŷ = A⁻¹·(M·X̂) of one (tile, frequency) in one pass over z (G never formed).
template <class T>
struct SolveStep {
  View hu, hp;
  Shape s;
  T lambda;
  const Cx<T>* spectra;  ///< X̂ [B, Z, F]
  Cx<T>* outputs;        ///< Ŷ [B, 2, F]
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), b = i / F, f = i % F;
    Gram<T> gram;
    Cx<T> v0{0, 0}, v1{0, 0};
    project<T>(hu, hp, s, spectra, b, f, gram, v0, v1);
    const TikhonovInverse<T> inv(gram, lambda);
    outputs[2 * b * F + f] = inv.row0(v0, v1);
    outputs[(2 * b + 1) * F + f] = inv.row1(v0, v1);
  }
};

/// The adjoint of SolveStep (Note [tikhonov adjoint]) for the tiles [b0, b0 + tiles) of one
/// frequency: gX̂ overwrites X̂ in `spectra` when `write_data`; the transfer functions' gradients
/// are written for the first tile and added for the next (shared transfer functions: one thread
/// owns a frequency for every tile, so the sum over B has a fixed order and no atomics).
template <class T>
struct AdjointStep {
  View hu, hp;
  Shape s;
  T lambda;
  Cx<T>* spectra;      ///< X̂ in, gX̂ out [B, Z, F]
  const Cx<T>* grads;  ///< FFT2 of the outputs' gradients [B, 2, F] (unscaled)
  T grad_scale;        ///< 1/(Y·X): the adjoint of the inverse FFT's normalisation
  Cx<T>* grad_hu;      ///< null: not computed
  Cx<T>* grad_hp;
  bool write_data;
  int64_t tiles;  ///< tiles per thread: B for shared transfer-function gradients, else 1
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), b0 = (i / F) * tiles, f = i % F;
    for (int64_t b = b0; b < b0 + tiles; ++b) {
      Gram<T> gram;
      Cx<T> v0{0, 0}, v1{0, 0};
      project<T>(hu, hp, s, spectra, b, f, gram, v0, v1);
      const TikhonovInverse<T> inv(gram, lambda);
      const AdjointTerms<T> terms(inv, inv.row0(v0, v1), inv.row1(v0, v1),
                                  grad_scale * grads[2 * b * F + f],
                                  grad_scale * grads[(2 * b + 1) * F + f]);
      const int64_t tf_tile = tiles > 1 ? 0 : b;
      const ZLine<T> hu_z(hu, b, f, s.X), hp_z(hp, b, f, s.X);
      for (int64_t z = 0; z < s.Z; ++z) {
        const Cx<T> u = hu_z[z], p = hp_z[z];
        Cx<T>& x = spectra[(b * s.Z + z) * F + f];
        const int64_t at = (tf_tile * s.Z + z) * F + f;
        if (grad_hu != nullptr) {
          const Cx<T> g = terms.grad_absorption(x, u, p);
          grad_hu[at] = b == b0 ? g : grad_hu[at] + g;
        }
        if (grad_hp != nullptr) {
          const Cx<T> g = terms.grad_phase(x, u, p);
          grad_hp[at] = b == b0 ? g : grad_hp[at] + g;
        }
        if (write_data) x = terms.grad_spectrum(u, p);
      }
    }
  }
};

/// out[i] = Re(src[i])·scale + offset.
template <class T>
struct ExtractReal {
  const Cx<T>* src;
  T scale, offset;
  T* out;
  FF_HOST_DEVICE void operator()(int64_t i) const { out[i] = src[i].re * scale + offset; }
};

/// first[b, f] = Re(src[b, 0, f])·scale, second[b, f] = Re(src[b, 1, f])·scale.
template <class T>
struct ExtractPair {
  const Cx<T>* src;
  int64_t F;
  T scale;
  T* first;
  T* second;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / F, f = i % F;
    first[i] = src[2 * b * F + f].re * scale;
    second[i] = src[(2 * b + 1) * F + f].re * scale;
  }
};

/// Σ over a slice of x (the normalisation's mean), or of Re(g)·x when `grads` is given.
template <class T>
struct SliceTerm {
  View data;
  Shape s;
  const Cx<T>* grads;
  FF_HOST_DEVICE double operator()(int64_t bz, int64_t f) const {
    const double x = read_real<T>(data, bz / s.Z, bz % s.Z, f, s.X);
    return grads == nullptr ? x : static_cast<double>(grads[bz * s.plane() + f].re) * x;
  }
};

/// grad_data from Re(gx̃) (in `grads`): through the normalisation when `sums` is given.
template <class T>
struct DataGradStep {
  const Cx<T>* grads;
  Shape s;
  const double* sums;   ///< Σx per slice (null: no normalisation)
  const double* sums2;  ///< Σ Re(gx̃)·x per slice
  T* out;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), bz = i / F;
    const double g = grads[i].re;
    if (sums == nullptr) {
      out[i] = static_cast<T>(g);
      return;
    }
    const double n = static_cast<double>(F);
    out[i] = static_cast<T>(normalization_grad(g, sums[bz] / n, sums2[bz], n));
  }
};

/// X̂·conj(H)/(|H|² + λ)·scale in place, H shared by the B volumes.
template <class T>
struct Filter3dStep {
  View h;
  Shape s;
  T lambda, scale;
  Cx<T>* spectra;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t volume = s.Z * s.plane(), e = i % volume;
    const Cx<T> gain = filter_3d(read_cx<T>(h, 0, e / s.plane(), e % s.plane(), s.X), lambda);
    spectra[i] = scale * (spectra[i] * gain);
  }
};

/// The 3-D filter's adjoint at one frequency, for every volume in order: gV = scale·FFT3[g_out],
/// gX̂ = conj(gain)·gV in place (when write_data), gH = Σ_b filter_3d_grad_tf.
template <class T>
struct Adjoint3dStep {
  View h;
  Shape s;
  T lambda, scale;
  const Cx<T>* spectra;  ///< X̂ (needed for gH only)
  Cx<T>* grads;          ///< FFT3[g_out] in, gX̂ out
  Cx<T>* grad_h;         ///< null: not computed
  bool write_data;
  FF_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t volume = s.Z * s.plane();
    const Cx<T> hv = read_cx<T>(h, 0, e / s.plane(), e % s.plane(), s.X);
    const Cx<T> gain = conj(filter_3d(hv, lambda));
    Cx<T> sum{0, 0};
    for (int64_t b = 0; b < s.B; ++b) {
      const Cx<T> gv = scale * grads[b * volume + e];
      if (grad_h != nullptr) sum = sum + filter_3d_grad_tf(hv, spectra[b * volume + e], gv, lambda);
      if (write_data) grads[b * volume + e] = gain * gv;
    }
    if (grad_h != nullptr) grad_h[e] = sum;
  }
};

/// |F| on the annulus, 0 elsewhere (a term of the mid-band sum).
template <class T>
struct MidbandTerm {
  const Cx<T>* spectra;
  Shape s;
  MidbandAnnulus annulus;
  FF_HOST_DEVICE double operator()(int64_t b, int64_t f) const {
    if (!annulus.contains(f / s.X, f % s.X, s.Y, s.X)) return 0.0;
    return std::sqrt(static_cast<double>(norm2(spectra[b * s.plane() + f])));
  }
};

template <class T>
struct MidbandFinish {
  const double* sums;
  int64_t count;
  T* out;
  FF_HOST_DEVICE void operator()(int64_t b) const {
    out[b] = count > 0 ? static_cast<T>(sums[b] / static_cast<double>(count)) : T(0);
  }
};

/// g_F = g_out[b]/n_mask · F/|F| on the annulus, 0 elsewhere, in place.
template <class T>
struct MidbandAdjoint {
  View grad_out;  ///< [B] (stride in strides[0])
  Shape s;
  MidbandAnnulus annulus;
  int64_t count;
  Cx<T>* spectra;
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), b = i / F, f = i % F;
    if (count == 0 || !annulus.contains(f / s.X, f % s.X, s.Y, s.X)) {
      spectra[i] = {T(0), T(0)};
      return;
    }
    const T g = static_cast<const T*>(grad_out.data)[b * grad_out.strides[0]];
    spectra[i] = amplitude_grad(spectra[i], static_cast<T>(g / static_cast<T>(count)));
  }
};

/// D[b, z] = Â[b]·Hu[b, z] + P̂[b]·Hp[b, z] (the thin forward model's spectrum).
template <class T>
struct ModelStep {
  View hu, hp;
  Shape s;
  const Cx<T>* objects;  ///< [B, 2, F]
  Cx<T>* spectra;        ///< [B, Z, F]
  FF_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t F = s.plane(), bz = i / F, f = i % F, b = bz / s.Z, z = bz % s.Z;
    spectra[i] = objects[2 * b * F + f] * read_cx<T>(hu, b, z, f, s.X) +
                 objects[(2 * b + 1) * F + f] * read_cx<T>(hp, b, z, f, s.X);
  }
};

inline fft::FftLayout planes(int64_t batch, const Shape& s) {
  fft::FftLayout l;
  l.batch = batch;
  l.rank = 2;
  l.n[0] = s.Y;
  l.n[1] = s.X;
  return l;
}

inline fft::FftLayout volumes(const Shape& s) {
  fft::FftLayout l;
  l.batch = s.B;
  l.rank = 3;
  l.n[0] = s.Z;
  l.n[1] = s.Y;
  l.n[2] = s.X;
  return l;
}

// Cost units per index for for_each (about a flop each), so small calls stay on one thread.
constexpr int64_t kPointWork = 8;

template <class T, class E>
void run_filter(E& e, const FilterArgs& a) {
  const Shape& s = a.shape;
  e.for_each(s.B * s.plane(),
             FilterStep<T>{a.absorption_tf, a.phase_tf, s, static_cast<T>(a.regularization),
                           static_cast<Cx<T>*>(a.filter)},
             16 * s.Z);
}

/// X̂ = FFT2[x̃] into a.spectra, with the slices' Σx in a.sums when normalising.
template <class T, class E>
void data_spectra(E& e, const InverseArgs& a) {
  const Shape& s = a.shape;
  const int64_t F = s.plane();
  if (a.normalize) slice_sums(e, s.B * s.Z, F, SliceTerm<T>{a.data, s, nullptr}, a.sums);
  auto* spectra = static_cast<Cx<T>*>(a.spectra);
  e.for_each(s.B * s.Z * F, GatherReal<T>{a.data, s, a.normalize ? a.sums : nullptr, spectra},
             kPointWork);
  e.fft(spectra, planes(s.B * s.Z, s), false);
}

template <class T, class E>
void run_inverse(E& e, const InverseArgs& a) {
  const Shape& s = a.shape;
  const int64_t F = s.plane();
  data_spectra<T>(e, a);
  auto* outputs = static_cast<Cx<T>*>(a.outputs);
  e.for_each(s.B * F,
             SolveStep<T>{a.absorption_tf, a.phase_tf, s, static_cast<T>(a.regularization),
                          static_cast<const Cx<T>*>(a.spectra), outputs},
             16 * s.Z);
  e.fft(outputs, planes(2 * s.B, s), true);
  e.for_each(s.B * F,
             ExtractPair<T>{outputs, F, static_cast<T>(1.0 / static_cast<double>(F)),
                            static_cast<T*>(a.absorption), static_cast<T*>(a.phase)},
             kPointWork);
}

template <class T, class E>
void run_inverse_backward(E& e, const InverseArgs& a) {
  const Shape& s = a.shape;
  const int64_t F = s.plane();
  const bool tf_grads = a.grad_absorption_tf != nullptr || a.grad_phase_tf != nullptr;
  data_spectra<T>(e, a);
  auto* spectra = static_cast<Cx<T>*>(a.spectra);
  auto* grads = static_cast<Cx<T>*>(a.outputs);
  e.for_each(s.B * F, GatherPair<T>{a.grad_absorption, a.grad_phase, s, grads}, kPointWork);
  e.fft(grads, planes(2 * s.B, s), false);
  const int64_t tiles = a.shared_tf && tf_grads ? s.B : 1;
  if (s.B > 0) {
    e.for_each((s.B / tiles) * F,
               AdjointStep<T>{a.absorption_tf, a.phase_tf, s, static_cast<T>(a.regularization),
                              spectra, grads, static_cast<T>(1.0 / static_cast<double>(F)),
                              static_cast<Cx<T>*>(a.grad_absorption_tf),
                              static_cast<Cx<T>*>(a.grad_phase_tf), a.grad_data != nullptr, tiles},
               24 * s.Z * tiles);
  }
  if (a.grad_data == nullptr) return;
  e.fft(spectra, planes(s.B * s.Z, s), true);
  if (a.normalize) slice_sums(e, s.B * s.Z, F, SliceTerm<T>{a.data, s, spectra}, a.sums2);
  e.for_each(s.B * s.Z * F,
             DataGradStep<T>{spectra, s, a.normalize ? a.sums : nullptr, a.sums2,
                             static_cast<T*>(a.grad_data)},
             kPointWork);
}

template <class T, class E>
void run_inverse_3d(E& e, const Inverse3dArgs& a, bool backward) {
  const Shape& s = a.shape;
  const int64_t volume = s.Z * s.plane();
  const T lambda = static_cast<T>(a.regularization);
  const T scale = static_cast<T>(1.0 / static_cast<double>(volume));
  auto* spectra = static_cast<Cx<T>*>(a.spectra);
  if (!backward) {
    e.for_each(s.B * volume, GatherReal<T>{a.data, s, nullptr, spectra}, kPointWork);
    e.fft(spectra, volumes(s), false);
    e.for_each(s.B * volume, Filter3dStep<T>{a.transfer_function, s, lambda, scale, spectra},
               kPointWork);
    e.fft(spectra, volumes(s), true);
    e.for_each(s.B * volume, ExtractReal<T>{spectra, T(1), T(0), static_cast<T*>(a.out)},
               kPointWork);
    return;
  }
  auto* grads = static_cast<Cx<T>*>(a.grad_spectra);
  if (a.grad_transfer_function != nullptr) {
    e.for_each(s.B * volume, GatherReal<T>{a.data, s, nullptr, spectra}, kPointWork);
    e.fft(spectra, volumes(s), false);
  }
  e.for_each(s.B * volume, GatherReal<T>{a.grad_out, s, nullptr, grads}, kPointWork);
  e.fft(grads, volumes(s), false);
  e.for_each(
      volume,
      Adjoint3dStep<T>{a.transfer_function, s, lambda, scale, spectra, grads,
                       static_cast<Cx<T>*>(a.grad_transfer_function), a.grad_data != nullptr},
      24 * s.B);
  if (a.grad_data == nullptr) return;
  e.fft(grads, volumes(s), true);
  e.for_each(s.B * volume, ExtractReal<T>{grads, T(1), T(0), static_cast<T*>(a.grad_data)},
             kPointWork);
}

template <class T, class E>
void run_midband(E& e, const MidbandArgs& a, bool backward) {
  const Shape& s = a.shape;
  const int64_t F = s.plane();
  const MidbandAnnulus annulus{a.pixel_size, a.low_squared, a.high_squared};
  auto* spectra = static_cast<Cx<T>*>(a.spectra);
  e.for_each(s.B * F, GatherReal<T>{a.images, s, nullptr, spectra}, kPointWork);
  e.fft(spectra, planes(s.B, s), false);
  if (!backward) {
    slice_sums(e, s.B, F, MidbandTerm<T>{spectra, s, annulus}, a.sums);
    e.for_each(s.B, MidbandFinish<T>{a.sums, a.mask_count, static_cast<T*>(a.out)}, 1);
    return;
  }
  e.for_each(s.B * F, MidbandAdjoint<T>{a.grad_out, s, annulus, a.mask_count, spectra}, kPointWork);
  e.fft(spectra, planes(s.B, s), true);
  e.for_each(s.B * F, ExtractReal<T>{spectra, T(1), T(0), static_cast<T*>(a.grad_images)},
             kPointWork);
}

template <class T, class E>
void run_forward_model(E& e, const ForwardModelArgs& a) {
  const Shape& s = a.shape;
  const int64_t F = s.plane();
  auto* objects = static_cast<Cx<T>*>(a.objects);
  auto* spectra = static_cast<Cx<T>*>(a.spectra);
  e.for_each(s.B * F, GatherPair<T>{a.absorption, a.phase, s, objects}, kPointWork);
  e.fft(objects, planes(2 * s.B, s), false);
  e.for_each(s.B * s.Z * F, ModelStep<T>{a.absorption_tf, a.phase_tf, s, objects, spectra}, 16);
  e.fft(spectra, planes(s.B * s.Z, s), true);
  e.for_each(s.B * s.Z * F,
             ExtractReal<T>{spectra, static_cast<T>(1.0 / static_cast<double>(F)),
                            static_cast<T>(a.background), static_cast<T*>(a.data)},
             kPointWork);
}

}  // namespace fieldfuse::detail::optics
