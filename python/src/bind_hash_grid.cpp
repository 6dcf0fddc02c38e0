// SPDX-License-Identifier: Apache-2.0
// Python bindings of the hash-grid encoding: thin wrappers that turn DLPack arrays into
// TensorRefs and the keyword options into a HashGridConfig; the GIL is released while a kernel
// runs. Optional tensors (gradients nobody asked for, absent seeds) arrive as None.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "fieldfuse/hash_grid.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;
using Release = nb::call_guard<nb::gil_scoped_release>;

HashGridConfig make_config(int n_levels, int n_features_per_level, int log2_hashmap_size,
                           int base_resolution, double per_level_scale,
                           const std::string& interpolation) {
  HashGridConfig config;
  config.n_levels = n_levels;
  config.n_features_per_level = n_features_per_level;
  config.log2_hashmap_size = log2_hashmap_size;
  config.base_resolution = base_resolution;
  config.per_level_scale = per_level_scale;
  config.interpolation = interpolation.c_str();  // `interpolation` outlives the call
  return config;
}

/// Binds `name` = `<op>_workspace_size(x, params, <config>, wants_grad_params)`.
template <std::size_t (*WorkspaceSize)(const TensorRef&, const TensorRef&, const HashGridConfig&,
                                       bool)>
void bind_workspace_size(nb::module_& m, const char* name, const char* op) {
  m.def(
      name,
      [op](const Array& x, const Array& params, int n_levels, int n_features_per_level,
           int log2_hashmap_size, int base_resolution, double per_level_scale,
           const std::string& interpolation, bool wants_grad_params) {
        return WorkspaceSize(to_tensor_ref(x, op, "x"), to_tensor_ref(params, op, "params"),
                             make_config(n_levels, n_features_per_level, log2_hashmap_size,
                                         base_resolution, per_level_scale, interpolation),
                             wants_grad_params);
      },
      "x"_a.noconvert(), "params"_a.noconvert(), "n_levels"_a, "n_features_per_level"_a,
      "log2_hashmap_size"_a, "base_resolution"_a, "per_level_scale"_a, "interpolation"_a,
      "wants_grad_params"_a);
}

}  // namespace

void bind_hash_grid(nb::module_& m) {
  // The config's keyword names, in the order every entry takes them after its tensors.
#define FF_HASH_GRID_CONFIG_ARGS                                                      \
  "n_levels"_a, "n_features_per_level"_a, "log2_hashmap_size"_a, "base_resolution"_a, \
      "per_level_scale"_a, "interpolation"_a

  m.def(
      "hash_grid_num_params",
      [](int n_input_dims, int n_levels, int n_features_per_level, int log2_hashmap_size,
         int base_resolution, double per_level_scale) {
        return hash_grid_num_params(n_input_dims,
                                    make_config(n_levels, n_features_per_level, log2_hashmap_size,
                                                base_resolution, per_level_scale, "linear"));
      },
      "n_input_dims"_a, "n_levels"_a, "n_features_per_level"_a, "log2_hashmap_size"_a,
      "base_resolution"_a, "per_level_scale"_a);

  m.def(
      "hash_grid_forward",
      [](const Array& x, const Array& params, int n_levels, int n_features_per_level,
         int log2_hashmap_size, int base_resolution, double per_level_scale,
         const std::string& interpolation, const Array& out, std::uintptr_t stream) {
        constexpr const char* op = "hash_grid";
        hash_grid_forward(to_tensor_ref(x, op, "x"), to_tensor_ref(params, op, "params"),
                          make_config(n_levels, n_features_per_level, log2_hashmap_size,
                                      base_resolution, per_level_scale, interpolation),
                          to_tensor_ref(out, op, "out"), to_stream(stream));
      },
      "x"_a.noconvert(), "params"_a.noconvert(), FF_HASH_GRID_CONFIG_ARGS, "out"_a.noconvert(),
      "stream"_a, Release());

  bind_workspace_size<hash_grid_backward_workspace_size>(m, "hash_grid_backward_workspace_size",
                                                         "hash_grid_backward");

  m.def(
      "hash_grid_backward",
      [](const Array& x, const Array& params, int n_levels, int n_features_per_level,
         int log2_hashmap_size, int base_resolution, double per_level_scale,
         const std::string& interpolation, const Array& grad_out, const OptionalArray& grad_x,
         const OptionalArray& grad_params, const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "hash_grid_backward";
        hash_grid_backward(to_tensor_ref(x, op, "x"), to_tensor_ref(params, op, "params"),
                           make_config(n_levels, n_features_per_level, log2_hashmap_size,
                                       base_resolution, per_level_scale, interpolation),
                           to_tensor_ref(grad_out, op, "grad_out"),
                           to_tensor_ref(grad_x, op, "grad_x"),
                           to_tensor_ref(grad_params, op, "grad_params"), workspace.data(),
                           workspace.nbytes(), to_stream(stream));
      },
      "x"_a.noconvert(), "params"_a.noconvert(), FF_HASH_GRID_CONFIG_ARGS, "grad_out"_a.noconvert(),
      "grad_x"_a.noconvert().none(), "grad_params"_a.noconvert().none(), "workspace"_a.noconvert(),
      "stream"_a, Release());

  bind_workspace_size<hash_grid_double_backward_workspace_size>(
      m, "hash_grid_double_backward_workspace_size", "hash_grid_double_backward");

  m.def(
      "hash_grid_double_backward",
      [](const Array& x, const Array& params, int n_levels, int n_features_per_level,
         int log2_hashmap_size, int base_resolution, double per_level_scale,
         const std::string& interpolation, const Array& grad_out, const OptionalArray& grad_grad_x,
         const OptionalArray& grad_grad_params, const OptionalArray& grad_grad_out,
         const OptionalArray& grad_x, const OptionalArray& grad_params, const Array& workspace,
         std::uintptr_t stream) {
        constexpr const char* op = "hash_grid_double_backward";
        hash_grid_double_backward(
            to_tensor_ref(x, op, "x"), to_tensor_ref(params, op, "params"),
            make_config(n_levels, n_features_per_level, log2_hashmap_size, base_resolution,
                        per_level_scale, interpolation),
            to_tensor_ref(grad_out, op, "grad_out"), to_tensor_ref(grad_grad_x, op, "grad_grad_x"),
            to_tensor_ref(grad_grad_params, op, "grad_grad_params"),
            to_tensor_ref(grad_grad_out, op, "grad_grad_out"), to_tensor_ref(grad_x, op, "grad_x"),
            to_tensor_ref(grad_params, op, "grad_params"), workspace.data(), workspace.nbytes(),
            to_stream(stream));
      },
      "x"_a.noconvert(), "params"_a.noconvert(), FF_HASH_GRID_CONFIG_ARGS, "grad_out"_a.noconvert(),
      "grad_grad_x"_a.noconvert().none(), "grad_grad_params"_a.noconvert().none(),
      "grad_grad_out"_a.noconvert().none(), "grad_x"_a.noconvert().none(),
      "grad_params"_a.noconvert().none(), "workspace"_a.noconvert(), "stream"_a, Release());
#undef FF_HASH_GRID_CONFIG_ARGS
}

}  // namespace fieldfuse::python
