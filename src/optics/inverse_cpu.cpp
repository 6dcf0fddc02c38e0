// SPDX-License-Identifier: Apache-2.0
// CPU driver of the optics inverses, loss and forward model: inverse_pipeline.h over parallel_for
// (static schedule, per-index results) and the Eigen FFT layer, so results never depend on the
// thread count.
#include <complex>
#include <cstdint>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "optics/fft.h"
#include "optics/inverse_drivers.h"
#include "optics/inverse_pipeline.h"

namespace fieldfuse::detail::optics {
namespace {

struct CpuExec {
  template <class F>
  void for_each(int64_t count, int64_t work, const F& f) const {
    parallel_for(0, count, work, f);
  }

  /// One slice per index, summed left to right.
  template <class Term>
  void slice_sums(int64_t slices, int64_t length, const Term& term, double* out) const {
    parallel_for(0, slices, length, [&](int64_t s) {
      double sum = 0.0;
      for (int64_t i = 0; i < length; ++i) sum += term(s, i);
      out[s] = sum;
    });
  }

  template <class T>
  void fft(Cx<T>* data, const fft::FftLayout& layout, bool inverse) const {
    // Cx<T> and std::complex<T> are both the (real, imaginary) pair (inverse_math.h).
    fft::fft_cpu<T>(reinterpret_cast<std::complex<T>*>(data), layout, inverse);
  }
};

template <class Args, class Run>
void dispatch(const Args& a, const Run& run) {
  CpuExec e;
  dispatch_float_types(a.exec.op, a.exec.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run(e, T{});
  });
}

}  // namespace

void run_cpu(const FilterArgs& a) {
  dispatch(a, [&](CpuExec& e, auto t) { run_filter<decltype(t)>(e, a); });
}

void run_cpu(const InverseArgs& a, bool backward) {
  dispatch(a, [&](CpuExec& e, auto t) {
    if (backward) {
      run_inverse_backward<decltype(t)>(e, a);
    } else {
      run_inverse<decltype(t)>(e, a);
    }
  });
}

void run_cpu(const Inverse3dArgs& a, bool backward) {
  dispatch(a, [&](CpuExec& e, auto t) { run_inverse_3d<decltype(t)>(e, a, backward); });
}

void run_cpu(const MidbandArgs& a, bool backward) {
  dispatch(a, [&](CpuExec& e, auto t) { run_midband<decltype(t)>(e, a, backward); });
}

void run_cpu(const ForwardModelArgs& a) {
  dispatch(a, [&](CpuExec& e, auto t) { run_forward_model<decltype(t)>(e, a); });
}

}  // namespace fieldfuse::detail::optics
