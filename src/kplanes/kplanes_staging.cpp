// SPDX-License-Identifier: Apache-2.0
// Plane staging for the K-Planes front: the decision (Note [plane staging]) and the copies into and
// out of the workspace's staging region.
#include "kplanes/kplanes_staging.h"

#include <cstdint>

#include "core/layout_copy.h"

namespace fieldfuse::detail::kplanes {
namespace {

// Note [plane staging]
// The CUDA kernels give each (point, tilt) a group of lanes that reads 4 consecutive channels of a
// corner per lane (Note [lanes]): with channels-last planes a group's reads of one corner are one
// coalesced run (16-byte vectors when C % 4 == 0 and the strides are multiples of 4), and the
// default backward adds its shares with one vector atomic per corner. With NCHW planes every
// channel of a corner is a separate cache line, H·W elements from the next: measured on an H100
// (kplanes_tilted, fwd+bwd, fp32) 5.28 ms NCHW vs 1.02 ms channels-last at the tomography config
// (T=4, C=8, 200², B=614 400) and 94 ms vs 10.9 ms at the production one (T=8, C=48,
// 50²/100²/200², B=262 144); the forward alone was 3.3-5.9x slower.
//
// So on CUDA a level that is not in the fast layout is staged: copied (layout_copy.h, a tiled
// transpose moving ~2 bytes per plane byte: ~0.16 ms for the production config's 242 MB of float32
// planes at H100 bandwidth) into a dense channels-last buffer carved from the caller's workspace,
// and the kernels read the copy. In the backward the plane gradient of a staged level is
// accumulated in a dense channels-last buffer of the plane dtype (zero-filled by the default
// scatter, fully written by the deterministic gather) and copied back into the caller's gradient
// in its layout. 16-bit planes on the default path need no buffer of ours: the driver already
// accumulates them in float32 channels-last and rounds once while copying into the caller's layout
// (copy_from_channels_last converts), so staging costs them no extra pass.
//
// The decision reads metadata only (the plane's strides, never the data pointer's alignment, and
// not the gradient's strides, which the workspace query does not see): the query and the call
// agree, and the workspace size depends on shapes, dtypes, strides and flags alone, so PyTorch's
// caching allocator, CUDA graphs and torch.compile keep working. Gradients are assumed to share
// their planes' layout (torch.empty_like); any other dense layout is still written correctly,
// through the copy back or in place. A channels-last level whose data is not 16-byte aligned runs
// in place on the scalar loads (still coalesced). Workspace: per staged level, its plane bytes, and
// as much again for its gradient (float32/float64, or deterministic), plus 256 bytes of alignment.
//
// The CPU driver reads in place: its channel loop has a vectorised instance for channels-last
// planes and a strided one for the rest, and they run at the same speed. Measured on the 2-core
// development machine (kplanes_tilted fp32, T=2, two levels of C=16, 128², B=20 000, median of 7,
// three runs): forward NCHW/channels-last 0.97-1.08 (about 4.2 ms each), forward+backward
// 0.92-1.14 (about 30 ms), while the transpose copy of the planes alone took 1.2 ms: staging
// would add about 25% to the CPU forward and save nothing.

/// The CUDA kernels' fast layout (Note [plane staging]), from metadata only: channels adjacent (or
/// a single channel), and with C % 4 == 0 every other stride a multiple of 4, as the vector path
/// (aligned_channels_last in kplanes_cuda.cuh) needs.
bool reads_fast_in_place(const PlaneView& v) {
  if (v.channels > 1 && v.stride_c != 1) return false;
  if (v.channels % 4 != 0) return true;
  const auto multiple = [](int64_t size, int64_t stride) { return size == 1 || stride % 4 == 0; };
  return multiple(v.planes, v.stride_k) && multiple(v.height, v.stride_y) &&
         multiple(v.width, v.stride_x);
}

bool is_16bit(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

TensorRef level_ref(const void* data, const PlaneView& v, const Problem& pb) {
  return plane_ref(data, v, pb.plane_dtype, pb.device);
}

std::size_t buffer_bytes(const Problem& pb, const Level& level) {
  return channels_last_bytes(level_ref(nullptr, level.view, pb), pb.plane_dtype, pb.op);
}

}  // namespace

Staging plan_staging(const Problem& pb, bool wants_grad_planes, bool deterministic) {
  Staging s;
  s.planes.assign(pb.levels.size(), 0);
  s.grads.assign(pb.levels.size(), 0);
  if (!pb.device.is_cuda()) return s;  // the CPU reads in place (Note [plane staging])
  // 16-bit gradients of the default path are float32 channels-last in the driver already.
  const bool stage_grads = wants_grad_planes && (deterministic || !is_16bit(pb.plane_dtype));
  std::size_t bytes = 0;
  for (std::size_t l = 0; l < pb.levels.size(); ++l) {
    if (reads_fast_in_place(pb.levels[l].view)) continue;
    s.planes[l] = 1;
    bytes += buffer_bytes(pb, pb.levels[l]);
    if (stage_grads) {
      s.grads[l] = 1;
      bytes += buffer_bytes(pb, pb.levels[l]);
    }
  }
  // The workspace is promised 8-byte alignment; the buffers start on a 256-byte boundary.
  s.bytes = bytes > 0 ? bytes + kChannelsLastAlignment : 0;
  return s;
}

StagedGradients stage(Problem& pb, const Staging& staging, void* workspace, Stream stream) {
  StagedGradients out;
  out.targets.resize(pb.levels.size());
  out.buffers.assign(pb.levels.size(), nullptr);
  if (staging.bytes == 0) return out;
  const auto address = reinterpret_cast<std::uintptr_t>(workspace);
  char* next = static_cast<char*>(workspace) +
               (kChannelsLastAlignment - address % kChannelsLastAlignment) % kChannelsLastAlignment;
  for (std::size_t l = 0; l < pb.levels.size(); ++l) {
    Level& level = pb.levels[l];
    if (!staging.planes[l]) continue;
    const std::size_t bytes = buffer_bytes(pb, level);
    copy_to_channels_last(level_ref(level.data, level.view, pb), next, pb.plane_dtype, stream,
                          pb.op);
    level.data = next;
    next += bytes;
    if (staging.grads[l]) {
      out.targets[l] = level_ref(level.grad, level.grad_view, pb);
      out.buffers[l] = next;
      level.grad = next;
      level.grad_view = channels_last(level.view);
      next += bytes;
    }
    level.view = channels_last(level.view);
  }
  return out;
}

void unstage_gradients(const Problem& pb, const StagedGradients& grads, Stream stream) {
  for (std::size_t l = 0; l < grads.buffers.size(); ++l) {
    if (grads.buffers[l] == nullptr) continue;
    copy_from_channels_last(grads.buffers[l], pb.plane_dtype, grads.targets[l], stream, pb.op);
  }
}

}  // namespace fieldfuse::detail::kplanes
