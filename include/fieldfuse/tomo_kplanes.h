// SPDX-License-Identifier: Apache-2.0
// K-Planes tomography reconstruction (issue 14, method `kplanes`): a neural field trained on a
// tilt series with the `kplanes`, `render`, `mlp`, `tv` and `optim` families, on CPU or CUDA.
//
// This is the app layer, unlike the kernel families: a KPlanesReconstruction OWNS its memory
// (host vectors for CPU, cudaMalloc'd device buffers for CUDA, freed by its destructor), sized
// once at construction, so a training step allocates nothing and can be captured in a CUDA graph.
//
// The pipeline (specs/tomography.md; docs/tomo_kplanes.md has the details and every option):
// - the stack [n, H, W] is normalised by its 95th percentile (linear interpolation between order
//   statistics, as numpy.percentile);
// - each step draws `rays` detector pixels with a counter-based hash of (seed, step, ray), so CPU
//   and CUDA draw the same pixels; ray r belongs to projection r mod n (fixed slots, so the pose
//   gradients are fixed-order sums over a projection's rays);
// - pose R_m = Rz(−z1_m)·Rx(tilt_m)·Rz(−z3_m) (tilt_rotation's convention); pixel (i, j) at
//   (u, v) = (−1 + (2j+1)/W, −1 + (2i+1)/H) casts the ray o = R_m·(u − s_u, v − s_v, 0),
//   d = R_m·e_z, sampled through [−1, 1]³ with step ds (ray_box_samples_padded_forward);
// - field: tilted K-Planes (T learnable rotations from unit quaternions), decoder (one Linear, or
//   a ReLU MLP), density ρ = softplus(x − 1), zero at padding samples; pred = Σ ρ·δ per ray;
// - loss = mean (pred − target)² + tv_volume·mean sqrt(Σ_i ((ρ(q + h·e_i) − ρ(q))/h)²) over up to
//   `tv_points` sample points q (h = one finest-plane cell) + tv_plane·plane_tv (Mean norm) +
//   sparsity·mean ρ over the valid samples; each term only when its weight is > 0;
// - the gradient reaches the planes, decoder, field rotations and, with pose refinement, z1, z3
//   and the shift of every projection but the reference one (the tilt closest to 0°); one fused
//   Adam step (adam_step) with per-tensor learning rates, cosine decay and clipping.
// Determinism: with `deterministic` (off by default: 3.5× slower) two runs with the same inputs and
// seed give the same bits on a device; CPU and CUDA agree within fp32 summation-order chaos.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fieldfuse/core.h"

namespace fieldfuse {

/// Every hyper-parameter of the K-Planes reconstruction, with the spec's defaults.
struct KPlanesReconOptions {
  int num_tilts = 4;                 ///< T >= 1 field rotations
  int channels = 8;                  ///< C >= 1 channels per plane (every level)
  std::vector<int64_t> resolutions;  ///< square plane sizes per level; empty: {max(H, W)}
  std::string decoder = "linear";    ///< "linear" or "mlp"
  int hidden = 64;                   ///< MLP width, a multiple of 16 in [16, 256] ("mlp" only)
  int layers = 2;                    ///< hidden MLP layers >= 1 ("mlp" only)
  int64_t rays = 2048;               ///< rays per step, >= 1
  double ds = 0.0;                   ///< sample step; 0: 2 / max(H, W)
  double tv_volume = 1e-3;           ///< volume-TV weight, >= 0
  int64_t tv_points = 10000;         ///< most volume-TV tap points per step, >= 1
  double tv_plane = 1e-3;            ///< plane-TV weight, >= 0
  double sparsity = 0.0;             ///< weight of mean ρ, >= 0
  double lr_planes = 1e-2;
  double lr_decoder = 1e-3;
  double lr_rotations = 1e-2;
  double lr_pose = 1e-2;
  bool cosine_decay = true;    ///< cosine decay of every rate over `iterations`
  double max_grad_norm = 1.0;  ///< global gradient-norm clip; 0: none
  bool pose_refinement = true;
  int64_t iterations = 300;      ///< training steps (the cosine period), >= 1
  double epochs = 0.0;           ///< > 0: iterations = ceil(epochs·n·H·W / rays) instead
  uint64_t seed = 0;             ///< pixel draws, tap points and initial parameters
  bool deterministic = false;    ///< bitwise-reproducible CUDA plane gradients (CPU always is)
  bool cuda_graph = true;        ///< CUDA: replay the step as a graph after one warm-up step
  DType dtype = DType::Float32;  ///< parameters and compute: float32 or float64
};

/// The options as (name, value) text pairs, in a fixed order (reports, checkpoints).
std::vector<std::pair<std::string, std::string>> describe(const KPlanesReconOptions& options);

/// Per-projection pose, as the app reports it (degrees; shifts in detector units of [−1, 1]).
struct KPlanesPose {
  double tilt = 0.0, z1 = 0.0, z3 = 0.0, shift_u = 0.0, shift_v = 0.0;
};

class KPlanesReconstruction {
 public:
  /// `stack [n, H, W]` float32 or float64, CPU or CUDA, any strides (copied and normalised);
  /// `angles_degrees` n finite tilt angles (host array); `device` where the training runs (the
  /// stack may be elsewhere); CUDA work goes on `stream`. Errors start with
  /// "kplanes_reconstruct(): " and name the argument or option.
  KPlanesReconstruction(const TensorRef& stack, const double* angles_degrees, int64_t num_angles,
                        const KPlanesReconOptions& options, Device device, Stream stream = {});
  ~KPlanesReconstruction();
  KPlanesReconstruction(const KPlanesReconstruction&) = delete;
  KPlanesReconstruction& operator=(const KPlanesReconstruction&) = delete;

  /// One training iteration, enqueued on the stream (no host synchronisation on CUDA).
  void step();
  /// Called after each iteration with (1-based iteration, its loss); reading the loss syncs.
  using Progress = std::function<void(int64_t iteration, double loss)>;
  /// `iterations` steps (negative: until options.iterations steps are done in total).
  void run(int64_t iterations = -1, const Progress& progress = {});
  /// Loss and gradients at the current parameters and step's draw, with no update: the loss.
  double evaluate();

  /// The loss of the last step (or evaluate), before its update; synchronises the stream.
  double loss() const;
  /// Steps done (the optimiser's counter; synchronises).
  int64_t steps_done() const;
  int64_t iterations() const;  ///< options.iterations, or the count epochs give
  /// The 95th percentile the stack was divided by.
  double normalisation() const;
  const KPlanesReconOptions& options() const;
  int64_t reference_projection() const;
  std::vector<KPlanesPose> poses() const;

  /// The field's density on the voxel centres of `volume [D, H, W]` (float32 or float64, any
  /// device, contiguous), evaluated `chunk_points` voxels at a time (the project family's
  /// convention: voxel (k, i, j) at (−1 + (2j+1)/W, −1 + (2i+1)/H, −1 + (2k+1)/D)), in the
  /// normalised units of the stack.
  void export_volume(const TensorRef& volume, int64_t chunk_points = 1 << 18);

  /// Binary checkpoint (Note [checkpoint format] in src/tomo/kplanes_recon_checkpoint.cpp):
  /// options, every parameter and Adam moment, the step. Written to `path + ".tmp"` then renamed.
  void save_checkpoint(const std::string& path) const;
  /// Restores a checkpoint of a reconstruction with the same options, stack shape and angles.
  void load_checkpoint(const std::string& path);

  /// Parameter tensors by name ("planes.0", "decoder.weight.0", "decoder.bias.0", "rotations",
  /// "z1", "z3", "shifts"), in Adam's order; views of owned memory on the training device.
  std::vector<std::string> parameter_names() const;
  TensorRef parameter(const std::string& name) const;
  TensorRef gradient(const std::string& name) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fieldfuse
