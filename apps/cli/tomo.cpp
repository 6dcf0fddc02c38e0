// SPDX-License-Identifier: Apache-2.0
// The `fieldfuse tomo` subcommand: load a tilt series (or make the embedded phantom's), reconstruct
// it with each chosen method, score and save the results.
//
// Note [tomo frames and units]
// The projector tilts about its detector's u axis, the image width (x). IMOD's aligned stacks have
// the tilt axis vertical, along the image height (y): with --tilt-axis y every image is transposed
// on input, and the volume's last two axes are swapped back on output, so the output [D, H, W]
// always has x = image x, y = image y, z = the beam at zero tilt. The projector integrates in box
// lengths (the box [-1, 1]^3 spans Hd pixels along y and z); the app gives the projections in pixel
// lengths instead (a projection is the sum of the voxels along its ray, as in IMOD and ASTRA), so
// the volume is the box-unit result times 2/Hd, and times the normalisation divisor (the stack's
// 95th percentile, specs/tomography.md), which puts it in the input's units again.
#include "tomo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "atomic_outputs.h"
#include "cli_error.h"
#include "fieldfuse/core.h"
#include "fieldfuse/metrics.h"
#include "fieldfuse/tomo_phantom.h"
#include "file_io.h"
#include "mrc.h"
#include "npy.h"
#include "phantom.h"
#include "preview.h"
#include "tiff_writer.h"
#include "tilt_angles.h"
#include "tomo_methods.h"
#include "tomo_report.h"
#include "volume_io.h"

namespace fieldfuse::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The truth is the mean of 3^3 points per voxel, the data the mean of 2^2 rays per pixel: edges
// become partial volumes, as a real detector and specimen make them.
constexpr int kTruthSupersample = 3;
constexpr int kProjectionSupersample = 2;
constexpr double kNormalisationQuantile = 0.95;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// [D, H, W] -> [D, W, H]: swaps the two image axes of a stack or a volume.
Volume transposed_in_plane(const Volume& in) {
  Volume out(in.depth, in.width, in.height);
  for (std::int64_t d = 0; d < in.depth; ++d) {
    for (std::int64_t h = 0; h < in.height; ++h) {
      for (std::int64_t w = 0; w < in.width; ++w) {
        out.voxels[static_cast<std::size_t>((d * in.width + w) * in.height + h)] = in.at(d, h, w);
      }
    }
  }
  return out;
}

// What the run works on, in the projector's frame (Note [tomo frames and units]).
struct Problem {
  TiltSeries series;        // normalised and in pixel-length units
  bool transposed = false;  // --tilt-axis y
  bool has_truth = false;
  Volume truth;  // output frame
  std::vector<std::int64_t> stack_shape;
  std::string format;
  std::array<double, 3> voxel_size{};
  double noise_sigma = 0.0;
  double normalisation = 1.0;
};

Problem phantom_problem(const TomoOptions& options) {
  Problem p;
  const std::int64_t n = options.phantom_size;
  p.series.angles = parse_angle_range(options.angles, "--angles");
  set_tilt_rotations(p.series);
  std::vector<double> rotations = tilt_rotations(p.series.angles);
  const auto count = static_cast<std::int64_t>(p.series.angles.size());
  p.series.stack = Volume(count, n, n);
  fieldfuse::tomo_phantom_projections(
      TensorRef::contiguous(rotations.data(), DType::Float64, {}, {count, 3, 3}),
      host_view(p.series.stack), kProjectionSupersample);
  // Box lengths to pixel lengths: the box's 2 units span n pixels.
  float peak = 0.0f;
  for (float& v : p.series.stack.voxels) {
    v *= static_cast<float>(n) / 2.0f;
    peak = std::max(peak, v);
  }
  p.noise_sigma = options.noise * peak;
  add_gaussian_noise(p.series.stack, p.noise_sigma, options.seed);
  p.stack_shape = p.series.stack.shape();
  p.format = "phantom";
  p.has_truth = true;
  return p;
}

Problem file_problem(const TomoOptions& options) {
  Problem p;
  VolumeFileInfo info;
  Volume stack = load_volume(options.input, "--input", kTiltStackRole, &info);
  p.stack_shape = stack.shape();
  p.format = info.format;
  p.voxel_size = info.voxel_size;
  const std::string stack_source = "--input '" + options.input + "'";
  if (!options.tlt.empty()) {
    p.series.angles = read_tilt_file(options.tlt, "--tlt");
    check_angle_count(p.series.angles.size(), stack.depth, "--tlt '" + options.tlt + "'",
                      stack_source);
  } else {
    p.series.angles = parse_angle_range(options.angles, "--angles");
    check_angle_count(p.series.angles.size(), stack.depth, "--angles " + options.angles,
                      stack_source);
  }
  set_tilt_rotations(p.series);
  p.transposed = options.tilt_axis == 'y';
  p.series.stack = p.transposed ? transposed_in_plane(stack) : std::move(stack);
  return p;
}

// Divides the stack by its 95th percentile (or, for data mostly at or below 0, its largest
// magnitude), so that the solver's numbers are near 1 whatever the detector's units.
void normalise(Problem& p) {
  std::vector<float>& values = p.series.stack.voxels;
  double divisor = quantile_range(values, kNormalisationQuantile, kNormalisationQuantile).high;
  if (!(divisor > 0.0)) {
    const IntensityRange range = min_max(values);
    divisor = std::max(std::abs(range.low), std::abs(range.high));
  }
  if (!(divisor > 0.0)) divisor = 1.0;  // an all-zero stack
  p.normalisation = divisor;
  for (float& v : values) v = static_cast<float>(v / divisor);
}

// The output shape [D, H, W] and the internal one (the projector's frame).
struct Shapes {
  std::array<std::int64_t, 3> output{};
  std::array<std::int64_t, 3> internal{};
  std::int64_t first_slice = 0;  // --thickness: the kept z-slices start here
  std::int64_t slices = 0;
};

Shapes shapes_for(const TomoOptions& options, const Problem& p) {
  const Volume& s = p.series.stack;  // projector frame: Hd across the axis, Wd along it
  Shapes shapes;
  shapes.internal = {s.height, s.height, s.width};
  if (options.volume_shape[0] > 0) {
    const auto& v = options.volume_shape;
    shapes.internal = p.transposed ? std::array<std::int64_t, 3>{v[0], v[2], v[1]} : v;
  }
  const std::int64_t depth = shapes.internal[0];
  shapes.slices = options.thickness > 0 ? options.thickness : depth;
  if (shapes.slices > depth) {
    throw usage_error("--thickness " + std::to_string(options.thickness) +
                      " exceeds the volume's depth D = " + std::to_string(depth) +
                      " (the beam-direction extent equals the detector's extent across the " +
                      "tilt axis; see --volume-shape)");
  }
  shapes.first_slice = (depth - shapes.slices) / 2;
  const auto& i = shapes.internal;
  shapes.output = p.transposed ? std::array<std::int64_t, 3>{shapes.slices, i[2], i[1]}
                               : std::array<std::int64_t, 3>{shapes.slices, i[1], i[2]};
  return shapes;
}

// A method's box-unit volume in the output frame and units (Note [tomo frames and units]).
Volume to_output(const Volume& internal, const Problem& p, const Shapes& shapes) {
  const double scale = 2.0 / static_cast<double>(p.series.stack.height) * p.normalisation;
  Volume kept(shapes.slices, internal.height, internal.width);
  const std::int64_t plane = internal.height * internal.width;
  for (std::int64_t i = 0; i < kept.numel(); ++i) {
    kept.voxels[static_cast<std::size_t>(i)] = static_cast<float>(
        internal.voxels[static_cast<std::size_t>(shapes.first_slice * plane + i)] * scale);
  }
  return p.transposed ? transposed_in_plane(kept) : kept;
}

double truth_range(const Volume& truth) {
  const double span = min_max(truth.voxels).span();
  return span > 0.0 ? span : 1.0;
}

TomoScores score(const Volume& estimate, const Volume& truth, double range) {
  TomoScores s;
  s.psnr = fieldfuse::psnr(host_view(estimate), host_view(truth), range);
  s.ssim = fieldfuse::ssim_3d(host_view(estimate), host_view(truth), range);
  for (int axis = 0; axis < 3; ++axis) {
    s.axis_error[axis] = fieldfuse::profile_error(host_view(estimate), host_view(truth), axis);
  }
  return s;
}

// The plain back projection at the scale that fits the truth best (least squares): the most
// favourable reading of a baseline whose own scale is arbitrary.
Volume best_scaled(Volume volume, const Volume& truth) {
  double cross = 0.0, power = 0.0;
  for (std::size_t i = 0; i < volume.voxels.size(); ++i) {
    cross += static_cast<double>(volume.voxels[i]) * truth.voxels[i];
    power += static_cast<double>(volume.voxels[i]) * volume.voxels[i];
  }
  const double alpha = power > 0.0 ? cross / power : 0.0;
  for (float& v : volume.voxels) v = static_cast<float>(v * alpha);
  return volume;
}

MrcWriteInfo volume_mrc_info(const Problem& p, const Shapes& shapes, const std::string& what) {
  MrcWriteInfo info;
  // Output axes x, y, z span the image's width and height and, along z, the image extent across
  // the tilt axis; a voxel is that extent over the voxel count, in the input's pixels.
  const double pixel = p.voxel_size[0] > 0.0 ? p.voxel_size[0] : 0.0;
  if (pixel > 0.0) {
    const std::int64_t image_height = p.stack_shape[1], image_width = p.stack_shape[2];
    const std::int64_t across = p.transposed ? image_width : image_height;
    const std::int64_t depth = shapes.internal[0];
    info.voxel_size = {pixel * image_width / shapes.output[2],
                       pixel * image_height / shapes.output[1], pixel * across / depth};
  }
  info.label = "fieldfuse " + fieldfuse::build_info().version + " tomo " + what;
  return info;
}

void add_volume_output(AtomicOutputs& outputs, const std::string& path, const Volume& volume,
                       const MrcWriteInfo& info) {
  const std::string extension = lowercase_extension(path);
  if (extension == ".npy") {
    outputs.add(path, [&volume](OutputStream& out) {
      write_npy_float32(out, volume.shape(), volume.voxels.data());
    });
  } else if (extension == ".tif" || extension == ".tiff") {
    outputs.add(path, [&volume](OutputStream& out) {
      const std::vector<std::uint8_t> tiff =
          encode_tiff_float32(volume.depth, volume.height, volume.width, volume.voxels.data());
      out.write(tiff.data(), tiff.size());
    });
  } else {
    outputs.add(path, [&volume, info](OutputStream& out) {
      write_mrc_float32(out, volume.depth, volume.height, volume.width, volume.voxels.data(), info);
    });
  }
}

void print_progress(TomoMethod method, const IterationRecord& record, double psnr_db) {
  const bool kplanes = method == TomoMethod::KPlanes;
  std::printf("  %s %s %5lld  %s %.4e  %7.1f ms/%s", tomo_method_name(method),
              kplanes ? "step" : "iter", static_cast<long long>(record.iteration),
              kplanes ? "loss" : "residual", record.residual, 1e3 * record.seconds,
              kplanes ? "step" : "iter");
  if (!std::isnan(psnr_db)) std::printf("  PSNR %.2f dB", psnr_db);
  std::printf("\n");
  std::fflush(stdout);
}

void print_table(const TomoRecord& record) {
  std::printf("\n%-22s %9s %7s   %s\n", "method", "PSNR dB", "SSIM",
              "profile error z / y / x (z: the missing wedge)");
  const auto row = [](const std::string& name, const TomoScores& s) {
    std::printf("%-22s %9.2f %7.4f   %.3f / %.3f / %.3f\n", name.c_str(), s.psnr, s.ssim,
                s.axis_error[0], s.axis_error[1], s.axis_error[2]);
  };
  for (const TomoMethodRecord& m : record.methods) {
    if (m.scored) row(tomo_method_name(m.method), m.scores);
  }
  if (record.has_baseline) row("backprojection (A^T b)", record.baseline);
}

}  // namespace

int run_tomo(const TomoOptions& options) {
  const Clock::time_point start = Clock::now();
  const bool from_phantom = options.input.empty();
  if (!options.output.empty()) check_output_directory("--output", options.output);
  if (!options.report.empty()) check_output_directory("--report", options.report);
  std::vector<std::pair<std::string, std::string>> planned;  // (flag, path) of every output
  if (!options.output.empty()) planned.emplace_back("--output", options.output);
  if (!options.report.empty()) planned.emplace_back("--report", options.report);
  if (!options.checkpoint.empty()) {
    check_output_directory("--checkpoint", options.checkpoint);
    planned.emplace_back("--checkpoint", options.checkpoint);
  }
  const auto in_dir = [](const std::string& dir, const std::string& name) {
    return (std::filesystem::path(dir) / name).string();
  };
  for (const TomoMethod method : options.methods) {
    const std::string name = tomo_method_name(method);
    if (!options.output_dir.empty())
      planned.emplace_back("--output-dir", in_dir(options.output_dir, name + ".mrc"));
    if (!options.png_dir.empty())
      planned.emplace_back("--png-dir", in_dir(options.png_dir, name + ".png"));
  }
  if (!options.output_dir.empty())
    planned.emplace_back("--output-dir", in_dir(options.output_dir, "truth.mrc"));
  refuse_outputs_that_are_inputs(
      planned, {{"--input", options.input}, {"--tlt", options.tlt}, {"--truth", options.truth}});

  Clock::time_point phase = Clock::now();
  Problem problem = from_phantom ? phantom_problem(options) : file_problem(options);
  normalise(problem);
  const Shapes shapes = shapes_for(options, problem);
  if (from_phantom) {
    problem.truth = Volume(shapes.internal[0], shapes.internal[1], shapes.internal[2]);
    fieldfuse::tomo_phantom_volume(host_view(problem.truth), kTruthSupersample);
    Volume kept(shapes.slices, shapes.internal[1], shapes.internal[2]);
    const std::int64_t plane = kept.height * kept.width;
    std::copy_n(problem.truth.voxels.begin() + shapes.first_slice * plane, kept.numel(),
                kept.voxels.begin());
    problem.truth = std::move(kept);
  } else if (!options.truth.empty()) {
    problem.truth = load_volume(options.truth, "--truth");
    if (problem.truth.shape() !=
        std::vector<std::int64_t>(shapes.output.begin(), shapes.output.end())) {
      throw input_error("--truth '" + options.truth + "': shape " + problem.truth.shape_str() +
                        " does not match the output volume's [" + std::to_string(shapes.output[0]) +
                        ", " + std::to_string(shapes.output[1]) + ", " +
                        std::to_string(shapes.output[2]) + "]");
    }
    problem.has_truth = true;
  }
  const double load_seconds = seconds_since(phase);
  const double range = problem.has_truth ? truth_range(problem.truth) : 0.0;

  Backend backend = Backend::create(options.device);
  const Volume& s = problem.series.stack;
  std::printf(
      "fieldfuse tomo: %s, %lld projections of %lldx%lld, tilts %.1f..%.1f deg, volume "
      "[%lld, %lld, %lld], on %s\n",
      from_phantom ? "embedded phantom" : ("'" + options.input + "'").c_str(),
      static_cast<long long>(s.depth), static_cast<long long>(problem.stack_shape[2]),
      static_cast<long long>(problem.stack_shape[1]),
      *std::min_element(problem.series.angles.begin(), problem.series.angles.end()),
      *std::max_element(problem.series.angles.begin(), problem.series.angles.end()),
      static_cast<long long>(shapes.output[0]), static_cast<long long>(shapes.output[1]),
      static_cast<long long>(shapes.output[2]), backend.description().c_str());
  std::fflush(stdout);

  TomoRecord record;
  record.options = &options;
  record.from_phantom = from_phantom;
  record.stack_shape = problem.stack_shape;
  record.angles = problem.series.angles;
  record.input_format = problem.format;
  record.input_voxel_size = problem.voxel_size;
  record.noise_sigma = problem.noise_sigma;
  record.normalisation = problem.normalisation;
  record.volume_shape = shapes.output;
  record.device = backend.description();
  record.data_range = range;

  std::vector<MethodResult> results(options.methods.size());
  std::vector<Volume> volumes(options.methods.size());
  for (std::size_t k = 0; k < options.methods.size(); ++k) {
    const TomoMethod method = options.methods[k];
    MethodSettings settings;
    settings.method = method;
    settings.iterations = options.iterations;
    settings.relaxation = options.relaxation;
    settings.positivity = options.positivity;
    settings.filter = options.filter;
    settings.kplanes = options.kplanes;
    settings.checkpoint = options.checkpoint;
    settings.checkpoint_every = options.checkpoint_every;
    settings.resume = options.resume;
    settings.progress_every = options.quiet ? 0 : options.progress_every;
    settings.progress_needs_estimate = problem.has_truth;
    results[k] = run_method(
        backend, problem.series, shapes.internal, settings,
        [&](const IterationRecord& it, const Volume& estimate) {
          const double db = problem.has_truth
                                ? fieldfuse::psnr(host_view(to_output(estimate, problem, shapes)),
                                                  host_view(problem.truth), range)
                                : std::nan("");
          print_progress(method, it, db);
        });
    volumes[k] = to_output(results[k].volume, problem, shapes);
    TomoMethodRecord m;
    m.method = method;
    m.result = &results[k];
    if (problem.has_truth) {
      m.scored = true;
      m.scores = score(volumes[k], problem.truth, range);
    }
    if (!options.output.empty()) m.output = options.output;
    if (!options.output_dir.empty())
      m.output = in_dir(options.output_dir, std::string(tomo_method_name(method)) + ".mrc");
    std::printf("%s: %.2f s", tomo_method_name(method), results[k].seconds);
    if (m.scored) std::printf(", PSNR %.2f dB, SSIM %.4f", m.scores.psnr, m.scores.ssim);
    std::printf("\n");
    std::fflush(stdout);
    record.methods.push_back(m);
  }
  if (from_phantom) {
    const Volume baseline = best_scaled(
        to_output(plain_backprojection(backend, problem.series, shapes.internal), problem, shapes),
        problem.truth);
    record.has_baseline = true;
    record.baseline = score(baseline, problem.truth, range);
  }

  // Every output lands together or not at all (Note [atomic outputs]).
  phase = Clock::now();
  AtomicOutputs outputs;
  const std::string method_names = [&] {
    std::string names;
    for (const TomoMethod m : options.methods)
      names += (names.empty() ? "" : ",") + std::string(tomo_method_name(m));
    return names;
  }();
  if (!options.output.empty()) {
    add_volume_output(outputs, options.output, volumes.front(),
                      volume_mrc_info(problem, shapes, method_names));
  }
  std::vector<std::vector<std::uint8_t>> pngs;
  pngs.reserve(options.methods.size());
  for (std::size_t k = 0; k < options.methods.size(); ++k) {
    const std::string name = tomo_method_name(options.methods[k]);
    if (!options.output_dir.empty()) {
      add_volume_output(outputs, in_dir(options.output_dir, name + ".mrc"), volumes[k],
                        volume_mrc_info(problem, shapes, name));
    }
    if (!options.png_dir.empty()) {
      std::vector<const Volume*> rows = {&volumes[k]};
      if (problem.has_truth) rows.push_back(&problem.truth);
      const IntensityRange window =
          problem.has_truth ? min_max(problem.truth.voxels) : min_max(volumes[k].voxels);
      pngs.push_back(encode_slice_preview(rows, window));
      const std::vector<std::uint8_t>& png = pngs.back();
      outputs.add(in_dir(options.png_dir, name + ".png"),
                  [&png](OutputStream& out) { out.write(png.data(), png.size()); });
    }
  }
  if (!options.output_dir.empty()) {
    add_volume_output(outputs, in_dir(options.output_dir, "truth.mrc"), problem.truth,
                      volume_mrc_info(problem, shapes, "phantom truth"));
  }
  record.load_seconds = load_seconds;
  record.outputs = outputs.paths();
  if (!options.report.empty()) {
    record.outputs.push_back(options.report);
    // Written last, so its total covers the others.
    outputs.add(options.report, [&](OutputStream& out) {
      record.total_seconds = seconds_since(start);
      const std::string json = tomo_report_json(record);
      out.write(json.data(), json.size());
    });
  }
  for (const std::string& dir : {options.output_dir, options.png_dir}) {
    std::error_code error;
    if (!dir.empty() && !std::filesystem::create_directories(dir, error) && error) {
      throw runtime_error("cannot create directory '" + dir + "': " + error.message());
    }
  }
  outputs.commit();

  if (problem.has_truth) print_table(record);
  if (!outputs.paths().empty()) {
    std::printf("\nwrote");
    for (const std::string& path : outputs.paths()) std::printf(" %s", path.c_str());
    std::printf(" (total %.2f s)\n", seconds_since(start));
  }
  return 0;
}

}  // namespace fieldfuse::cli
