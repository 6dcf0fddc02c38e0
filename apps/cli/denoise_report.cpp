// SPDX-License-Identifier: Apache-2.0
// The JSON report of `fieldfuse denoise`: what ran, on what, how it converged and how it scored.
#include "denoise_report.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "fieldfuse/core.h"

namespace fieldfuse::cli {

std::string denoise_report_json(const DenoiseRecord& record) {
  using Json = nlohmann::ordered_json;  // keys in the order written, for readers
  const DenoiseOptions& options = *record.options;
  const SolverOutcome& outcome = *record.outcome;

  Json input;
  input["source"] = record.from_phantom ? "phantom" : "file";
  if (record.from_phantom) {
    input["phantom"] = {{"kind", "modified Shepp-Logan 3-D"},
                        {"size", options.phantom_size},
                        {"noise_sigma", options.noise_sigma},
                        {"seed", options.seed}};
  } else {
    input["path"] = options.input;
  }
  input["shape"] = record.shape;
  input["clean_reference"] =
      record.clean_source.empty() ? Json(nullptr) : Json(record.clean_source);

  Json report;
  report["fieldfuse_version"] = fieldfuse::build_info().version;
  report["command"] = "denoise";
  report["input"] = std::move(input);
  report["settings"] = {
      {"tv", tv_kind_name(options.tv)},
      {"lambda", options.lambda},
      {"eps", options.tv == TvKind::Isotropic ? Json(options.eps) : Json(nullptr)},
      {"max_iterations", options.iterations},
      {"tolerance", options.tolerance},
      {"device", record.device},
      {"intensity_offset", record.normalisation.offset},
      {"intensity_scale", record.normalisation.scale}};
  report["solver"] = {{"method", outcome.method},       {"iterations", outcome.iterations},
                      {"converged", outcome.converged}, {"objective_normalised", outcome.objective},
                      {"restarts", outcome.restarts},   {"distance_bound", outcome.distance_bound},
                      {"step_size", outcome.step_size}, {"duality_gap", outcome.gap}};
  if (record.metrics != nullptr) {
    const Metrics& m = *record.metrics;
    report["metrics"] = {{"data_range", m.data_range},
                         {"psnr_noisy", m.psnr_noisy},
                         {"psnr_denoised", m.psnr_denoised},
                         {"ssim_noisy", m.ssim_noisy},
                         {"ssim_denoised", m.ssim_denoised}};
  } else {
    report["metrics"] = nullptr;
  }
  const Timings& t = record.timings;
  report["timings_s"] = {{"load", t.load},
                         {"solve", t.solve},
                         {"metrics", t.metrics},
                         {"write", t.write},
                         {"total", t.total}};
  report["outputs"] = {{"volume", record.outputs.at(0)},
                       {"preview", record.outputs.at(1)},
                       {"report", record.outputs.at(2)}};
  // nlohmann writes NaN and infinities as null; `replace` turns invalid UTF-8 into U+FFFD instead
  // of throwing, so any path yields a valid report.
  return report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace fieldfuse::cli
