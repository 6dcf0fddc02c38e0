// SPDX-License-Identifier: Apache-2.0
// make_volume_view: coalesces a tensor's leading dims into the compact form VolumeView walks.
#include "core/volume_view.h"

namespace fieldfuse::detail {

VolumeView make_volume_view(const TensorRef& t, int inner_dims) {
  VolumeView v;
  const int lead = t.ndim - inner_dims;
  v.width = t.sizes[t.ndim - 1];
  v.stride_w = t.strides[t.ndim - 1];
  v.height = t.sizes[t.ndim - 2];
  v.stride_h = t.strides[t.ndim - 2];
  if (inner_dims == 3) {
    v.depth = t.sizes[t.ndim - 3];
    v.stride_d = t.strides[t.ndim - 3];
  }
  // Drop size-1 leading dims and merge neighbours whose strides nest (stride[i] == size[i+1] *
  // stride[i+1]), so a contiguous batch of any rank becomes one dim.
  v.batch = 1;
  for (int i = 0; i < lead; ++i) {
    const int64_t size = t.sizes[i];
    const int64_t stride = t.strides[i];
    v.batch *= size;
    if (size == 1) continue;
    const int last = v.lead_ndim - 1;
    if (last >= 0 && v.lead_strides[last] == size * stride) {
      v.lead_sizes[last] *= size;
      v.lead_strides[last] = stride;
    } else {
      v.lead_sizes[v.lead_ndim] = size;
      v.lead_strides[v.lead_ndim] = stride;
      ++v.lead_ndim;
    }
  }
  return v;
}

}  // namespace fieldfuse::detail
