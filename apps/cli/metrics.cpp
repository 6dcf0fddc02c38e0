// SPDX-License-Identifier: Apache-2.0
// Image-quality metrics of a volume against a reference: PSNR and 3-D SSIM.
#include "metrics.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ordered_sum.h"

namespace fieldfuse::cli {
namespace {

constexpr double kSsimSigma = 1.5;       // Wang et al.'s window
constexpr std::int64_t kSsimRadius = 5;  // 11 taps: ±3.3 sigma, weights beyond are < 0.5%
constexpr double kSsimK1 = 0.01;
constexpr double kSsimK2 = 0.03;
// The five local moments SSIM needs: E[x], E[y], E[x²], E[y²], E[xy].
constexpr int kMoments = 5;
// Work of one voxel of a filter pass, in the units parallel_for weighs (about one tap each).
constexpr std::int64_t kTapsPerVoxel = kMoments * (2 * kSsimRadius + 1);

std::vector<double> gaussian_taps() {
  std::vector<double> taps(2 * kSsimRadius + 1);
  for (std::int64_t t = -kSsimRadius; t <= kSsimRadius; ++t) {
    taps[static_cast<std::size_t>(t + kSsimRadius)] =
        std::exp(-0.5 * static_cast<double>(t * t) / (kSsimSigma * kSsimSigma));
  }
  return taps;
}

// Window weights for position `i` of an axis of `count`: taps falling off the axis are dropped
// and the rest rescaled to sum to 1. Calls `add(j, weight)` for each neighbour j.
template <class Add>
void for_each_tap(const std::vector<double>& taps, std::int64_t i, std::int64_t count,
                  const Add& add) {
  const std::int64_t first = i - kSsimRadius < 0 ? 0 : i - kSsimRadius;
  const std::int64_t last = i + kSsimRadius >= count ? count - 1 : i + kSsimRadius;
  double total = 0.0;
  for (std::int64_t j = first; j <= last; ++j)
    total += taps[static_cast<std::size_t>(j - i + kSsimRadius)];
  for (std::int64_t j = first; j <= last; ++j) {
    add(j, taps[static_cast<std::size_t>(j - i + kSsimRadius)] / total);
  }
}

// Gaussian-filtered moments of one (H, W) plane: `out` holds kMoments planes of H·W values.
void filter_plane_moments(const float* x, const float* y, std::int64_t height, std::int64_t width,
                          const std::vector<double>& taps, std::vector<double>& scratch,
                          double* out) {
  const std::int64_t plane = height * width;
  fieldfuse::detail::parallel_for(
      0, height, width * kTapsPerVoxel, [&](std::int64_t h) {  // along W
        for (std::int64_t w = 0; w < width; ++w) {
          double m[kMoments] = {};
          for_each_tap(taps, w, width, [&](std::int64_t j, double weight) {
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
  fieldfuse::detail::parallel_for(
      0, height, width * kTapsPerVoxel, [&](std::int64_t h) {  // along H
        for (int k = 0; k < kMoments; ++k) {
          double* row = out + k * plane + h * width;
          for (std::int64_t w = 0; w < width; ++w) row[w] = 0.0;
          for_each_tap(taps, h, height, [&](std::int64_t j, double weight) {
            const double* source = scratch.data() + k * plane + j * width;
            for (std::int64_t w = 0; w < width; ++w) row[w] += weight * source[w];
          });
        }
      });
}

}  // namespace

double psnr_from_mse(double mse, double data_range) {
  if (mse <= 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(data_range * data_range / mse);
}

double mean_squared_error(const float* a, const float* b, std::int64_t count) {
  if (count == 0) return 0.0;
  const double sum = ordered_sum(count, [&](std::int64_t i) {
    const double diff = static_cast<double>(a[i]) - b[i];
    return diff * diff;
  });
  return sum / static_cast<double>(count);
}

double psnr(const Volume& estimate, const Volume& reference, double data_range) {
  return psnr_from_mse(
      mean_squared_error(estimate.voxels.data(), reference.voxels.data(), estimate.numel()),
      data_range);
}

// The D axis is filtered through a ring of 2·radius + 1 plane-filtered slices, so memory stays at
// a few planes per moment rather than five copies of the whole volume.
double ssim_3d(const Volume& estimate, const Volume& reference, double data_range) {
  const std::int64_t depth = estimate.depth;
  const std::int64_t height = estimate.height;
  const std::int64_t width = estimate.width;
  const std::int64_t plane = height * width;
  if (estimate.numel() == 0) return 1.0;
  const std::vector<double> taps = gaussian_taps();
  const double c1 = (kSsimK1 * data_range) * (kSsimK1 * data_range);
  const double c2 = (kSsimK2 * data_range) * (kSsimK2 * data_range);

  const std::int64_t ring_slots = 2 * kSsimRadius + 1;
  std::vector<double> ring(static_cast<std::size_t>(ring_slots * kMoments * plane));
  std::vector<double> scratch(static_cast<std::size_t>(kMoments * plane));
  std::vector<double> row_sums(static_cast<std::size_t>(height));
  const auto slot = [&](std::int64_t d) {
    return ring.data() + (d % ring_slots) * kMoments * plane;
  };

  double total = 0.0;
  for (std::int64_t next = 0; next < depth + kSsimRadius; ++next) {
    if (next < depth) {
      filter_plane_moments(estimate.voxels.data() + next * plane,
                           reference.voxels.data() + next * plane, height, width, taps, scratch,
                           slot(next));
    }
    const std::int64_t d = next - kSsimRadius;  // every plane d needs is filtered by now
    if (d < 0) continue;
    fieldfuse::detail::parallel_for(0, height, width * kTapsPerVoxel, [&](std::int64_t h) {
      double row_sum = 0.0;
      for (std::int64_t w = 0; w < width; ++w) {
        double m[kMoments] = {};
        for_each_tap(taps, d, depth, [&](std::int64_t j, double weight) {
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
  return total / static_cast<double>(estimate.numel());
}

double profile_error(const Volume& estimate, const Volume& reference, int axis) {
  const std::int64_t sizes[3] = {reference.depth, reference.height, reference.width};
  std::vector<double> difference(static_cast<std::size_t>(sizes[axis]), 0.0);
  std::vector<double> profile(difference.size(), 0.0);
  for (std::int64_t d = 0; d < reference.depth; ++d) {
    for (std::int64_t h = 0; h < reference.height; ++h) {
      for (std::int64_t w = 0; w < reference.width; ++w) {
        const std::int64_t index[3] = {d, h, w};
        const auto i = static_cast<std::size_t>((d * reference.height + h) * reference.width + w);
        const auto bin = static_cast<std::size_t>(index[axis]);
        difference[bin] += static_cast<double>(estimate.voxels[i]) - reference.voxels[i];
        profile[bin] += reference.voxels[i];
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

}  // namespace fieldfuse::cli
