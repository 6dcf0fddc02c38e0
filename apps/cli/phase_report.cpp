// SPDX-License-Identifier: Apache-2.0
// The JSON report of `fieldfuse phase`: the input, the settings, the tiles, the timings, a per-tile
// summary and, for the embedded default, how well it was recovered.
#include "phase_report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "fieldfuse/core.h"

namespace fieldfuse::cli {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written, for readers

constexpr double kDegrees = 57.29577951308232;  // 180 / pi

template <class T>
Json summary(const std::vector<T>& values, double scale = 1.0) {
  if (values.empty()) return nullptr;
  double sum = 0.0;
  for (const T v : values) sum += static_cast<double>(v);
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  return {{"mean", scale * sum / static_cast<double>(values.size())},
          {"min", scale * static_cast<double>(*low)},
          {"max", scale * static_cast<double>(*high)}};
}

Json settings_json(const PhaseOptions& o) {
  const fieldfuse::MicroscopeSettings& m = o.microscope;
  Json optimized = Json::array();
  if (o.optimize_z) optimized.push_back("z");
  if (o.optimize_zenith) optimized.push_back("zenith");
  if (o.optimize_azimuth) optimized.push_back("azimuth");
  return {{"microscope",
           {{"pixel_size", m.pixel_size},
            {"wavelength", m.wavelength},
            {"index_medium", m.index_medium},
            {"na_illumination", m.na_illumination},
            {"na_detection", m.na_detection},
            {"z_spacing", o.z_spacing},
            {"pupil_steepness", m.pupil_steepness},
            {"invert_phase_contrast", m.invert_phase_contrast}}},
          {"regularization", o.regularization},
          {"config", o.config.empty() ? Json(nullptr) : Json(o.config)},
          {"optimize",
           {{"parameters", optimized},
            {"method", tile_method_name(o.method)},
            {"iterations", o.iterations},
            {"learning_rates",
             {{"z_slices", o.lr_z},
              {"zenith_degrees", o.lr_zenith},
              {"azimuth_degrees", o.lr_azimuth}}},
            {"start",
             {{"z_offset_slices", o.z_offset},
              {"zenith_degrees", o.zenith},
              {"azimuth_degrees", o.azimuth}}}}}};
}

}  // namespace

std::string phase_report_json(const PhaseRecord& record) {
  const PhaseOptions& o = *record.options;
  const TileGrid& grid = *record.grid;
  const TileParameters reported = with_positive_zenith(*record.parameters);
  Json input;
  input["source"] = record.embedded ? "embedded" : "file";
  if (record.embedded) {
    input["simulation"] = {
        {"kind",
         "Gaussian blobs of phase; each tile imaged through the thin forward model at its "
         "own focus offset and tilt, with the transfer functions of azimuth + 180 degrees "
         "(the conjugates, which the unconjugated inverse undoes at the true parameters)"},
        {"size", o.size},
        {"slices", kSimulatedSlices},
        {"z_ramp_slices", kSimulatedZRamp},
        {"max_zenith_degrees", kSimulatedMaxZenithDegrees},
        {"noise_fraction", o.noise},
        {"seed", o.seed}};
  } else {
    input["path"] = o.input;
  }
  input["format"] = record.input_format;
  input["stack_shape"] = record.stack_shape;

  Json report;
  report["fieldfuse_version"] = fieldfuse::build_info().version;
  report["command"] = "phase";
  report["input"] = std::move(input);
  report["settings"] = settings_json(o);
  report["tiles"] = {{"tile", grid.tile},
                     {"overlap", grid.overlap},
                     {"tiles_y", grid.tiles_y()},
                     {"tiles_x", grid.tiles_x()},
                     {"count", grid.count()},
                     {"starts_y", grid.starts_y},
                     {"starts_x", grid.starts_x},
                     {"batch", o.batch > 0 ? o.batch : grid.count()},
                     {"batches", record.batches},
                     {"blend",
                      "sin^2 / cos^2 ramps over the overlap, normalised by the summed "
                      "weights"}};
  report["device"] = record.device;
  report["per_tile"] = {
      {"z_offset_slices", summary(reported.z_offset)},
      {"zenith_degrees", summary(reported.zenith, kDegrees)},
      {"azimuth_degrees", summary(reported.azimuth, kDegrees)},
      {"loss", o.optimizes() ? summary(reported.loss) : Json(nullptr)},
      {"iterations", o.optimizes() ? summary(reported.iterations) : Json(nullptr)}};
  if (record.has_recovery) {
    const PhaseRecovery& r = record.recovery;
    report["recovery"] = {{"z_offset_rms_slices", r.z_offset_rms_slices},
                          {"zenith_rms_degrees", r.zenith_rms_degrees},
                          {"azimuth_rms_degrees", r.azimuth_rms_degrees},
                          {"azimuth_tiles", r.azimuth_tiles},
                          {"phase_correlation", r.phase_correlation},
                          {"phase_rmse_radians", r.phase_rmse},
                          {"phase_correlation_at_start", r.start_phase_correlation},
                          {"phase_correlation_at_truth", r.truth_phase_correlation}};
  } else {
    report["recovery"] = nullptr;
  }
  const PhaseTimings& s = record.seconds;
  report["timings_s"] = {{"load", s.load},         {"simulate", s.simulate},
                         {"optimize", s.optimize}, {"reconstruct", s.reconstruct},
                         {"blend", s.blend},       {"total", s.total}};
  report["outputs"] = record.outputs;
  return report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace fieldfuse::cli
