// SPDX-License-Identifier: Apache-2.0
// KPlanesReconstruction::export_volume: the field's density on a voxel grid, in chunks.
#include <algorithm>

#include "core/check.h"
#include "core/dispatch.h"
#include "fieldfuse/kplanes.h"
#include "tomo/kplanes_recon_impl.h"

namespace fieldfuse {

namespace glue = detail::tomo;

void KPlanesReconstruction::export_volume(const TensorRef& volume, int64_t chunk_points) {
  const char* op = "kplanes_reconstruct.export_volume";
  Impl& s = *impl_;
  detail::check_storage(op, "volume", volume);
  if (volume.ndim != 3) {
    detail::fail(ErrorKind::Value, op,
                 "expected volume to have shape [D, H, W], but got shape " + volume.shape_str());
  }
  if (volume.dtype != DType::Float32 && volume.dtype != DType::Float64) {
    detail::fail(ErrorKind::Type, op,
                 std::string("expected volume to have dtype float32 or float64, but got ") +
                     dtype_name(volume.dtype));
  }
  if (volume.device != s.device) {
    detail::fail(ErrorKind::Value, op,
                 "expected volume to be on " + s.device.str() +
                     " (the reconstruction's device), but got " + volume.device.str());
  }
  detail::check_contiguous(op, "volume", volume);
  if (chunk_points < 1) {
    detail::fail(ErrorKind::Value, op,
                 "expected chunk_points to be >= 1, but got " + std::to_string(chunk_points));
  }
  const int64_t total = volume.numel();
  if (total == 0) return;
  const int64_t chunk = std::min(chunk_points, total);
  const int64_t F = s.features, Tt = s.options.num_tilts;
  const int L = static_cast<int>(s.levels);
  const std::size_t e = dtype_size(s.dtype);
  glue::Buffer points(s.device, std::size_t(3 * chunk) * e),
      rows(s.device, std::size_t(chunk * F) * e), raw(s.device, std::size_t(chunk) * e);
  const std::vector<TensorRef> planes = s.plane_views(false),
                               weights = s.decoder_views(false, false),
                               biases = s.decoder_views(true, false);
  const TensorRef rot = s.tensor(s.field_rotations, {Tt, 3, 3});
  const TensorRef full_pts = s.tensor(points, {chunk, 3}), full_rows = s.tensor(rows, {chunk, F});
  glue::Buffer kp_ws(s.device,
                     kplanes_tilted_forward_workspace_size(full_pts, rot, planes.data(), L));
  glue::Buffer mlp_ws(
      s.device, mlp_forward_workspace_size(full_rows, weights.data(), biases.data(),
                                           static_cast<int>(s.decoder_layers), s.mlp_options()));
  detail::dispatch_float_types(op, s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The field rotations of the current quaternions (the pose stage's second range).
    glue::PoseStage<T> poses;
    poses.projections = 0;
    poses.quaternions = s.params[s.rotations_index].value.as<T>();
    poses.field_rotations = s.field_rotations.as<T>();
    glue::for_each(s.device, Tt, 64, poses, s.stream);
    for (int64_t first = 0; first < total; first += chunk) {
      const int64_t count = std::min(chunk, total - first);
      glue::VoxelStage<T> voxels;
      voxels.first = first;
      voxels.depth = volume.sizes[0];
      voxels.height = volume.sizes[1];
      voxels.width = volume.sizes[2];
      voxels.points = points.as<T>();
      glue::for_each(s.device, count, 8, voxels, s.stream);
      const TensorRef pts = s.tensor(points, {count, 3}), features = s.tensor(rows, {count, F}),
                      out = s.tensor(raw, {count, 1});
      kplanes_tilted_forward(pts, rot, planes.data(), L, nullptr, features, kp_ws.data(),
                             kp_ws.bytes(), s.stream);
      mlp_forward(features, weights.data(), biases.data(), static_cast<int>(s.decoder_layers),
                  s.mlp_options(), out, mlp_ws.data(), mlp_ws.bytes(), s.stream);
      detail::dispatch_float_types(op, volume.dtype, [&](auto vtag) {
        using V = typename decltype(vtag)::type;
        glue::ExportDensityStage<T, V> write;
        write.first = first;
        write.raw = raw.as<T>();
        write.out = static_cast<V*>(volume.data);
        glue::for_each(s.device, count, 4, write, s.stream);
      });
    }
  });
  // The chunk buffers are freed on return: wait until the work that reads them is done.
  if (s.device.is_cuda()) {
#if FIELDFUSE_WITH_CUDA
    glue::cuda_synchronize(s.stream);
#endif
  }
}

}  // namespace fieldfuse
