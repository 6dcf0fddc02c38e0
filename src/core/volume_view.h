// SPDX-License-Identifier: Apache-2.0
// VolumeView: a strided `[..., D, H, W]` tensor seen as B independent D×H×W volumes, usable on host
// and device. Leading dims may have any strides; they are coalesced once on the host so the common
// cases (contiguous, or one batch dim) cost a single multiply per slice.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "fieldfuse/core.h"

namespace fieldfuse::detail {

struct VolumeView {
  int64_t batch = 1;  ///< B, the product of the leading dims.
  int64_t depth = 1, height = 1, width = 1;
  int64_t stride_d = 0, stride_h = 0, stride_w = 0;
  // Leading dims after coalescing (row-major), to turn a slice index n into an element offset.
  int32_t lead_ndim = 0;
  int64_t lead_sizes[kMaxDims] = {};
  int64_t lead_strides[kMaxDims] = {};

  /// Element offset of slice n's voxel (0, 0, 0).
  FF_HOST_DEVICE int64_t slice_offset(int64_t n) const {
    int64_t offset = 0;
    for (int32_t i = lead_ndim - 1; i >= 0; --i) {
      const int64_t size = lead_sizes[i];
      offset += (n % size) * lead_strides[i];
      n /= size;
    }
    return offset;
  }

  FF_HOST_DEVICE int64_t voxels_per_slice() const { return depth * height * width; }
  FF_HOST_DEVICE int64_t numel() const { return batch * voxels_per_slice(); }
};

/// Views the last `inner_dims` (2 or 3) dims of `t` as (D, H, W); with 2 inner dims D = 1.
/// Precondition: t.ndim >= inner_dims (checked by the caller's front).
VolumeView make_volume_view(const TensorRef& t, int inner_dims = 3);

}  // namespace fieldfuse::detail
