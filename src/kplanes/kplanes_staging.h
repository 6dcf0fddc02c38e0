// SPDX-License-Identifier: Apache-2.0
// Plane staging for the K-Planes front (Note [plane staging] in kplanes_staging.cpp): which levels
// the CUDA kernels read from a channels-last copy, and which plane gradients they accumulate in a
// channels-last buffer, all carved from the caller's workspace.
#pragma once

#include <cstddef>
#include <vector>

#include "fieldfuse/core.h"
#include "kplanes/kplanes_drivers.h"

namespace fieldfuse::detail::kplanes {

/// The staging of one call; decided from metadata only (shapes, strides, dtypes, device, flags),
/// so the workspace query and the call agree and CUDA graphs see fixed sizes.
struct Staging {
  std::vector<char> planes;  ///< per level: read from a channels-last copy
  std::vector<char> grads;   ///< per level: gradient accumulated channels-last, then copied back
  std::size_t bytes = 0;     ///< the staging region's share of the workspace (0: nothing staged)
};

/// The one place that decides. `wants_grad_planes` and `deterministic` are the backward's; a
/// forward passes false for both.
Staging plan_staging(const Problem& pb, bool wants_grad_planes, bool deterministic);

/// The caller's plane gradients of the staged levels, to copy the buffers back into.
struct StagedGradients {
  std::vector<TensorRef> targets;  ///< per level; absent for levels not staged
  std::vector<const void*> buffers;
};

/// Copies the staged levels into the staging region at the start of `workspace` (on `stream`)
/// and points `pb`'s levels (and, for staged gradients, their grad) at the copies. Returns the
/// caller's gradients to copy back with `unstage_gradients`.
StagedGradients stage(Problem& pb, const Staging& staging, void* workspace, Stream stream);

/// Copies each staged gradient buffer into the caller's gradient, in its layout (on `stream`).
void unstage_gradients(const Problem& pb, const StagedGradients& grads, Stream stream);

/// The workspace after the staging region, and its bytes.
inline void* driver_workspace(void* workspace, const Staging& staging) {
  return workspace == nullptr ? nullptr : static_cast<char*>(workspace) + staging.bytes;
}

}  // namespace fieldfuse::detail::kplanes
