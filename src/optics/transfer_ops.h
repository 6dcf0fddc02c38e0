// SPDX-License-Identifier: Apache-2.0
// thin_transfer_functions and its backward on top of the shared pipeline, over an execution policy
// (included by the CPU and the CUDA driver only).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/check.h"
#include "optics/transfer_drivers.h"
#include "optics/transfer_pipeline.h"

namespace fieldfuse::detail::optics {

/// Writes Hu and Hp [B, Z, Y, X] (values only).
template <class T>
struct ThinWrite {
  ThinTransferReader<T, 0, 1> reader;
  Complex<T>* absorption;
  Complex<T>* phase;

  FF_HOST_DEVICE void operator()(int64_t i) const {
    const ThinModel<T>& m = reader.m;
    const int64_t yx = m.Y * m.X;
    const int64_t slice = i / yx, k = i - slice * yx;
    const auto t = reader.at(slice / m.Z, slice % m.Z, k);
    absorption[i] = t.absorption.c[0];
    phase[i] = t.phase.c[0];
  }
};

/// Row (b, z): Σ_k Re(conj(g_u)·∂Hu/∂p + conj(g_p)·∂Hp/∂p) for each direction p.
template <class T, int P>
struct ThinVjp {
  ThinTransferReader<T, P, 1> reader;
  const Complex<T>* grad_absorption;
  const Complex<T>* grad_phase;
  int64_t ga[4], gp[4];  ///< strides of the output gradients

  FF_HOST_DEVICE void operator()(int64_t row, int64_t k, T (&acc)[P]) const {
    const ThinModel<T>& m = reader.m;
    const int64_t b = row / m.Z, z = row - b * m.Z;
    const int64_t ky = k / m.X, kx = k - ky * m.X;
    const auto t = reader.at(b, z, k);
    const Complex<T> gu = grad_absorption[b * ga[0] + z * ga[1] + ky * ga[2] + kx * ga[3]];
    const Complex<T> gv = grad_phase[b * gp[0] + z * gp[1] + ky * gp[2] + kx * gp[3]];
    for (int p = 0; p < P; ++p) {
      acc[p] += (conj(gu) * t.absorption.c[1 + p]).re + (conj(gv) * t.phase.c[1 + p]).re;
    }
  }
};

/// Scatters the per-(b, z) partials into the input gradients: z's own, and sums over z (in order)
/// for the per-tile and shared inputs.
template <class T, int P>
struct ThinVjpScatter {
  int64_t Z;
  ThinDirections dir;
  const T* partial;  ///< [B·Z][P]
  T* grad_z;
  T* grad_zenith;
  T* grad_azimuth;
  T* grad_na_illumination;
  T* grad_na_detection;

  FF_HOST_DEVICE static void sum_into(T* out, const T* partial, int64_t b, int64_t Z, int p) {
    if (out == nullptr || p < 0) return;
    T s = T(0);
    for (int64_t z = 0; z < Z; ++z) s += partial[(b * Z + z) * P + p];
    out[b] = s;
  }

  FF_HOST_DEVICE void operator()(int64_t b) const {
    if (grad_z != nullptr && dir.z >= 0) {
      for (int64_t z = 0; z < Z; ++z) grad_z[b * Z + z] = partial[(b * Z + z) * P + dir.z];
    }
    sum_into(grad_zenith, partial, b, Z, dir.zenith);
    sum_into(grad_azimuth, partial, b, Z, dir.azimuth);
    sum_into(grad_na_illumination, partial, b, Z, dir.na_illumination);
    sum_into(grad_na_detection, partial, b, Z, dir.na_detection);
  }
};

template <class T>
ThinModel<T> thin_model(const ThinCall& call) {
  return thin_model<T>(call.settings, call.factor, call.B, call.Z, call.Y, call.X);
}

template <class T>
TileInputs<T> tile_inputs(const ThinCall& call) {
  TileInputs<T> in;
  in.z = static_cast<const T*>(call.z_positions.data);
  in.z_stride_b = call.z_positions.strides[0];
  in.z_stride_z = call.z_positions.strides[1];
  in.zenith = static_cast<const T*>(call.zenith.data);
  in.zenith_stride = call.zenith.strides[0];
  in.azimuth = static_cast<const T*>(call.azimuth.data);
  in.azimuth_stride = call.azimuth.strides[0];
  return in;
}

template <int P, class Exec, class T>
void run_thin_backward(Exec& exec, const ThinCall& call, const ThinModel<T>& m,
                       const ThinDirections& dir, char* workspace) {
  constexpr int C = 1 + P;
  const int64_t nu = m.pixels_up();
  ThinBuffers<T> buf;
  buf.fields = reinterpret_cast<Complex<T>*>(workspace);
  char* next = workspace + align_up(sizeof(Complex<T>) * 2 * C * m.B * m.Z * nu);
  buf.intensity = reinterpret_cast<T*>(next);
  next += align_up(sizeof(T) * m.B * C);
  T* partial = reinterpret_cast<T*>(next);

  const TileInputs<T> in = tile_inputs<T>(call);
  thin_correlation<P, 1>(exec, m, dir, in, buf);
  ThinVjp<T, P> vjp{{m, buf.fields, buf.intensity},
                    static_cast<const Complex<T>*>(call.grad_absorption.data),
                    static_cast<const Complex<T>*>(call.grad_phase.data),
                    {},
                    {}};
  for (int d = 0; d < 4; ++d) {
    vjp.ga[d] = call.grad_absorption.strides[d];
    vjp.gp[d] = call.grad_phase.strides[d];
  }
  exec.template reduce<P>(m.B * m.Z, m.Y * m.X, vjp, partial);
  exec.for_each(m.B, ThinVjpScatter<T, P>{m.Z, dir, partial, static_cast<T*>(call.grad_z),
                                          static_cast<T*>(call.grad_zenith),
                                          static_cast<T*>(call.grad_azimuth),
                                          static_cast<T*>(call.grad_na_illumination),
                                          static_cast<T*>(call.grad_na_detection)});
}

template <class Exec, class T>
void run_thin_transfer(Exec& exec, const ThinCall& call) {
  const ThinModel<T> m = thin_model<T>(call);
  if (m.B == 0 || m.Z == 0 || m.Y == 0 || m.X == 0) return;
  char* workspace = static_cast<char*>(call.workspace);
  if (call.forward()) {
    ThinBuffers<T> buf;
    buf.fields = reinterpret_cast<Complex<T>*>(workspace);
    buf.intensity = reinterpret_cast<T*>(
        workspace + align_up(sizeof(Complex<T>) * 2 * m.B * m.Z * m.pixels_up()));
    thin_correlation<0, 1>(exec, m, ThinDirections{}, tile_inputs<T>(call), buf);
    exec.for_each(m.B * m.Z * m.Y * m.X, ThinWrite<T>{{m, buf.fields, buf.intensity},
                                                      static_cast<Complex<T>*>(call.absorption),
                                                      static_cast<Complex<T>*>(call.phase)});
    return;
  }
  // Backward: one direction per gradient asked for, in a fixed order.
  ThinDirections dir;
  int p = 0;
  if (call.grad_z) dir.z = p++;
  if (call.grad_zenith) dir.zenith = p++;
  if (call.grad_azimuth) dir.azimuth = p++;
  if (call.grad_na_illumination) dir.na_illumination = p++;
  if (call.grad_na_detection) dir.na_detection = p++;
  switch (p) {
    case 0:
      return;
    case 1:
      return run_thin_backward<1>(exec, call, m, dir, workspace);
    case 2:
      return run_thin_backward<2>(exec, call, m, dir, workspace);
    case 3:
      return run_thin_backward<3>(exec, call, m, dir, workspace);
    case 4:
      return run_thin_backward<4>(exec, call, m, dir, workspace);
    default:
      return run_thin_backward<5>(exec, call, m, dir, workspace);
  }
}

}  // namespace fieldfuse::detail::optics
