// SPDX-License-Identifier: Apache-2.0
// The hash-grid front: validates every argument, computes the level table (Note [tcnn layout])
// and picks the CPU or CUDA driver. All checks live here, so C++ and Python callers see the same
// messages, each starting with the public function the caller called.
#include "fieldfuse/hash_grid.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"
#include "encoding/hash_grid_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
namespace hg = detail::hash_grid;

constexpr const char* kForward = "hash_grid";
constexpr const char* kBackward = "hash_grid_backward";
constexpr const char* kDoubleBackward = "hash_grid_double_backward";

std::string shape_text(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

void check_range(const char* op, const char* arg, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    fail(ErrorKind::Value, op,
         "expected " + std::string(arg) + " to be in [" + std::to_string(lo) + ", " +
             std::to_string(hi) + "], but got " + std::to_string(value));
  }
}

/// Validates the hyperparameters and fills the level table of `pb` (dims already set).
void make_levels(const char* op, const HashGridConfig& config, hg::Problem& pb) {
  check_range(op, "n_levels", config.n_levels, 1, hg::kMaxLevels);
  const int f = config.n_features_per_level;
  if (f != 1 && f != 2 && f != 4 && f != 8) {
    fail(ErrorKind::Value, op,
         "expected n_features_per_level to be 1, 2, 4 or 8, but got " + std::to_string(f));
  }
  check_range(op, "log2_hashmap_size", config.log2_hashmap_size, 1, 31);
  check_range(op, "base_resolution", config.base_resolution, 1, int64_t{1} << 24);
  const double b = config.per_level_scale;
  // The level scales are float32 (as tiny-cuda-nn computes them): b must be finite there too.
  if (!(std::isfinite(static_cast<float>(b)) && b >= 1.0)) {
    fail(ErrorKind::Value, op,
         "expected per_level_scale to be finite (as a float32 number) and >= 1, but got " +
             detail::number_text(b));
  }
  const char* interp = config.interpolation;
  const bool linear = interp != nullptr && std::strcmp(interp, "linear") == 0;
  const bool smooth = interp != nullptr && std::strcmp(interp, "smoothstep") == 0;
  if (!linear && !smooth) {
    fail(ErrorKind::Value, op,
         std::string("expected interpolation to be \"linear\" or \"smoothstep\", but got ") +
             (interp == nullptr ? std::string("null") : "\"" + std::string(interp) + "\""));
  }
  const float finest = hg::level_scale(config.n_levels - 1, b, config.base_resolution);
  if (!(static_cast<double>(finest) <= hg::kMaxScale)) {
    fail(ErrorKind::Value, op,
         "expected the finest level's scale (per_level_scale^(n_levels - 1) * base_resolution "
         "- 1) to be at most 16777216, but got " +
             detail::number_text(finest));
  }
  pb.levels = config.n_levels;
  pb.features = f;
  pb.smoothstep = smooth;
  int64_t offset = 0;
  for (int l = 0; l < config.n_levels; ++l) {
    pb.level[l] = hg::level_info(pb.dims, hg::level_scale(l, b, config.base_resolution),
                                 config.log2_hashmap_size);
    pb.level[l].offset = offset;
    offset += pb.level[l].rows;
  }
  pb.rows = offset;
}

hg::MatrixView view(const TensorRef& t) {
  if (is_absent(t)) return {};
  return {t.data, t.strides[0], t.strides[1]};
}

/// Validates x, params and the config; `needs_data = false` for workspace queries.
hg::Problem make_problem(const char* op, const TensorRef& x, const TensorRef& params,
                         const HashGridConfig& config, bool needs_data = true) {
  hg::Problem pb;
  pb.op = op;
  detail::check_storage(op, "x", x, needs_data);
  detail::check_device_supported(op, "x", x);
  if (x.dtype != DType::Float32 && x.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         std::string("expected x to be float32 or float64, but got ") + dtype_name(x.dtype));
  }
  if (x.ndim != 2 || (x.sizes[1] != 2 && x.sizes[1] != 3)) {
    fail(ErrorKind::Value, op,
         "expected x to have shape [B, D] with D = 2 or 3, but got shape " + x.shape_str());
  }
  pb.dims = static_cast<int>(x.sizes[1]);
  pb.batch = x.sizes[0];
  pb.dtype = x.dtype;
  pb.device = x.device;
  pb.x = view(x);
  make_levels(op, config, pb);

  detail::check_storage(op, "params", params, needs_data);
  detail::check_device_supported(op, "params", params);
  detail::check_same_device(op, "params", params, "x", x);
  const bool half = params.dtype == DType::Float16 && x.dtype == DType::Float32;
  if (params.dtype != x.dtype && !half) {
    fail(ErrorKind::Type, op,
         std::string("expected params to have the dtype of x (") + dtype_name(x.dtype) +
             "), or float16 with float32 x, but got " + dtype_name(params.dtype));
  }
  if (half && !params.device.is_cuda()) {
    fail(ErrorKind::NotImplemented, op,
         "not implemented for params of dtype float16 on " + params.device.str() +
             "; float16 params are supported on CUDA (use float32 on cpu)");
  }
  if (params.ndim != 2 || params.sizes[0] != pb.rows || params.sizes[1] != pb.features) {
    fail(ErrorKind::Value, op,
         "expected params to have shape [hash_grid_num_params(" + std::to_string(pb.dims) +
             ", ...), n_features_per_level] = " + shape_text(pb.rows, pb.features) +
             ", but got shape " + params.shape_str());
  }
  pb.param_dtype = params.dtype;
  pb.params = view(params);
  return pb;
}

/// A strided matrix input (upstream gradient or seed) of the given shape, dtype and device.
void check_input_matrix(const char* op, const char* arg, const TensorRef& t, int64_t rows,
                        int64_t cols, DType dtype, const char* why, const TensorRef& x) {
  detail::check_storage(op, arg, t);
  detail::check_same_device(op, arg, t, "x", x);
  detail::check_dtype(op, arg, t, dtype, why);
  const std::string layout = shape_text(rows, cols);
  detail::check_shape(op, arg, t, {rows, cols}, layout.c_str());
}

/// An output: an input-like matrix that is contiguous and overlaps none of `inputs`.
void check_output(const char* op, const char* arg, const TensorRef& t, int64_t rows, int64_t cols,
                  DType dtype, const char* why, const TensorRef& x,
                  std::initializer_list<std::pair<const char*, const TensorRef*>> inputs) {
  check_input_matrix(op, arg, t, rows, cols, dtype, why, x);
  detail::check_contiguous(op, arg, t);
  for (const auto& [name, input] : inputs) {
    if (!is_absent(*input)) detail::check_disjoint(op, arg, t, name, *input);
  }
}

std::size_t grad_workspace(const hg::Problem& pb, bool wants_grad_params) {
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) return hg::grad_workspace_cuda(pb, wants_grad_params);
#endif
  (void)pb;
  (void)wants_grad_params;
  return 1;
}

/// The outputs of a backward or double backward, checked, into `args`.
void check_grad_outputs(const char* op, hg::GradArgs& args, const TensorRef& x,
                        const TensorRef& grad_x, const TensorRef& grad_params,
                        std::initializer_list<std::pair<const char*, const TensorRef*>> inputs) {
  const hg::Problem& pb = args.problem;
  if (!is_absent(grad_x)) {
    check_output(op, "grad_x", grad_x, pb.batch, pb.dims, pb.dtype, "the dtype of x", x, inputs);
    args.grad_x = grad_x.data;
  }
  if (!is_absent(grad_params)) {
    check_output(op, "grad_params", grad_params, pb.rows, pb.features, pb.param_dtype,
                 "the dtype of params", x, inputs);
    if (!is_absent(grad_x))
      detail::check_disjoint(op, "grad_params", grad_params, "grad_x", grad_x);
    args.grad_params = grad_params.data;
  }
}

/// The problem and upstream gradient shared by both gradient entries, validated.
hg::GradArgs grad_args(const char* op, const TensorRef& x, const TensorRef& params,
                       const HashGridConfig& config, const TensorRef& grad_out) {
  hg::GradArgs args;
  args.problem = make_problem(op, x, params, config);
  const hg::Problem& pb = args.problem;
  check_input_matrix(op, "grad_out", grad_out, pb.batch, pb.out_cols(), pb.dtype, "the dtype of x",
                     x);
  args.grad_out = view(grad_out);
  return args;
}

/// The end of both gradient entries: checks the workspace and runs the CPU or CUDA driver.
using Driver = void (*)(const hg::GradArgs&);
void run(const char* op, hg::GradArgs& args, void* workspace, std::size_t workspace_bytes,
         Stream stream, Driver cpu, Driver cuda) {
  detail::check_workspace(op, workspace, workspace_bytes,
                          grad_workspace(args.problem, args.grad_params != nullptr));
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  args.stream = stream;
  if (args.problem.device.is_cuda() && cuda != nullptr) return cuda(args);
  cpu(args);
}
#if FIELDFUSE_WITH_CUDA
#define FF_HASH_GRID_CUDA_DRIVER(name) hg::name##_cuda
#else
// Without CUDA, CUDA tensors were rejected by check_device_supported.
#define FF_HASH_GRID_CUDA_DRIVER(name) nullptr
#endif

}  // namespace

int64_t hash_grid_num_params(int n_input_dims, const HashGridConfig& config) {
  constexpr const char* op = "hash_grid_num_params";
  if (n_input_dims != 2 && n_input_dims != 3) {
    fail(ErrorKind::Value, op,
         "expected n_input_dims to be 2 or 3, but got " + std::to_string(n_input_dims));
  }
  hg::Problem pb;
  pb.dims = n_input_dims;
  make_levels(op, config, pb);
  return pb.rows;
}

void hash_grid_forward(const TensorRef& x, const TensorRef& params, const HashGridConfig& config,
                       const TensorRef& out, Stream stream) {
  const hg::Problem pb = make_problem(kForward, x, params, config);
  check_output(kForward, "out", out, pb.batch, pb.out_cols(), pb.dtype, "the dtype of x", x,
               {{"x", &x}, {"params", &params}});
  if (pb.batch == 0) return;
#if FIELDFUSE_WITH_CUDA
  if (pb.device.is_cuda()) return hg::forward_cuda(pb, out.data, stream);
#endif
  (void)stream;
  hg::forward_cpu(pb, out.data);
}

std::size_t hash_grid_backward_workspace_size(const TensorRef& x, const TensorRef& params,
                                              const HashGridConfig& config,
                                              bool wants_grad_params) {
  return grad_workspace(make_problem(kBackward, x, params, config, false), wants_grad_params);
}

void hash_grid_backward(const TensorRef& x, const TensorRef& params, const HashGridConfig& config,
                        const TensorRef& grad_out, const TensorRef& grad_x,
                        const TensorRef& grad_params, void* workspace, std::size_t workspace_bytes,
                        Stream stream) {
  constexpr const char* op = kBackward;
  hg::GradArgs args = grad_args(op, x, params, config, grad_out);
  check_grad_outputs(op, args, x, grad_x, grad_params,
                     {{"x", &x}, {"params", &params}, {"grad_out", &grad_out}});
  run(op, args, workspace, workspace_bytes, stream, hg::backward_cpu,
      FF_HASH_GRID_CUDA_DRIVER(backward));
}

std::size_t hash_grid_double_backward_workspace_size(const TensorRef& x, const TensorRef& params,
                                                     const HashGridConfig& config,
                                                     bool wants_grad_params) {
  return grad_workspace(make_problem(kDoubleBackward, x, params, config, false), wants_grad_params);
}

void hash_grid_double_backward(const TensorRef& x, const TensorRef& params,
                               const HashGridConfig& config, const TensorRef& grad_out,
                               const TensorRef& grad_grad_x, const TensorRef& grad_grad_params,
                               const TensorRef& grad_grad_out, const TensorRef& grad_x,
                               const TensorRef& grad_params, void* workspace,
                               std::size_t workspace_bytes, Stream stream) {
  constexpr const char* op = kDoubleBackward;
  hg::GradArgs args = grad_args(op, x, params, config, grad_out);
  const hg::Problem& pb = args.problem;
  if (!is_absent(grad_grad_x)) {
    check_input_matrix(op, "grad_grad_x", grad_grad_x, pb.batch, pb.dims, pb.dtype,
                       "the dtype of x", x);
    args.grad_grad_x = view(grad_grad_x);
  }
  if (!is_absent(grad_grad_params)) {
    check_input_matrix(op, "grad_grad_params", grad_grad_params, pb.rows, pb.features,
                       pb.param_dtype, "the dtype of params", x);
    args.grad_grad_params = view(grad_grad_params);
  }
  const std::initializer_list<std::pair<const char*, const TensorRef*>> inputs = {
      {"x", &x},
      {"params", &params},
      {"grad_out", &grad_out},
      {"grad_grad_x", &grad_grad_x},
      {"grad_grad_params", &grad_grad_params}};
  if (!is_absent(grad_grad_out)) {
    check_output(op, "grad_grad_out", grad_grad_out, pb.batch, pb.out_cols(), pb.dtype,
                 "the dtype of x", x, inputs);
    args.grad_grad_out = grad_grad_out.data;
  }
  check_grad_outputs(op, args, x, grad_x, grad_params, inputs);
  if (!is_absent(grad_grad_out)) {
    if (!is_absent(grad_x))
      detail::check_disjoint(op, "grad_grad_out", grad_grad_out, "grad_x", grad_x);
    if (!is_absent(grad_params)) {
      detail::check_disjoint(op, "grad_grad_out", grad_grad_out, "grad_params", grad_params);
    }
  }
  run(op, args, workspace, workspace_bytes, stream, hg::double_backward_cpu,
      FF_HASH_GRID_CUDA_DRIVER(double_backward));
}

}  // namespace fieldfuse
