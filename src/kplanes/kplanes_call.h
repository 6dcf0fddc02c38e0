// SPDX-License-Identifier: Apache-2.0
// The one implementation behind the public K-Planes entries (kplanes.h): each public function is a
// thin wrapper that describes its call as a `Call` and passes its own name for errors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fieldfuse/core.h"
#include "kplanes/kplanes_math.h"

namespace fieldfuse::detail::kplanes {

/// One evaluation of a field: points evaluated once, tap points evaluated at four taps, or both.
/// Absent tensors are default-constructed TensorRefs. Argument names in messages are the public
/// ones: `tap_pts_arg` is "pts" for kplanes_tilted_taps, whose points are all tap points.
struct Call {
  Variant variant = Variant::kTilted;
  TensorRef pts;      ///< `[B, 3]`; B may be 0
  TensorRef tap_pts;  ///< `[N, 3]`, or absent (N = 0)
  const char* tap_pts_arg = "tap_pts";
  double h = 0.0;       ///< tap step (finite); used only with tap points
  TensorRef rotations;  ///< `[T, 3, 3]`; absent axis-aligned
  const TensorRef* planes = nullptr;
  int num_levels = 0;
  const double* gates = nullptr;  ///< `num_levels` finite factors, or null (all 1)
  TensorRef valid;                ///< bool `[B]`: the points evaluated; absent: all
};

/// Where a backward writes; a null pointer skips that gradient (and the work only it needs).
struct Gradients {
  const TensorRef* pts = nullptr;
  const TensorRef* tap_pts = nullptr;
  const TensorRef* rotations = nullptr;
  const TensorRef* planes = nullptr;  ///< `num_levels` tensors
};

/// `op` is the public name every message starts with (a forward's for forward and num_features,
/// `<name>_backward` for the backward and its workspace query).
int64_t num_features(const char* op, const Call& call);

/// The forward's workspace: the staging region (Note [plane staging]), at least 1 byte.
std::size_t forward_workspace_size(const char* op, const Call& call);

/// `features [B, F]` (may be absent when B = 0) and `tap_features [4, N, F]` (may be absent when
/// N = 0).
void forward(const char* op, const Call& call, const TensorRef& features,
             const TensorRef& tap_features, void* workspace, std::size_t workspace_bytes,
             Stream stream);

std::size_t backward_workspace_size(const char* op, const Call& call, const Gradients& grads,
                                    bool deterministic);

/// `grad_features` may be absent when B = 0, `grad_tap_features` when N = 0.
void backward(const char* op, const Call& call, const TensorRef& grad_features,
              const TensorRef& grad_tap_features, const Gradients& grads, bool deterministic,
              void* workspace, std::size_t workspace_bytes, Stream stream);

}  // namespace fieldfuse::detail::kplanes
