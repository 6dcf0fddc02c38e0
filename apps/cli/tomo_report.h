// SPDX-License-Identifier: Apache-2.0
// The JSON report of `fieldfuse tomo`: the input, the settings, and per method its residuals,
// timings and scores against the truth.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tomo_methods.h"
#include "tomo_options.h"

namespace fieldfuse::cli {

/// Scores of a volume against the truth (all in the output frame and units).
struct TomoScores {
  double psnr = 0.0;
  double ssim = 0.0;
  /// profile_error along z (D, the beam at zero tilt), y (H) and x (W).
  std::array<double, 3> axis_error{};
};

struct TomoMethodRecord {
  TomoMethod method = TomoMethod::Sirt;
  const MethodResult* result = nullptr;
  bool scored = false;
  TomoScores scores;
  std::string output;  ///< the volume file written for it, "" for none
};

/// Everything the report states about one run.
struct TomoRecord {
  const TomoOptions* options = nullptr;
  bool from_phantom = false;
  std::vector<std::int64_t> stack_shape;  ///< [n, H, W] as read (before any transposition)
  std::vector<double> angles;
  std::string input_format;                  ///< "npy", "tiff", "mrc" or "phantom"
  std::array<double, 3> input_voxel_size{};  ///< Å (x, y, z) from an MRC header, 0 unknown
  double noise_sigma = 0.0;                  ///< the phantom's absolute noise sigma
  double normalisation = 1.0;  ///< the stack was divided by this (its 95th percentile)
  std::array<std::int64_t, 3> volume_shape{};  ///< the output [D, H, W]
  std::string device;
  double data_range = 0.0;  ///< the truth's range (PSNR peak, SSIM L); 0 without a truth
  std::vector<TomoMethodRecord> methods;
  bool has_baseline = false;
  TomoScores baseline;  ///< the plain back projection at its best scale
  double load_seconds = 0.0;
  double total_seconds = 0.0;
  std::vector<std::string> outputs;
};

/// Pretty-printed JSON (two-space indent, trailing newline); non-finite numbers become null and
/// invalid UTF-8 in paths U+FFFD, so it is always valid JSON.
std::string tomo_report_json(const TomoRecord& record);

}  // namespace fieldfuse::cli
