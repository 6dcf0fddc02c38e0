// SPDX-License-Identifier: Apache-2.0
// Image-quality metrics (metrics.h): PSNR, 3-D SSIM and the per-axis profile error on host arrays.
#include "fieldfuse/metrics.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/ordered_sum.h"
#include "core/parallel.h"

namespace fieldfuse {
namespace detail {
namespace {

constexpr double kSsimSigma = 1.5;  // Wang et al.'s window
constexpr int64_t kSsimRadius = 5;  // 11 taps: ±3.3 sigma, weights beyond are < 0.5%
constexpr double kSsimK1 = 0.01;
constexpr double kSsimK2 = 0.03;
// The five local moments SSIM needs: E[x], E[y], E[x²], E[y²], E[xy].
constexpr int kMoments = 5;
// Work of one voxel of a filter pass, in the units parallel_for weighs (about one tap each).
constexpr int64_t kTapsPerVoxel = kMoments * (2 * kSsimRadius + 1);

std::vector<double> gaussian_taps() {
  std::vector<double> taps(2 * kSsimRadius + 1);
  for (int64_t t = -kSsimRadius; t <= kSsimRadius; ++t) {
    taps[static_cast<std::size_t>(t + kSsimRadius)] =
        std::exp(-0.5 * static_cast<double>(t * t) / (kSsimSigma * kSsimSigma));
  }
  return taps;
}

// Window weights for position `i` of an axis of `count`: taps falling off the axis are dropped
// and the rest rescaled to sum to 1. Calls `add(j, weight)` for each neighbour j.
template <class Add>
void for_each_tap(const std::vector<double>& taps, int64_t i, int64_t count, const Add& add) {
  const int64_t first = i - kSsimRadius < 0 ? 0 : i - kSsimRadius;
  const int64_t last = i + kSsimRadius >= count ? count - 1 : i + kSsimRadius;
  double total = 0.0;
  for (int64_t j = first; j <= last; ++j)
    total += taps[static_cast<std::size_t>(j - i + kSsimRadius)];
  for (int64_t j = first; j <= last; ++j) {
    add(j, taps[static_cast<std::size_t>(j - i + kSsimRadius)] / total);
  }
}

// Gaussian-filtered moments of one (H, W) plane: `out` holds kMoments planes of H·W values.
template <class T>
void filter_plane_moments(const T* x, const T* y, int64_t height, int64_t width,
                          const std::vector<double>& taps, std::vector<double>& scratch,
                          double* out) {
  const int64_t plane = height * width;
  parallel_for(0, height, width * kTapsPerVoxel, [&](int64_t h) {  // along W
    for (int64_t w = 0; w < width; ++w) {
      double m[kMoments] = {};
      for_each_tap(taps, w, width, [&](int64_t j, double weight) {
        const double a = x[h * width + j];
        const double b = y[h * width + j];
        m[0] += weight * a;
        m[1] += weight * b;
        m[2] += weight * a * a;
        m[3] += weight * b * b;
        m[4] += weight * a * b;
      });
      for (int k = 0; k < kMoments; ++k)
        scratch[static_cast<std::size_t>(k * plane + h * width + w)] = m[k];
    }
  });
  parallel_for(0, height, width * kTapsPerVoxel, [&](int64_t h) {  // along H
    for (int k = 0; k < kMoments; ++k) {
      double* row = out + k * plane + h * width;
      for (int64_t w = 0; w < width; ++w) row[w] = 0.0;
      for_each_tap(taps, h, height, [&](int64_t j, double weight) {
        const double* source = scratch.data() + k * plane + j * width;
        for (int64_t w = 0; w < width; ++w) row[w] += weight * source[w];
      });
    }
  });
}

template <class T>
double mean_squared_error(const T* a, const T* b, int64_t count) {
  if (count == 0) return 0.0;
  const double sum = ordered_sum(count, [&](int64_t i) {
    const double diff = static_cast<double>(a[i]) - b[i];
    return diff * diff;
  });
  return sum / static_cast<double>(count);
}

// The D axis is filtered through a ring of 2·radius + 1 plane-filtered slices, so memory stays at
// a few planes per moment rather than five copies of the whole volume.
template <class T>
double ssim_volume(const T* estimate, const T* reference, int64_t depth, int64_t height,
                   int64_t width, double data_range) {
  const int64_t plane = height * width;
  const int64_t numel = depth * plane;
  if (numel == 0) return 1.0;
  const std::vector<double> taps = gaussian_taps();
  const double c1 = (kSsimK1 * data_range) * (kSsimK1 * data_range);
  const double c2 = (kSsimK2 * data_range) * (kSsimK2 * data_range);

  const int64_t ring_slots = 2 * kSsimRadius + 1;
  std::vector<double> ring(static_cast<std::size_t>(ring_slots * kMoments * plane));
  std::vector<double> scratch(static_cast<std::size_t>(kMoments * plane));
  std::vector<double> row_sums(static_cast<std::size_t>(height));
  const auto slot = [&](int64_t d) { return ring.data() + (d % ring_slots) * kMoments * plane; };

  double total = 0.0;
  for (int64_t next = 0; next < depth + kSsimRadius; ++next) {
    if (next < depth) {
      filter_plane_moments(estimate + next * plane, reference + next * plane, height, width, taps,
                           scratch, slot(next));
    }
    const int64_t d = next - kSsimRadius;  // every plane d needs is filtered by now
    if (d < 0) continue;
    parallel_for(0, height, width * kTapsPerVoxel, [&](int64_t h) {
      double row_sum = 0.0;
      for (int64_t w = 0; w < width; ++w) {
        double m[kMoments] = {};
        for_each_tap(taps, d, depth, [&](int64_t j, double weight) {
          const double* moments = slot(j);
          for (int k = 0; k < kMoments; ++k) m[k] += weight * moments[k * plane + h * width + w];
        });
        const double var_x = m[2] - m[0] * m[0];
        const double var_y = m[3] - m[1] * m[1];
        const double cov = m[4] - m[0] * m[1];
        row_sum += ((2.0 * m[0] * m[1] + c1) * (2.0 * cov + c2)) /
                   ((m[0] * m[0] + m[1] * m[1] + c1) * (var_x + var_y + c2));
      }
      row_sums[static_cast<std::size_t>(h)] = row_sum;
    });
    for (const double row_sum : row_sums) total += row_sum;  // fixed order: deterministic
  }
  return total / static_cast<double>(numel);
}

template <class T>
double profile_error_volume(const T* estimate, const T* reference, const int64_t* sizes, int axis) {
  std::vector<double> difference(static_cast<std::size_t>(sizes[axis]), 0.0);
  std::vector<double> profile(difference.size(), 0.0);
  for (int64_t d = 0; d < sizes[0]; ++d) {
    for (int64_t h = 0; h < sizes[1]; ++h) {
      for (int64_t w = 0; w < sizes[2]; ++w) {
        const int64_t index[3] = {d, h, w};
        const int64_t i = (d * sizes[1] + h) * sizes[2] + w;
        const auto bin = static_cast<std::size_t>(index[axis]);
        difference[bin] += static_cast<double>(estimate[i]) - reference[i];
        profile[bin] += reference[i];
      }
    }
  }
  // The plane size divides both profiles alike and cancels in the ratio.
  double error = 0.0, signal = 0.0;
  for (std::size_t bin = 0; bin < profile.size(); ++bin) {
    error += difference[bin] * difference[bin];
    signal += profile[bin] * profile[bin];
  }
  if (signal == 0.0) return error == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(error / signal);
}

// The pair's shared checks: host, contiguous, float32/float64 alike, the same shape, and
// `volume_3d` when the metric needs [D, H, W].
void check_pair(const char* op, const TensorRef& estimate, const TensorRef& reference,
                bool volume_3d) {
  check_storage(op, "estimate", estimate);
  check_storage(op, "reference", reference);
  if (estimate.dtype != DType::Float32 && estimate.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         std::string("expected estimate to have dtype float32 or float64, but got ") +
             dtype_name(estimate.dtype));
  }
  check_dtype(op, "reference", reference, estimate.dtype, "the dtype of estimate");
  for (const auto& [arg, t] :
       {std::make_pair("estimate", &estimate), std::make_pair("reference", &reference)}) {
    if (t->device.is_cuda()) {
      fail(ErrorKind::Value, op,
           std::string("expected ") + arg + " on the CPU (metrics are computed on the host), " +
               "but got it on " + t->device.str());
    }
  }
  if (volume_3d && estimate.ndim != 3) {
    fail(ErrorKind::Value, op,
         "expected estimate to have shape [D, H, W] (3 dims), but got shape " +
             estimate.shape_str());
  }
  check_same_shape(op, "reference", reference, "estimate", estimate);
  check_contiguous(op, "estimate", estimate);
  check_contiguous(op, "reference", reference);
}

void check_data_range(const char* op, double data_range) {
  if (!(std::isfinite(data_range) && data_range > 0.0)) {
    fail(ErrorKind::Value, op,
         "expected data_range to be finite and > 0, but got " + number_text(data_range));
  }
}

}  // namespace
}  // namespace detail

double psnr_from_mse(double mse, double data_range) {
  if (mse <= 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(data_range * data_range / mse);
}

double psnr(const TensorRef& estimate, const TensorRef& reference, double data_range) {
  using namespace detail;
  const char* op = "psnr";
  check_pair(op, estimate, reference, false);
  check_data_range(op, data_range);
  const int64_t count = estimate.numel();
  const double mse = estimate.dtype == DType::Float32
                         ? mean_squared_error(static_cast<const float*>(estimate.data),
                                              static_cast<const float*>(reference.data), count)
                         : mean_squared_error(static_cast<const double*>(estimate.data),
                                              static_cast<const double*>(reference.data), count);
  return psnr_from_mse(mse, data_range);
}

double ssim_3d(const TensorRef& estimate, const TensorRef& reference, double data_range) {
  using namespace detail;
  const char* op = "ssim_3d";
  check_pair(op, estimate, reference, true);
  check_data_range(op, data_range);
  const int64_t* s = estimate.sizes;
  return estimate.dtype == DType::Float32
             ? ssim_volume(static_cast<const float*>(estimate.data),
                           static_cast<const float*>(reference.data), s[0], s[1], s[2], data_range)
             : ssim_volume(static_cast<const double*>(estimate.data),
                           static_cast<const double*>(reference.data), s[0], s[1], s[2],
                           data_range);
}

double profile_error(const TensorRef& estimate, const TensorRef& reference, int axis) {
  using namespace detail;
  const char* op = "profile_error";
  check_pair(op, estimate, reference, true);
  if (axis < 0 || axis > 2) {
    fail(ErrorKind::Value, op,
         "expected axis to be 0 (D), 1 (H) or 2 (W), but got " + std::to_string(axis));
  }
  return estimate.dtype == DType::Float32
             ? profile_error_volume(static_cast<const float*>(estimate.data),
                                    static_cast<const float*>(reference.data), estimate.sizes, axis)
             : profile_error_volume(static_cast<const double*>(estimate.data),
                                    static_cast<const double*>(reference.data), estimate.sizes,
                                    axis);
}

}  // namespace fieldfuse
