// SPDX-License-Identifier: Apache-2.0
// GoogleTest of the optics FFT layer (vs a naive DFT), the Tikhonov closed form (inverse_math.h)
// and the tikhonov_filter front's results and argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <vector>

#include "fieldfuse/optics.h"
#include "optics/fft.h"
#include "optics/inverse_math.h"

namespace {

using fieldfuse::detail::fft::FftLayout;

constexpr double kPi = 3.14159265358979323846;

/// The unnormalised DFT of the layout's axes, one output element at a time (the oracle).
std::vector<std::complex<double>> naive_dft(const std::vector<std::complex<double>>& in,
                                            const FftLayout& l, bool inverse) {
  std::vector<std::complex<double>> out(in.size());
  const int64_t points = l.points();
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t b = 0; b < l.batch; ++b) {
    for (int64_t k = 0; k < points; ++k) {
      for (int64_t q = 0; q < l.inner; ++q) {
        std::complex<double> sum = 0.0;
        for (int64_t j = 0; j < points; ++j) {
          // Row-major multi-indices of k and j over n[0..rank).
          double phase = 0.0;
          int64_t kr = k, jr = j;
          for (int d = l.rank - 1; d >= 0; --d) {
            phase += static_cast<double>((kr % l.n[d]) * (jr % l.n[d])) / l.n[d];
            kr /= l.n[d];
            jr /= l.n[d];
          }
          sum += in[(b * points + j) * l.inner + q] *
                 std::polar(1.0, sign * 2.0 * kPi * (phase - std::floor(phase)));
        }
        out[(b * points + k) * l.inner + q] = sum;
      }
    }
  }
  return out;
}

template <class T>
void expect_fft_matches(const FftLayout& layout, bool inverse, double tolerance) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  std::vector<std::complex<double>> in(static_cast<std::size_t>(layout.elements()));
  for (auto& v : in) v = {normal(rng), normal(rng)};
  std::vector<std::complex<T>> data(in.begin(), in.end());
  fieldfuse::detail::fft::fft_cpu<T>(data.data(), layout, inverse);
  const auto expected = naive_dft(in, layout, inverse);
  double worst = 0.0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    worst = std::max(worst, std::abs(std::complex<double>(data[i]) - expected[i]));
  }
  EXPECT_LT(worst, tolerance * std::sqrt(static_cast<double>(layout.points())))
      << "rank " << layout.rank << " inverse " << inverse;
}

FftLayout layout(int64_t batch, std::initializer_list<int64_t> n, int64_t inner) {
  FftLayout l;
  l.batch = batch;
  l.rank = static_cast<int>(n.size());
  int d = 0;
  for (int64_t v : n) l.n[d++] = v;
  l.inner = inner;
  return l;
}

TEST(OpticsFft, MatchesNaiveDftInDouble) {
  // Odd, even, prime and size-1 lengths; inner > 1 is the FFT along z of a [Z, Y, X] stack.
  for (const FftLayout& l : {layout(3, {6, 5}, 1), layout(2, {7}, 4), layout(1, {4, 3, 5}, 1),
                             layout(2, {3, 2, 4}, 2), layout(2, {1, 9}, 1), layout(1, {13}, 1)}) {
    expect_fft_matches<double>(l, false, 1e-13);
    expect_fft_matches<double>(l, true, 1e-13);
  }
}

TEST(OpticsFft, MatchesNaiveDftInFloat) {
  for (const FftLayout& l : {layout(4, {8, 6}, 1), layout(3, {5}, 6), layout(1, {3, 4, 5}, 1)}) {
    expect_fft_matches<float>(l, false, 2e-6);
    expect_fft_matches<float>(l, true, 2e-6);
  }
}

TEST(OpticsFft, ForwardThenInverseScalesByPoints) {
  // Many lines (several parallel tasks), checking the task split covers every line once.
  const FftLayout l = layout(40, {16, 12}, 1);
  std::vector<std::complex<double>> data(static_cast<std::size_t>(l.elements()));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = {std::sin(0.1 * i), std::cos(0.37 * i)};
  const auto original = data;
  fieldfuse::detail::fft::fft_cpu<double>(data.data(), l, false);
  fieldfuse::detail::fft::fft_cpu<double>(data.data(), l, true);
  for (std::size_t i = 0; i < data.size(); ++i) {
    EXPECT_NEAR(std::abs(data[i] / static_cast<double>(l.points()) - original[i]), 0.0, 1e-12);
  }
}

TEST(OpticsFft, EmptyLayoutIsANoOp) {
  const FftLayout l = layout(0, {4, 4}, 1);
  EXPECT_EQ(l.elements(), 0);
  fieldfuse::detail::fft::fft_cpu<float>(nullptr, l, false);
}

using Cd = std::complex<double>;

/// (M·Mᴴ + λI)·G − M for the filter rows G the closed form gives (0 when G is right).
double closed_form_residual(const std::vector<Cd>& hu, const std::vector<Cd>& hp, double lambda) {
  namespace opt = fieldfuse::detail::optics;
  auto cx = [](Cd v) { return opt::Cx<double>{v.real(), v.imag()}; };
  auto cd = [](opt::Cx<double> v) { return Cd(v.re, v.im); };
  opt::Gram<double> gram;
  for (std::size_t z = 0; z < hu.size(); ++z) gram.add(cx(hu[z]), cx(hp[z]));
  const opt::TikhonovInverse<double> inv(gram, lambda);
  Cd n00 = 0, n01 = 0, n11 = 0;
  for (std::size_t z = 0; z < hu.size(); ++z) {
    n00 += hu[z] * std::conj(hu[z]);
    n01 += hu[z] * std::conj(hp[z]);
    n11 += hp[z] * std::conj(hp[z]);
  }
  double worst = 0.0;
  for (std::size_t z = 0; z < hu.size(); ++z) {
    const Cd g0 = cd(inv.row0(cx(hu[z]), cx(hp[z]))), g1 = cd(inv.row1(cx(hu[z]), cx(hp[z])));
    worst = std::max(worst, std::abs((n00 + lambda) * g0 + n01 * g1 - hu[z]));
    worst = std::max(worst, std::abs(std::conj(n01) * g0 + (n11 + lambda) * g1 - hp[z]));
  }
  return worst;
}

TEST(OpticsTikhonov, ClosedFormSolvesTheRegularisedSystem) {
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  for (int Z : {1, 2, 7, 21}) {
    std::vector<Cd> hu(Z), hp(Z);
    for (int z = 0; z < Z; ++z) {
      hu[z] = {normal(rng), normal(rng)};
      hp[z] = {normal(rng), normal(rng)};
    }
    EXPECT_LT(closed_form_residual(hu, hp, 1e-3), 1e-12) << "Z = " << Z;
    // Rank 1 (Hp = c·Hu) and rank 0 (M = 0): the SVD filter's cases the closed form must match.
    for (int z = 0; z < Z; ++z) hp[z] = Cd(0.5, -2.0) * hu[z];
    // Rank 1: the Gram determinant n00·n11 − |c|² cancels to rounding (about eps·n00·n11, up to
    // 1e-11 at Z = 21) against det ≈ λ·(n00 + n11) ≈ 0.2, so the residual grows to ~1e-10.
    EXPECT_LT(closed_form_residual(hu, hp, 1e-3), 1e-9) << "rank 1, Z = " << Z;
    std::fill(hu.begin(), hu.end(), Cd(0.0));
    std::fill(hp.begin(), hp.end(), Cd(0.0));
    EXPECT_EQ(closed_form_residual(hu, hp, 1e-3), 0.0);
  }
}

TEST(OpticsTikhonov, FilterFrontMatchesTheClosedFormAndChecksArguments) {
  using fieldfuse::DType;
  using fieldfuse::TensorRef;
  const int64_t Z = 3, Y = 2, X = 4;
  std::vector<Cd> hu(Z * Y * X), hp(hu.size()), filter(2 * hu.size());
  for (std::size_t i = 0; i < hu.size(); ++i) {
    hu[i] = {std::sin(1.0 + i), std::cos(0.3 * i)};
    hp[i] = {std::cos(2.0 * i), 0.5 - std::sin(0.7 * i)};
  }
  const auto ref = [](void* data, std::initializer_list<int64_t> sizes) {
    return TensorRef::contiguous(data, DType::Complex128, {}, sizes);
  };
  const TensorRef u = ref(hu.data(), {1, Z, Y, X}), p = ref(hp.data(), {1, Z, Y, X});
  fieldfuse::tikhonov_filter(u, p, 1e-2, ref(filter.data(), {1, 2, Z, Y, X}));
  for (int64_t f = 0; f < Y * X; ++f) {
    // G's defining property per frequency: (M·Mᴴ + λI)·G = M.
    Cd n00 = 0, n01 = 0, n11 = 0;
    for (int64_t z = 0; z < Z; ++z) {
      n00 += std::norm(hu[z * Y * X + f]);
      n01 += hu[z * Y * X + f] * std::conj(hp[z * Y * X + f]);
      n11 += std::norm(hp[z * Y * X + f]);
    }
    for (int64_t z = 0; z < Z; ++z) {
      const Cd g0 = filter[z * Y * X + f], g1 = filter[(Z + z) * Y * X + f];
      EXPECT_LT(std::abs((n00 + 1e-2) * g0 + n01 * g1 - hu[z * Y * X + f]), 1e-12);
      EXPECT_LT(std::abs(std::conj(n01) * g0 + (n11 + 1e-2) * g1 - hp[z * Y * X + f]), 1e-12);
    }
  }
  try {
    fieldfuse::tikhonov_filter(u, p, 0.0, ref(filter.data(), {1, 2, Z, Y, X}));
    FAIL() << "expected an error";
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(e.kind(), fieldfuse::ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("tikhonov_filter(): expected regularization"),
              std::string::npos)
        << e.what();
  }
  try {
    TensorRef wrong = p;
    wrong.dtype = DType::Complex64;
    fieldfuse::tikhonov_filter(u, wrong, 1e-3, ref(filter.data(), {1, 2, Z, Y, X}));
    FAIL() << "expected an error";
  } catch (const fieldfuse::Error& e) {
    EXPECT_EQ(e.kind(), fieldfuse::ErrorKind::Type);
    EXPECT_NE(std::string(e.what()).find("expected phase_tf to be complex128"), std::string::npos)
        << e.what();
  }
}

}  // namespace
