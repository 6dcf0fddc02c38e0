// SPDX-License-Identifier: Apache-2.0
// The interface between the project front (project.cpp), which validates, and the CPU and CUDA
// drivers, which run the formulas of project_math.h over pixels or voxels.
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "fieldfuse/core.h"
#include "project/project_math.h"

namespace fieldfuse::detail::project {

/// A strided 3-D tensor: the volume [D, H, W] or the projections [n, Hd, Wd].
struct Strided3 {
  void* data = nullptr;
  int64_t sizes[3] = {};
  int64_t strides[3] = {};
};

/// One call of either direction. `volume` is read by the forward and written by the back
/// projection, `projections` the other way round.
struct ProjectArgs {
  const char* op = "";
  DType dtype = DType::Float32;
  Device device{};
  int64_t count = 0;  ///< n, the projections
  Strided3 volume;
  Strided3 projections;
  const void* rotations = nullptr;  ///< [n, 3, 3]
  int64_t rotation_strides[3] = {};
  const void* shifts = nullptr;  ///< [n, 2], or null (no shifts)
  int64_t shift_strides[2] = {};
  Stream stream{};

  FF_HOST_DEVICE int64_t height() const { return projections.sizes[1]; }
  FF_HOST_DEVICE int64_t width() const { return projections.sizes[2]; }
};

/// The pose of projection m, widened to float64 (the geometry is computed in float64).
template <class T>
FF_HOST_DEVICE FF_FORCE_INLINE Pose load_pose(const ProjectArgs& a, int64_t m) {
  Pose pose;
  const T* r = static_cast<const T*>(a.rotations) + m * a.rotation_strides[0];
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 3; ++col) {
      pose.r[row * 3 + col] =
          static_cast<double>(r[row * a.rotation_strides[1] + col * a.rotation_strides[2]]);
    }
  }
  if (a.shifts != nullptr) {
    const T* s = static_cast<const T*>(a.shifts) + m * a.shift_strides[0];
    pose.shift_u = static_cast<double>(s[0]);
    pose.shift_v = static_cast<double>(s[a.shift_strides[1]]);
  } else {
    pose.shift_u = pose.shift_v = 0.0;
  }
  return pose;
}

void project_forward_cpu(const ProjectArgs& args);
void backproject_forward_cpu(const ProjectArgs& args);

#if FIELDFUSE_WITH_CUDA
void project_forward_cuda(const ProjectArgs& args);
void backproject_forward_cuda(const ProjectArgs& args);
#endif

}  // namespace fieldfuse::detail::project
