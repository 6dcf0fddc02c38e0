// SPDX-License-Identifier: Apache-2.0
// Tests of the render C++ API on the CPU: volume rendering, line integrals and ray-box sampling
// against naive loops written from specs/render.md, finite differences, and argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fieldfuse/render.h"
#include "tv_test_util.h"

namespace fftest {
namespace {

using fieldfuse::ErrorKind;
using fieldfuse::TensorRef;

constexpr uint32_t kSeed = 7u;

/// An int64 offsets tensor over `storage`.
TensorRef offsets_ref(std::vector<int64_t>& storage) {
  TensorRef t = TensorRef::contiguous(storage.data(), fieldfuse::DType::Int64, {},
                                      {static_cast<int64_t>(storage.size())});
  return t;
}

/// Element-wise |got − want| <= atol + rtol·|want|.
void expect_all_near(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                     double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << "element " << i;
  }
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> o{0};
  for (int64_t n : lengths) o.push_back(o.back() + n);
  return o;
}

/// The spec's per-ray loop (front to back, termination after the composited sample).
struct NaiveRender {
  std::vector<double> rgb, opacity, depth, weights, trans;
  std::vector<int64_t> count;
};

NaiveRender naive_render(const std::vector<double>& sigma, const std::vector<double>& rgbs,
                         const std::vector<double>& delta, const std::vector<double>& t,
                         const std::vector<int64_t>& offsets, int64_t c, double thresh,
                         const std::vector<double>& background) {
  const int64_t r = static_cast<int64_t>(offsets.size()) - 1;
  NaiveRender out{std::vector<double>(r * c, 0.0), std::vector<double>(r, 0.0),
                  std::vector<double>(r, 0.0),     std::vector<double>(sigma.size(), 0.0),
                  std::vector<double>(r, 1.0),     std::vector<int64_t>(r, 0)};
  for (int64_t ray = 0; ray < r; ++ray) {
    double trans = 1.0;
    for (int64_t s = offsets[ray]; s < offsets[ray + 1]; ++s) {
      const double a = 1.0 - std::exp(-sigma[s] * delta[s]);
      const double w = a * trans;
      for (int64_t k = 0; k < c; ++k) out.rgb[ray * c + k] += w * rgbs[s * c + k];
      out.depth[ray] += w * t[s];
      out.opacity[ray] += w;
      out.weights[s] = w;
      trans *= 1.0 - a;
      ++out.count[ray];
      if (trans <= thresh) break;
    }
    for (int64_t k = 0; k < c; ++k) out.rgb[ray * c + k] += trans * background[k];
    out.trans[ray] = trans;
  }
  return out;
}

struct RenderCase {
  std::vector<int64_t> lengths{5, 0, 9, 1, 4};
  int64_t c = 3;
  std::vector<int64_t> offsets = offsets_of(lengths);
  int64_t n = offsets.back(), r = static_cast<int64_t>(lengths.size());
  std::vector<double> sigma = random_values<double>(n, kSeed, 0.0, 6.0);
  std::vector<double> rgbs = random_values<double>(n * c, kSeed + 1, 0.0, 1.0);
  std::vector<double> delta = random_values<double>(n, kSeed + 2, 0.05, 0.3);
  std::vector<double> t = random_values<double>(n, kSeed + 3, 0.0, 2.0);
  std::vector<double> background = random_values<double>(c, kSeed + 4, 0.0, 1.0);
};

/// Runs volume_render_forward in double with every output.
NaiveRender run_render(const RenderCase& k, double thresh, const std::vector<double>& sigma) {
  HostTensor<double> sig = make_tensor<double>({k.n}, sigma);
  HostTensor<double> rgb_in = make_tensor<double>({k.n, k.c}, k.rgbs, Layout{{1, 0}, 0});
  HostTensor<double> delta = make_tensor<double>({k.n}, k.delta);
  HostTensor<double> t = make_tensor<double>({k.n}, k.t);
  HostTensor<double> bg = make_tensor<double>({k.c}, k.background);
  std::vector<int64_t> offsets = k.offsets;
  fieldfuse::VolumeRenderInputs in;
  in.sigmas = sig.ref, in.rgbs = rgb_in.ref, in.delta_ts = delta.ref, in.ts = t.ref;
  in.offsets = offsets_ref(offsets), in.transmittance_thresh = thresh, in.background = bg.ref;
  HostTensor<double> rgb = make_tensor<double>({k.r, k.c}), opacity = make_tensor<double>({k.r}),
                     depth = make_tensor<double>({k.r}), weights = make_tensor<double>({k.n}),
                     trans = make_tensor<double>({k.r});
  std::vector<int64_t> count(k.r, -1);
  fieldfuse::VolumeRenderOutputs out;
  out.rgb = rgb.ref, out.opacity = opacity.ref, out.depth = depth.ref, out.weights = weights.ref;
  out.transmittance = trans.ref;
  out.total_samples = TensorRef::contiguous(count.data(), fieldfuse::DType::Int64, {}, {k.r});
  fieldfuse::volume_render_forward(in, out);
  return {rgb.logical(),     opacity.logical(), depth.logical(),
          weights.logical(), trans.logical(),   count};
}

TEST(RenderApi, ForwardMatchesTheSpecLoop) {
  const RenderCase k;
  for (double thresh : {0.0, 0.05}) {
    const NaiveRender got = run_render(k, thresh, k.sigma);
    const NaiveRender want =
        naive_render(k.sigma, k.rgbs, k.delta, k.t, k.offsets, k.c, thresh, k.background);
    expect_all_near(got.rgb, want.rgb, 1e-12, 1e-14);
    expect_all_near(got.opacity, want.opacity, 1e-12, 1e-14);
    expect_all_near(got.depth, want.depth, 1e-12, 1e-14);
    expect_all_near(got.weights, want.weights, 1e-12, 1e-14);
    expect_all_near(got.trans, want.trans, 1e-12, 1e-14);
    EXPECT_EQ(got.count, want.count) << "threshold " << thresh;
  }
}

TEST(RenderApi, SigmaGradientMatchesFiniteDifferences) {
  const RenderCase k;
  const double thresh = 0.0;
  const std::vector<double> g_rgb = random_values<double>(k.r * k.c, kSeed + 9);
  const auto loss = [&](const std::vector<double>& sigma) {
    const NaiveRender o = run_render(k, thresh, sigma);
    double l = 0;
    for (size_t i = 0; i < o.rgb.size(); ++i) l += g_rgb[i] * o.rgb[i];
    return l;
  };
  HostTensor<double> sig = make_tensor<double>({k.n}, k.sigma);
  HostTensor<double> rgb_in = make_tensor<double>({k.n, k.c}, k.rgbs);
  HostTensor<double> delta = make_tensor<double>({k.n}, k.delta);
  HostTensor<double> bg = make_tensor<double>({k.c}, k.background);
  HostTensor<double> grad_rgb = make_tensor<double>({k.r, k.c}, g_rgb);
  HostTensor<double> grad_sigma = make_tensor<double>({k.n});
  std::vector<int64_t> offsets = k.offsets;
  fieldfuse::VolumeRenderInputs in;
  in.sigmas = sig.ref, in.rgbs = rgb_in.ref, in.delta_ts = delta.ref, in.background = bg.ref;
  in.offsets = offsets_ref(offsets);
  fieldfuse::VolumeRenderGradients g;
  g.grad_rgb = grad_rgb.ref, g.grad_sigmas = grad_sigma.ref;
  fieldfuse::volume_render_backward(in, g);
  const std::vector<double> analytic = grad_sigma.logical();
  for (int64_t s = 0; s < k.n; ++s) {
    std::vector<double> up = k.sigma, down = k.sigma;
    const double h = 1e-6;
    up[s] += h, down[s] -= h;
    EXPECT_NEAR(analytic[s], (loss(up) - loss(down)) / (2 * h), 1e-7) << "sample " << s;
  }
}

TEST(RenderApi, LineIntegralStridedChannels) {
  const std::vector<int64_t> lengths{3, 0, 5, 2};
  std::vector<int64_t> offsets = offsets_of(lengths);
  const int64_t n = offsets.back(), r = 4, c = 2;
  const std::vector<double> v = random_values<double>(n * c, kSeed),
                            d = random_values<double>(n, 3);
  HostTensor<double> values = make_tensor<double>({n, c}, v, Layout{{1, 0}, 1});  // column-major
  HostTensor<double> delta = make_tensor<double>({n}, d);
  HostTensor<double> out = make_tensor<double>({r, c});
  fieldfuse::line_integral_forward(values.ref, delta.ref, offsets_ref(offsets), out.ref);
  std::vector<double> want(r * c, 0.0);
  for (int64_t ray = 0; ray < r; ++ray)
    for (int64_t s = offsets[ray]; s < offsets[ray + 1]; ++s)
      for (int64_t k = 0; k < c; ++k) want[ray * c + k] += v[s * c + k] * d[s];
  expect_all_near(out.logical(), want, 1e-14, 1e-15);
}

TEST(RenderApi, RayBoxPackedMatchesTheSlabMethod) {
  std::vector<double> o = {0, 0, -3, 0.5, -0.2, 0, 5, 5, 5}, d = {0, 0, 1, 0, 0, -1, 0, 0, 1};
  HostTensor<double> origins = make_tensor<double>({3, 3}, o),
                     dirs = make_tensor<double>({3, 3}, d);
  std::vector<int64_t> counts(3, -1);
  const TensorRef counts_ref =
      TensorRef::contiguous(counts.data(), fieldfuse::DType::Int64, {}, {3});
  fieldfuse::ray_box_samples_counts(origins.ref, dirs.ref, 0.5, counts_ref);
  EXPECT_EQ(counts, (std::vector<int64_t>{5, 5, 0}));  // length 2 → ceil(4) + 1; the third misses
  std::vector<int64_t> offsets = offsets_of(counts);
  HostTensor<double> points = make_tensor<double>({10, 3}), delta = make_tensor<double>({10});
  fieldfuse::ray_box_samples_forward(origins.ref, dirs.ref, 0.5, offsets_ref(offsets), points.ref,
                                     delta.ref);
  const std::vector<double> p = points.logical();
  EXPECT_DOUBLE_EQ(p[2], -1.0);  // first ray enters at z = −1
  EXPECT_DOUBLE_EQ(p[14], 1.0);  // and leaves at z = +1
  EXPECT_DOUBLE_EQ(p[17], 1.0);  // the second runs backwards along −z from z = 1
  for (double step : delta.logical()) EXPECT_DOUBLE_EQ(step, 0.5);
}

TEST(RenderApi, ArgumentChecksNameTheArgument) {
  RenderCase k;
  HostTensor<double> sig = make_tensor<double>({k.n}, k.sigma);
  HostTensor<double> rgb_in = make_tensor<double>({k.n, k.c}, k.rgbs);
  HostTensor<double> delta = make_tensor<double>({k.n}, k.delta);
  HostTensor<double> rgb = make_tensor<double>({k.r, k.c});
  std::vector<int64_t> offsets = k.offsets;
  fieldfuse::VolumeRenderInputs in;
  in.sigmas = sig.ref, in.rgbs = rgb_in.ref, in.delta_ts = delta.ref;
  in.offsets = offsets_ref(offsets);
  fieldfuse::VolumeRenderOutputs out;
  out.rgb = rgb.ref;
  const auto render = [&] { fieldfuse::volume_render_forward(in, out); };
  render();  // valid as given

  offsets[1] = 7, offsets[2] = 5;  // [0, 7, 5, ...]: decreasing
  expect_error(render, ErrorKind::Value, {"volume_render(): ", "non-decreasing", "offsets[2]"});
  offsets = k.offsets;
  offsets.back() += 1;
  in.offsets = offsets_ref(offsets);
  expect_error(render, ErrorKind::Value, {"offsets[-1]", "N = 19"});
  offsets = k.offsets;
  in.offsets = offsets_ref(offsets);
  std::vector<int32_t> narrow(offsets.begin(), offsets.end());
  in.offsets = TensorRef::contiguous(narrow.data(), fieldfuse::DType::Int32, {},
                                     {static_cast<int64_t>(narrow.size())});
  expect_error(render, ErrorKind::Type, {"offsets", "int64", "int32"});
  in.offsets = offsets_ref(offsets);
  in.transmittance_thresh = 1.0;
  expect_error(render, ErrorKind::Value, {"transmittance_thresh", "[0, 1)"});
  in.transmittance_thresh = 0.0;
  HostTensor<double> wrong = make_tensor<double>({k.n - 1, k.c});
  in.rgbs = wrong.ref;
  expect_error(render, ErrorKind::Value, {"rgbs", "[N, C]"});
  in.rgbs = rgb_in.ref;
  in.alpha_input = true;
  in.sigmas.ndim = 2, in.sigmas.sizes[1] = 1, in.sigmas.strides[1] = 1;
  expect_error(render, ErrorKind::Value, {"volume_render_alpha(): ", "alphas", "[N]"});
}

}  // namespace
}  // namespace fftest
