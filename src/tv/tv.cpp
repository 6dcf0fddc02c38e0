// SPDX-License-Identifier: Apache-2.0
// The TV front: validates every argument, turns each public functional into a reduction plan and
// hands the work to the CPU or CUDA driver. All checks live here, so every caller (C++, CLI,
// Python) sees the same messages.
#include "fieldfuse/tv.h"

#include <string>

#include "core/check.h"
#include "tv/tv_drivers.h"

namespace fieldfuse {
namespace {

using detail::make_volume_view;
using detail::VolumeView;
using detail::tv::BackwardArgs;
using detail::tv::ForwardArgs;
using detail::tv::Functional;
using detail::tv::ReducePlan;

constexpr const char* kVolumeLayout = "[..., D, H, W]";

/// 16-bit inputs are accumulated and returned in float32; float32/float64 keep their dtype.
DType reduced_dtype(DType input) {
  return input == DType::Float16 || input == DType::BFloat16 ? DType::Float32 : input;
}

const char* trailing_layout(int inner_dims) {
  return inner_dims == 3 ? "[..., Z, Y, X]" : "[..., Y, X]";
}

/// Validates an input; a workspace-size query (`needs_data = false`) reads only its metadata, so
/// it accepts a TensorRef without data.
void check_input(const char* op, const char* arg, const TensorRef& t, int inner_dims,
                 const char* layout, bool needs_data = true) {
  detail::check_storage(op, arg, t, needs_data);
  detail::check_min_dims(op, arg, t, inner_dims, layout);
  detail::check_device_supported(op, arg, t);
  detail::check_float_dtype(op, arg, t);
}

/// Stride between consecutive elements of a tensor read as a flat vector of 1 or 3 elements (1 and
/// 3 have no non-trivial factorisation, so at most one dim is larger than 1).
int64_t vector_stride(const TensorRef& t) {
  for (int i = 0; i < t.ndim; ++i)
    if (t.sizes[i] > 1) return t.strides[i];
  return 1;
}

/// A reduced output (out, or grad_out in a backward): plan.num_outputs elements on vol's device.
void check_reduced(const char* op, const char* arg, const TensorRef& t, const char* input_arg,
                   const TensorRef& input, int num_outputs) {
  detail::check_storage(op, arg, t);
  detail::check_same_device(op, arg, t, input_arg, input);
  detail::check_numel(op, arg, t, num_outputs);
  const std::string why = "the reduced dtype of " + std::string(input_arg);
  detail::check_dtype(op, arg, t, reduced_dtype(input.dtype), why.c_str());
}

std::size_t workspace_bytes(const VolumeView& view, const TensorRef& input, Functional f) {
#if FIELDFUSE_WITH_CUDA
  if (input.device.is_cuda()) return detail::tv::forward_workspace_cuda(view, f);
#endif
  (void)input;
  return detail::tv::forward_workspace_cpu(view, f);
}

/// The workspace query of a [..., D, H, W] functional: it reads only vol's metadata.
std::size_t volume_workspace(const char* op, const TensorRef& vol, Functional f) {
  check_input(op, "vol", vol, 3, kVolumeLayout, /*needs_data=*/false);
  return workspace_bytes(make_volume_view(vol, 3), vol, f);
}

void run_forward(const char* op, Functional f, double eps, const char* arg, const TensorRef& input,
                 int inner_dims, const ReducePlan& plan, const TensorRef& out, void* workspace,
                 std::size_t workspace_size, Stream stream) {
  check_reduced(op, "out", out, arg, input, plan.num_outputs);
  detail::check_disjoint(op, "out", out, arg, input);
  const VolumeView view = make_volume_view(input, inner_dims);
  detail::check_workspace(op, workspace, workspace_size, workspace_bytes(view, input, f));
  const ForwardArgs args{op,           f,    eps,      view,      input.data,         input.dtype,
                         input.device, plan, out.data, out.dtype, vector_stride(out), workspace,
                         stream};
#if FIELDFUSE_WITH_CUDA
  if (input.device.is_cuda()) return detail::tv::forward_cuda(args);
#endif
  detail::tv::forward_cpu(args);
}

void run_backward(const char* op, Functional f, double eps, const char* arg, const TensorRef& input,
                  int inner_dims, const ReducePlan& plan, const TensorRef& grad_out,
                  const char* grad_arg, const TensorRef& grad_input, Stream stream) {
  check_reduced(op, "grad_out", grad_out, arg, input, plan.num_outputs);
  detail::check_storage(op, grad_arg, grad_input);
  detail::check_same_device(op, grad_arg, grad_input, arg, input);
  detail::check_same_shape(op, grad_arg, grad_input, arg, input);
  const std::string why = "the dtype of " + std::string(arg);
  detail::check_dtype(op, grad_arg, grad_input, input.dtype, why.c_str());
  detail::check_no_repeated_elements(op, grad_arg, grad_input);
  detail::check_disjoint(op, grad_arg, grad_input, arg, input);
  detail::check_disjoint(op, grad_arg, grad_input, "grad_out", grad_out);
  const BackwardArgs args{op,
                          f,
                          eps,
                          make_volume_view(input, inner_dims),
                          input.data,
                          input.dtype,
                          input.device,
                          plan,
                          grad_out.data,
                          grad_out.dtype,
                          vector_stride(grad_out),
                          make_volume_view(grad_input, inner_dims),
                          grad_input.data,
                          stream,
                          /*accumulate=*/false};
#if FIELDFUSE_WITH_CUDA
  if (input.device.is_cuda()) return detail::tv::backward_cuda(args);
#endif
  detail::tv::backward_cpu(args);
}

ReducePlan sum_plan() { return ReducePlan{}; }

ReducePlan per_axis_plan() {
  ReducePlan plan;
  plan.num_sums = 3;
  plan.num_outputs = 3;
  return plan;
}

/// tv_iso_3d is a mean over corners: N = B·(D−1)(H−1)(W−1), and N = 0 gives L = 0, not 0/0.
ReducePlan iso_plan(const TensorRef& vol) {
  const VolumeView v = make_volume_view(vol, 3);
  const int64_t corners = v.depth < 2 || v.height < 2 || v.width < 2
                              ? 0
                              : v.batch * (v.depth - 1) * (v.height - 1) * (v.width - 1);
  ReducePlan plan;
  plan.scale[0] = corners > 0 ? 1.0 / static_cast<double>(corners) : 0.0;
  return plan;
}

constexpr const char* kSqOp = "tv_sq_3d";
constexpr const char* kIsoOp = "tv_iso_3d";
constexpr const char* kL1Op = "tv_l1_3d";
constexpr const char* kWeightedOp = "tv_weighted_l1";
constexpr const char* kSqBackwardOp = "tv_sq_3d_backward";
constexpr const char* kIsoBackwardOp = "tv_iso_3d_backward";
constexpr const char* kL1BackwardOp = "tv_l1_3d_backward";
constexpr const char* kWeightedBackwardOp = "tv_weighted_l1_backward";

// --- tv_weighted_l1 -------------------------------------------------------------------------

void check_num_weights(const char* op, int num_weights) {
  if (num_weights != 2 && num_weights != 3) {
    detail::fail(ErrorKind::Value, op,
                 "expected weights to have 2 or 3 entries (one per trailing axis), but got " +
                     std::to_string(num_weights));
  }
}

/// Validates the weights and builds L = Σ_a w_a·mean|Δ_a| / max(1, #active) as a plan over the
/// three per-axis sums (with 2 weights the array is viewed as D = 1, so axis 0 never contributes).
ReducePlan weighted_plan(const char* op, const TensorRef& array, const double* weights,
                         int num_weights) {
  check_num_weights(op, num_weights);
  if (weights == nullptr) {
    detail::fail(ErrorKind::Value, op, "expected weights to point at data, but got null");
  }
  check_input(op, "array", array, num_weights, trailing_layout(num_weights));
  for (int i = 0; i < num_weights; ++i) {
    const std::string name = "weights[" + std::to_string(i) + "]";
    detail::check_non_negative(op, name.c_str(), weights[i]);
  }
  const VolumeView v = make_volume_view(array, num_weights);
  const int64_t counts[3] = {v.batch * (v.depth - 1) * v.height * v.width,
                             v.batch * v.depth * (v.height - 1) * v.width,
                             v.batch * v.depth * v.height * (v.width - 1)};
  const int first_axis = 3 - num_weights;  // with 2 weights, sums[0] (the D of the view) is unused
  int active = 0;
  for (int i = 0; i < num_weights; ++i) active += weights[i] > 0.0 ? 1 : 0;
  ReducePlan plan;
  plan.num_sums = 3;
  plan.num_outputs = 1;
  plan.scale[0] = 0.0;
  for (int i = 0; i < num_weights; ++i) {
    const int axis = first_axis + i;
    plan.scale[axis] = 0.0;
    if (weights[i] == 0.0) continue;
    const int dim = array.ndim - num_weights + i;
    if (array.sizes[dim] < 2) {
      detail::fail(ErrorKind::Value, op,
                   "axis " + std::to_string(dim) + " of array has size " +
                       std::to_string(array.sizes[dim]) + " but weights[" + std::to_string(i) +
                       "] = " + detail::number_text(weights[i]) +
                       " is nonzero: there are no differences to penalise (set that weight to 0)");
    }
    if (counts[axis] == 0) {
      detail::fail(ErrorKind::Value, op,
                   "expected array to be non-empty when a weight is nonzero, but got shape " +
                       array.shape_str());
    }
    plan.scale[axis] = weights[i] / (static_cast<double>(counts[axis]) * active);
  }
  return plan;
}

}  // namespace

// --- tv_sq_3d --------------------------------------------------------------------------------

std::size_t tv_sq_3d_workspace_size(const TensorRef& vol) {
  return volume_workspace(kSqOp, vol, Functional::Sq);
}

void tv_sq_3d_forward(const TensorRef& vol, const TensorRef& out, void* workspace,
                      std::size_t workspace_bytes, Stream stream) {
  check_input(kSqOp, "vol", vol, 3, kVolumeLayout);
  run_forward(kSqOp, Functional::Sq, 0.0, "vol", vol, 3, sum_plan(), out, workspace,
              workspace_bytes, stream);
}

void tv_sq_3d_backward(const TensorRef& vol, const TensorRef& grad_out, const TensorRef& grad_vol,
                       Stream stream) {
  check_input(kSqBackwardOp, "vol", vol, 3, kVolumeLayout);
  run_backward(kSqBackwardOp, Functional::Sq, 0.0, "vol", vol, 3, sum_plan(), grad_out, "grad_vol",
               grad_vol, stream);
}

// --- tv_iso_3d -------------------------------------------------------------------------------

std::size_t tv_iso_3d_workspace_size(const TensorRef& vol) {
  return volume_workspace(kIsoOp, vol, Functional::Iso);
}

void tv_iso_3d_forward(const TensorRef& vol, double eps, const TensorRef& out, void* workspace,
                       std::size_t workspace_bytes, Stream stream) {
  check_input(kIsoOp, "vol", vol, 3, kVolumeLayout);
  detail::check_non_negative(kIsoOp, "eps", eps);
  run_forward(kIsoOp, Functional::Iso, eps, "vol", vol, 3, iso_plan(vol), out, workspace,
              workspace_bytes, stream);
}

void tv_iso_3d_backward(const TensorRef& vol, double eps, const TensorRef& grad_out,
                        const TensorRef& grad_vol, Stream stream) {
  check_input(kIsoBackwardOp, "vol", vol, 3, kVolumeLayout);
  detail::check_non_negative(kIsoBackwardOp, "eps", eps);
  run_backward(kIsoBackwardOp, Functional::Iso, eps, "vol", vol, 3, iso_plan(vol), grad_out,
               "grad_vol", grad_vol, stream);
}

// --- tv_l1_3d --------------------------------------------------------------------------------

std::size_t tv_l1_3d_workspace_size(const TensorRef& vol) {
  return volume_workspace(kL1Op, vol, Functional::L1);
}

void tv_l1_3d_forward(const TensorRef& vol, const TensorRef& out, void* workspace,
                      std::size_t workspace_bytes, Stream stream) {
  check_input(kL1Op, "vol", vol, 3, kVolumeLayout);
  run_forward(kL1Op, Functional::L1, 0.0, "vol", vol, 3, per_axis_plan(), out, workspace,
              workspace_bytes, stream);
}

void tv_l1_3d_backward(const TensorRef& vol, const TensorRef& grad_out, const TensorRef& grad_vol,
                       Stream stream) {
  check_input(kL1BackwardOp, "vol", vol, 3, kVolumeLayout);
  run_backward(kL1BackwardOp, Functional::L1, 0.0, "vol", vol, 3, per_axis_plan(), grad_out,
               "grad_vol", grad_vol, stream);
}

// --- tv_weighted_l1 --------------------------------------------------------------------------

std::size_t tv_weighted_l1_workspace_size(const TensorRef& array, int num_weights) {
  check_num_weights(kWeightedOp, num_weights);
  check_input(kWeightedOp, "array", array, num_weights, trailing_layout(num_weights),
              /*needs_data=*/false);
  return workspace_bytes(make_volume_view(array, num_weights), array, Functional::L1);
}

void tv_weighted_l1_forward(const TensorRef& array, const double* weights, int num_weights,
                            const TensorRef& out, void* workspace, std::size_t workspace_bytes,
                            Stream stream) {
  const ReducePlan plan = weighted_plan(kWeightedOp, array, weights, num_weights);
  run_forward(kWeightedOp, Functional::L1, 0.0, "array", array, num_weights, plan, out, workspace,
              workspace_bytes, stream);
}

void tv_weighted_l1_backward(const TensorRef& array, const double* weights, int num_weights,
                             const TensorRef& grad_out, const TensorRef& grad_array,
                             Stream stream) {
  const ReducePlan plan = weighted_plan(kWeightedBackwardOp, array, weights, num_weights);
  run_backward(kWeightedBackwardOp, Functional::L1, 0.0, "array", array, num_weights, plan,
               grad_out, "grad_array", grad_array, stream);
}

}  // namespace fieldfuse
