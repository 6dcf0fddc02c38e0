// SPDX-License-Identifier: Apache-2.0
// GoogleTest of thick_transfer_function: its formulas (thick_math.h), its result against a naive
// float64 reference that follows waveorder's recipe step by step (both H1 and H2 transformed, the
// window applied after the inverse FFT, naive DFTs, fftshift-slice-ifftshift crop), and every
// argument check of the front.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <string>
#include <vector>

#include "fieldfuse/optics.h"
#include "optics/thick_math.h"

namespace {

using fieldfuse::DType;
using fieldfuse::ErrorKind;
using fieldfuse::MicroscopeSettings;
using fieldfuse::TensorRef;
using fieldfuse::ThickGeometry;
using cd = std::complex<double>;

constexpr double kPi = 3.14159265358979323846;

TEST(OpticsThickMath, ShiftedHannIsTheIfftshiftedSymmetricWindow) {
  for (int64_t n : {1, 2, 5, 8}) {
    for (int64_t k = 0; k < n; ++k) {
      // numpy's ifftshift: out[k] = in[(k + n/2) mod n]; torch.hann_window(periodic=False).
      const int64_t j = (k + n / 2) % n;
      const double want = n == 1 ? 1.0 : 0.5 - 0.5 * std::cos(2.0 * kPi * j / (n - 1));
      EXPECT_NEAR(fieldfuse::detail::optics::shifted_hann<double>(k, n), want, 1e-15)
          << "n " << n << " k " << k;
    }
  }
  // The window's peak (1) sits at index 0 for odd n, its ends (0) around the middle.
  EXPECT_DOUBLE_EQ(fieldfuse::detail::optics::shifted_hann<double>(0, 5), 1.0);
  EXPECT_DOUBLE_EQ(fieldfuse::detail::optics::shifted_hann<double>(3, 5), 0.0);
}

TEST(OpticsThickMath, NyquistSpacings) {
  using fieldfuse::detail::optics::axial_nyquist;
  using fieldfuse::detail::optics::transverse_nyquist;
  EXPECT_DOUBLE_EQ(transverse_nyquist(0.532, 0.5, 0.9), 0.532 / 2.8);
  // n/λ − sqrt((n/λ)² − (NAd/λ)²) = (n − sqrt(n² − NAd²))/λ = (1 − 0.6)/0.5 for n = 1, NAd = 0.8.
  EXPECT_NEAR(axial_nyquist(0.5, 0.8, 1.0), 1.0 / (2.0 * 0.8), 1e-14);
}

// --- the naive reference ---------------------------------------------------------------------

struct Case {
  MicroscopeSettings settings;
  ThickGeometry geometry;
};

/// Unnormalised DFT along `axis` of a row-major [n0, n1, n2] block, sign −1 forward, +1 inverse.
void naive_dft(std::vector<cd>& a, const int64_t (&n)[3], int axis, double sign) {
  const int64_t stride = axis == 2 ? 1 : (axis == 1 ? n[2] : n[1] * n[2]);
  const int64_t len = n[axis];
  std::vector<cd> line(static_cast<std::size_t>(len));
  for (int64_t start = 0; start < n[0] * n[1] * n[2]; ++start) {
    if ((start / stride) % len != 0) continue;  // one line per start of axis
    for (int64_t k = 0; k < len; ++k) {
      cd sum = 0.0;
      for (int64_t j = 0; j < len; ++j) {
        sum +=
            a[start + j * stride] * std::polar(1.0, sign * 2.0 * kPi * double((k * j) % len) / len);
      }
      line[k] = sum;
    }
    for (int64_t k = 0; k < len; ++k) a[start + k * stride] = line[k];
  }
}

/// fftshift, keep the window starting at (N − n)/2, ifftshift: the source of output index k.
int64_t crop_source(int64_t k, int64_t n, int64_t N) {
  const int64_t j = (k + n / 2) % n;         // ifftshift of the cropped axis
  return ((N - n) / 2 + j - N / 2 + N) % N;  // fftshift of the source axis
}

/// The spec's tilted illumination pupil, restated independently of transfer_math.h.
double tilted_pupil(double fy, double fx, double step_x, const MicroscopeSettings& s, double zenith,
                    double azimuth) {
  const double K = s.index_medium / s.wavelength;
  const double fz2 = K * K - fx * fx - fy * fy;
  if (fz2 < 0) return 0.0;
  const double cos_alpha =
      std::sqrt(std::max(0.0, 1 - std::pow(s.na_illumination / s.index_medium, 2)));
  const double dot = fx * std::sin(zenith) * std::cos(azimuth) +
                     fy * std::sin(zenith) * std::sin(azimuth) + std::sqrt(fz2) * std::cos(zenith);
  return 1.0 / (1.0 + std::exp(-(4.0 / step_x) * (dot - K * cos_alpha)));
}

double fftfreq(int64_t k, int64_t n, double d) {
  return static_cast<double>(k < (n + 1) / 2 ? k : k - n) / (static_cast<double>(n) * d);
}

/// (real, imag) [Zo, Y, X] as waveorder computes them, in float64.
std::pair<std::vector<cd>, std::vector<cd>> naive_thick(const Case& c) {
  const MicroscopeSettings& s = c.settings;
  const ThickGeometry& g = c.geometry;
  const int f = static_cast<int>(
      std::ceil(s.pixel_size / (s.wavelength / (2 * (s.na_detection + s.na_illumination)))));
  const double nl = s.index_medium / s.wavelength, al = s.na_detection / s.wavelength;
  const int fz =
      static_cast<int>(std::ceil(g.z_pixel_size / (1 / (2 * (nl - std::sqrt(nl * nl - al * al))))));
  const int64_t Zu = g.Z * fz + 2 * g.z_padding, Yu = g.Y * f, Xu = g.X * f, Nu = Yu * Xu;
  // P, Hz and G of the upsampled grid from the public shared_optics_3d.
  MicroscopeSettings up = s;
  up.pixel_size = s.pixel_size / f;
  ThickGeometry ug = g;
  ug.Z = g.Z * fz;
  ug.Y = Yu;
  ug.X = Xu;
  ug.z_pixel_size = g.z_pixel_size / fz;
  std::vector<double> P(Nu);
  std::vector<cd> Hz(Zu * Nu), G(Zu * Nu);
  fieldfuse::shared_optics_3d(up, ug, TensorRef::contiguous(P.data(), DType::Float64, {}, {Yu, Xu}),
                              TensorRef::contiguous(Hz.data(), DType::Complex128, {}, {Zu, Yu, Xu}),
                              TensorRef::contiguous(G.data(), DType::Complex128, {}, {Zu, Yu, Xu}));
  std::vector<double> S(Nu);
  double intensity = 0;
  for (int64_t p = 0; p < Nu; ++p) {
    S[p] = tilted_pupil(fftfreq(p / Xu, Yu, up.pixel_size), fftfreq(p % Xu, Xu, up.pixel_size),
                        1.0 / (Xu * up.pixel_size), s, g.zenith, g.azimuth);
    intensity += S[p] * P[p] * P[p];
  }
  std::vector<cd> sph(Zu * Nu), pg(Zu * Nu);
  for (int64_t i = 0; i < Zu * Nu; ++i) {
    sph[i] = S[i % Nu] * P[i % Nu] * Hz[i];
    pg[i] = P[i % Nu] * G[i];
  }
  const int64_t n[3] = {Zu, Yu, Xu};
  for (int axis : {1, 2}) {
    naive_dft(sph, n, axis, -1);
    naive_dft(pg, n, axis, -1);
  }
  std::vector<cd> h1(Zu * Nu), h2(Zu * Nu);
  for (int64_t i = 0; i < Zu * Nu; ++i) {
    h1[i] = std::conj(sph[i]) * pg[i];
    h2[i] = sph[i] * std::conj(pg[i]);
  }
  for (std::vector<cd>* h : {&h1, &h2}) {
    for (int axis : {1, 2}) naive_dft(*h, n, axis, +1);
    for (int64_t i = 0; i < Zu * Nu; ++i) {
      const int64_t j = (i / Nu + Zu / 2) % Zu;
      const double w = Zu == 1 ? 1.0 : 0.5 - 0.5 * std::cos(2 * kPi * j / (Zu - 1));
      (*h)[i] *= w / static_cast<double>(Nu);
    }
    naive_dft(*h, n, 0, -1);
  }
  const int64_t Zo = g.Z + 2 * g.z_padding;
  std::vector<cd> re(Zo * g.Y * g.X), im(re.size());
  const double dz = g.z_pixel_size / fz;
  for (int64_t kz = 0; kz < Zo; ++kz) {
    for (int64_t ky = 0; ky < g.Y; ++ky) {
      for (int64_t kx = 0; kx < g.X; ++kx) {
        const int64_t src = (crop_source(kz, Zo, Zu) * Yu + crop_source(ky, g.Y, Yu)) * Xu +
                            crop_source(kx, g.X, Xu);
        const int64_t out = (kz * g.Y + ky) * g.X + kx;
        re[out] = (h1[src] + h2[src]) / intensity * dz;
        im[out] = cd(0, 1) * (h1[src] - h2[src]) / intensity * dz;
      }
    }
  }
  return {re, im};
}

template <class T>
std::pair<std::vector<std::complex<T>>, std::vector<std::complex<T>>> run_thick(const Case& c) {
  const DType real = sizeof(T) == 8 ? DType::Float64 : DType::Float32;
  const DType cplx = sizeof(T) == 8 ? DType::Complex128 : DType::Complex64;
  const ThickGeometry& g = c.geometry;
  const int64_t Zo = g.Z + 2 * g.z_padding;
  std::vector<std::complex<T>> re(Zo * g.Y * g.X), im(re.size());
  const std::size_t bytes = fieldfuse::thick_transfer_function_workspace_size(c.settings, g, real);
  std::vector<double> ws((bytes + 7) / 8);
  fieldfuse::thick_transfer_function(
      c.settings, g, TensorRef::contiguous(re.data(), cplx, {}, {Zo, g.Y, g.X}),
      TensorRef::contiguous(im.data(), cplx, {}, {Zo, g.Y, g.X}), ws.data(), bytes);
  return {re, im};
}

template <class T>
double worst_relative(const std::vector<std::complex<T>>& got, const std::vector<cd>& want) {
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    worst = std::max(worst, std::abs(cd(got[i]) - want[i]));
  }
  return worst / scale;
}

std::vector<Case> cases() {
  Case a;  // factors 2 in y, x and z; padding; tilt; a smooth pupil
  a.settings.pixel_size = 0.25;
  a.settings.wavelength = 0.532;
  a.settings.index_medium = 1.0;
  a.settings.na_illumination = 0.5;
  a.settings.na_detection = 0.9;
  a.settings.pupil_steepness = 100.0;
  a.geometry = {3, 6, 5, 0.6, 1, 0.15, 0.7};
  Case b;  // factor 1, NAi > NAd (not clamped), inverted contrast, odd sizes, no padding
  b.settings.pixel_size = 0.22;
  b.settings.wavelength = 0.532;
  b.settings.index_medium = 1.33;
  b.settings.na_illumination = 0.6;
  b.settings.na_detection = 0.5;
  b.settings.invert_phase_contrast = true;
  b.geometry = {4, 9, 11, 0.4, 0, -0.1, 2.0};
  return {a, b};
}

template <class T>
void expect_matches_naive(double tolerance) {
  for (const Case& c : cases()) {
    const auto want = naive_thick(c);
    const auto got = run_thick<T>(c);
    // An all-zero reference gives NaN here, which fails too.
    EXPECT_LT(worst_relative(got.first, want.first), tolerance);
    EXPECT_LT(worst_relative(got.second, want.second), tolerance);
  }
}

TEST(OpticsThick, MatchesTheNaiveReferenceInDouble) { expect_matches_naive<double>(1e-12); }

TEST(OpticsThick, MatchesTheNaiveReferenceInFloat) {
  // float32 rounding of FFTs of ~10² points and phases 2πz·ob of a few radians.
  expect_matches_naive<float>(2e-5);
}

TEST(OpticsThick, RepeatedCallsAgreeBitForBit) {
  const Case c = cases()[0];
  const auto first = run_thick<float>(c);
  const auto second = run_thick<float>(c);
  EXPECT_EQ(first.first, second.first);
  EXPECT_EQ(first.second, second.second);
}

TEST(OpticsThick, EmptyStackWritesNothing) {
  Case c = cases()[0];
  c.geometry.Z = 0;
  c.geometry.z_padding = 0;
  const auto out = run_thick<float>(c);
  EXPECT_TRUE(out.first.empty());
}

// --- argument checks -------------------------------------------------------------------------

/// Calls thick_transfer_function on valid outputs after `change`, expecting an Error of `kind`
/// whose message starts with the op and names `what`.
template <class Change>
void expect_rejected(Change change, ErrorKind kind, const std::string& what) {
  Case c = cases()[0];
  const ThickGeometry& g0 = c.geometry;
  const int64_t Zo = g0.Z + 2 * g0.z_padding;
  std::vector<std::complex<float>> re(2 * Zo * g0.Y * g0.X), im(re.size());
  TensorRef r = TensorRef::contiguous(re.data(), DType::Complex64, {}, {Zo, g0.Y, g0.X});
  TensorRef i = TensorRef::contiguous(im.data(), DType::Complex64, {}, {Zo, g0.Y, g0.X});
  std::vector<double> ws(1 << 16);
  std::size_t bytes = ws.size() * sizeof(double);
  change(c, r, i, bytes);
  try {
    fieldfuse::thick_transfer_function(c.settings, c.geometry, r, i, ws.data(), bytes);
    ADD_FAILURE() << "no error for " << what;
  } catch (const fieldfuse::Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("thick_transfer_function(): ", 0), 0u) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
    EXPECT_EQ(e.kind(), kind) << message;
  }
}

TEST(OpticsThick, RejectsBadSettingsAndGeometry) {
  using C = Case&;
  using R = TensorRef&;
  using B = std::size_t&;
  const auto V = ErrorKind::Value;
  expect_rejected([](C c, R, R, B) { c.settings.pixel_size = -0.2; }, V, "yx_pixel_size");
  expect_rejected([](C c, R, R, B) { c.settings.wavelength = 0; }, V, "wavelength");
  expect_rejected([](C c, R, R, B) { c.settings.index_medium = NAN; }, V, "index_medium");
  expect_rejected([](C c, R, R, B) { c.settings.na_illumination = -0.1; }, V, "na_illumination");
  expect_rejected([](C c, R, R, B) { c.settings.na_detection = 1.0; }, V, "na_detection");
  expect_rejected([](C c, R, R, B) { c.settings.pupil_steepness = 0; }, V, "pupil_steepness");
  expect_rejected([](C c, R, R, B) { c.geometry.Y = 0; }, V, "zyx_shape");
  expect_rejected([](C c, R, R, B) { c.geometry.Z = -1; }, V, "zyx_shape");
  expect_rejected([](C c, R, R, B) { c.geometry.z_padding = -1; }, V, "z_padding");
  expect_rejected([](C c, R, R, B) { c.geometry.z_pixel_size = 0; }, V, "z_pixel_size");
  expect_rejected([](C c, R, R, B) { c.geometry.zenith = INFINITY; }, V, "zenith");
  expect_rejected([](C c, R, R, B) { c.geometry.azimuth = NAN; }, V, "azimuth");
  // 100 µm pixels: a transverse factor far past 64; likewise 100 µm slices in z.
  expect_rejected([](C c, R, R, B) { c.settings.pixel_size = 100; }, V, "transverse upsampling");
  expect_rejected([](C c, R, R, B) { c.geometry.z_pixel_size = 100; }, V, "axial upsampling");
  expect_rejected([](C c, R, R, B) { c.geometry.X = int64_t{1} << 50; }, V, "upsampled grid");
}

TEST(OpticsThick, RejectsBadOutputsAndWorkspace) {
  using C = Case&;
  using R = TensorRef&;
  using B = std::size_t&;
  expect_rejected([](C, R r, R, B) { r.dtype = DType::Float32; }, ErrorKind::Type,
                  "expected real_potential_tf to be complex64 or complex128");
  expect_rejected([](C, R, R i, B) { i.dtype = DType::Complex128; }, ErrorKind::Type,
                  "imag_potential_tf");
  expect_rejected([](C, R r, R, B) { r.sizes[0] += 1; }, ErrorKind::Value, "real_potential_tf");
  expect_rejected([](C, R, R i, B) { i.sizes[2] -= 1; }, ErrorKind::Value, "imag_potential_tf");
  expect_rejected(
      [](C, R r, R, B) {
        r.strides[1] *= 2;
        r.strides[0] *= 2;
      },
      ErrorKind::Value, "real_potential_tf");
  expect_rejected([](C, R r, R i, B) { i.data = r.data; }, ErrorKind::Value, "imag_potential_tf");
  expect_rejected([](C, R, R, B b) { b = 16; }, ErrorKind::Value, "workspace");
}

TEST(OpticsThick, WorkspaceSizeRejectsANonRealDtype) {
  const Case c = cases()[0];
  try {
    fieldfuse::thick_transfer_function_workspace_size(c.settings, c.geometry, DType::Complex64);
    ADD_FAILURE() << "no error";
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Type);
    EXPECT_NE(std::string(e.what()).find("dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
