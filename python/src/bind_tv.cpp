// SPDX-License-Identifier: Apache-2.0
// Python bindings of the TV family: thin wrappers that turn DLPack arrays into TensorRefs. The GIL
// is released while a kernel runs, since CPU drivers can take a while.
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fieldfuse/tv.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using Release = nb::call_guard<nb::gil_scoped_release>;

int num_weights(const std::vector<double>& weights) { return static_cast<int>(weights.size()); }

/// The op names of a functional whose entry points take no options (tv_sq_3d, tv_l1_3d).
struct PlainNames {
  const char* op;  ///< public name, for error messages
  const char* workspace_size;
  const char* forward;
  const char* backward;
};

/// Binds the workspace query, forward and backward of a `[..., D, H, W]` functional without
/// options; tv_iso_3d and tv_weighted_l1 add arguments and are bound one by one below.
template <std::size_t (*WorkspaceSize)(const TensorRef&),
          void (*Forward)(const TensorRef&, const TensorRef&, void*, std::size_t, Stream),
          void (*Backward)(const TensorRef&, const TensorRef&, const TensorRef&, Stream)>
void bind_plain(nb::module_& m, PlainNames names) {
  m.def(
      names.workspace_size,
      [op = names.op](const Array& vol) { return WorkspaceSize(to_tensor_ref(vol, op, "vol")); },
      "vol"_a.noconvert());
  m.def(
      names.forward,
      [op = names.op](const Array& vol, const Array& out, const Array& workspace,
                      std::uintptr_t stream) {
        Forward(to_tensor_ref(vol, op, "vol"), to_tensor_ref(out, op, "out"), workspace.data(),
                workspace.nbytes(), to_stream(stream));
      },
      "vol"_a.noconvert(), "out"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a, Release());
  m.def(
      names.backward,
      [op = names.backward](const Array& vol, const Array& grad_out, const Array& grad_vol,
                            std::uintptr_t stream) {
        Backward(to_tensor_ref(vol, op, "vol"), to_tensor_ref(grad_out, op, "grad_out"),
                 to_tensor_ref(grad_vol, op, "grad_vol"), to_stream(stream));
      },
      "vol"_a.noconvert(), "grad_out"_a.noconvert(), "grad_vol"_a.noconvert(), "stream"_a,
      Release());
}

}  // namespace

void bind_tv(nb::module_& m) {
  bind_plain<tv_sq_3d_workspace_size, tv_sq_3d_forward, tv_sq_3d_backward>(
      m, {"tv_sq_3d", "tv_sq_3d_workspace_size", "tv_sq_3d_forward", "tv_sq_3d_backward"});
  bind_plain<tv_l1_3d_workspace_size, tv_l1_3d_forward, tv_l1_3d_backward>(
      m, {"tv_l1_3d", "tv_l1_3d_workspace_size", "tv_l1_3d_forward", "tv_l1_3d_backward"});

  m.def(
      "tv_iso_3d_workspace_size",
      [](const Array& vol) {
        return tv_iso_3d_workspace_size(to_tensor_ref(vol, "tv_iso_3d", "vol"));
      },
      "vol"_a.noconvert());
  m.def(
      "tv_iso_3d_forward",
      [](const Array& vol, double eps, const Array& out, const Array& workspace,
         std::uintptr_t stream) {
        tv_iso_3d_forward(to_tensor_ref(vol, "tv_iso_3d", "vol"), eps,
                          to_tensor_ref(out, "tv_iso_3d", "out"), workspace.data(),
                          workspace.nbytes(), to_stream(stream));
      },
      "vol"_a.noconvert(), "eps"_a, "out"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a,
      Release());
  m.def(
      "tv_iso_3d_backward",
      [](const Array& vol, double eps, const Array& grad_out, const Array& grad_vol,
         std::uintptr_t stream) {
        constexpr const char* op = "tv_iso_3d_backward";
        tv_iso_3d_backward(to_tensor_ref(vol, op, "vol"), eps,
                           to_tensor_ref(grad_out, op, "grad_out"),
                           to_tensor_ref(grad_vol, op, "grad_vol"), to_stream(stream));
      },
      "vol"_a.noconvert(), "eps"_a, "grad_out"_a.noconvert(), "grad_vol"_a.noconvert(), "stream"_a,
      Release());

  m.def(
      "tv_weighted_l1_workspace_size",
      [](const Array& array, int num_weights) {
        return tv_weighted_l1_workspace_size(to_tensor_ref(array, "tv_weighted_l1", "array"),
                                             num_weights);
      },
      "array"_a.noconvert(), "num_weights"_a);
  m.def(
      "tv_weighted_l1_forward",
      [](const Array& array, const std::vector<double>& weights, const Array& out,
         const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "tv_weighted_l1";
        tv_weighted_l1_forward(to_tensor_ref(array, op, "array"), weights.data(),
                               num_weights(weights), to_tensor_ref(out, op, "out"),
                               workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      "array"_a.noconvert(), "weights"_a, "out"_a.noconvert(), "workspace"_a.noconvert(),
      "stream"_a, Release());
  m.def(
      "tv_weighted_l1_backward",
      [](const Array& array, const std::vector<double>& weights, const Array& grad_out,
         const Array& grad_array, std::uintptr_t stream) {
        constexpr const char* op = "tv_weighted_l1_backward";
        tv_weighted_l1_backward(to_tensor_ref(array, op, "array"), weights.data(),
                                num_weights(weights), to_tensor_ref(grad_out, op, "grad_out"),
                                to_tensor_ref(grad_array, op, "grad_array"), to_stream(stream));
      },
      "array"_a.noconvert(), "weights"_a, "grad_out"_a.noconvert(), "grad_array"_a.noconvert(),
      "stream"_a, Release());
}

}  // namespace fieldfuse::python
