// SPDX-License-Identifier: Apache-2.0
// The sirt front: validates, carves the workspace and runs the SIRT loop, each iteration a forward
// projection, an elementwise ratio, a back projection and an elementwise update (the `project`
// family's operator pair and the drivers of sirt_cpu.cpp / sirt_cuda.cu).
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "fieldfuse/project.h"
#include "fieldfuse/tomo.h"
#include "tomo/tomo_check.h"
#include "tomo/tomo_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::tomo::aligned_bytes;
using detail::tomo::kResidualParts;

constexpr const char* kSirtOp = "sirt";

/// The workspace of one call, carved in this order: R = 1/(A·1) [n, Hd, Wd], C = 1/(Aᵀ·1)
/// [D, H, W], the stack A·x then R·(b − A·x) [n, Hd, Wd], the back projection [D, H, W], and the
/// residual's partial sums (float64).
struct SirtWorkspace {
  void* inv_row;
  void* inv_col;
  void* stack;
  void* back;
  double* partials;
  std::size_t bytes;
};

SirtWorkspace carve(const TensorRef& projections, const TensorRef& volume, void* base) {
  const std::size_t element = dtype_size(projections.dtype);
  const std::size_t stack = aligned_bytes(projections.numel(), element);
  const std::size_t vol = aligned_bytes(volume.numel(), element);
  char* p = static_cast<char*>(base);
  SirtWorkspace w;
  w.inv_row = p;
  w.inv_col = p + stack;
  w.stack = p + stack + vol;
  w.back = p + 2 * stack + vol;
  w.partials = reinterpret_cast<double*>(p + 2 * stack + 2 * vol);
  w.bytes = 2 * stack + 2 * vol + aligned_bytes(kResidualParts, sizeof(double));
  return w;
}

/// A contiguous view of `like`'s shape over workspace memory.
TensorRef scratch(void* data, const TensorRef& like) {
  return TensorRef::contiguous(data, like.dtype, like.device,
                               {like.sizes[0], like.sizes[1], like.sizes[2]});
}

detail::tomo::SirtDriver driver_for(const Device& device) {
#if FIELDFUSE_WITH_CUDA
  if (device.is_cuda()) return detail::tomo::sirt_driver_cuda();
#endif
  (void)device;
  return detail::tomo::sirt_driver_cpu();
}

}  // namespace

std::size_t sirt_workspace_size(const TensorRef& projections, const TensorRef& volume) {
  return carve(projections, volume, nullptr).bytes;
}

void sirt(const TensorRef& projections, const TensorRef& rotations, const TensorRef& shifts,
          const SirtOptions& options, const TensorRef& volume, void* workspace,
          std::size_t workspace_bytes, Stream stream, const SirtProgress& progress) {
  const char* op = kSirtOp;
  detail::tomo::check_reconstruction(op, projections, rotations, shifts, volume, false);
  if (options.iterations < 0) {
    fail(ErrorKind::Value, op,
         "expected iterations to be >= 0, but got " + std::to_string(options.iterations));
  }
  if (!(options.relaxation > 0.0 && options.relaxation < 2.0)) {  // NaN fails too
    fail(ErrorKind::Value, op,
         "expected relaxation to be in (0, 2) (the range where SIRT converges), but got " +
             detail::number_text(options.relaxation));
  }
  const SirtWorkspace w = carve(projections, volume, workspace);
  detail::check_workspace(op, workspace, workspace_bytes, w.bytes);
  if (options.iterations == 0) return;

  const detail::tomo::SirtDriver d = driver_for(projections.device);
  const detail::tomo::Exec e{op, projections.dtype, projections.device, stream};
  const detail::tomo::View3 b = detail::tomo::view_of(projections);
  const int64_t pixels = projections.numel(), voxels = volume.numel();
  const TensorRef stack = scratch(w.stack, projections);
  const TensorRef back = scratch(w.back, volume);
  const TensorRef inv_row = scratch(w.inv_row, projections);
  const TensorRef inv_col = scratch(w.inv_col, volume);

  // R = 1/(A·1) and C = 1/(Aᵀ·1), with the back-projection and stack buffers as the ones.
  d.fill(e, w.back, voxels, 1.0);
  project_forward(back, rotations, shifts, inv_row, stream);
  d.invert(e, w.inv_row, pixels);
  d.fill(e, w.stack, pixels, 1.0);
  backproject_forward(stack, rotations, shifts, inv_col, stream);
  d.invert(e, w.inv_col, voxels);

  double norm_b = 0.0;
  if (progress) {
    norm_b = std::sqrt(d.residual(e, b, nullptr, w.partials));
  }
  for (int iteration = 1; iteration <= options.iterations; ++iteration) {
    project_forward(volume, rotations, shifts, stack, stream);
    double residual = 0.0;
    if (progress) residual = std::sqrt(d.residual(e, b, w.stack, w.partials));
    d.ratio(e, b, w.stack, w.inv_row);
    backproject_forward(stack, rotations, shifts, back, stream);
    d.update(e, volume.data, w.inv_col, w.back, voxels, options.relaxation, options.positivity);
    if (progress && !progress(iteration, norm_b > 0.0 ? residual / norm_b : residual)) break;
  }
}

}  // namespace fieldfuse
