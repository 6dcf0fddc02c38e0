// SPDX-License-Identifier: Apache-2.0
// The JSON report of `fieldfuse tomo`: the input, the settings, and per method its residuals,
// timings and scores against the truth.
#include "tomo_report.h"

#include <nlohmann/json.hpp>

#include "fieldfuse/core.h"

namespace fieldfuse::cli {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written, for readers

Json scores_json(const TomoScores& s) {
  return {
      {"psnr_db", s.psnr},
      {"ssim", s.ssim},
      {"profile_error", {{"z", s.axis_error[0]}, {"y", s.axis_error[1]}, {"x", s.axis_error[2]}}}};
}

// The K-Planes entry: settings as trained, losses, per-step times, poses and the normalisation.
void add_kplanes(Json& entry, const TomoOptions& options, const MethodResult& result) {
  const KPlanesOutcome& k = result.kplanes;
  Json settings = Json::object();
  for (const auto& [name, value] : k.options) settings[name] = value;
  settings["checkpoint"] = options.checkpoint.empty() ? Json(nullptr) : Json(options.checkpoint);
  settings["checkpoint_every"] = options.checkpoint_every;
  settings["resume"] = options.resume.empty() ? Json(nullptr) : Json(options.resume);
  entry["settings"] = std::move(settings);
  Json steps = Json::array(), losses = Json::array(), seconds = Json::array();
  for (const IterationRecord& it : result.iterations) {
    steps.push_back(it.iteration);
    losses.push_back(it.residual);
    seconds.push_back(it.seconds);
  }
  entry["logged_steps"] = std::move(steps);
  entry["loss"] = std::move(losses);
  entry["step_seconds"] = std::move(seconds);
  entry["iterations"] = k.iterations;
  entry["first_step"] = k.first_step;
  entry["steps_run"] = k.steps_run;
  entry["train_seconds"] = k.train_seconds;
  entry["seconds_per_step"] =
      k.steps_run > 0 ? Json(k.train_seconds / static_cast<double>(k.steps_run)) : Json(nullptr);
  entry["normalisation_divisor"] = k.normalisation;
  entry["reference_projection"] = k.reference_projection;
  Json tilt = Json::array(), z1 = Json::array(), z3 = Json::array(), su = Json::array(),
       sv = Json::array();
  for (const fieldfuse::KPlanesPose& p : k.poses) {
    tilt.push_back(p.tilt);
    z1.push_back(p.z1);
    z3.push_back(p.z3);
    su.push_back(p.shift_u);
    sv.push_back(p.shift_v);
  }
  entry["poses_degrees_and_detector_units"] = {
      {"tilt", tilt}, {"z1", z1}, {"z3", z3}, {"shift_u", su}, {"shift_v", sv}};
  entry["checkpoint_steps"] = k.checkpoint_steps;
}

}  // namespace

std::string tomo_report_json(const TomoRecord& record) {
  const TomoOptions& options = *record.options;
  Json input;
  input["source"] = record.from_phantom ? "phantom" : "file";
  if (record.from_phantom) {
    input["phantom"] = {{"kind", "ellipsoids and dense particles, analytic projections"},
                        {"size", options.phantom_size},
                        {"noise_fraction", options.noise},
                        {"noise_sigma", record.noise_sigma},
                        {"seed", options.seed}};
  } else {
    input["path"] = options.input;
    input["tilt_axis"] = std::string(1, options.tilt_axis);
    input["truth"] = options.truth.empty() ? Json(nullptr) : Json(options.truth);
  }
  input["format"] = record.input_format;
  input["voxel_size_angstrom"] = record.input_voxel_size;
  input["stack_shape"] = record.stack_shape;
  input["angles_degrees"] = record.angles;
  input["normalisation_divisor"] = record.normalisation;

  Json methods = Json::array();
  for (const TomoMethodRecord& m : record.methods) {
    Json entry;
    entry["method"] = tomo_method_name(m.method);
    if (m.method == TomoMethod::Sirt) {
      entry["settings"] = {{"iterations", options.iterations},
                           {"relaxation", options.relaxation},
                           {"positivity", options.positivity}};
      Json residuals = Json::array(), seconds = Json::array();
      for (const IterationRecord& it : m.result->iterations) {
        residuals.push_back(it.residual);
        seconds.push_back(it.seconds);
      }
      entry["relative_residual"] = std::move(residuals);
      entry["iteration_seconds"] = std::move(seconds);
    } else if (m.method == TomoMethod::KPlanes) {
      add_kplanes(entry, options, *m.result);
    } else {
      entry["settings"] = {{"filter", options.filter}};
    }
    entry["seconds"] = m.result->seconds;
    entry["metrics"] = m.scored ? scores_json(m.scores) : Json(nullptr);
    entry["output"] = m.output.empty() ? Json(nullptr) : Json(m.output);
    methods.push_back(std::move(entry));
  }

  Json report;
  report["fieldfuse_version"] = fieldfuse::build_info().version;
  report["command"] = "tomo";
  report["input"] = std::move(input);
  report["volume_shape"] = record.volume_shape;
  report["device"] = record.device;
  report["units"] =
      "line integrals in detector-pixel lengths: a projection is the sum of the voxels along its "
      "ray, so the volume is in the input's units per pixel";
  report["data_range"] = record.data_range > 0.0 ? Json(record.data_range) : Json(nullptr);
  report["methods"] = std::move(methods);
  report["plain_backprojection"] =
      record.has_baseline ? scores_json(record.baseline) : Json(nullptr);
  report["timings_s"] = {{"load", record.load_seconds}, {"total", record.total_seconds}};
  report["outputs"] = record.outputs;
  return report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace fieldfuse::cli
