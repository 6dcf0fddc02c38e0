// SPDX-License-Identifier: Apache-2.0
// The interface between the K-Planes front (kplanes.cpp), which validates and lays out the
// problem, and the CPU and CUDA drivers, which only iterate, scatter and reduce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/macros.h"
#include "fieldfuse/core.h"
#include "kplanes/kplanes_math.h"

namespace fieldfuse::detail::kplanes {

/// A strided `[P, C, H, W]` level (element strides; channels-last has stride_c == 1).
struct PlaneView {
  int64_t planes = 0, channels = 0, height = 0, width = 0;
  int64_t stride_k = 0, stride_c = 0, stride_y = 0, stride_x = 0;

  FF_HOST_DEVICE FF_FORCE_INLINE int64_t offset(int64_t k, int64_t c, int64_t y, int64_t x) const {
    return k * stride_k + c * stride_c + y * stride_y + x * stride_x;
  }
  FF_HOST_DEVICE int64_t numel() const { return planes * channels * height * width; }
};

/// The dense channels-last view of a `[P, C, H, W]` level (strides (H·W·C, 1, W·C, C)).
inline PlaneView channels_last(const PlaneView& v) {
  PlaneView cl = v;
  cl.stride_c = 1;
  cl.stride_x = v.channels;
  cl.stride_y = v.channels * v.width;
  cl.stride_k = v.channels * v.width * v.height;
  return cl;
}

/// A level as a `[P, C, H, W]` TensorRef (for the layout copies, layout_copy.h).
inline TensorRef plane_ref(const void* data, const PlaneView& v, DType dtype, Device device) {
  TensorRef t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.device = device;
  t.ndim = 4;
  const int64_t sizes[4] = {v.planes, v.channels, v.height, v.width};
  const int64_t strides[4] = {v.stride_k, v.stride_c, v.stride_y, v.stride_x};
  for (int i = 0; i < 4; ++i) t.sizes[i] = sizes[i], t.strides[i] = strides[i];
  return t;
}

/// One level as the drivers see it.
struct Level {
  const void* data = nullptr;
  PlaneView view;
  int64_t column = 0;  ///< first feature column of the level (T·Σ_{m<l} C_m)
  double gate = 1.0;
  void* grad = nullptr;  ///< backward: the plane gradient (dense), or null
  PlaneView grad_view;
};

/// A strided `[rows, 3]` point array.
struct PointsView {
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t stride_row = 0, stride_col = 0;
};

/// Upstream gradients, or outputs, of shape [rows, F] (taps: [4, rows, F]), any strides.
struct MatrixView {
  const void* data = nullptr;
  int64_t stride_tap = 0, stride_row = 0, stride_col = 0;
};

/// A validated problem. Sample slots are the B points (one position each) followed by the N tap
/// points (kTapsPerTapPoint positions each).
struct Problem {
  const char* op = "";
  Variant variant = Variant::kTilted;
  DType dtype = DType::Float32;        ///< points, rotations, compute type
  DType plane_dtype = DType::Float32;  ///< all levels
  Device device{};
  PointsView pts, tap_pts;
  double h = 0.0;
  const void* rotations = nullptr;  ///< tilted: [T, 3, 3]
  int64_t rotation_strides[3] = {0, 0, 0};
  int num_tilts = 1;
  std::vector<Level> levels;
  int64_t num_features = 0;
  const bool* valid = nullptr;  ///< [B] points evaluated (stride valid_stride), or null: all
  int64_t valid_stride = 0;

  int64_t num_slots() const { return pts.rows + tap_pts.rows; }
  /// Positions evaluated (B + 4N), each one feature row.
  int64_t num_positions() const { return pts.rows + kTapsPerTapPoint * tap_pts.rows; }
  int64_t planes_per_level() const { return 3 * static_cast<int64_t>(num_tilts); }
};

struct ForwardOutputs {
  void* features = nullptr;      ///< contiguous [B, F]
  void* tap_features = nullptr;  ///< contiguous [4, N, F]
  DType dtype = DType::Float32;
};

struct BackwardArgs {
  Problem problem;
  MatrixView grad_features, grad_tap_features;  ///< dtype grad_dtype
  DType grad_dtype = DType::Float32;
  // Outputs (null data = not wanted); strided.
  void* grad_pts = nullptr;
  int64_t grad_pts_strides[2] = {0, 0};
  void* grad_tap_pts = nullptr;
  int64_t grad_tap_pts_strides[2] = {0, 0};
  void* grad_rotations = nullptr;
  int64_t grad_rotation_strides[3] = {0, 0, 0};
  bool wants_planes = false;  ///< every level's grad is set
  bool deterministic = false;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  Stream stream{};

  bool wants_geometry() const {
    return grad_pts != nullptr || grad_tap_pts != nullptr || grad_rotations != nullptr;
  }
};

// ---- strided access shared by the drivers ------------------------------------------------------

/// Row `row` of a strided [rows, 3] point array.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void load_point(const PointsView& v, int64_t row, T (&p)[3]) {
  const T* base = static_cast<const T*>(v.data) + row * v.stride_row;
  p[0] = base[0];
  p[1] = base[v.stride_col];
  p[2] = base[2 * v.stride_col];
}

/// Rotation t of a strided [T, 3, 3] array, row-major into R.
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE void load_rotation(const void* data, const int64_t (&strides)[3],
                                                  int64_t t, T (&R)[9]) {
  const T* base = static_cast<const T*>(data) + t * strides[0];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < 3; ++i) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 3; ++j) R[3 * i + j] = base[i * strides[1] + j * strides[2]];
  }
}

/// Rotation t (tilted), or the identity (axis-aligned: its planes read the point itself).
template <Variant V, class T>
FF_HOST_DEVICE FF_FORCE_INLINE void rotation_or_identity(const void* data,
                                                         const int64_t (&strides)[3], int64_t t,
                                                         T (&R)[9]) {
  if (V == Variant::kTilted) {
    load_rotation(data, strides, t, R);
  } else {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < 9; ++i) R[i] = (i % 4 == 0) ? T(1) : T(0);
  }
}

/// Calls `f(std::integral_constant<Variant, v>{})`, so drivers get the variant at compile time.
template <class F>
void visit_variant(Variant v, const F& f) {
  if (v == Variant::kTilted) {
    f(std::integral_constant<Variant, Variant::kTilted>{});
  } else {
    f(std::integral_constant<Variant, Variant::kAxisAligned>{});
  }
}

/// The four corner rows of plane k under a tap, located once per tap so that the channel loop
/// only steps by stride_c: channel c of corner j is at[j][c·stride_c].
template <class S>
struct CornerRows {
  const S* at[4];
  int64_t stride_c;

  /// Channel c; `kDense` promises stride_c == 1 (channels-last), which lets the CPU driver's
  /// channel loop vectorise.
  template <class T, bool kDense = false>
  FF_HOST_DEVICE FF_FORCE_INLINE Corners<T> load(int64_t c) const {
    const int64_t o = kDense ? c : c * stride_c;
    return {{static_cast<T>(at[0][o]), static_cast<T>(at[1][o]), static_cast<T>(at[2][o]),
             static_cast<T>(at[3][o])}};
  }
};

template <class S, class T>
FF_HOST_DEVICE FF_FORCE_INLINE CornerRows<S> corner_rows(const S* plane, const PlaneView& v,
                                                         int64_t k, const BilinearTap<T>& tap) {
  const S* base = plane + k * v.stride_k;
  const int64_t r0 = tap.y0 * v.stride_y, r1 = tap.y1 * v.stride_y;
  const int64_t c0 = tap.x0 * v.stride_x, c1 = tap.x1 * v.stride_x;
  return {{base + r0 + c0, base + r0 + c1, base + r1 + c0, base + r1 + c1}, v.stride_c};
}

/// One sample slot (Problem): which points array it reads, its row there and how many positions.
struct Slot {
  bool is_tap_point;
  int64_t row;
  int num_positions;
};

FF_HOST_DEVICE FF_FORCE_INLINE Slot slot_of(int64_t s, int64_t num_points) {
  return s < num_points ? Slot{false, s, 1} : Slot{true, s - num_points, kTapsPerTapPoint};
}

/// Whether a slot is evaluated: tap points always, points unless the `valid` mask (if any) says
/// not. An unevaluated point has zero features and no gradient.
FF_HOST_DEVICE FF_FORCE_INLINE bool evaluated(const Slot& slot, const bool* valid,
                                              int64_t valid_stride) {
  return slot.is_tap_point || valid == nullptr || valid[slot.row * valid_stride];
}

/// Element (tap, row, col) of a [rows, F] or [4, rows, F] matrix stored as S, as T.
template <class T, class S = T>
FF_HOST_DEVICE FF_FORCE_INLINE T matrix_at(const MatrixView& m, int64_t tap, int64_t row,
                                           int64_t col) {
  return static_cast<T>(
      static_cast<const S*>(m.data)[tap * m.stride_tap + row * m.stride_row + col * m.stride_col]);
}

void forward_cpu(const Problem& problem, const ForwardOutputs& out);
std::size_t backward_workspace_cpu(const Problem& problem);
void backward_cpu(const BackwardArgs& args);

#if FIELDFUSE_WITH_CUDA
void forward_cuda(const Problem& problem, const ForwardOutputs& out, Stream stream);
std::size_t backward_workspace_cuda(const Problem& problem, bool wants_planes, bool deterministic);
void backward_cuda(const BackwardArgs& args);
#endif

}  // namespace fieldfuse::detail::kplanes
