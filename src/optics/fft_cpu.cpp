// SPDX-License-Identifier: Apache-2.0
// CPU side of the optics FFT layer: each axis of a [batch, n..., inner] complex block in turn,
// line by line through Eigen's FFT (gathered into a contiguous buffer, transformed, scattered).
#include <complex>
#include <cstdint>
#include <unsupported/Eigen/FFT>
#include <vector>

#include "core/parallel.h"
#include "optics/fft.h"

namespace fieldfuse::detail::fft {
namespace {

/// Lines per parallel task: each task owns an Eigen::FFT object (its twiddle cache is not safe to
/// share between threads), so a task should be long against building that cache.
constexpr int64_t kLinesPerTask = 64;

/// Transforms every line along axis `axis` of the layout. A line is fixed by (outer, inner
/// offset): outer runs over batch and the axes before `axis`, the offset over the axes after it
/// and `inner`, which are also its stride.
template <class T>
void transform_axis(std::complex<T>* data, const FftLayout& layout, int axis, bool inverse) {
  const int64_t length = layout.n[axis];
  int64_t stride = layout.inner;
  for (int d = axis + 1; d < layout.rank; ++d) stride *= layout.n[d];
  const int64_t outer = layout.elements() / (length * stride);
  const int64_t lines = outer * stride;
  const int64_t tasks = (lines + kLinesPerTask - 1) / kLinesPerTask;
  parallel_for(0, tasks, kLinesPerTask * length * 8, [&](int64_t task) {
    Eigen::FFT<T> engine;
    engine.SetFlag(Eigen::FFT<T>::Unscaled);  // the layer's inverse is unnormalised (fft.h)
    std::vector<std::complex<T>> in(static_cast<std::size_t>(length)), out(in.size());
    const int64_t end = (task + 1) * kLinesPerTask < lines ? (task + 1) * kLinesPerTask : lines;
    for (int64_t line = task * kLinesPerTask; line < end; ++line) {
      std::complex<T>* first = data + (line / stride) * length * stride + line % stride;
      for (int64_t i = 0; i < length; ++i) in[i] = first[i * stride];
      if (inverse) {
        engine.inv(out.data(), in.data(), static_cast<typename Eigen::FFT<T>::Index>(length));
      } else {
        engine.fwd(out.data(), in.data(), static_cast<typename Eigen::FFT<T>::Index>(length));
      }
      for (int64_t i = 0; i < length; ++i) first[i * stride] = out[i];
    }
  });
}

}  // namespace

template <class T>
void fft_cpu(std::complex<T>* data, const FftLayout& layout, bool inverse) {
  if (layout.elements() == 0) return;
  for (int axis = 0; axis < layout.rank; ++axis) {
    // A length-1 transform is the identity.
    if (layout.n[axis] > 1) transform_axis(data, layout, axis, inverse);
  }
}

template void fft_cpu<float>(std::complex<float>*, const FftLayout&, bool);
template void fft_cpu<double>(std::complex<double>*, const FftLayout&, bool);

}  // namespace fieldfuse::detail::fft
