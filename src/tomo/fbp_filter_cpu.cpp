// SPDX-License-Identifier: Apache-2.0
// CPU driver of FBP's filtering: tilt angles and weights per projection, the filter response from
// the FFT of the circular Ram-Lak kernel, then each padded detector column through KissFFT's real
// FFT, scaled by the response and its projection's weight, and back (tomo_math.h formulas).
#include <kiss_fftr.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/parallel.h"
#include "tomo/tomo_drivers.h"
#include "tomo/tomo_math.h"

namespace fieldfuse::detail::tomo {
namespace {

/// Columns per parallel task: each task makes its own KissFFT states (a state holds scratch, so
/// one cannot be shared between threads), so a task should be long against that set-up.
constexpr int64_t kColumnsPerTask = 64;

/// A KissFFT real-FFT state for the scope (KissFFT allocates it; null when that failed).
class RealFft {
 public:
  RealFft(int64_t length, bool inverse)
      : cfg_(kiss_fftr_alloc(static_cast<int>(length), inverse ? 1 : 0, nullptr, nullptr)) {}
  ~RealFft() { kiss_fftr_free(cfg_); }
  RealFft(const RealFft&) = delete;
  RealFft& operator=(const RealFft&) = delete;
  kiss_fftr_cfg get() const { return cfg_; }

 private:
  kiss_fftr_cfg cfg_;
};

[[noreturn]] void fft_failed(const char* op, int64_t length) {
  fail(ErrorKind::Runtime, op,
       "KissFFT could not allocate a real FFT of length " + std::to_string(length));
}

}  // namespace

void fbp_filter_cpu(const FbpFilterArgs& a) {
  const char* op = a.exec.op;
  const int64_t n = a.projections.sizes[0], height = a.projections.sizes[1];
  const int64_t width = a.projections.sizes[2], padded = a.padded;
  const int64_t stride = fbp_column_stride(padded), bins = padded / 2 + 1;
  if (padded > (int64_t{1} << 30)) {
    fail(ErrorKind::NotImplemented, op,
         "not implemented for projections with Hd = " + std::to_string(height) +
             " (the FFT length must fit in an int)");
  }

  // Angles and weights per projection (rotations float32, read through their strides).
  const float* rotations = static_cast<const float*>(a.rotations);
  for (int64_t m = 0; m < n; ++m) {
    const float* r = rotations + m * a.rotation_strides[0];
    const double dy = r[1 * a.rotation_strides[1] + 2 * a.rotation_strides[2]];
    const double dz = r[2 * a.rotation_strides[1] + 2 * a.rotation_strides[2]];
    a.angles[m] = tilt_angle(dy, dz);
  }
  for (int64_t m = 0; m < n; ++m) {
    a.scales[m] = fbp_projection_scale(fbp_interval(a.angles, n, m), a.volume_sizes, width, padded);
  }

  // The filter response: the real spectrum of the circular kernel, times the window.
  {
    RealFft forward(padded, false);
    if (forward.get() == nullptr) fft_failed(op, padded);
    for (int64_t i = 0; i < padded; ++i)
      a.kernel[i] = static_cast<float>(ramp_tap_circular(i, padded));
    kiss_fftr(forward.get(), a.kernel, reinterpret_cast<kiss_fft_cpx*>(a.kernel));
    const int32_t filter = static_cast<int32_t>(a.filter);
    for (int64_t k = 0; k < bins; ++k) {
      a.response[k] = fbp_response(a.kernel[2 * k], filter, k, padded);
    }
  }

  // Each column: gather, zero-pad, FFT, scale, inverse FFT, in place in its row of `columns`.
  const float* p = static_cast<const float*>(a.projections.data);
  const int64_t* s = a.projections.strides;
  const int64_t columns = n * width;
  const int64_t tasks = (columns + kColumnsPerTask - 1) / kColumnsPerTask;
  std::atomic<bool> failed{false};
  parallel_for(0, tasks, kColumnsPerTask * padded, [&](int64_t task) {
    RealFft forward(padded, false), inverse(padded, true);
    if (forward.get() == nullptr || inverse.get() == nullptr) {
      failed = true;
      return;
    }
    const int64_t end =
        (task + 1) * kColumnsPerTask < columns ? (task + 1) * kColumnsPerTask : columns;
    for (int64_t c = task * kColumnsPerTask; c < end; ++c) {
      const int64_t m = c / width, j = c % width;
      float* col = a.columns + c * stride;
      const float* src = p + m * s[0] + j * s[2];
      for (int64_t i = 0; i < height; ++i) col[i] = src[i * s[1]];
      for (int64_t i = height; i < stride; ++i) col[i] = 0.0f;
      auto* spectrum = reinterpret_cast<kiss_fft_cpx*>(col);
      kiss_fftr(forward.get(), col, spectrum);
      for (int64_t k = 0; k < bins; ++k) {
        const float gain = fbp_gain(a.response[k], a.scales[m]);
        spectrum[k].r *= gain;
        spectrum[k].i *= gain;
      }
      kiss_fftri(inverse.get(), spectrum, col);
    }
  });
  if (failed) fft_failed(op, padded);
}

}  // namespace fieldfuse::detail::tomo
