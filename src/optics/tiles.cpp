// SPDX-License-Identifier: Apache-2.0
// optimize_tiles' front: validates every argument and picks the CPU or CUDA driver.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "fieldfuse/optics.h"
#include "optics/optics_check.h"
#include "optics/tiles_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
using detail::number_text;
using detail::optics::kTileParameters;

constexpr const char* kOp = "optimize_tiles";
constexpr const char* kNames[kTileParameters] = {"z_offset", "zenith", "azimuth", "na_illumination",
                                                 "na_detection"};

void check_options(const TileOptimizerOptions& o) {
  if (o.iterations < 0) {
    fail(ErrorKind::Value, kOp,
         "expected iterations to be >= 0, but got " + std::to_string(o.iterations));
  }
  if (!(std::isfinite(o.regularization) && o.regularization > 0.0)) {
    fail(ErrorKind::Value, kOp,
         "expected regularization to be finite and > 0, but got " + number_text(o.regularization));
  }
  if (!(o.band.low >= 0.0 && o.band.low < o.band.high && std::isfinite(o.band.high))) {
    fail(ErrorKind::Value, kOp,
         "expected band to satisfy 0 <= low < high (finite), but got (" + number_text(o.band.low) +
             ", " + number_text(o.band.high) + ")");
  }
  const double betas[2] = {o.beta1, o.beta2};
  const char* beta_names[2] = {"beta1", "beta2"};
  for (int i = 0; i < 2; ++i) {
    if (!(betas[i] >= 0.0 && betas[i] < 1.0)) {
      fail(ErrorKind::Value, kOp,
           std::string("expected ") + beta_names[i] + " to be in [0, 1), but got " +
               number_text(betas[i]));
    }
  }
  detail::check_non_negative(kOp, "eps", o.eps);
  detail::check_non_negative(kOp, "momentum_decay", o.momentum_decay);
  detail::check_non_negative(kOp, "tolerance", o.tolerance);
  if (o.patience < 1) {
    fail(ErrorKind::Value, kOp,
         "expected patience to be >= 1, but got " + std::to_string(o.patience));
  }
  if (o.method != TileOptimizerMethod::Adam && o.method != TileOptimizerMethod::NAdam &&
      o.method != TileOptimizerMethod::Newton) {
    fail(ErrorKind::Value, kOp,
         "expected method to be Adam, NAdam or Newton, but got " +
             std::to_string(static_cast<int>(o.method)));
  }
}

void check_output(const char* arg, const TensorRef& t, const TensorRef& tiles, DType dtype,
                  const char* why) {
  detail::check_storage(kOp, arg, t);
  detail::check_same_device(kOp, arg, t, "tiles", tiles);
  detail::check_dtype(kOp, arg, t, dtype, why);
  detail::check_shape(kOp, arg, t, {tiles.sizes[0]}, "[B] (B from tiles)");
  detail::check_contiguous(kOp, arg, t);
}

}  // namespace

void optimize_tiles(const TensorRef& tiles, const MicroscopeSettings& settings, double z_spacing,
                    const TileParameterSet& parameters, const TileOptimizerOptions& options,
                    const TileOptimizerResult& result, Stream stream) {
  detail::optics::check_microscope(kOp, settings);
  check_options(options);
  if (!(std::isfinite(z_spacing) && z_spacing > 0.0)) {
    fail(ErrorKind::Value, kOp,
         "expected z_spacing to be finite and > 0, but got " + number_text(z_spacing));
  }
  detail::check_storage(kOp, "tiles", tiles);
  detail::check_device_supported(kOp, "tiles", tiles);
  detail::optics::check_real_dtype(kOp, "tiles", tiles);
  detail::check_shape(kOp, "tiles", tiles, {-1, -1, -1, -1}, "[B, Z, Y, X]");
  const int64_t B = tiles.sizes[0], Z = tiles.sizes[1], Y = tiles.sizes[2], X = tiles.sizes[3];
  if (B > 0 && (Z < 1 || Y < 1 || X < 1)) {
    fail(ErrorKind::Value, kOp,
         "expected tiles to have Z, Y, X >= 1, but got shape " + tiles.shape_str());
  }

  detail::optics::TilesCall call;
  call.settings = settings;
  call.factor = detail::optics::upsampling_factor(kOp, settings);
  call.z_spacing = z_spacing;
  call.B = B;
  call.Z = Z;
  call.Y = Y;
  call.X = X;
  call.real_dtype = tiles.dtype;
  call.device = tiles.device.index;
  call.stream = stream;
  call.options = options;
  call.tiles.data = tiles.data;
  for (int d = 0; d < 4; ++d) call.tiles.strides[d] = tiles.strides[d];

  const TileParameter* params[kTileParameters] = {&parameters.z_offset, &parameters.zenith,
                                                  &parameters.azimuth, &parameters.na_illumination,
                                                  &parameters.na_detection};
  // The apertures' NaN initial value: the microscope's setting.
  const double setting[kTileParameters] = {0.0, 0.0, 0.0, settings.na_illumination,
                                           settings.na_detection};
  for (int p = 0; p < kTileParameters; ++p) {
    const TileParameter& param = *params[p];
    const std::string name = std::string(kNames[p]) + ".initial";
    if (!(std::isfinite(param.learning_rate) && param.learning_rate >= 0.0)) {
      fail(ErrorKind::Value, kOp,
           std::string("expected ") + kNames[p] + ".learning_rate to be finite and >= 0, but got " +
               number_text(param.learning_rate));
    }
    const bool aperture = p >= detail::optics::kNaIllumination;
    const double initial_value =
        aperture && std::isnan(param.initial_value) ? setting[p] : param.initial_value;
    if (!std::isfinite(initial_value)) {
      fail(ErrorKind::Value, kOp,
           std::string("expected ") + kNames[p] + ".initial_value to be finite, but got " +
               number_text(param.initial_value));
    }
    if (!is_absent(param.initial)) {
      detail::check_storage(kOp, name.c_str(), param.initial);
      detail::check_same_device(kOp, name.c_str(), param.initial, "tiles", tiles);
      detail::check_dtype(kOp, name.c_str(), param.initial, tiles.dtype, "the dtype of tiles");
      detail::check_shape(kOp, name.c_str(), param.initial, {B}, "[B] (B from tiles)");
      call.initial[p] = {param.initial.data, {param.initial.strides[0]}};
    }
    call.initial_value[p] = initial_value;
    call.learning_rate[p] = param.learning_rate;
  }
  const TensorRef* outs[kTileParameters] = {&result.z_offset, &result.zenith, &result.azimuth,
                                            &result.na_illumination, &result.na_detection};
  const char* out_names[kTileParameters] = {"result.z_offset", "result.zenith", "result.azimuth",
                                            "result.na_illumination", "result.na_detection"};
  for (int p = 0; p < kTileParameters; ++p) {
    if (p >= detail::optics::kNaIllumination && is_absent(*outs[p])) continue;  // optional
    check_output(out_names[p], *outs[p], tiles, tiles.dtype, "the dtype of tiles");
    call.parameters_out[p] = outs[p]->data;
  }
  check_output("result.loss", result.loss, tiles, tiles.dtype, "the dtype of tiles");
  check_output("result.iterations", result.iterations, tiles, DType::Int32, "iteration counts");
  call.loss_out = result.loss.data;
  call.iterations_out = result.iterations.data;

#if FIELDFUSE_WITH_CUDA
  if (tiles.device.is_cuda()) {
    detail::optics::optimize_tiles_cuda(call);
    return;
  }
#endif
  detail::optics::optimize_tiles_cpu(call);
}

}  // namespace fieldfuse
