// SPDX-License-Identifier: Apache-2.0
// The CPU execution policy of the optics pipelines (transfer_pipeline.h, tiles_pipeline.h,
// inverse_pipeline.h): OpenMP loops, reductions summed in index order per row, and Eigen's FFT.
#pragma once

#include <complex>
#include <cstdint>

#include "core/parallel.h"
#include "optics/complex.h"
#include "optics/fft.h"

namespace fieldfuse::detail::optics {

struct CpuExec {
  /// f(i) for i in [0, n); `work` is the cost of one index in flop-sized units (parallel_for's
  /// grain: small calls stay on one thread).
  template <class F>
  void for_each(int64_t n, const F& f, int64_t work = 64) const {
    parallel_for(0, n, work, [&](int64_t i) { f(i); });
  }

  template <int W, class F, class T>
  void reduce(int64_t rows, int64_t n, const F& f, T* out) const {
    parallel_for(0, rows, n, [&](int64_t row) {
      T acc[W] = {};
      for (int64_t i = 0; i < n; ++i) f(row, i, acc);
      for (int w = 0; w < W; ++w) out[row * W + w] = acc[w];
    });
  }

  template <class T>
  void fft(Complex<T>* data, const fft::FftLayout& layout, bool inverse) const {
    static_assert(sizeof(Complex<T>) == sizeof(std::complex<T>), "interleaved complex layout");
    fft::fft_cpu(reinterpret_cast<std::complex<T>*>(data), layout, inverse);
  }
};

}  // namespace fieldfuse::detail::optics
