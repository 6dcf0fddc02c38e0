// SPDX-License-Identifier: Apache-2.0
// Python bindings of the MLP family: DLPack arrays in, TensorRef lists and MLPOptions out, and the
// GIL released while a kernel runs. Layers arrive as Python lists; absent biases and unwanted
// gradients as None.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fieldfuse/mlp.h"
#include "tensor_ref.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fieldfuse::python {
namespace {

using Array = TensorArg;  // Note [DLPack exchange API]
using OptionalArray = std::optional<Array>;
using OptionalArrays = std::vector<OptionalArray>;

void check_count(const char* op, const char* arg, std::size_t count, std::size_t layers) {
  // The C++ API reads num_layers entries through a pointer, so the count is checked here.
  if (count != layers) {
    throw Error(ErrorKind::Value, std::string(op) + "(): expected " + arg +
                                      " to have one entry per layer (" + std::to_string(layers) +
                                      "), but got " + std::to_string(count));
  }
}

/// A list of optional per-layer tensors (absent entries stay default TensorRefs).
std::vector<TensorRef> optional_refs(const OptionalArrays& arrays, const char* op,
                                     const char* arg) {
  std::vector<TensorRef> refs(arrays.size());
  for (std::size_t k = 0; k < arrays.size(); ++k) {
    if (arrays[k]) refs[k] = to_tensor_ref(*arrays[k], op, arg, k);
  }
  return refs;
}

std::optional<DType> dtype_of_name(const char* op, const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  constexpr DType kNamed[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  for (const DType d : kNamed)
    if (*name == dtype_name(d)) return d;
  throw Error(ErrorKind::Type, std::string(op) +
                                   "(): expected compute_dtype to be None, torch.float16, "
                                   "torch.bfloat16, torch.float32 or torch.float64, but got " +
                                   *name);
}

/// One call's network: x, the layer lists, the options, and the storage their pointers refer to.
struct Network {
  std::string activation, output_activation;
  MLPOptions options;
  TensorRef x;
  std::vector<TensorRef> weights, biases;

  Network(const char* op, const Array& x_array, const std::vector<Array>& weight_arrays,
          const OptionalArrays& bias_arrays, std::string activation_name,
          std::string output_activation_name, double softplus_beta, double sine_omega0,
          double leaky_slope, const std::optional<std::string>& compute_dtype)
      : activation(std::move(activation_name)),
        output_activation(std::move(output_activation_name)) {
    x = to_tensor_ref(x_array, op, "x");
    for (std::size_t k = 0; k < weight_arrays.size(); ++k) {
      weights.push_back(to_tensor_ref(weight_arrays[k], op, "weights", k));
    }
    // An empty list means no biases at all (the Python schema's Tensor[] cannot hold None).
    if (!bias_arrays.empty()) check_count(op, "biases", bias_arrays.size(), weights.size());
    biases = optional_refs(bias_arrays, op, "biases");
    options.activation = activation.c_str();
    options.output_activation = output_activation.c_str();
    options.softplus_beta = softplus_beta;
    options.sine_omega0 = sine_omega0;
    options.leaky_slope = leaky_slope;
    options.compute_dtype = dtype_of_name(op, compute_dtype);
  }
  int layers() const { return static_cast<int>(weights.size()); }
  const TensorRef* bias_ptr() const { return biases.empty() ? nullptr : biases.data(); }
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;
};

/// Optional gradient outputs of a backward entry.
struct Grads {
  std::optional<TensorRef> x;
  std::vector<TensorRef> weights, biases;
  bool has_weights = false, has_biases = false;

  Grads(const char* op, const char* x_arg, const OptionalArray& grad_x,
        const std::optional<std::vector<Array>>& grad_weights,
        const std::optional<OptionalArrays>& grad_biases, std::size_t layers,
        const char* weights_arg = "grad_weights", const char* biases_arg = "grad_biases") {
    if (grad_x) x = to_tensor_ref(*grad_x, op, x_arg);
    if (grad_weights && !grad_weights->empty()) {
      check_count(op, weights_arg, grad_weights->size(), layers);
      for (std::size_t k = 0; k < layers; ++k) {
        weights.push_back(to_tensor_ref((*grad_weights)[k], op, weights_arg, k));
      }
      has_weights = true;
    }
    if (grad_biases && !grad_biases->empty()) {
      check_count(op, biases_arg, grad_biases->size(), layers);
      biases = optional_refs(*grad_biases, op, biases_arg);
      has_biases = true;
    }
  }
  const TensorRef* x_ptr() const { return x ? &*x : nullptr; }
  const TensorRef* weights_ptr() const { return has_weights ? weights.data() : nullptr; }
  const TensorRef* biases_ptr() const { return has_biases ? biases.data() : nullptr; }
};

using Names = std::optional<std::string>;
using GradWeights = std::optional<std::vector<Array>>;
using GradBiases = std::optional<OptionalArrays>;

}  // namespace

void bind_mlp(nb::module_& m) {
  // Every entry takes the network as (x, weights, biases, activation, output_activation,
  // softplus_beta, sine_omega0, leaky_slope, compute_dtype): the Python signature's names.
#define FF_MLP_NETWORK_ARGS                                                          \
  "x"_a.noconvert(), "weights"_a, "biases"_a, "activation"_a, "output_activation"_a, \
      "softplus_beta"_a, "sine_omega0"_a, "leaky_slope"_a, "compute_dtype"_a.none()
#define FF_MLP_NETWORK_PARAMS                                                      \
  const Array &x, const std::vector<Array>&weights, const OptionalArrays &biases,  \
      std::string activation, std::string output_activation, double softplus_beta, \
      double sine_omega0, double leaky_slope, const Names &compute_dtype
#define FF_MLP_NETWORK(op)                                                                       \
  const Network net(op, x, weights, biases, std::move(activation), std::move(output_activation), \
                    softplus_beta, sine_omega0, leaky_slope, compute_dtype)

  m.def(
      "mlp_forward_workspace_size",
      [](FF_MLP_NETWORK_PARAMS) {
        FF_MLP_NETWORK("mlp");
        return mlp_forward_workspace_size(net.x, net.weights.data(), net.bias_ptr(), net.layers(),
                                          net.options);
      },
      FF_MLP_NETWORK_ARGS);
  m.def(
      "mlp_forward",
      [](FF_MLP_NETWORK_PARAMS, const Array& out, const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "mlp";
        FF_MLP_NETWORK(op);
        const TensorRef o = to_tensor_ref(out, op, "out");
        nb::gil_scoped_release release;
        mlp_forward(net.x, net.weights.data(), net.bias_ptr(), net.layers(), net.options, o,
                    workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      FF_MLP_NETWORK_ARGS, "out"_a.noconvert(), "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "mlp_backward_workspace_size",
      [](FF_MLP_NETWORK_PARAMS) {
        FF_MLP_NETWORK("mlp_backward");
        return mlp_backward_workspace_size(net.x, net.weights.data(), net.bias_ptr(), net.layers(),
                                           net.options);
      },
      FF_MLP_NETWORK_ARGS);
  m.def(
      "mlp_backward",
      [](FF_MLP_NETWORK_PARAMS, const Array& grad_out, const OptionalArray& grad_x,
         const GradWeights& grad_weights, const GradBiases& grad_biases, const OptionalArray& out,
         const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "mlp_backward";
        FF_MLP_NETWORK(op);
        const TensorRef g = to_tensor_ref(grad_out, op, "grad_out");
        const Grads grads(op, "grad_x", grad_x, grad_weights, grad_biases, weights.size());
        std::optional<TensorRef> y;
        if (out) y = to_tensor_ref(*out, op, "out");
        nb::gil_scoped_release release;
        mlp_backward(net.x, net.weights.data(), net.bias_ptr(), net.layers(), net.options, g,
                     grads.x_ptr(), grads.weights_ptr(), grads.biases_ptr(), y ? &*y : nullptr,
                     workspace.data(), workspace.nbytes(), to_stream(stream));
      },
      FF_MLP_NETWORK_ARGS, "grad_out"_a.noconvert(), "grad_x"_a.noconvert().none(),
      "grad_weights"_a.none(), "grad_biases"_a.none(), "out"_a.noconvert().none(),
      "workspace"_a.noconvert(), "stream"_a);

  m.def(
      "mlp_double_backward_workspace_size",
      [](FF_MLP_NETWORK_PARAMS) {
        FF_MLP_NETWORK("mlp_double_backward");
        return mlp_double_backward_workspace_size(net.x, net.weights.data(), net.bias_ptr(),
                                                  net.layers(), net.options);
      },
      FF_MLP_NETWORK_ARGS);
  m.def(
      "mlp_double_backward",
      [](FF_MLP_NETWORK_PARAMS, const Array& grad_out, const Array& grad_grad_x,
         const GradWeights& grad_grad_weights, const GradBiases& grad_grad_biases,
         const OptionalArray& grad_y, const OptionalArray& grad_grad_out,
         const OptionalArray& grad_x, const GradWeights& grad_weights,
         const GradBiases& grad_biases, const Array& workspace, std::uintptr_t stream) {
        constexpr const char* op = "mlp_double_backward";
        FF_MLP_NETWORK(op);
        const TensorRef g = to_tensor_ref(grad_out, op, "grad_out");
        const TensorRef v = to_tensor_ref(grad_grad_x, op, "grad_grad_x");
        std::optional<TensorRef> gy, ggo;
        if (grad_y) gy = to_tensor_ref(*grad_y, op, "grad_y");
        if (grad_grad_out) ggo = to_tensor_ref(*grad_grad_out, op, "grad_grad_out");
        const Grads grads(op, "grad_x", grad_x, grad_weights, grad_biases, weights.size());
        const Grads upstream(op, "grad_grad_x", std::nullopt, grad_grad_weights, grad_grad_biases,
                             weights.size(), "grad_grad_weights", "grad_grad_biases");
        nb::gil_scoped_release release;
        mlp_double_backward(net.x, net.weights.data(), net.bias_ptr(), net.layers(), net.options, g,
                            v, upstream.weights_ptr(), upstream.biases_ptr(), gy ? &*gy : nullptr,
                            ggo ? &*ggo : nullptr, grads.x_ptr(), grads.weights_ptr(),
                            grads.biases_ptr(), workspace.data(), workspace.nbytes(),
                            to_stream(stream));
      },
      FF_MLP_NETWORK_ARGS, "grad_out"_a.noconvert(), "grad_grad_x"_a.noconvert(),
      "grad_grad_weights"_a.none(), "grad_grad_biases"_a.none(), "grad_y"_a.noconvert().none(),
      "grad_grad_out"_a.noconvert().none(), "grad_x"_a.noconvert().none(), "grad_weights"_a.none(),
      "grad_biases"_a.none(), "workspace"_a.noconvert(), "stream"_a);
#undef FF_MLP_NETWORK
#undef FF_MLP_NETWORK_PARAMS
#undef FF_MLP_NETWORK_ARGS
}

}  // namespace fieldfuse::python
