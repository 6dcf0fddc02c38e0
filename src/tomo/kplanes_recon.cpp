// SPDX-License-Identifier: Apache-2.0
// KPlanesReconstruction: option checks, the owned buffers, and the training step composed from
// the kplanes, render, mlp, tv and optim families plus the glue stages of kplanes_recon_math.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/dispatch.h"
#include "fieldfuse/kplanes.h"
#include "fieldfuse/optim.h"
#include "fieldfuse/render.h"
#include "tomo/kplanes_recon_impl.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::tomo::Buffer;
namespace glue = detail::tomo;

constexpr const char* kOp = kKPlanesReconOp;

// Planes start uniform in [0.1, 0.5] (specs/kplanes.md; nn/kplanes.py PLANE_INIT_RANGE).
constexpr double kPlaneInitLow = 0.1, kPlaneInitHigh = 0.5;
// Default field tilts t >= 1 turn by π/5 about golden-spiral axes (nn/rotations.py).
constexpr double kPi = 3.14159265358979323846;
constexpr double kDefaultTiltAngle = kPi / 5;
constexpr double kGoldenAngle = kPi * (3.0 - 2.2360679774997896964);
// Pixels per projection are drawn with random_index, exact below 2^32.
constexpr int64_t kMaxPixels = int64_t(1) << 32;

void check_positive(const char* name, int64_t value) {
  if (value < 1) {
    fail(ErrorKind::Value, kOp,
         std::string("expected options.") + name + " to be >= 1, but got " + std::to_string(value));
  }
}

void check_weight(const char* name, double value) {
  if (!std::isfinite(value) || value < 0) {
    fail(ErrorKind::Value, kOp,
         std::string("expected options.") + name + " to be finite and >= 0, but got " +
             detail::number_text(value));
  }
}

void check_options(const KPlanesReconOptions& o) {
  check_positive("num_tilts", o.num_tilts);
  check_positive("channels", o.channels);
  for (std::size_t l = 0; l < o.resolutions.size(); ++l) {
    if (o.resolutions[l] < 2) {
      fail(ErrorKind::Value, kOp,
           "expected options.resolutions[" + std::to_string(l) + "] to be >= 2, but got " +
               std::to_string(o.resolutions[l]));
    }
  }
  if (o.decoder != "linear" && o.decoder != "mlp") {
    fail(ErrorKind::Value, kOp,
         "expected options.decoder to be \"linear\" or \"mlp\", but got \"" + o.decoder + "\"");
  }
  if (o.decoder == "mlp") {
    if (o.hidden < 16 || o.hidden > 256 || o.hidden % 16 != 0) {
      fail(ErrorKind::Value, kOp,
           "expected options.hidden to be a multiple of 16 in [16, 256] (the mlp family's hidden "
           "widths), but got " +
               std::to_string(o.hidden));
    }
    check_positive("layers", o.layers);
  }
  check_positive("rays", o.rays);
  if (!std::isfinite(o.ds) || o.ds < 0) {
    fail(ErrorKind::Value, kOp,
         "expected options.ds to be finite and > 0 (or 0 for 2 / max(H, W)), but got " +
             detail::number_text(o.ds));
  }
  check_weight("tv_volume", o.tv_volume);
  check_positive("tv_points", o.tv_points);
  check_weight("tv_plane", o.tv_plane);
  check_weight("sparsity", o.sparsity);
  check_weight("lr_planes", o.lr_planes);
  check_weight("lr_decoder", o.lr_decoder);
  check_weight("lr_rotations", o.lr_rotations);
  check_weight("lr_pose", o.lr_pose);
  check_weight("max_grad_norm", o.max_grad_norm);
  check_positive("iterations", o.iterations);
  check_weight("epochs", o.epochs);
  if (o.dtype != DType::Float32 && o.dtype != DType::Float64) {
    fail(ErrorKind::Type, kOp,
         std::string("expected options.dtype to be float32 or float64, but got ") +
             dtype_name(o.dtype));
  }
}

/// numpy.percentile's linear interpolation between order statistics.
double percentile(std::vector<double> values, double q) {
  const double position = q * double(values.size() - 1);
  const std::size_t low = static_cast<std::size_t>(std::floor(position));
  std::nth_element(values.begin(), values.begin() + low, values.end());
  const double a = values[low];
  if (low + 1 >= values.size()) return a;
  const double b = *std::min_element(values.begin() + low + 1, values.end());
  return a + (position - double(low)) * (b - a);
}

/// The stack's values in row-major order as float64 (host copy of a CPU or CUDA tensor).
std::vector<double> read_stack(const TensorRef& stack, Stream stream) {
  const int64_t count = stack.numel();
  std::vector<double> values(static_cast<std::size_t>(count));
  auto read = [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> host;
    const T* base = static_cast<const T*>(stack.data);
    if (stack.device.is_cuda()) {
      detail::check_contiguous(kOp, "stack", stack);
#if FIELDFUSE_WITH_CUDA
      host.resize(static_cast<std::size_t>(count));
      glue::cuda_copy_to_host(host.data(), stack.data, host.size() * sizeof(T), stream);
#else
      (void)stream;
#endif
      for (int64_t i = 0; i < count; ++i) values[i] = double(host[i]);
      return;
    }
    const int64_t h = stack.sizes[1], w = stack.sizes[2];
    for (int64_t m = 0; m < stack.sizes[0]; ++m)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          values[(m * h + i) * w + j] =
              double(base[m * stack.strides[0] + i * stack.strides[1] + j * stack.strides[2]]);
  };
  detail::dispatch_float_types(kOp, stack.dtype, read);
  return values;
}

/// Host values of type T from doubles, uploaded into a new buffer.
template <class T>
Buffer upload(Device device, const std::vector<double>& values, Stream stream) {
  std::vector<T> host(values.begin(), values.end());
  Buffer buffer(device, host.size() * sizeof(T));
  buffer.upload(host.data(), stream);
  return buffer;
}

Buffer upload_values(Device device, DType dtype, const std::vector<double>& values, Stream stream) {
  return dtype == DType::Float32 ? upload<float>(device, values, stream)
                                 : upload<double>(device, values, stream);
}

std::vector<double> uniform_values(uint64_t seed, uint64_t tensor, int64_t count, double low,
                                   double high) {
  std::vector<double> values(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const double u =
        glue::random_unit(glue::random_bits(seed, glue::kDrawInit, tensor, uint64_t(i)));
    values[i] = low + (high - low) * u;
  }
  return values;
}

/// Unit quaternions (w, x, y, z) of the default field rotations (nn/rotations.py
/// default_rotations: identity, then turns of π/5 about golden-spiral axes).
std::vector<double> default_quaternions(int64_t tilts) {
  std::vector<double> q(static_cast<std::size_t>(4 * tilts), 0.0);
  q[0] = 1.0;
  const int64_t n = tilts - 1;
  for (int64_t i = 0; i < n; ++i) {
    const double z = 1.0 - double(2 * i + 1) / double(n);
    const double radius = std::sqrt(std::max(0.0, 1.0 - z * z));
    const double phi = double(i) * kGoldenAngle;
    const double axis[3] = {radius * std::cos(phi), radius * std::sin(phi), z};
    const double c = std::cos(kDefaultTiltAngle / 2), s = std::sin(kDefaultTiltAngle / 2);
    double* out = q.data() + 4 * (i + 1);
    out[0] = c;
    for (int a = 0; a < 3; ++a) out[a + 1] = s * axis[a];
  }
  return q;
}

std::string text(double value) { return detail::number_text(value); }

}  // namespace

// --- parameters
// ------------------------------------------------------------------------------------

int64_t ReconParam::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

TensorRef ReconParam::view(const Buffer& buffer, DType dtype) const {
  TensorRef t;
  t.data = buffer.data();
  t.dtype = dtype;
  t.device = buffer.device();
  t.ndim = static_cast<int32_t>(sizes.size());
  for (int d = 0; d < t.ndim; ++d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = strides[d];
  }
  return t;
}

TensorRef ReconParam::flat(const Buffer& buffer, DType dtype) const {
  return TensorRef::contiguous(buffer.data(), dtype, buffer.device(), {numel()});
}

std::vector<std::pair<std::string, std::string>> describe(const KPlanesReconOptions& o) {
  // No ostringstream: its locale facets crash the Python module where the toolchain links
  // libstdc++ statically into it and the process already has another libstdc++ (the H100
  // machines' build: describe() segfaulted in std::ostream::_M_insert<long>).
  std::string resolutions;
  for (std::size_t l = 0; l < o.resolutions.size(); ++l) {
    resolutions += (l ? "," : "") + std::to_string(o.resolutions[l]);
  }
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  return {{"num_tilts", std::to_string(o.num_tilts)},
          {"channels", std::to_string(o.channels)},
          {"resolutions", resolutions},
          {"decoder", o.decoder},
          {"hidden", std::to_string(o.hidden)},
          {"layers", std::to_string(o.layers)},
          {"rays", std::to_string(o.rays)},
          {"ds", text(o.ds)},
          {"tv_volume", text(o.tv_volume)},
          {"tv_points", std::to_string(o.tv_points)},
          {"tv_plane", text(o.tv_plane)},
          {"sparsity", text(o.sparsity)},
          {"lr_planes", text(o.lr_planes)},
          {"lr_decoder", text(o.lr_decoder)},
          {"lr_rotations", text(o.lr_rotations)},
          {"lr_pose", text(o.lr_pose)},
          {"cosine_decay", flag(o.cosine_decay)},
          {"max_grad_norm", text(o.max_grad_norm)},
          {"pose_refinement", flag(o.pose_refinement)},
          {"iterations", std::to_string(o.iterations)},
          {"epochs", text(o.epochs)},
          {"seed", std::to_string(o.seed)},
          {"deterministic", flag(o.deterministic)},
          {"cuda_graph", flag(o.cuda_graph)},
          {"dtype", dtype_name(o.dtype)}};
}

// --- construction
// ------------------------------------------------------------------------------------

KPlanesReconstruction::KPlanesReconstruction(const TensorRef& stack, const double* angles_degrees,
                                             int64_t num_angles, const KPlanesReconOptions& options,
                                             Device device, Stream stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  check_options(options);
  detail::check_storage(kOp, "stack", stack);
  if (stack.ndim != 3) {
    fail(ErrorKind::Value, kOp,
         "expected stack to have shape [n, H, W], but got shape " + stack.shape_str());
  }
  if (stack.dtype != DType::Float32 && stack.dtype != DType::Float64) {
    fail(ErrorKind::Type, kOp,
         std::string("expected stack to have dtype float32 or float64, but got ") +
             dtype_name(stack.dtype));
  }
  detail::check_device_supported(kOp, "stack", stack);
  if (device.is_cuda() && !build_info().cuda) {
    fail(ErrorKind::NotImplemented, kOp,
         "expected device to be cpu in this build (no CUDA support), but got " + device.str());
  }
  if (stack.sizes[0] < 1 || stack.sizes[1] < 1 || stack.sizes[2] < 1) {
    fail(ErrorKind::Value, kOp,
         "expected stack to have at least one projection of at least one pixel, but got shape " +
             stack.shape_str());
  }
  if (stack.sizes[1] * stack.sizes[2] >= kMaxPixels) {
    fail(ErrorKind::Value, kOp,
         "expected stack to have fewer than 2^32 pixels per projection, but got shape " +
             stack.shape_str());
  }
  if (num_angles != stack.sizes[0] || angles_degrees == nullptr) {
    fail(ErrorKind::Value, kOp,
         "expected angles to hold one angle per projection (" + std::to_string(stack.sizes[0]) +
             "), but got " + std::to_string(angles_degrees ? num_angles : 0));
  }
  for (int64_t m = 0; m < num_angles; ++m) {
    if (!std::isfinite(angles_degrees[m])) {
      fail(ErrorKind::Value, kOp,
           "expected angles to be finite, but angles[" + std::to_string(m) + "] is " +
               text(angles_degrees[m]));
    }
  }

  s.options = options;
  s.device = device;
  s.stream = stream;
  s.dtype = options.dtype;
  s.projections = stack.sizes[0];
  s.height = stack.sizes[1];
  s.width = stack.sizes[2];
  s.angles.assign(angles_degrees, angles_degrees + num_angles);
  const int64_t side = std::max(s.height, s.width);
  if (s.options.resolutions.empty()) s.options.resolutions = {std::max<int64_t>(side, 2)};
  s.ds = options.ds > 0 ? options.ds : 2.0 / double(side);
  s.capacity = ray_box_samples_padded_capacity(s.ds);
  s.rays = options.rays;
  s.taps = options.tv_volume > 0 ? std::min(options.tv_points, s.rays * s.capacity) : 0;
  s.levels = static_cast<int64_t>(s.options.resolutions.size());
  s.features = options.num_tilts * options.channels * s.levels;
  s.h = 2.0 / double(*std::max_element(s.options.resolutions.begin(), s.options.resolutions.end()));
  const double pixels = double(s.projections) * double(s.height) * double(s.width);
  s.total_iterations =
      options.epochs > 0
          ? std::max<int64_t>(1, int64_t(std::ceil(options.epochs * pixels / double(s.rays))))
          : options.iterations;
  s.reference = 0;
  for (int64_t m = 1; m < s.projections; ++m) {
    if (std::fabs(s.angles[m]) < std::fabs(s.angles[s.reference])) s.reference = m;
  }

  // The data: normalised by its 95th percentile.
  std::vector<double> values = read_stack(stack, stream);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      fail(ErrorKind::Value, kOp,
           "expected stack to hold finite values, but element " + std::to_string(i) + " is " +
               text(values[i]));
    }
  }
  s.scale = percentile(values, 0.95);
  if (!(s.scale > 0)) {
    fail(ErrorKind::Value, kOp,
         "expected the stack's 95th percentile to be > 0 (it normalises the data), but got " +
             text(s.scale));
  }
  for (double& v : values) v /= s.scale;
  s.stack = upload_values(device, s.dtype, values, stream);
  s.tilt = upload_values(device, s.dtype, s.angles, stream);

  // Parameters.
  const int64_t T = options.num_tilts, C = options.channels;
  auto add = [&](std::string name, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                 double lr, const std::vector<double>& init) {
    ReconParam p;
    p.name = std::move(name);
    p.sizes = std::move(sizes);
    p.strides = std::move(strides);
    p.lr = lr;
    const std::size_t bytes = std::size_t(p.numel()) * dtype_size(s.dtype);
    p.value = upload_values(device, s.dtype, init, stream);
    p.grad = Buffer(device, bytes);
    p.exp_avg = Buffer(device, bytes);
    p.exp_avg_sq = Buffer(device, bytes);
    p.grad.zero(stream);
    p.exp_avg.zero(stream);
    p.exp_avg_sq.zero(stream);
    s.params.push_back(std::move(p));
  };
  uint64_t tensor_id = 0;
  for (int64_t l = 0; l < s.levels; ++l) {
    const int64_t r = s.options.resolutions[l];
    // Channels-last [3T, C, r, r]: the kplanes kernels' fast layout, read in place.
    add("planes." + std::to_string(l), {3 * T, C, r, r}, {r * r * C, 1, r * C, C},
        options.lr_planes,
        uniform_values(options.seed, tensor_id++, 3 * T * C * r * r, kPlaneInitLow,
                       kPlaneInitHigh));
  }
  std::vector<int64_t> widths{s.features};
  if (options.decoder == "mlp") widths.insert(widths.end(), options.layers, options.hidden);
  widths.push_back(1);
  s.decoder_layers = static_cast<int64_t>(widths.size()) - 1;
  s.first_decoder = static_cast<int64_t>(s.params.size());
  std::vector<std::vector<double>> biases;
  for (int64_t k = 0; k < s.decoder_layers; ++k) {
    // torch.nn.Linear's default init: weights and bias uniform in ±1/sqrt(fan_in).
    const double bound = 1.0 / std::sqrt(double(widths[k]));
    add("decoder.weight." + std::to_string(k), {widths[k + 1], widths[k]}, {widths[k], 1},
        options.lr_decoder,
        uniform_values(options.seed, tensor_id++, widths[k + 1] * widths[k], -bound, bound));
    biases.push_back(uniform_values(options.seed, tensor_id++, widths[k + 1], -bound, bound));
  }
  for (int64_t k = 0; k < s.decoder_layers; ++k) {
    add("decoder.bias." + std::to_string(k), {widths[k + 1]}, {1}, options.lr_decoder, biases[k]);
  }
  s.rotations_index = static_cast<int64_t>(s.params.size());
  add("rotations", {T, 4}, {4, 1}, options.lr_rotations, default_quaternions(T));
  const std::vector<double> zeros(std::size_t(2 * s.projections), 0.0);
  const std::vector<double> zeros_n(zeros.begin(), zeros.begin() + s.projections);
  s.z1_index = static_cast<int64_t>(s.params.size());
  add("z1", {s.projections}, {1}, options.lr_pose, zeros_n);
  s.z3_index = s.z1_index + 1;
  add("z3", {s.projections}, {1}, options.lr_pose, zeros_n);
  s.shifts_index = s.z1_index + 2;
  add("shifts", {s.projections, 2}, {2, 1}, options.lr_pose, zeros);
  for (int64_t i = s.z1_index; i <= s.shifts_index; ++i) {
    s.params[i].trained = options.pose_refinement;
  }

  // Work buffers.
  const std::size_t e = dtype_size(s.dtype);
  const int64_t R = s.rays, S = s.capacity, N = s.taps, n = s.projections;
  const int64_t M = R * S + 4 * N;  // decoder rows: ray samples, then the four taps
  auto make = [&](int64_t count, std::size_t element) {
    return Buffer(device, std::size_t(count) * element);
  };
  s.step_counter = make(1, sizeof(int64_t));
  s.step_counter.zero(stream);
  s.pose = make(9 * n, e);
  s.pose_dz1 = make(9 * n, e);
  s.pose_dz3 = make(9 * n, e);
  s.field_rotations = make(9 * T, e);
  s.grad_field_rotations = make(9 * T, e);
  s.origins = make(3 * R, e);
  s.directions = make(3 * R, e);
  s.targets = make(R, e);
  s.points = make(3 * R * S, e);
  s.delta_ts = make(R * S, e);
  s.valid = make(R * S, sizeof(bool));
  s.tap_points = make(3 * N, e);
  s.feature_rows = make(M * s.features, e);
  s.raw = make(M, e);
  s.rho = make(M, e);
  s.pred = make(R, e);
  s.terms = make(glue::kTermColumns * (R + N), e);
  s.plane_tv = make(s.levels, e);
  s.plane_tv_weights = make(s.levels, e);
  s.scalars = make(glue::kNumScalars, sizeof(double));
  s.loss_value = make(1, e);
  s.grad_pred = make(R, e);
  s.grad_values = make(R * S, e);
  s.grad_delta_ts = make(R * S, e);
  s.grad_raw = make(M, e);
  s.grad_features = make(M * s.features, e);
  s.grad_points = make(3 * R * S, e);
  s.grad_origins = make(3 * R, e);
  s.grad_directions = make(3 * R, e);
  s.pose_terms = make(glue::kPoseTerms * R, e);
  s.scalars.zero(stream);
  {
    // Padded rays: ray r's samples are rows [r·S, (r+1)·S) of the flattened per-sample tensors.
    std::vector<int64_t> offsets(std::size_t(R + 1));
    for (int64_t r = 0; r <= R; ++r) offsets[r] = r * S;
    s.offsets = make(R + 1, sizeof(int64_t));
    s.offsets.upload(offsets.data(), stream);
    s.plane_tv_weights = upload_values(
        device, s.dtype, std::vector<double>(std::size_t(s.levels), options.tv_plane), stream);
  }

  // Workspaces (sizes from metadata only).
  const std::vector<TensorRef> planes = s.plane_views(false);
  const int L = static_cast<int>(s.levels);
  const TensorRef pts = s.tensor(s.points, {R * S, 3}), taps = s.tensor(s.tap_points, {N, 3}),
                  rot = s.tensor(s.field_rotations, {T, 3, 3});
  s.kplanes_forward_bytes =
      kplanes_tilted_with_taps_forward_workspace_size(pts, taps, rot, planes.data(), L);
  s.kplanes_backward_bytes = kplanes_tilted_with_taps_backward_workspace_size(
      pts, taps, rot, planes.data(), L, true, options.deterministic);
  const TensorRef rows = s.tensor(s.feature_rows, {M, s.features});
  const std::vector<TensorRef> weights = s.decoder_views(false, false),
                               bias_views = s.decoder_views(true, false);
  const int layers = static_cast<int>(s.decoder_layers);
  s.mlp_forward_bytes =
      mlp_forward_workspace_size(rows, weights.data(), bias_views.data(), layers, s.mlp_options());
  s.mlp_backward_bytes =
      mlp_backward_workspace_size(rows, weights.data(), bias_views.data(), layers, s.mlp_options());
  s.plane_tv_bytes = plane_tv_workspace_size(planes.data(), L);
  std::vector<AdamParam> adam;
  for (const ReconParam& p : s.params) {
    if (p.trained) {
      adam.push_back({p.flat(p.value, s.dtype), p.flat(p.grad, s.dtype), p.flat(p.exp_avg, s.dtype),
                      p.flat(p.exp_avg_sq, s.dtype), p.lr});
    }
  }
  s.adam_bytes = adam_workspace_size(adam.data(), static_cast<int>(adam.size()));
  s.kplanes_forward_ws = make(int64_t(s.kplanes_forward_bytes), 1);
  s.kplanes_backward_ws = make(int64_t(s.kplanes_backward_bytes), 1);
  s.mlp_forward_ws = make(int64_t(s.mlp_forward_bytes), 1);
  s.mlp_backward_ws = make(int64_t(s.mlp_backward_bytes), 1);
  s.plane_tv_ws = make(int64_t(s.plane_tv_bytes), 1);
  s.adam_ws = make(int64_t(s.adam_bytes), 1);
}

KPlanesReconstruction::~KPlanesReconstruction() = default;

// --- views -------------------------------------------------------------------------------------

MLPOptions KPlanesReconstruction::Impl::mlp_options() const {
  MLPOptions o;
  o.activation = "relu";
  o.output_activation = "none";  // the density's softplus(x − 1) is a glue stage
  return o;
}

TensorRef KPlanesReconstruction::Impl::tensor(const Buffer& buffer,
                                              std::initializer_list<int64_t> sizes,
                                              DType type) const {
  return TensorRef::contiguous(buffer.data(), type, buffer.device(), sizes);
}

std::vector<TensorRef> KPlanesReconstruction::Impl::plane_views(bool gradients) const {
  std::vector<TensorRef> views;
  for (int64_t l = 0; l < levels; ++l) {
    views.push_back(params[l].view(gradients ? params[l].grad : params[l].value, dtype));
  }
  return views;
}

std::vector<TensorRef> KPlanesReconstruction::Impl::decoder_views(bool biases,
                                                                  bool gradients) const {
  std::vector<TensorRef> views;
  for (int64_t k = 0; k < decoder_layers; ++k) {
    const ReconParam& p = params[first_decoder + (biases ? decoder_layers : 0) + k];
    views.push_back(p.view(gradients ? p.grad : p.value, dtype));
  }
  return views;
}

// --- the step ------------------------------------------------------------------------------------

template <class T>
void KPlanesReconstruction::Impl::enqueue_step_typed(bool update) {
  const int64_t R = rays, S = capacity, N = taps, n = projections, Tt = options.num_tilts;
  const int64_t M = R * S + 4 * N, F = features;
  const int L = static_cast<int>(levels);
  const bool pose_on = options.pose_refinement;
  const int64_t* step = step_counter.as<int64_t>();
  const ReconParam &rot_p = params[rotations_index], &z1_p = params[z1_index],
                   &z3_p = params[z3_index], &shift_p = params[shifts_index];

  // Poses and field rotations.
  glue::PoseStage<T> poses;
  poses.projections = n;
  poses.tilts = Tt;
  poses.tilt = tilt.as<T>();
  poses.z1 = z1_p.value.as<T>();
  poses.z3 = z3_p.value.as<T>();
  poses.quaternions = rot_p.value.as<T>();
  poses.pose = pose.as<T>();
  poses.pose_dz1 = pose_dz1.as<T>();
  poses.pose_dz3 = pose_dz3.as<T>();
  poses.field_rotations = field_rotations.as<T>();
  glue::for_each(device, n + Tt, 64, poses, stream);

  // Rays and their samples.
  glue::PixelDraw<T> draw;
  draw.projections = n;
  draw.height = height;
  draw.width = width;
  draw.seed = options.seed;
  draw.step = step;
  draw.shifts = shift_p.value.as<T>();
  glue::RayStage<T> ray;
  ray.draw = draw;
  ray.pose = pose.as<T>();
  ray.stack = stack.as<T>();
  ray.origins = origins.as<T>();
  ray.directions = directions.as<T>();
  ray.targets = targets.as<T>();
  glue::for_each(device, R, 32, ray, stream);
  const TensorRef o_ref = tensor(origins, {R, 3}), d_ref = tensor(directions, {R, 3}),
                  pts_rs = tensor(points, {R, S, 3}), delta_rs = tensor(delta_ts, {R, S}),
                  valid_rs = tensor(valid, {R, S}, DType::Bool);
  ray_box_samples_padded_forward(o_ref, d_ref, ds, pts_rs, delta_rs, valid_rs, stream);
  if (options.deterministic) {
    // The K-Planes ops skip the padding (the `valid` mask below), but the deterministic plane
    // gradient still sorts every position by cell (SpreadPaddingStage).
    glue::SpreadPaddingStage<T> spread;
    spread.capacity = S;
    spread.valid = valid.as<bool>();
    spread.points = points.as<T>();
    glue::for_each(device, R * S, 16, spread, stream);
  }

  glue::TapStage<T> tap;
  tap.rays = R;
  tap.capacity = S;
  tap.seed = options.seed;
  tap.step = step;
  tap.points = points.as<T>();
  tap.valid = valid.as<bool>();
  tap.tap_points = tap_points.as<T>();
  glue::for_each(device, N, S, tap, stream);

  // Field: features of the samples and of the taps, decoder, density.
  const std::vector<TensorRef> planes = plane_views(false), grad_planes = plane_views(true);
  const TensorRef pts = tensor(points, {R * S, 3}), tap_pts = tensor(tap_points, {N, 3}),
                  rot = tensor(field_rotations, {Tt, 3, 3}),
                  valid_mask = tensor(valid, {R * S}, DType::Bool);
  T* rows_base = feature_rows.as<T>();
  const TensorRef sample_features = TensorRef::contiguous(rows_base, dtype, device, {R * S, F});
  const TensorRef tap_features =
      TensorRef::contiguous(rows_base + R * S * F, dtype, device, {4, N, F});
  kplanes_tilted_with_taps_forward(pts, tap_pts, rot, planes.data(), L, h, nullptr, &valid_mask,
                                   sample_features, tap_features, kplanes_forward_ws.data(),
                                   kplanes_forward_bytes, stream);
  const TensorRef rows = tensor(feature_rows, {M, F}), raw_ref = tensor(raw, {M, 1});
  const std::vector<TensorRef> weights = decoder_views(false, false),
                               biases = decoder_views(true, false);
  const int layers = static_cast<int>(decoder_layers);
  mlp_forward(rows, weights.data(), biases.data(), layers, mlp_options(), raw_ref,
              mlp_forward_ws.data(), mlp_forward_bytes, stream);
  glue::DensityStage<T> dens;
  dens.ray_samples = R * S;
  dens.raw = raw.as<T>();
  dens.valid = valid.as<bool>();
  dens.rho = rho.as<T>();
  glue::for_each(device, M, 4, dens, stream);

  // Projection and loss.
  const TensorRef rho_samples = tensor(rho, {R * S}), delta_flat = tensor(delta_ts, {R * S}),
                  offsets_ref = tensor(offsets, {R + 1}, DType::Int64),
                  pred_ref = tensor(pred, {R});
  line_integral_forward(rho_samples, delta_flat, offsets_ref, pred_ref, stream);
  const bool plane_term = options.tv_plane > 0;
  if (plane_term) {
    plane_tv_forward(planes.data(), L, static_cast<int>(Tt), PlaneTVNorm::Mean,
                     tensor(plane_tv, {levels}), plane_tv_ws.data(), plane_tv_bytes, stream);
  }
  glue::TermStage<T> term;
  term.rays = R;
  term.capacity = S;
  term.taps = N;
  term.h = T(h);
  term.pred = pred.as<T>();
  term.targets = targets.as<T>();
  term.rho = rho.as<T>();
  term.valid = valid.as<bool>();
  term.sum_density = options.sparsity > 0;
  term.terms = terms.as<T>();
  glue::for_each(device, R + N, S, term, stream);
  glue::LossWeights weights_info;
  weights_info.rays = R;
  weights_info.taps = N;
  weights_info.levels = levels;
  weights_info.tv_volume = options.tv_volume;
  weights_info.tv_plane = options.tv_plane;
  weights_info.sparsity = options.sparsity;
  glue::reduce_loss(device, terms.as<T>(), R + N, plane_tv.as<T>(), weights_info,
                    scalars.as<double>(), loss_value.as<T>(), stream);

  // Backward: pred → ρ (and δ) → raw → features → planes, rotations, points.
  glue::ResidualSeedStage<T> residual;
  residual.rays = R;
  residual.terms = terms.as<T>();
  residual.grad_pred = grad_pred.as<T>();
  glue::for_each(device, R, 4, residual, stream);
  line_integral_backward(rho_samples, delta_flat, offsets_ref, tensor(grad_pred, {R}),
                         tensor(grad_values, {R * S}),
                         pose_on ? tensor(grad_delta_ts, {R * S}) : TensorRef{}, stream);
  glue::SeedStage<T> seed;
  seed.ray_samples = R * S;
  seed.taps = N;
  seed.h = T(h);
  seed.tv_scale = N > 0 ? T(options.tv_volume / double(N)) : T(0);
  seed.sparsity = T(options.sparsity);
  seed.scalars = scalars.as<double>();
  seed.raw = raw.as<T>();
  seed.rho = rho.as<T>();
  seed.valid = valid.as<bool>();
  seed.grad_values = grad_values.as<T>();
  seed.grad_raw = grad_raw.as<T>();
  glue::for_each(device, R * S + N, 8, seed, stream);

  const std::vector<TensorRef> grad_weights = decoder_views(false, true),
                               grad_biases = decoder_views(true, true);
  const TensorRef grad_rows = tensor(grad_features, {M, F});
  mlp_backward(rows, weights.data(), biases.data(), layers, mlp_options(), tensor(grad_raw, {M, 1}),
               &grad_rows, grad_weights.data(), grad_biases.data(), nullptr, mlp_backward_ws.data(),
               mlp_backward_bytes, stream);
  T* grad_rows_base = grad_features.as<T>();
  const TensorRef grad_sample_features =
      TensorRef::contiguous(grad_rows_base, dtype, device, {R * S, F});
  const TensorRef grad_tap_features =
      TensorRef::contiguous(grad_rows_base + R * S * F, dtype, device, {4, N, F});
  const TensorRef grad_pts = tensor(grad_points, {R * S, 3}),
                  grad_rot = tensor(grad_field_rotations, {Tt, 3, 3});
  kplanes_tilted_with_taps_backward(
      pts, tap_pts, rot, planes.data(), L, h, nullptr, &valid_mask, grad_sample_features,
      grad_tap_features, pose_on ? &grad_pts : nullptr, nullptr, &grad_rot, grad_planes.data(),
      options.deterministic, kplanes_backward_ws.data(), kplanes_backward_bytes, stream);
  if (plane_term) {
    // Added straight into the planes' gradient, which the K-Planes backward has just written.
    plane_tv_backward(planes.data(), L, static_cast<int>(Tt), PlaneTVNorm::Mean,
                      tensor(plane_tv_weights, {levels}), grad_planes.data(), stream,
                      /*accumulate=*/true);
  }
  glue::RotationBackwardStage<T> rot_back;
  rot_back.quaternions = rot_p.value.as<T>();
  rot_back.grad_rotations = grad_field_rotations.as<T>();
  rot_back.grad_quaternions = rot_p.grad.as<T>();
  glue::for_each(device, Tt, 64, rot_back, stream);

  if (pose_on) {
    ray_box_samples_padded_backward(o_ref, d_ref, ds, tensor(grad_points, {R, S, 3}),
                                    tensor(grad_delta_ts, {R, S}), tensor(grad_origins, {R, 3}),
                                    tensor(grad_directions, {R, 3}), stream);
    glue::RayPoseTermStage<T> ray_terms;
    ray_terms.draw = draw;
    ray_terms.pose = pose.as<T>();
    ray_terms.pose_dz1 = pose_dz1.as<T>();
    ray_terms.pose_dz3 = pose_dz3.as<T>();
    ray_terms.grad_origins = grad_origins.as<T>();
    ray_terms.grad_directions = grad_directions.as<T>();
    ray_terms.terms = pose_terms.as<T>();
    glue::for_each(device, R, 64, ray_terms, stream);
    glue::PoseBackwardStage<T> pose_back;
    pose_back.projections = n;
    pose_back.rays = R;
    pose_back.reference = reference;
    pose_back.terms = pose_terms.as<T>();
    pose_back.grad_z1 = z1_p.grad.as<T>();
    pose_back.grad_z3 = z3_p.grad.as<T>();
    pose_back.grad_shifts = shift_p.grad.as<T>();
    glue::for_each(device, n, 4 * (R / n + 1), pose_back, stream);
  }
  if (update) enqueue_adam();
}

void KPlanesReconstruction::Impl::enqueue_adam() {
  std::vector<AdamParam> adam;
  for (const ReconParam& p : params) {
    if (p.trained) {
      adam.push_back({p.flat(p.value, dtype), p.flat(p.grad, dtype), p.flat(p.exp_avg, dtype),
                      p.flat(p.exp_avg_sq, dtype), p.lr});
    }
  }
  AdamOptions o;
  o.max_grad_norm = options.max_grad_norm;
  o.total_steps = options.cosine_decay ? total_iterations : 0;
  adam_step(adam.data(), static_cast<int>(adam.size()), o, tensor(step_counter, {1}, DType::Int64),
            TensorRef{}, adam_ws.data(), adam_bytes, stream);
}

void KPlanesReconstruction::Impl::enqueue_step(bool update) {
  detail::dispatch_float_types(
      kOp, dtype, [&](auto tag) { enqueue_step_typed<typename decltype(tag)::type>(update); });
}

// --- public API
// ------------------------------------------------------------------------------------

void KPlanesReconstruction::step() {
  Impl& s = *impl_;
  // CUDA graph: the first step runs eagerly (it warms up lazy initialisation in the libraries),
  // the second is captured, and every later one replays it. The default (legacy) stream cannot
  // be captured, so it always runs eagerly.
  const bool graphable =
      s.device.is_cuda() && s.options.cuda_graph && s.stream.handle != nullptr && !s.graph_failed;
  if (graphable && s.host_steps > 0) {
#if FIELDFUSE_WITH_CUDA
    if (!s.graph.ready()) {
      s.graph.begin_capture(s.stream);
      s.enqueue_step(true);
      s.graph.end_capture(s.stream);
    }
    s.graph.launch(s.stream);
#endif
  } else {
    s.enqueue_step(true);
  }
  ++s.host_steps;
}

void KPlanesReconstruction::run(int64_t iterations, const Progress& progress) {
  const int64_t count = iterations >= 0 ? iterations : impl_->total_iterations - impl_->host_steps;
  for (int64_t i = 0; i < count; ++i) {
    step();
    if (progress) progress(impl_->host_steps, loss());
  }
}

double KPlanesReconstruction::evaluate() {
  impl_->enqueue_step(false);
  return loss();
}

double KPlanesReconstruction::loss() const {
  double scalars[glue::kNumScalars];
  impl_->scalars.download(scalars, impl_->stream);
  return scalars[glue::kLoss];
}

int64_t KPlanesReconstruction::steps_done() const {
  int64_t step = 0;
  impl_->step_counter.download(&step, impl_->stream);
  return step;
}

int64_t KPlanesReconstruction::iterations() const { return impl_->total_iterations; }
double KPlanesReconstruction::normalisation() const { return impl_->scale; }
const KPlanesReconOptions& KPlanesReconstruction::options() const { return impl_->options; }
int64_t KPlanesReconstruction::reference_projection() const { return impl_->reference; }

std::vector<KPlanesPose> KPlanesReconstruction::poses() const {
  const Impl& s = *impl_;
  const int64_t n = s.projections;
  std::vector<double> z1(n), z3(n), shifts(2 * n);
  auto fetch = [&](const ReconParam& p, std::vector<double>& out) {
    if (s.dtype == DType::Float64) {
      p.value.download(out.data(), s.stream);
      return;
    }
    std::vector<float> host(out.size());
    p.value.download(host.data(), s.stream);
    std::copy(host.begin(), host.end(), out.begin());
  };
  fetch(s.params[s.z1_index], z1);
  fetch(s.params[s.z3_index], z3);
  fetch(s.params[s.shifts_index], shifts);
  std::vector<KPlanesPose> poses(n);
  for (int64_t m = 0; m < n; ++m) {
    poses[m] = {s.angles[m], z1[m], z3[m], shifts[2 * m], shifts[2 * m + 1]};
  }
  return poses;
}

std::vector<std::string> KPlanesReconstruction::parameter_names() const {
  std::vector<std::string> names;
  for (const ReconParam& p : impl_->params) names.push_back(p.name);
  return names;
}

namespace {
const ReconParam& find_param(const KPlanesReconstruction::Impl& s, const std::string& name) {
  for (const ReconParam& p : s.params) {
    if (p.name == name) return p;
  }
  fail(ErrorKind::Value, kOp, "no parameter named \"" + name + "\"");
}
}  // namespace

TensorRef KPlanesReconstruction::parameter(const std::string& name) const {
  const ReconParam& p = find_param(*impl_, name);
  return p.view(p.value, impl_->dtype);
}

TensorRef KPlanesReconstruction::gradient(const std::string& name) const {
  const ReconParam& p = find_param(*impl_, name);
  return p.view(p.grad, impl_->dtype);
}

}  // namespace fieldfuse
