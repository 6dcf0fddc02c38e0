// SPDX-License-Identifier: Apache-2.0
// The MLP front: validates every argument, describes the network as a Problem of LayerViews and
// hands the work to the CPU, CUDA or CUDA tensor-core driver. All checks live here, so the C++ API
// and Python give the same messages.
#include "fieldfuse/mlp.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "mlp/mlp_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
using detail::mlp::Activation;
using detail::mlp::LayerView;
using detail::mlp::MatrixView;
using detail::mlp::Problem;

constexpr const char* kForwardOp = "mlp";
constexpr const char* kBackwardOp = "mlp_backward";
constexpr const char* kDoubleBackwardOp = "mlp_double_backward";

constexpr int64_t kWidthMultiple = 16;
constexpr int64_t kMaxHiddenWidth = 256;

struct NamedActivation {
  const char* name;
  Activation kind;
};
constexpr NamedActivation kActivations[] = {
    {"relu", Activation::ReLU},         {"leaky_relu", Activation::LeakyReLU},
    {"softplus", Activation::Softplus}, {"sine", Activation::Sine},
    {"tanh", Activation::Tanh},         {"sigmoid", Activation::Sigmoid},
    {"silu", Activation::SiLU},         {"exp", Activation::Exp},
    {"none", Activation::None}};

Activation parse_activation(const char* op, const char* arg, const char* name) {
  std::string names;
  for (const NamedActivation& a : kActivations) {
    if (name != nullptr && std::strcmp(name, a.name) == 0) return a.kind;
    names += std::string(names.empty() ? "" : ", ") + a.name;
  }
  fail(ErrorKind::Value, op,
       "expected " + std::string(arg) + " to be one of " + names + ", but got " +
           (name == nullptr ? std::string("null") : "\"" + std::string(name) + "\""));
}

/// Below float64 the drivers hold the activation parameters in float32: one that rounds to inf,
/// or a β or ω₀ that rounds to 0 or a subnormal (1/β overflows), would give NaN outputs.
void check_float32_params(const char* op, const MLPOptions& options) {
  const auto check = [op](const char* arg, double value, bool normal) {
    const float rounded = static_cast<float>(value);
    if (normal ? !std::isnormal(rounded) : !std::isfinite(rounded)) {
      fail(ErrorKind::Value, op,
           "expected " + std::string(arg) + " to be a " + (normal ? "normal" : "finite") +
               " float32 number (float32 and 16-bit compute hold it in float32), but got " +
               detail::number_text(value));
    }
  };
  check("softplus_beta", options.softplus_beta, true);
  check("sine_omega0", options.sine_omega0, true);
  check("leaky_slope", options.leaky_slope, false);
}

std::string indexed(const char* arg, int k) {
  return std::string(arg) + "[" + std::to_string(k) + "]";
}

void check_finite(const char* op, const char* arg, double value) {
  if (!std::isfinite(value)) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to be finite, but got " + detail::number_text(value));
  }
}

/// x, a weight or a bias: float32 or float64 (16-bit inputs are not accepted: 16-bit compute is
/// asked for with compute_dtype, on float32 parameters).
void check_parameter_dtype(const char* op, const char* arg, const TensorRef& t) {
  if (t.dtype != DType::Float32 && t.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         "expected " + std::string(arg) +
             " to have dtype float32 or float64 (16-bit compute is chosen with compute_dtype), "
             "but got " +
             dtype_name(t.dtype));
  }
}

void check_two_dims(const char* op, const char* arg, const TensorRef& t, const char* layout) {
  if (t.ndim != 2) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to be 2-D " + layout + ", but got shape " +
             t.shape_str());
  }
}

/// An input that shares x's device and dtype.
void check_like_x(const char* op, const char* arg, const TensorRef& t, const TensorRef& x,
                  bool needs_data) {
  detail::check_storage(op, arg, t, needs_data);
  detail::check_same_device(op, arg, t, "x", x);
  detail::check_dtype(op, arg, t, x.dtype, "the dtype of x");
}

/// An argument the entry needs, given as an absent (default) TensorRef: named as such, where the
/// checks that follow would report a null pointer for shape [].
void check_given(const char* op, const char* arg, const TensorRef& t, const std::string& layout) {
  if (is_absent(t)) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to be a tensor of shape " + layout +
             ", but got an absent (default-constructed) TensorRef");
  }
}

/// The layer table and options of a call: everything every entry checks first. `needs_data` is
/// false for the workspace queries, which read metadata only.
struct Network {
  Problem problem;
  std::vector<LayerView> layers;

  Network(const char* op, const TensorRef& x, const TensorRef* weights, const TensorRef* biases,
          int num_layers, const MLPOptions& options, bool needs_data) {
    detail::check_storage(op, "x", x, needs_data);
    check_two_dims(op, "x", x, "[B, in]");
    detail::check_device_supported(op, "x", x);
    check_parameter_dtype(op, "x", x);
    if (num_layers < 1 || weights == nullptr) {
      fail(ErrorKind::Value, op,
           "expected weights to hold at least one layer, but got " +
               std::to_string(weights == nullptr ? 0 : num_layers));
    }
    layers.resize(static_cast<std::size_t>(num_layers));
    int64_t in = x.sizes[1];
    for (int k = 0; k < num_layers; ++k) {
      const std::string w = indexed("weights", k);
      check_like_x(op, w.c_str(), weights[k], x, needs_data);
      check_two_dims(op, w.c_str(), weights[k], "[out, in]");
      const int64_t out = weights[k].sizes[0];
      if (weights[k].sizes[1] != in) {
        const std::string source =
            k == 0 ? "x's width " + std::to_string(in)
                   : "weights[" + std::to_string(k - 1) + "]'s out " + std::to_string(in);
        fail(ErrorKind::Value, op,
             "expected " + w + " to have in = " + std::to_string(in) + " columns (" + source +
                 "), but got shape " + weights[k].shape_str());
      }
      const bool hidden = k + 1 < num_layers;
      if (hidden && (out % kWidthMultiple != 0 || out < kWidthMultiple || out > kMaxHiddenWidth)) {
        fail(ErrorKind::Value, op,
             "expected " + w +
                 " to have a hidden width (rows) that is a multiple of 16 from 16 to " +
                 std::to_string(kMaxHiddenWidth) + ", but got shape " + weights[k].shape_str());
      }
      if (in < 1 || out < 1) {
        fail(ErrorKind::Value, op,
             "expected " + w + " to have non-zero sizes, but got shape " + weights[k].shape_str());
      }
      LayerView& layer = layers[static_cast<std::size_t>(k)];
      layer.in = in;
      layer.out = out;
      layer.weight = weights[k].data;
      layer.weight_stride_out = weights[k].strides[0];
      layer.weight_stride_in = weights[k].strides[1];
      if (biases != nullptr && !is_absent(biases[k])) {
        const std::string b = indexed("biases", k);
        check_like_x(op, b.c_str(), biases[k], x, needs_data);
        detail::check_shape(
            op, b.c_str(), biases[k], {out},
            ("[" + std::to_string(out) + "] (weights[" + std::to_string(k) + "]'s out)").c_str());
        layer.bias = biases[k].data;
        layer.bias_stride = biases[k].strides[0];
      }
      in = out;
    }
    problem.op = op;
    problem.dtype = x.dtype;
    problem.compute_dtype = compute_dtype(op, x, options);
    problem.device = x.device;
    problem.batch = x.sizes[0];
    problem.num_layers = num_layers;
    problem.layers = layers.data();
    problem.activation = parse_activation(op, "activation", options.activation);
    problem.output_activation =
        parse_activation(op, "output_activation", options.output_activation);
    check_finite(op, "softplus_beta", options.softplus_beta);
    if (options.softplus_beta <= 0.0) {
      fail(ErrorKind::Value, op,
           "expected softplus_beta to be > 0, but got " +
               detail::number_text(options.softplus_beta));
    }
    check_finite(op, "sine_omega0", options.sine_omega0);
    if (options.sine_omega0 == 0.0) {
      fail(ErrorKind::Value, op, "expected sine_omega0 to be non-zero, but got 0");
    }
    check_finite(op, "leaky_slope", options.leaky_slope);
    if (problem.compute_dtype != DType::Float64) check_float32_params(op, options);
    problem.params.softplus_beta = options.softplus_beta;
    problem.params.sine_omega0 = options.sine_omega0;
    problem.params.leaky_slope = options.leaky_slope;
  }
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  static DType compute_dtype(const char* op, const TensorRef& x, const MLPOptions& options) {
    if (!options.compute_dtype || *options.compute_dtype == x.dtype) return x.dtype;
    const DType c = *options.compute_dtype;
    if (c != DType::Float16 && c != DType::BFloat16) {
      fail(ErrorKind::Type, op,
           std::string("expected compute_dtype to be None, x's dtype (") + dtype_name(x.dtype) +
               "), float16 or bfloat16, but got " + dtype_name(c));
    }
    if (!x.device.is_cuda()) {
      fail(ErrorKind::NotImplemented, op,
           std::string("compute_dtype ") + dtype_name(c) +
               " runs on CUDA tensor cores only, but x is on " + x.device.str() +
               " (leave compute_dtype None on the CPU)");
    }
    if (x.dtype != DType::Float32) {
      fail(ErrorKind::Type, op,
           std::string("expected x, weights and biases to be float32 (the master dtype) with "
                       "compute_dtype ") +
               dtype_name(c) + ", but got x of dtype " + dtype_name(x.dtype));
    }
    return c;
  }
};

MatrixView matrix_view(const TensorRef& t) {
  return MatrixView{t.data, t.strides[0], t.strides[1]};
}

/// An input matrix [B, cols] on x's device in x's dtype (grad_out, grad_grad_x).
MatrixView checked_matrix(const char* op, const char* arg, const TensorRef& t, const TensorRef& x,
                          int64_t cols, const char* layout) {
  check_given(op, arg, t, layout);
  check_like_x(op, arg, t, x, true);
  detail::check_shape(op, arg, t, {x.sizes[0], cols}, layout);
  return matrix_view(t);
}

/// The inputs every output of a call must stay clear of.
struct Inputs {
  const TensorRef& x;
  const TensorRef* weights;
  const TensorRef* biases;
  int num_layers;
  const TensorRef* extra[3];  ///< grad_out, grad_grad_x, grad_y where the entry takes them
  const char* extra_names[3];
  /// The double backward's upstream gradients of grad_weights / grad_biases (null: none).
  const TensorRef* upstream_weights = nullptr;
  const TensorRef* upstream_biases = nullptr;
};

/// Outputs must not share memory with each other either: of two on one buffer only the one
/// written last would survive. `named` are the entry's single outputs (null: not asked for),
/// then come the parameter gradients of every layer.
void check_outputs_disjoint(const char* op,
                            std::initializer_list<std::pair<const char*, const TensorRef*>> named,
                            const TensorRef* grad_weights, const TensorRef* grad_biases,
                            int num_layers) {
  std::vector<std::pair<std::string, const TensorRef*>> written;
  const auto add = [&written](std::string name, const TensorRef* t) {
    if (t != nullptr && !is_absent(*t)) written.emplace_back(std::move(name), t);
  };
  for (const auto& [name, t] : named) add(name, t);
  for (int k = 0; k < num_layers; ++k) {
    if (grad_weights != nullptr) add(indexed("grad_weights", k), &grad_weights[k]);
    if (grad_biases != nullptr) add(indexed("grad_biases", k), &grad_biases[k]);
  }
  for (std::size_t i = 1; i < written.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      detail::check_disjoint(op, written[i].first.c_str(), *written[i].second,
                             written[j].first.c_str(), *written[j].second);
    }
  }
}

/// A contiguous output of x's dtype and device, shaped `expected` (`layout` for the message),
/// disjoint from every input. Returns its data pointer.
void* checked_output(const char* op, const std::string& arg, const TensorRef& t,
                     std::initializer_list<int64_t> expected, const std::string& layout,
                     const Inputs& in) {
  const char* name = arg.c_str();
  check_given(op, name, t, layout);
  check_like_x(op, name, t, in.x, true);
  detail::check_shape(op, name, t, expected, layout.c_str());
  detail::check_contiguous(op, name, t);
  detail::check_disjoint(op, name, t, "x", in.x);
  // Each per-layer input array (null: none; absent entries: that layer has none).
  const auto clear_of = [&](const char* input, const TensorRef* per_layer) {
    if (per_layer == nullptr) return;
    for (int k = 0; k < in.num_layers; ++k) {
      if (!is_absent(per_layer[k])) {
        detail::check_disjoint(op, name, t, indexed(input, k).c_str(), per_layer[k]);
      }
    }
  };
  clear_of("weights", in.weights);
  clear_of("biases", in.biases);
  clear_of("grad_grad_weights", in.upstream_weights);
  clear_of("grad_grad_biases", in.upstream_biases);
  for (int i = 0; i < 3; ++i) {
    if (in.extra[i] != nullptr)
      detail::check_disjoint(op, name, t, in.extra_names[i], *in.extra[i]);
  }
  return t.data;
}

std::string shape_text(int64_t rows, int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

/// Parameter-gradient outputs (null arrays: not wanted) into the network's layer table.
void bind_parameter_grads(const char* op, Network& net, const TensorRef* grad_weights,
                          const TensorRef* grad_biases, const TensorRef* biases, const Inputs& in) {
  for (int k = 0; k < net.problem.num_layers; ++k) {
    LayerView& layer = net.layers[static_cast<std::size_t>(k)];
    if (grad_weights != nullptr) {
      layer.grad_weight =
          checked_output(op, indexed("grad_weights", k), grad_weights[k], {layer.out, layer.in},
                         shape_text(layer.out, layer.in), in);
    }
    if (grad_biases == nullptr) continue;
    const bool has_bias = biases != nullptr && !is_absent(biases[k]);
    if (!has_bias) {
      if (!is_absent(grad_biases[k])) {
        fail(ErrorKind::Value, op,
             "expected grad_biases[" + std::to_string(k) + "] to be absent (layer " +
                 std::to_string(k) + " has no bias), but got shape " + grad_biases[k].shape_str());
      }
      continue;
    }
    layer.grad_bias = checked_output(op, indexed("grad_biases", k), grad_biases[k], {layer.out},
                                     "[" + std::to_string(layer.out) + "]", in);
  }
}

/// The double backward's optional upstream gradients of grad_weights / grad_biases (inputs, any
/// strides; absent entries and null arrays are zero) into the layer table.
void bind_upstream_parameter_grads(const char* op, Network& net, const TensorRef* grad_grad_weights,
                                   const TensorRef* grad_grad_biases, const TensorRef* biases,
                                   const TensorRef& x) {
  for (int k = 0; k < net.problem.num_layers; ++k) {
    LayerView& layer = net.layers[static_cast<std::size_t>(k)];
    if (grad_grad_weights != nullptr && !is_absent(grad_grad_weights[k])) {
      const std::string arg = indexed("grad_grad_weights", k);
      check_like_x(op, arg.c_str(), grad_grad_weights[k], x, true);
      detail::check_shape(
          op, arg.c_str(), grad_grad_weights[k], {layer.out, layer.in},
          (shape_text(layer.out, layer.in) + " (the shape of weights[" + std::to_string(k) + "])")
              .c_str());
      layer.grad_grad_weight = grad_grad_weights[k].data;
      layer.grad_grad_weight_stride_out = grad_grad_weights[k].strides[0];
      layer.grad_grad_weight_stride_in = grad_grad_weights[k].strides[1];
    }
    if (grad_grad_biases == nullptr || is_absent(grad_grad_biases[k])) continue;
    const std::string arg = indexed("grad_grad_biases", k);
    if (biases == nullptr || is_absent(biases[k])) {
      fail(ErrorKind::Value, op,
           "expected " + arg + " to be absent (layer " + std::to_string(k) +
               " has no bias), but got shape " + grad_grad_biases[k].shape_str());
    }
    check_like_x(op, arg.c_str(), grad_grad_biases[k], x, true);
    detail::check_shape(op, arg.c_str(), grad_grad_biases[k], {layer.out},
                        ("[" + std::to_string(layer.out) + "]").c_str());
    layer.grad_grad_bias = grad_grad_biases[k].data;
    layer.grad_grad_bias_stride = grad_grad_biases[k].strides[0];
  }
}

/// One entry's drivers: its workspace size and its run, on the CPU, CUDA and CUDA tensor cores.
template <class Args>
struct Drivers {
  std::size_t (*workspace_cpu)(const Problem&);
  void (*run_cpu)(const Args&);
#if FIELDFUSE_WITH_CUDA
  std::size_t (*workspace_cuda)(const Problem&);
  void (*run_cuda)(const Args&);
  std::size_t (*workspace_tensor_core)(const Problem&);
  void (*run_tensor_core)(const Args&);
#endif
};

// The tables' CUDA rows exist only in CUDA builds; clang-format would indent them oddly.
// clang-format off
constexpr Drivers<detail::mlp::ForwardArgs> kForwardDrivers{
    detail::mlp::forward_workspace_cpu, detail::mlp::forward_cpu,
#if FIELDFUSE_WITH_CUDA
    detail::mlp::forward_workspace_cuda, detail::mlp::forward_cuda,
    detail::mlp::forward_workspace_cuda_tensor_core, detail::mlp::forward_cuda_tensor_core,
#endif
};
constexpr Drivers<detail::mlp::BackwardArgs> kBackwardDrivers{
    detail::mlp::backward_workspace_cpu, detail::mlp::backward_cpu,
#if FIELDFUSE_WITH_CUDA
    detail::mlp::backward_workspace_cuda, detail::mlp::backward_cuda,
    detail::mlp::backward_workspace_cuda_tensor_core, detail::mlp::backward_cuda_tensor_core,
#endif
};
constexpr Drivers<detail::mlp::DoubleBackwardArgs> kDoubleBackwardDrivers{
    detail::mlp::double_backward_workspace_cpu, detail::mlp::double_backward_cpu,
#if FIELDFUSE_WITH_CUDA
    detail::mlp::double_backward_workspace_cuda, detail::mlp::double_backward_cuda,
    detail::mlp::double_backward_workspace_cuda_tensor_core,
    detail::mlp::double_backward_cuda_tensor_core,
#endif
};
  // clang-format on

#if FIELDFUSE_WITH_CUDA
/// A 16-bit compute_dtype (only ever set for CUDA tensors) selects the tensor-core driver.
bool tensor_core(const Problem& p) { return p.compute_dtype != p.dtype; }
#endif

/// The workspace of an entry on x's device and driver.
template <class Args>
std::size_t workspace_bytes_of(const Drivers<Args>& drivers, const Problem& p) {
#if FIELDFUSE_WITH_CUDA
  if (p.device.is_cuda()) {
    return tensor_core(p) ? drivers.workspace_tensor_core(p) : drivers.workspace_cuda(p);
  }
#endif
  return drivers.workspace_cpu(p);
}

/// Checks the caller's workspace against the entry's need, then runs the entry on x's device.
template <class Args>
void run(const char* op, const Drivers<Args>& drivers, Args& args, void* workspace,
         std::size_t workspace_bytes, Stream stream) {
  detail::check_workspace(op, workspace, workspace_bytes,
                          workspace_bytes_of(drivers, args.problem));
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  args.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (args.problem.device.is_cuda()) {
    return tensor_core(args.problem) ? drivers.run_tensor_core(args) : drivers.run_cuda(args);
  }
#endif
  drivers.run_cpu(args);
}

/// The [B, cols] matrices an entry reads and writes, checked against x: inputs any strides,
/// outputs contiguous and clear of every input. Each message names the shape it expected.
struct BatchShapes {
  const char* op;
  const Inputs& in;
  int64_t batch, in_cols, out_cols;

  BatchShapes(const char* op, const Inputs& in, const Network& net)
      : op(op),
        in(in),
        batch(in.x.sizes[0]),
        in_cols(in.x.sizes[1]),
        out_cols(net.problem.out_features()) {}

  MatrixView input_like_x(const char* arg, const TensorRef& t) const {
    return checked_matrix(op, arg, t, in.x, in_cols,
                          (shape_text(batch, in_cols) + " (the shape of x)").c_str());
  }
  MatrixView input_like_y(const char* arg, const TensorRef& t) const {
    return checked_matrix(op, arg, t, in.x, out_cols,
                          (shape_text(batch, out_cols) + " (the shape of the output)").c_str());
  }
  void* output_like_x(const char* arg, const TensorRef& t) const {
    return checked_output(op, arg, t, {batch, in_cols},
                          shape_text(batch, in_cols) + " (the shape of x)", in);
  }
  void* output_like_y(const char* arg, const TensorRef& t, const char* what) const {
    return checked_output(op, arg, t, {batch, out_cols},
                          shape_text(batch, out_cols) + " (" + what + ")", in);
  }
};

}  // namespace

// --- mlp_forward -----------------------------------------------------------------------------

std::size_t mlp_forward_workspace_size(const TensorRef& x, const TensorRef* weights,
                                       const TensorRef* biases, int num_layers,
                                       const MLPOptions& options) {
  const Network net(kForwardOp, x, weights, biases, num_layers, options, false);
  return workspace_bytes_of(kForwardDrivers, net.problem);
}

void mlp_forward(const TensorRef& x, const TensorRef* weights, const TensorRef* biases,
                 int num_layers, const MLPOptions& options, const TensorRef& out, void* workspace,
                 std::size_t workspace_bytes, Stream stream) {
  constexpr const char* op = kForwardOp;
  const Network net(op, x, weights, biases, num_layers, options, true);
  const Inputs in{x, weights, biases, num_layers, {nullptr, nullptr}, {"", ""}};
  const BatchShapes shapes(op, in, net);
  detail::mlp::ForwardArgs args;
  args.problem = net.problem;
  args.x = matrix_view(x);
  args.out = shapes.output_like_y("out", out, "B, the last layer's out");
  run(op, kForwardDrivers, args, workspace, workspace_bytes, stream);
}

// --- mlp_backward ----------------------------------------------------------------------------

std::size_t mlp_backward_workspace_size(const TensorRef& x, const TensorRef* weights,
                                        const TensorRef* biases, int num_layers,
                                        const MLPOptions& options) {
  const Network net(kBackwardOp, x, weights, biases, num_layers, options, false);
  return workspace_bytes_of(kBackwardDrivers, net.problem);
}

void mlp_backward(const TensorRef& x, const TensorRef* weights, const TensorRef* biases,
                  int num_layers, const MLPOptions& options, const TensorRef& grad_out,
                  const TensorRef* grad_x, const TensorRef* grad_weights,
                  const TensorRef* grad_biases, const TensorRef* out, void* workspace,
                  std::size_t workspace_bytes, Stream stream) {
  constexpr const char* op = kBackwardOp;
  Network net(op, x, weights, biases, num_layers, options, true);
  const Inputs in{x, weights, biases, num_layers, {&grad_out, nullptr}, {"grad_out", ""}};
  const BatchShapes shapes(op, in, net);
  detail::mlp::BackwardArgs args;
  args.x = matrix_view(x);
  args.grad_out = shapes.input_like_y("grad_out", grad_out);
  if (grad_x != nullptr) args.grad_x = shapes.output_like_x("grad_x", *grad_x);
  if (out != nullptr) args.out = shapes.output_like_y("out", *out, "the shape of the output");
  bind_parameter_grads(op, net, grad_weights, grad_biases, biases, in);
  check_outputs_disjoint(op, {{"grad_x", grad_x}, {"out", out}}, grad_weights, grad_biases,
                         num_layers);
  args.problem = net.problem;
  run(op, kBackwardDrivers, args, workspace, workspace_bytes, stream);
}

// --- mlp_double_backward ---------------------------------------------------------------------

std::size_t mlp_double_backward_workspace_size(const TensorRef& x, const TensorRef* weights,
                                               const TensorRef* biases, int num_layers,
                                               const MLPOptions& options) {
  const Network net(kDoubleBackwardOp, x, weights, biases, num_layers, options, false);
  return workspace_bytes_of(kDoubleBackwardDrivers, net.problem);
}

void mlp_double_backward(const TensorRef& x, const TensorRef* weights, const TensorRef* biases,
                         int num_layers, const MLPOptions& options, const TensorRef& grad_out,
                         const TensorRef& grad_grad_x, const TensorRef* grad_grad_weights,
                         const TensorRef* grad_grad_biases, const TensorRef* grad_y,
                         const TensorRef* grad_grad_out, const TensorRef* grad_x,
                         const TensorRef* grad_weights, const TensorRef* grad_biases,
                         void* workspace, std::size_t workspace_bytes, Stream stream) {
  constexpr const char* op = kDoubleBackwardOp;
  Network net(op, x, weights, biases, num_layers, options, true);
  const Inputs in{x,
                  weights,
                  biases,
                  num_layers,
                  {&grad_out, &grad_grad_x, grad_y},
                  {"grad_out", "grad_grad_x", "grad_y"},
                  grad_grad_weights,
                  grad_grad_biases};
  const BatchShapes shapes(op, in, net);
  detail::mlp::DoubleBackwardArgs args;
  args.x = matrix_view(x);
  args.grad_out = shapes.input_like_y("grad_out", grad_out);
  args.grad_grad_x = shapes.input_like_x("grad_grad_x", grad_grad_x);
  bind_upstream_parameter_grads(op, net, grad_grad_weights, grad_grad_biases, biases, x);
  if (grad_y != nullptr) args.grad_y = shapes.input_like_y("grad_y", *grad_y);
  if (grad_grad_out != nullptr) {
    args.grad_grad_out =
        shapes.output_like_y("grad_grad_out", *grad_grad_out, "the shape of grad_out");
  }
  if (grad_x != nullptr) args.grad_x = shapes.output_like_x("grad_x", *grad_x);
  bind_parameter_grads(op, net, grad_weights, grad_biases, biases, in);
  check_outputs_disjoint(op, {{"grad_grad_out", grad_grad_out}, {"grad_x", grad_x}}, grad_weights,
                         grad_biases, num_layers);
  args.problem = net.problem;
  run(op, kDoubleBackwardDrivers, args, workspace, workspace_bytes, stream);
}

}  // namespace fieldfuse
