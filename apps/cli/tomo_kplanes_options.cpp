// SPDX-License-Identifier: Apache-2.0
// The K-Planes flags of `fieldfuse tomo` (--method kplanes): their table, the embedded run's
// settings and the checks across them.
#include "tomo_kplanes_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <limits>
#include <vector>

#include "cli_error.h"

namespace fieldfuse::cli {
namespace {

// Bounds that only catch typos; the library checks what it needs (hidden's multiple of 16, ...).
constexpr std::int64_t kMaxTilts = 64;
constexpr std::int64_t kMaxChannels = 256;
constexpr std::int64_t kMaxResolution = 8192;
constexpr std::int64_t kMaxLayers = 16;
constexpr std::int64_t kMaxRays = std::int64_t{1} << 24;
constexpr std::int64_t kMaxSteps = 100000000;
constexpr double kMaxEpochs = 1e6;
constexpr double kMaxWeight = 1e6;
constexpr double kMaxRate = 10.0;

// The embedded run (64^3, 41 tilts, 2 CPU cores): half the spec's rays and a fifth of its TV
// points bring a step to about 0.06 s, so 600 steps take about 37 s, and a 10x plane rate makes
// up for the short run: 36.3 dB / SSIM 0.95 (34.9 / 0.93 after 300 steps; 33.8 / 0.90 at a rate
// of 0.03 and about 28 dB at the spec's 1e-2; docs/tomo_cli.md has the table).
constexpr std::int64_t kEmbeddedIterations = 600;
constexpr std::int64_t kEmbeddedRays = 1024;
constexpr std::int64_t kEmbeddedTvPoints = 2000;
constexpr double kEmbeddedLrPlanes = 0.1;

// Every flag of the table: given with --method sirt or fbp, it is a usage error.
const char* const kKPlanesFlags[] = {"--tilts",
                                     "--channels",
                                     "--resolution",
                                     "--decoder",
                                     "--hidden",
                                     "--layers",
                                     "--rays",
                                     "--kplanes-iterations",
                                     "--epochs",
                                     "--tv-volume",
                                     "--tv-points",
                                     "--tv-plane",
                                     "--sparsity",
                                     "--lr-planes",
                                     "--lr-decoder",
                                     "--lr-rotations",
                                     "--lr-pose",
                                     "--no-pose-refinement",
                                     "--no-cuda-graph",
                                     "--checkpoint",
                                     "--checkpoint-every",
                                     "--resume"};

std::vector<std::int64_t> parse_resolutions(const std::string& flag, const std::string& text) {
  std::vector<std::int64_t> levels;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    levels.push_back(parse_integer(
        flag, text.substr(start, comma == std::string::npos ? std::string::npos : comma - start), 2,
        kMaxResolution));
    if (comma == std::string::npos) return levels;
    start = comma + 1;
  }
}

std::string embedded_default(const std::string& library, const std::string& embedded) {
  return library + "; embedded run " + embedded;
}

}  // namespace

FlagTable kplanes_flags(TomoOptions& options, const std::string& group) {
  fieldfuse::KPlanesReconOptions& k = options.kplanes;
  const fieldfuse::KPlanesReconOptions d;  // the library's defaults
  return {
      {"--tilts", "T", "K-Planes: field rotations (tilted plane triples)",
       std::to_string(d.num_tilts), group,
       [&k](const std::string& v) {
         k.num_tilts = static_cast<int>(parse_integer("--tilts", v, 1, kMaxTilts));
       }},
      {"--channels", "C", "K-Planes: channels per plane", std::to_string(d.channels), group,
       [&k](const std::string& v) {
         k.channels = static_cast<int>(parse_integer("--channels", v, 1, kMaxChannels));
       }},
      {"--resolution", "R[,R...]", "K-Planes: square plane size per level (several: multi-level)",
       "the detector's larger side", group,
       [&k](const std::string& v) { k.resolutions = parse_resolutions("--resolution", v); }},
      {"--decoder", "linear|mlp", "K-Planes: features to density by one Linear or a ReLU MLP",
       d.decoder, group,
       [&k](const std::string& v) {
         k.decoder = parse_choice("--decoder", v, {"linear", "mlp"});
       }},
      {"--hidden", "N", "K-Planes MLP width, a multiple of 16 in [16, 256]",
       std::to_string(d.hidden), group,
       [&k](const std::string& v) {
         k.hidden = static_cast<int>(parse_integer("--hidden", v, 16, 256));
         if (k.hidden % 16 != 0) {
           throw usage_error("--hidden must be a multiple of 16 in [16, 256], got " + v);
         }
       }},
      {"--layers", "N", "K-Planes MLP hidden layers", std::to_string(d.layers), group,
       [&k](const std::string& v) {
         k.layers = static_cast<int>(parse_integer("--layers", v, 1, kMaxLayers));
       }},
      {"--rays", "N", "K-Planes: detector pixels drawn per step",
       embedded_default(std::to_string(d.rays), std::to_string(kEmbeddedRays)), group,
       [&k](const std::string& v) { k.rays = parse_integer("--rays", v, 1, kMaxRays); }},
      {"--kplanes-iterations", "N", "K-Planes training steps (and the cosine decay's period)",
       embedded_default(std::to_string(d.iterations), std::to_string(kEmbeddedIterations)), group,
       [&k](const std::string& v) {
         k.iterations = parse_integer("--kplanes-iterations", v, 1, kMaxSteps);
       }},
      {"--epochs", "X",
       "K-Planes: steps = ceil(X * pixels of the stack / rays) instead of\n"
       "--kplanes-iterations",
       "", group,
       [&k](const std::string& v) {
         k.epochs = parse_number_in("--epochs", v, 0.0, kMaxEpochs, true);
       }},
      {"--tv-volume", "X", "K-Planes volume-TV weight", number_text(d.tv_volume), group,
       [&k](const std::string& v) {
         k.tv_volume = parse_number_in("--tv-volume", v, 0.0, kMaxWeight);
       }},
      {"--tv-points", "N", "K-Planes: most volume-TV tap points per step",
       embedded_default(std::to_string(d.tv_points), std::to_string(kEmbeddedTvPoints)), group,
       [&k](const std::string& v) { k.tv_points = parse_integer("--tv-points", v, 1, kMaxSteps); }},
      {"--tv-plane", "X", "K-Planes plane-TV weight", number_text(d.tv_plane), group,
       [&k](const std::string& v) {
         k.tv_plane = parse_number_in("--tv-plane", v, 0.0, kMaxWeight);
       }},
      {"--sparsity", "X", "K-Planes weight of the mean density", number_text(d.sparsity), group,
       [&k](const std::string& v) {
         k.sparsity = parse_number_in("--sparsity", v, 0.0, kMaxWeight);
       }},
      {"--lr-planes", "X", "K-Planes Adam rate of the planes",
       embedded_default(number_text(d.lr_planes), number_text(kEmbeddedLrPlanes)), group,
       [&k](const std::string& v) {
         k.lr_planes = parse_number_in("--lr-planes", v, 0.0, kMaxRate, true);
       }},
      {"--lr-decoder", "X", "K-Planes Adam rate of the decoder", number_text(d.lr_decoder), group,
       [&k](const std::string& v) {
         k.lr_decoder = parse_number_in("--lr-decoder", v, 0.0, kMaxRate, true);
       }},
      {"--lr-rotations", "X", "K-Planes Adam rate of the field rotations",
       number_text(d.lr_rotations), group,
       [&k](const std::string& v) {
         k.lr_rotations = parse_number_in("--lr-rotations", v, 0.0, kMaxRate, true);
       }},
      {"--lr-pose", "X", "K-Planes Adam rate of the poses (z1, z3 in degrees; shifts)",
       number_text(d.lr_pose), group,
       [&k](const std::string& v) {
         k.lr_pose = parse_number_in("--lr-pose", v, 0.0, kMaxRate, true);
       }},
      {"--no-pose-refinement", "", "K-Planes: keep every pose as given (no z1, z3, shifts)", "",
       group, [&k](const std::string&) { k.pose_refinement = false; }},
      {"--no-cuda-graph", "", "K-Planes on CUDA: launch every step eagerly", "", group,
       [&k](const std::string&) { k.cuda_graph = false; }},
      {"--checkpoint", "PATH",
       "K-Planes: save the training state here at the end (and every\n"
       "--checkpoint-every steps), atomically (PATH.tmp, then renamed)",
       "", group, [&options](const std::string& v) { options.checkpoint = v; }},
      {"--checkpoint-every", "N", "K-Planes: also save the checkpoint every N steps", "", group,
       [&options](const std::string& v) {
         options.checkpoint_every = parse_integer("--checkpoint-every", v, 1, kMaxSteps);
       }},
      {"--resume", "PATH",
       "K-Planes: continue from a checkpoint of the same run (options, stack\n"
       "shape and angles are checked)",
       "", group, [&options](const std::string& v) { options.resume = v; }},
  };
}

void finish_kplanes_options(const CLI::App& command, TomoOptions& options, bool from_file) {
  const bool runs_kplanes = std::find(options.methods.begin(), options.methods.end(),
                                      TomoMethod::KPlanes) != options.methods.end();
  for (const char* flag : kKPlanesFlags) {
    if (!runs_kplanes && command.count(flag) > 0) {
      throw usage_error(std::string(flag) + " applies only to --method kplanes");
    }
  }
  if (options.kplanes.decoder != "mlp") {
    for (const char* flag : {"--hidden", "--layers"}) {
      if (command.count(flag) > 0) throw usage_error(std::string(flag) + " needs --decoder mlp");
    }
  }
  if (command.count("--kplanes-iterations") > 0 && command.count("--epochs") > 0) {
    throw usage_error("give the K-Planes length once: --kplanes-iterations or --epochs, not both");
  }
  if (command.count("--checkpoint-every") > 0 && options.checkpoint.empty()) {
    throw usage_error("--checkpoint-every needs --checkpoint PATH");
  }
  options.kplanes.seed = options.seed;
  if (from_file) return;
  if (command.count("--rays") == 0) options.kplanes.rays = kEmbeddedRays;
  if (command.count("--kplanes-iterations") == 0 && command.count("--epochs") == 0) {
    options.kplanes.iterations = kEmbeddedIterations;
  }
  if (command.count("--tv-points") == 0) options.kplanes.tv_points = kEmbeddedTvPoints;
  if (command.count("--lr-planes") == 0) options.kplanes.lr_planes = kEmbeddedLrPlanes;
}

}  // namespace fieldfuse::cli
