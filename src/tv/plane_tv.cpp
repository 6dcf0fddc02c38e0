// SPDX-License-Identifier: Apache-2.0
// Front of plane_tv (declared in fieldfuse/kplanes.h, next to the planes it smooths): each level's
// planes viewed as a volume stack, reduced by the TV drivers into per-axis Δ² sums
// (Functional::SqAxes, plane_tv_math.h) that a per-level plan weighs into the level's term.
//
// Note [plane_tv layout]
// Layouts are read in place, unlike the feature functions (Note [plane staging] in
// src/kplanes/kplanes_staging.cpp). The TV kernels put threadIdx.x along the view's W axis
// (coalesced rows, and the 4-wide quad path of Note [quad path] in tv_cuda.cu), so each level is
// viewed as a volume with its innermost axis there, and the channel axis's sum weighted 0 (plane
// TV takes no differences across channels): an NCHW level as [3T, C, H, W] (depth C); a
// channels-last one (C innermost) as [3T, H, W, C], whose depth and height are the plane's H and
// W and whose width is C. Before, a level was a stack of 3T·C [H, W] slices: channels-last rows
// were read C elements apart (3-4× slower than NCHW, production config, H100), and NCHW ran on
// the slice path (0.55 ms for the production forward against 0.21 ms for the volume view).
// On CUDA, a level whose planes are dense rows (plane_rows) skips the volume view for the row
// kernels of Note [plane_tv rows] in plane_tv_cuda.cu; other layouts, and the CPU, keep it.
#include <algorithm>
#include <optional>
#include <string>

#include "core/check.h"
#include "core/volume_view.h"
#include "fieldfuse/kplanes.h"
#include "tv/plane_tv_drivers.h"
#include "tv/tv_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::tv::Functional;
using detail::tv::PlaneRows;
using detail::tv::ReducePlan;

constexpr const char* kForwardOp = "plane_tv";
constexpr const char* kBackwardOp = "plane_tv_backward";

DType reduced_dtype(DType d) {
  return d == DType::Float16 || d == DType::BFloat16 ? DType::Float32 : d;
}

std::string plane_arg(const char* name, int level) {
  return std::string(name) + "[" + std::to_string(level) + "]";
}

/// Validates the level list and returns the tilts the planes imply.
void check_planes(const char* op, const TensorRef* planes, int num_levels, int num_tilts,
                  bool needs_data) {
  if (num_levels < 1 || planes == nullptr) {
    fail(ErrorKind::Value, op,
         "expected at least one level of planes, but got " + std::to_string(num_levels));
  }
  if (num_tilts < 1) {
    fail(ErrorKind::Value, op,
         "expected num_tilts >= 1 (1 for axis-aligned planes), but got " +
             std::to_string(num_tilts));
  }
  for (int l = 0; l < num_levels; ++l) {
    const TensorRef& t = planes[l];
    const std::string arg = plane_arg("planes", l);
    detail::check_storage(op, arg.c_str(), t, needs_data);
    detail::check_device_supported(op, arg.c_str(), t);
    detail::check_float_dtype(op, arg.c_str(), t);
    if (t.ndim != 4 || t.sizes[0] != 3 * static_cast<int64_t>(num_tilts)) {
      fail(ErrorKind::Value, op,
           "expected " + arg + " to have shape [3T, C, H, W] with T = num_tilts = " +
               std::to_string(num_tilts) + ", but got shape " + t.shape_str());
    }
    if (l > 0) {
      detail::check_same_device(op, arg.c_str(), t, "planes[0]", planes[0]);
      detail::check_dtype(op, arg.c_str(), t, planes[0].dtype, "the dtype of planes[0]");
    }
  }
}

/// Whether a level's channels are its innermost axis (Note [plane_tv layout]).
bool channels_inner(const TensorRef& plane) {
  return plane.sizes[1] > 1 && plane.strides[1] < plane.strides[3];
}

/// The volume view of a level (or of its gradient, which must be walked in the same order).
detail::VolumeView level_view(const TensorRef& t, bool inner) {
  if (!inner) return detail::make_volume_view(t, 3);  // [3T, C, H, W]
  TensorRef permuted = t;                             // [3T, H, W, C]
  const int order[4] = {0, 2, 3, 1};
  for (int i = 0; i < 4; ++i) {
    permuted.sizes[i] = t.sizes[order[i]];
    permuted.strides[i] = t.strides[order[i]];
  }
  return detail::make_volume_view(permuted, 3);
}

/// The weights of a level's ΣΔH² and ΣΔW²:
/// level_l = factor_l·(1/T)·[ΣΔH²/(C(H−1)W) + ΣΔW²/(CH(W−1))], an axis of size 1 (no differences)
/// and an empty level weighted 0.
struct LevelWeights {
  double h, w;
};

LevelWeights level_weights(const TensorRef& plane, int num_tilts, double factor) {
  const double c = static_cast<double>(plane.sizes[1]);
  const double h = static_cast<double>(plane.sizes[2]);
  const double w = static_cast<double>(plane.sizes[3]);
  const bool filled = plane.numel() > 0;
  return {plane.sizes[2] > 1 && filled ? factor / (num_tilts * c * (h - 1) * w) : 0.0,
          plane.sizes[3] > 1 && filled ? factor / (num_tilts * c * h * (w - 1)) : 0.0};
}

/// The plan over the volume view's three per-axis sums. The plane's H and W are the view's axes 1
/// and 2 (NCHW; axis 0 is C) or 0 and 1 (channels inner; axis 2 is C); the channel axis's sum is
/// weighted 0.
ReducePlan volume_plan(const LevelWeights& weights, bool inner) {
  ReducePlan plan;
  plan.num_sums = 3;
  plan.num_outputs = 1;
  const int h_axis = inner ? 0 : 1;
  plan.scale[0] = plan.scale[1] = plan.scale[2] = 0.0;
  plan.scale[h_axis] = weights.h;
  plan.scale[h_axis + 1] = weights.w;
  return plan;
}

/// The per-cell factors H_l·W_l / max_m(H_m·W_m), or 1 with PlaneTVNorm::Mean.
double level_factor(const TensorRef* planes, int num_levels, int level, PlaneTVNorm norm) {
  if (norm == PlaneTVNorm::Mean) return 1.0;
  int64_t largest = 0;
  for (int l = 0; l < num_levels; ++l) {
    largest = std::max(largest, planes[l].sizes[2] * planes[l].sizes[3]);
  }
  return static_cast<double>(planes[level].sizes[2] * planes[level].sizes[3]) /
         static_cast<double>(largest);
}

void check_norm(const char* op, PlaneTVNorm norm) {
  if (norm != PlaneTVNorm::Mean && norm != PlaneTVNorm::PerCell) {
    fail(ErrorKind::Value, op, "expected norm to be Mean or PerCell");
  }
}

#if FIELDFUSE_WITH_CUDA
/// The plan over the row kernels' two sums, ΣΔH² and ΣΔW².
ReducePlan rows_plan(const LevelWeights& weights) {
  ReducePlan plan;
  plan.num_sums = 2;
  plan.num_outputs = 1;
  plan.scale[0] = weights.h;
  plan.scale[1] = weights.w;
  plan.scale[2] = 0.0;
  return plan;
}

/// A level read as dense rows (Note [plane_tv rows] in plane_tv_cuda.cu), if its strides allow:
/// channels inner, [3T, H, W, C] with (H, W, C) dense, each plane a slab of H rows of W·C values;
/// otherwise [3T, C, H, W] with (H, W) dense and the (plane, channel) slabs evenly spaced, each
/// (plane, channel) a slab of H rows of W values. Strides of size-1 dims are never followed.
std::optional<PlaneRows> plane_rows(const TensorRef& t, bool inner) {
  const int64_t planes = t.sizes[0], c = t.sizes[1], h = t.sizes[2], w = t.sizes[3];
  const auto is = [&](int dim, int64_t stride) {
    return t.sizes[dim] == 1 || t.strides[dim] == stride;
  };
  if (inner) {
    if (!is(1, 1) || !is(3, c) || !is(2, w * c)) return std::nullopt;
    return PlaneRows{planes, t.strides[0], h, w * c, c};
  }
  if (!is(3, 1) || !is(2, w)) return std::nullopt;
  if (c == 1) return PlaneRows{planes, t.strides[0], h, w, 1};
  if (t.strides[0] != c * t.strides[1]) return std::nullopt;  // 3T >= 3: stride 0 is followed
  return PlaneRows{planes * c, t.strides[1], h, w, 1};
}

/// The dense rows of a level the CUDA row kernels take, or none (volume view, as on the CPU).
std::optional<PlaneRows> cuda_rows(const TensorRef& plane) {
  if (!plane.device.is_cuda()) return std::nullopt;
  const std::optional<PlaneRows> rows = plane_rows(plane, channels_inner(plane));
  if (rows && detail::tv::rows_supported_cuda(*rows)) return rows;
  return std::nullopt;
}
#endif  // FIELDFUSE_WITH_CUDA

std::size_t level_workspace(const TensorRef& plane) {
  const detail::VolumeView view = level_view(plane, channels_inner(plane));
#if FIELDFUSE_WITH_CUDA
  if (const std::optional<PlaneRows> rows = cuda_rows(plane)) {
    return detail::tv::rows_forward_workspace_cuda(*rows);
  }
  if (plane.device.is_cuda()) return detail::tv::forward_workspace_cuda(view, Functional::SqAxes);
#endif
  return detail::tv::forward_workspace_cpu(view, Functional::SqAxes);
}

/// The stride between the L elements of a 1-D per-level tensor.
void check_level_vector(const char* op, const char* arg, const TensorRef& t, int num_levels,
                        const TensorRef& planes0) {
  detail::check_storage(op, arg, t);
  const std::string layout = "[" + std::to_string(num_levels) + "] (one term per level)";
  detail::check_shape(op, arg, t, {num_levels}, layout.c_str());
  detail::check_same_device(op, arg, t, "planes[0]", planes0);
  detail::check_dtype(op, arg, t, reduced_dtype(planes0.dtype), "the reduced dtype of planes");
}

char* element(void* data, DType dtype, int64_t index) {
  return static_cast<char*>(data) + index * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace

std::size_t plane_tv_workspace_size(const TensorRef* planes, int num_levels) {
  if (num_levels < 1 || planes == nullptr) {
    fail(ErrorKind::Value, kForwardOp,
         "expected at least one level of planes, but got " + std::to_string(num_levels));
  }
  std::size_t bytes = 1;
  for (int l = 0; l < num_levels; ++l) {
    const std::string arg = plane_arg("planes", l);
    detail::check_storage(kForwardOp, arg.c_str(), planes[l], /*needs_data=*/false);
    detail::check_device_supported(kForwardOp, arg.c_str(), planes[l]);
    detail::check_min_dims(kForwardOp, arg.c_str(), planes[l], 2, "[3T, C, H, W]");
    bytes = std::max(bytes, level_workspace(planes[l]));
  }
  return bytes;
}

void plane_tv_forward(const TensorRef* planes, int num_levels, int num_tilts, PlaneTVNorm norm,
                      const TensorRef& out, void* workspace, std::size_t workspace_bytes,
                      Stream stream) {
  const char* op = kForwardOp;
  check_norm(op, norm);
  check_planes(op, planes, num_levels, num_tilts, /*needs_data=*/true);
  check_level_vector(op, "out", out, num_levels, planes[0]);
  std::size_t required = 1;
  for (int l = 0; l < num_levels; ++l) {
    detail::check_disjoint(op, "out", out, plane_arg("planes", l).c_str(), planes[l]);
    required = std::max(required, level_workspace(planes[l]));
  }
  detail::check_workspace(op, workspace, workspace_bytes, required);
  // The levels run one after another on one stream, so they can share the workspace.
  for (int l = 0; l < num_levels; ++l) {
    const TensorRef& plane = planes[l];
    const bool inner = channels_inner(plane);
    const LevelWeights weights =
        level_weights(plane, num_tilts, level_factor(planes, num_levels, l, norm));
    void* level_out = element(out.data, out.dtype, l * out.strides[0]);
#if FIELDFUSE_WITH_CUDA
    if (const std::optional<PlaneRows> rows = cuda_rows(plane)) {
      detail::tv::rows_forward_cuda({op, *rows, plane.data, plane.dtype, plane.device,
                                     rows_plan(weights), level_out, workspace, stream});
      continue;
    }
#endif
    const detail::tv::ForwardArgs args{op,
                                       Functional::SqAxes,
                                       0.0,
                                       level_view(plane, inner),
                                       plane.data,
                                       plane.dtype,
                                       plane.device,
                                       volume_plan(weights, inner),
                                       level_out,
                                       out.dtype,
                                       out.strides[0],
                                       workspace,
                                       stream};
#if FIELDFUSE_WITH_CUDA
    if (plane.device.is_cuda()) {
      detail::tv::forward_cuda(args);
      continue;
    }
#endif
    detail::tv::forward_cpu(args);
  }
}

void plane_tv_backward(const TensorRef* planes, int num_levels, int num_tilts, PlaneTVNorm norm,
                       const TensorRef& grad_out, const TensorRef* grad_planes, Stream stream,
                       bool accumulate) {
  const char* op = kBackwardOp;
  check_norm(op, norm);
  check_planes(op, planes, num_levels, num_tilts, /*needs_data=*/true);
  check_level_vector(op, "grad_out", grad_out, num_levels, planes[0]);
  if (grad_planes == nullptr) fail(ErrorKind::Value, op, "expected grad_planes, but got null");
  for (int l = 0; l < num_levels; ++l) {
    const TensorRef& g = grad_planes[l];
    const std::string arg = plane_arg("grad_planes", l);
    const std::string input_arg = plane_arg("planes", l);
    detail::check_storage(op, arg.c_str(), g);
    detail::check_same_shape(op, arg.c_str(), g, input_arg.c_str(), planes[l]);
    detail::check_same_device(op, arg.c_str(), g, input_arg.c_str(), planes[l]);
    detail::check_dtype(op, arg.c_str(), g, planes[l].dtype, "the dtype of planes");
    detail::check_no_repeated_elements(op, arg.c_str(), g);
    detail::check_disjoint(op, arg.c_str(), g, "grad_out", grad_out);
    for (int m = 0; m < num_levels; ++m) {
      detail::check_disjoint(op, arg.c_str(), g, plane_arg("planes", m).c_str(), planes[m]);
    }
  }
  for (int l = 0; l < num_levels; ++l) {
    const TensorRef& plane = planes[l];
    const TensorRef& grad = grad_planes[l];
    const bool inner = channels_inner(plane);
    const LevelWeights weights =
        level_weights(plane, num_tilts, level_factor(planes, num_levels, l, norm));
    const void* level_grad_out = element(grad_out.data, grad_out.dtype, l * grad_out.strides[0]);
#if FIELDFUSE_WITH_CUDA
    // The row kernels need the gradient in the same rows as the level (own slab stride).
    const std::optional<PlaneRows> rows = cuda_rows(plane);
    const std::optional<PlaneRows> grad_rows = rows ? plane_rows(grad, inner) : std::nullopt;
    if (rows && grad_rows) {
      detail::tv::rows_backward_cuda({op, *rows, plane.data, plane.dtype, plane.device,
                                      rows_plan(weights), level_grad_out, grad_rows->slab_stride,
                                      grad.data, accumulate, stream});
      continue;
    }
#endif
    const detail::tv::BackwardArgs args{op,
                                        Functional::SqAxes,
                                        0.0,
                                        level_view(plane, inner),
                                        plane.data,
                                        plane.dtype,
                                        plane.device,
                                        volume_plan(weights, inner),
                                        level_grad_out,
                                        grad_out.dtype,
                                        grad_out.strides[0],
                                        level_view(grad, inner),
                                        grad.data,
                                        stream,
                                        accumulate};
#if FIELDFUSE_WITH_CUDA
    if (plane.device.is_cuda()) {
      detail::tv::backward_cuda(args);
      continue;
    }
#endif
    detail::tv::backward_cpu(args);
  }
}

}  // namespace fieldfuse
