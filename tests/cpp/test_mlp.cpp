// SPDX-License-Identifier: Apache-2.0
// Tests of the MLP family: σ′ and σ″ of every activation (mlp_math.h) against finite differences,
// the C++ forward and backward against naive loops, and the front's checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fieldfuse/mlp.h"

#if FIELDFUSE_TEST_CUDA
#include <cuda_runtime.h>
#endif
#include "mlp/mlp_math.h"

namespace fftest {
namespace {

namespace m = fieldfuse::detail::mlp;
using fieldfuse::DType;
using fieldfuse::TensorRef;

constexpr uint32_t kSeed = 20261124u;  // fixed, so a failure reproduces

TEST(MlpMath, DerivativesMatchFiniteDifferences) {
  const m::ActivationParams params{2.0, 1.5, 0.1};
  const m::Activation kinds[] = {
      m::Activation::None,     m::Activation::ReLU, m::Activation::LeakyReLU,
      m::Activation::Softplus, m::Activation::Sine, m::Activation::Tanh,
      m::Activation::Sigmoid,  m::Activation::SiLU, m::Activation::Exp};
  const double h = 1e-5;
  for (const m::Activation kind : kinds) {
    for (const double p : {-2.3, -0.7, 0.4, 1.9}) {  // away from the ReLU kink
      const auto d = m::activation_derivs<double>(kind, params, p);
      const auto lo = m::activation_derivs<double>(kind, params, p - h);
      const auto hi = m::activation_derivs<double>(kind, params, p + h);
      EXPECT_NEAR(d.d1, (hi.value - lo.value) / (2 * h), 1e-6) << int(kind) << " at " << p;
      EXPECT_NEAR(d.d2, (hi.d1 - lo.d1) / (2 * h), 1e-6) << int(kind) << " at " << p;
      // The compile-time policies agree with the runtime switch.
      m::visit_activation<double>(kind, params, [&](auto act) {
        EXPECT_EQ(act.value(p), d.value);
        EXPECT_EQ(act.d1(p), d.d1);
      });
    }
  }
}

TEST(MlpMath, SoftplusFollowsPyTorchThreshold) {
  const m::Softplus<double> sp{2.0};
  EXPECT_EQ(sp.value(10.5), 10.5);  // βp = 21 > 20: exactly p
  EXPECT_EQ(sp.all(10.5).d2, 0.0);
  EXPECT_NEAR(sp.value(0.0), std::log(2.0) / 2.0, 1e-15);
}

/// The slope the 16-bit backward takes from a stored value, and the curvature term the double
/// backward takes from a stored tangent (Note [mlp slope from the output]), agree with those from
/// p, on both sides of 0 and past the threshold.
TEST(MlpMath, SoftplusSlopesFromStoredValuesMatchThoseFromP) {
  for (const double beta : {1.0, 3.0, 100.0}) {
    const m::Softplus<double> sp{beta};
    for (const double z : {-30.0, -12.0, -3.0, -0.5, 0.0, 0.7, 4.0, 19.0, 25.0}) {
      const double p = z / beta;
      EXPECT_NEAR(sp.d1_of_value(sp.value(p)), sp.d1(p), 1e-12 * sp.d1(p) + 3e-9)
          << "beta " << beta << " z " << z;
      const double u = -1.7;  // σ″u from the tangent σ′u
      EXPECT_NEAR(sp.d2u_of_tangent(sp.d1(p), sp.d1(p) * u), sp.all(p).d2 * u, 1e-12 * beta)
          << "beta " << beta << " z " << z;
    }
  }
}

TensorRef ref(std::vector<double>& data, std::initializer_list<int64_t> sizes) {
  return TensorRef::contiguous(data.data(), DType::Float64, {}, sizes);
}

/// y = W2 tanh(W1 x + b1) + b2 and its input and weight gradients, naively.
TEST(MlpApi, ForwardAndBackwardMatchNaiveLoops) {
  std::mt19937 rng(kSeed);
  std::normal_distribution<double> normal;
  const int64_t B = 5, I = 3, H = 16, O = 2;
  std::vector<double> x(B * I), w1(H * I), b1(H), w2(O * H), b2(O), out(B * O), g(B * O);
  for (auto* v : {&x, &w1, &b1, &w2, &b2, &g})
    for (double& e : *v) e = 0.5 * normal(rng);
  TensorRef weights[2] = {ref(w1, {H, I}), ref(w2, {O, H})};
  TensorRef biases[2] = {ref(b1, {H}), ref(b2, {O})};
  fieldfuse::MLPOptions options;
  options.activation = "tanh";
  const TensorRef xr = ref(x, {B, I});
  std::vector<char> ws(fieldfuse::mlp_forward_workspace_size(xr, weights, biases, 2, options));
  fieldfuse::mlp_forward(xr, weights, biases, 2, options, ref(out, {B, O}), ws.data(), ws.size());
  std::vector<double> gx(B * I), gw1(H * I), gb1(H), gw2(O * H), gb2(O);
  TensorRef grad_x = ref(gx, {B, I});
  TensorRef grad_w[2] = {ref(gw1, {H, I}), ref(gw2, {O, H})};
  TensorRef grad_b[2] = {ref(gb1, {H}), ref(gb2, {O})};
  ws.resize(fieldfuse::mlp_backward_workspace_size(xr, weights, biases, 2, options));
  std::vector<double> y(B * O);  // the backward's optional copy of the forward's output
  TensorRef y_out = ref(y, {B, O});
  fieldfuse::mlp_backward(xr, weights, biases, 2, options, ref(g, {B, O}), &grad_x, grad_w, grad_b,
                          &y_out, ws.data(), ws.size());
  EXPECT_EQ(y, out);
  // An `out` of the wrong shape is named in the error.
  TensorRef y_bad = ref(y, {O, B});
  try {
    fieldfuse::mlp_backward(xr, weights, biases, 2, options, ref(g, {B, O}), &grad_x, grad_w,
                            grad_b, &y_bad, ws.data(), ws.size());
    FAIL() << "expected an error";
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("mlp_backward(): expected out to have shape [5, 2]", 0),
              0u)
        << e.what();
  }
  std::vector<double> nw1(H * I, 0), nw2(O * H, 0);
  for (int64_t r = 0; r < B; ++r) {
    double a[H], d[H];
    for (int64_t j = 0; j < H; ++j) {
      double p = b1[j];
      for (int64_t i = 0; i < I; ++i) p += w1[j * I + i] * x[r * I + i];
      a[j] = std::tanh(p);
    }
    for (int64_t o = 0; o < O; ++o) {
      double y = b2[o];
      for (int64_t j = 0; j < H; ++j) y += w2[o * H + j] * a[j];
      EXPECT_NEAR(out[r * O + o], y, 1e-13);
      for (int64_t j = 0; j < H; ++j) nw2[o * H + j] += g[r * O + o] * a[j];
    }
    for (int64_t j = 0; j < H; ++j) {
      double s = 0;
      for (int64_t o = 0; o < O; ++o) s += g[r * O + o] * w2[o * H + j];
      d[j] = s * (1 - a[j] * a[j]);
      for (int64_t i = 0; i < I; ++i) nw1[j * I + i] += d[j] * x[r * I + i];
    }
    for (int64_t i = 0; i < I; ++i) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j) s += d[j] * w1[j * I + i];
      EXPECT_NEAR(gx[r * I + i], s, 1e-13);
    }
  }
  for (int64_t e = 0; e < H * I; ++e) EXPECT_NEAR(gw1[e], nw1[e], 1e-13);
  for (int64_t e = 0; e < O * H; ++e) EXPECT_NEAR(gw2[e], nw2[e], 1e-13);
}

/// The double backward's grad_y starts the second reverse sweep (r_L = grad_y); r is linear in
/// it, so its terms are the backward's gradients for grad_out = grad_y: double_backward(grad_y) =
/// double_backward(no grad_y) + backward(grad_out = grad_y), and grad_grad_out does not move.
TEST(MlpApi, DoubleBackwardGradYAddsTheBackwardOfGradY) {
  std::mt19937 rng(kSeed + 1);
  std::normal_distribution<double> normal;
  const int64_t B = 7, I = 3, H = 16, O = 2;
  std::vector<double> x(B * I), w1(H * I), b1(H), w2(O * H), b2(O), g(B * O), v(B * I), gy(B * O);
  for (auto* vec : {&x, &w1, &b1, &w2, &b2, &g, &v, &gy})
    for (double& e : *vec) e = 0.5 * normal(rng);
  TensorRef weights[2] = {ref(w1, {H, I}), ref(w2, {O, H})};
  TensorRef biases[2] = {ref(b1, {H}), ref(b2, {O})};
  fieldfuse::MLPOptions options;
  options.activation = "softplus";
  options.output_activation = "sigmoid";  // σ′ ≠ 1 on the output layer too
  const TensorRef xr = ref(x, {B, I});
  /// grad_x, grad_w1, grad_b1, grad_w2, grad_b2 and grad_grad_out of one call.
  struct Grads {
    std::vector<double> x, w1, b1, w2, b2, ggo;
  };
  auto make = [&] {
    return Grads{std::vector<double>(B * I), std::vector<double>(H * I),
                 std::vector<double>(H),     std::vector<double>(O * H),
                 std::vector<double>(O),     std::vector<double>(B * O)};
  };
  auto double_backward = [&](const TensorRef* grad_y) {
    Grads out = make();
    TensorRef gx = ref(out.x, {B, I}), ggo = ref(out.ggo, {B, O});
    TensorRef gw[2] = {ref(out.w1, {H, I}), ref(out.w2, {O, H})};
    TensorRef gb[2] = {ref(out.b1, {H}), ref(out.b2, {O})};
    std::vector<char> ws(
        fieldfuse::mlp_double_backward_workspace_size(xr, weights, biases, 2, options));
    fieldfuse::mlp_double_backward(xr, weights, biases, 2, options, ref(g, {B, O}), ref(v, {B, I}),
                                   nullptr, nullptr, grad_y, &ggo, &gx, gw, gb, ws.data(),
                                   ws.size());
    return out;
  };
  const TensorRef gyr = ref(gy, {B, O});
  const Grads with = double_backward(&gyr), without = double_backward(nullptr);
  Grads first = make();
  {
    TensorRef gx = ref(first.x, {B, I});
    TensorRef gw[2] = {ref(first.w1, {H, I}), ref(first.w2, {O, H})};
    TensorRef gb[2] = {ref(first.b1, {H}), ref(first.b2, {O})};
    std::vector<char> ws(fieldfuse::mlp_backward_workspace_size(xr, weights, biases, 2, options));
    fieldfuse::mlp_backward(xr, weights, biases, 2, options, gyr, &gx, gw, gb, nullptr, ws.data(),
                            ws.size());
  }
  const std::vector<double> Grads::*fields[] = {&Grads::x, &Grads::w1, &Grads::b1, &Grads::w2,
                                                &Grads::b2};
  for (const auto field : fields) {
    double moved = 0;
    for (std::size_t e = 0; e < (with.*field).size(); ++e) {
      EXPECT_NEAR((with.*field)[e], (without.*field)[e] + (first.*field)[e], 1e-12) << e;
      moved = std::max(moved, std::abs((first.*field)[e]));
    }
    EXPECT_GT(moved, 1e-3);  // grad_y reached this gradient
  }
  for (std::size_t e = 0; e < with.ggo.size(); ++e) EXPECT_EQ(with.ggo[e], without.ggo[e]);
  // A grad_y of the wrong shape is named in the error.
  const TensorRef bad = ref(gy, {O, B});
  try {
    double_backward(&bad);
    FAIL() << "expected an error";
  } catch (const fieldfuse::Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad_y"), std::string::npos) << e.what();
  }
}

TEST(MlpApi, RejectsHiddenWidthNotMultipleOf16) {
  std::vector<double> x(6), w1(15 * 3), w2(2 * 15);
  TensorRef weights[2] = {ref(w1, {15, 3}), ref(w2, {2, 15})};
  try {
    fieldfuse::mlp_forward_workspace_size(ref(x, {2, 3}), weights, nullptr, 2, {});
    FAIL() << "expected an error";
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(e.kind(), fieldfuse::ErrorKind::Value);
    EXPECT_EQ(std::string(e.what()).rfind("mlp(): expected weights[0] to have a hidden width", 0),
              0u)
        << e.what();
  }
}

/// The error of `call`, which must throw fieldfuse::Error; "" (and a test failure) if it does not.
template <class Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(e.kind(), fieldfuse::ErrorKind::Value) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

/// The backward's and the double backward's outputs: a gradient for a layer without a bias, an
/// output that overlaps an input or is not contiguous, and an upstream gradient of an absent
/// bias are each refused with a message naming the argument.
TEST(MlpApi, RejectsOutputsTheNetworkCannotTake) {
  const int64_t B = 4, I = 3, H = 16, O = 2;
  std::vector<double> x(B * I, 0.5), w1(H * I, 0.1), b1(H, 0.0), w2(O * H, 0.2), g(B * O, 1.0),
      v(B * I, 1.0);
  TensorRef weights[2] = {ref(w1, {H, I}), ref(w2, {O, H})};
  TensorRef biases[2] = {ref(b1, {H}), TensorRef{}};  // layer 1 has no bias
  const fieldfuse::MLPOptions options;
  const TensorRef xr = ref(x, {B, I}), gr = ref(g, {B, O});
  std::vector<double> gx(B * I), gw1(H * I), gb1(H), gw2(O * H), gb2(O), wide(2 * B * I);
  TensorRef grad_w[2] = {ref(gw1, {H, I}), ref(gw2, {O, H})};
  std::vector<char> ws(fieldfuse::mlp_backward_workspace_size(xr, weights, biases, 2, options));
  auto backward = [&](TensorRef* grad_x, TensorRef* grad_b) {
    fieldfuse::mlp_backward(xr, weights, biases, 2, options, gr, grad_x, grad_w, grad_b, nullptr,
                            ws.data(), ws.size());
  };
  TensorRef grad_b[2] = {ref(gb1, {H}), ref(gb2, {O})};
  EXPECT_EQ(error_of([&] { backward(nullptr, grad_b); }),
            "mlp_backward(): expected grad_biases[1] to be absent (layer 1 has no bias), but got "
            "shape [2]");
  grad_b[1] = TensorRef{};
  TensorRef aliased = ref(x, {B, I});  // grad_x written over x
  const std::string overlap = error_of([&] { backward(&aliased, grad_b); });
  EXPECT_EQ(overlap.rfind("mlp_backward(): expected grad_x not to overlap x in memory", 0), 0u)
      << overlap;
  // Every other column of a [B, 2I] buffer: the right shape, not contiguous.
  TensorRef strided = TensorRef::contiguous(wide.data(), DType::Float64, {}, {B, I});
  strided.strides[0] = 2 * I;
  const std::string layout = error_of([&] { backward(&strided, grad_b); });
  EXPECT_EQ(layout.rfind("mlp_backward(): expected grad_x to be contiguous (row-major)", 0), 0u)
      << layout;
  TensorRef grad_x = ref(gx, {B, I});
  backward(&grad_x, grad_b);  // the same call with valid outputs runs

  // Outputs on one buffer: only the one written last would survive.
  std::vector<double> shared(H * H);
  TensorRef same_buffer[2] = {ref(shared, {H, I}), ref(shared, {O, H})};
  const std::string overlapping = error_of([&] {
    fieldfuse::mlp_backward(xr, weights, biases, 2, options, gr, &grad_x, same_buffer, grad_b,
                            nullptr, ws.data(), ws.size());
  });
  EXPECT_EQ(overlapping.rfind(
                "mlp_backward(): expected grad_weights[1] not to overlap grad_weights[0]", 0),
            0u)
      << overlapping;
  std::vector<double> y(B * O);
  TensorRef y_over_grad_x = ref(gx, {B, O});  // out written over grad_x's buffer
  const std::string out_over = error_of([&] {
    fieldfuse::mlp_backward(xr, weights, biases, 2, options, gr, &grad_x, grad_w, grad_b,
                            &y_over_grad_x, ws.data(), ws.size());
  });
  EXPECT_EQ(out_over.rfind("mlp_backward(): expected out not to overlap grad_x", 0), 0u)
      << out_over;
  // An absent entry where a gradient is asked for is named as such.
  TensorRef missing[2] = {ref(gw1, {H, I}), TensorRef{}};
  EXPECT_EQ(error_of([&] {
              fieldfuse::mlp_backward(xr, weights, biases, 2, options, gr, &grad_x, missing, grad_b,
                                      nullptr, ws.data(), ws.size());
            }),
            "mlp_backward(): expected grad_weights[1] to be a tensor of shape [2, 16], but got an "
            "absent (default-constructed) TensorRef");
  // A corrupt ndim is refused, not read past the sizes array while printing the shape.
  TensorRef corrupt{};
  corrupt.ndim = 100000000;
  TensorRef corrupt_b[2] = {ref(gb1, {H}), corrupt};
  EXPECT_NE(error_of([&] { backward(&grad_x, corrupt_b); }).find("(ndim 100000000)"),
            std::string::npos);

  std::vector<double> gg_b2(O), ggo(B * O);
  TensorRef grad_grad_b[2] = {TensorRef{}, ref(gg_b2, {O})};
  TensorRef grad_grad_out = ref(ggo, {B, O});
  ws.resize(fieldfuse::mlp_double_backward_workspace_size(xr, weights, biases, 2, options));
  EXPECT_EQ(error_of([&] {
              fieldfuse::mlp_double_backward(xr, weights, biases, 2, options, gr, ref(v, {B, I}),
                                             nullptr, grad_grad_b, nullptr, &grad_grad_out, &grad_x,
                                             grad_w, grad_b, ws.data(), ws.size());
            }),
            "mlp_double_backward(): expected grad_grad_biases[1] to be absent (layer 1 has no "
            "bias), but got shape [2]");
  // The upstream gradients of the parameter gradients are inputs: outputs stay clear of them.
  const std::string upstream = error_of([&] {
    fieldfuse::mlp_double_backward(xr, weights, biases, 2, options, gr, ref(v, {B, I}), grad_w,
                                   nullptr, nullptr, &grad_grad_out, &grad_x, grad_w, grad_b,
                                   ws.data(), ws.size());
  });
  EXPECT_EQ(upstream.rfind("mlp_double_backward(): expected grad_weights[0] not to overlap "
                           "grad_grad_weights[0]",
                           0),
            0u)
      << upstream;
}

/// Sizes whose element count overflows int64 are refused before any data pointer is trusted
/// (the count wrapped to 0 or below and let a null x through to the driver).
TEST(MlpApi, RejectsSizesThatOverflow) {
  std::vector<double> w1(16 * 16), w2(16 * 16);
  TensorRef weights[2] = {ref(w1, {16, 16}), ref(w2, {16, 16})};
  const TensorRef x = TensorRef::contiguous(nullptr, DType::Float64, {}, {int64_t{1} << 62, 16});
  const std::string error =
      error_of([&] { fieldfuse::mlp_forward_workspace_size(x, weights, nullptr, 2, {}); });
  EXPECT_EQ(error.rfind("mlp(): expected x to span fewer than 2^63 bytes, but got shape "
                        "[4611686018427387904, 16]",
                        0),
            0u)
      << error;
}

}  // namespace
}  // namespace fftest

#if FIELDFUSE_TEST_CUDA
// ---- the CUDA SIMT driver through the C++ API vs the CPU driver (skipped without a GPU)
// ----------
namespace fftest {
namespace {

/// A device copy of host doubles, copied back by to_host() and freed at scope exit.
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<double>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<std::size_t>(n_, 1) * sizeof(double)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(double), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  TensorRef ref(std::initializer_list<int64_t> sizes) const {
    return TensorRef::contiguous(ptr_, DType::Float64, {fieldfuse::DeviceType::CUDA, 0}, sizes);
  }
  void* data() const { return ptr_; }
  std::vector<double> to_host() const {
    std::vector<double> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(double), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t n_ = 0;
};

/// 7 → 48 → 48 → 5 softplus, B rows (several tiles and a partial one): the CUDA forward and
/// backward equal the CPU driver's to float64 rounding, on a created stream.
TEST(MlpCuda, ForwardAndBackwardMatchCpu) {
  if (fieldfuse::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(kSeed);
  std::normal_distribution<double> normal;
  const int64_t B = 301, I = 7, H = 48, O = 5;
  const int64_t shapes[3][2] = {{H, I}, {H, H}, {O, H}};
  std::vector<std::vector<double>> w, b;
  for (const auto& s : shapes) {
    w.emplace_back(s[0] * s[1]);
    b.emplace_back(s[0]);
  }
  std::vector<double> x(B * I), g(B * O);
  for (auto* v : {&x, &g})
    for (double& e : *v) e = normal(rng);
  for (int k = 0; k < 3; ++k) {
    for (double& e : w[k]) e = normal(rng) / std::sqrt(double(shapes[k][1]));
    for (double& e : b[k]) e = 0.2 * normal(rng);
  }
  fieldfuse::MLPOptions options;
  options.activation = "softplus";
  options.softplus_beta = 3.0;
  // CPU results.
  TensorRef cw[3], cb[3];
  for (int k = 0; k < 3; ++k) {
    cw[k] = ref(w[k], {shapes[k][0], shapes[k][1]});
    cb[k] = ref(b[k], {shapes[k][0]});
  }
  std::vector<double> out(B * O), gx(B * I), gw0(H * I), gb0(H);
  std::vector<char> ws(fieldfuse::mlp_forward_workspace_size(ref(x, {B, I}), cw, cb, 3, options));
  fieldfuse::mlp_forward(ref(x, {B, I}), cw, cb, 3, options, ref(out, {B, O}), ws.data(),
                         ws.size());
  std::vector<double> gw1(H * H), gb1(H), gw2(O * H), gb2(O);
  TensorRef cgw[3] = {ref(gw0, {H, I}), ref(gw1, {H, H}), ref(gw2, {O, H})};
  TensorRef cgb[3] = {ref(gb0, {H}), ref(gb1, {H}), ref(gb2, {O})};
  TensorRef cgx = ref(gx, {B, I});
  ws.resize(fieldfuse::mlp_backward_workspace_size(ref(x, {B, I}), cw, cb, 3, options));
  fieldfuse::mlp_backward(ref(x, {B, I}), cw, cb, 3, options, ref(g, {B, O}), &cgx, cgw, cgb,
                          nullptr, ws.data(), ws.size());
  // CUDA results.
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const DeviceVector dx(x), dg(g), dw0(w[0]), dw1(w[1]), dw2(w[2]), db0(b[0]), db1(b[1]), db2(b[2]);
  const DeviceVector dout(std::vector<double>(B * O)), dgx(std::vector<double>(B * I));
  const DeviceVector dgw0(gw0), dgw1(gw1), dgw2(gw2), dgb0(gb0), dgb1(gb1), dgb2(gb2);
  TensorRef weights[3] = {dw0.ref({H, I}), dw1.ref({H, H}), dw2.ref({O, H})};
  TensorRef biases[3] = {db0.ref({H}), db1.ref({H}), db2.ref({O})};
  TensorRef grad_w[3] = {dgw0.ref({H, I}), dgw1.ref({H, H}), dgw2.ref({O, H})};
  TensorRef grad_b[3] = {dgb0.ref({H}), dgb1.ref({H}), dgb2.ref({O})};
  const TensorRef xr = dx.ref({B, I});
  TensorRef grad_x = dgx.ref({B, I});
  const std::size_t bytes =
      std::max(fieldfuse::mlp_forward_workspace_size(xr, weights, biases, 3, options),
               fieldfuse::mlp_backward_workspace_size(xr, weights, biases, 3, options));
  const DeviceVector scratch(std::vector<double>((bytes + 7) / 8));
  const fieldfuse::Stream s{stream};
  fieldfuse::mlp_forward(xr, weights, biases, 3, options, dout.ref({B, O}), scratch.data(), bytes,
                         s);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<double> out_cuda = dout.to_host();
  fieldfuse::mlp_backward(xr, weights, biases, 3, options, dg.ref({B, O}), &grad_x, grad_w, grad_b,
                          nullptr, scratch.data(), bytes, s);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  auto expect_near = [](const std::vector<double>& a, const std::vector<double>& e) {
    ASSERT_EQ(a.size(), e.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], e[i], 1e-11 * (1 + std::abs(e[i])));
  };
  expect_near(out_cuda, out);
  expect_near(dgx.to_host(), gx);
  expect_near(dgw0.to_host(), gw0);
  expect_near(dgw1.to_host(), gw1);
  expect_near(dgw2.to_host(), gw2);
  expect_near(dgb0.to_host(), gb0);
  expect_near(dgb1.to_host(), gb1);
  expect_near(dgb2.to_host(), gb2);
}

}  // namespace
}  // namespace fftest
#endif
