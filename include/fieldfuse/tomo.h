// SPDX-License-Identifier: Apache-2.0
// Tomographic reconstruction on a voxel grid (the `tomo` app family): tilt poses, SIRT and
// filtered back-projection, built on the `project` family's operator pair (fieldfuse/project.h).
//
// Geometry is the projector's (include/fieldfuse/project.h, specs/tomography.md): `volume
// [D, H, W]` fills the box [-1, 1]^3, `projections [n, Hd, Wd]` sit on the detector [-1, 1]^2
// (u along the width Wd, v along the height Hd), pose m is `rotations[m]` (R_m, applied as R·p)
// and optional `shifts[m]` = (s_u, s_v) in detector units. A is `project_forward`, Aᵀ is
// `backproject_forward`.
//
// Common to sirt and fbp:
// - devices: every tensor on the same device, CPU (OpenMP) or CUDA; CUDA work is enqueued on
//   `stream` and the host never synchronises it (except where a SirtProgress callback asks for the
//   residual, see there).
// - layout: inputs are read through their strides; `volume` must be contiguous (it is updated in
//   place element by element) and must not overlap an input.
// - workspace: caller-allocated, at least `*_workspace_size` bytes, aligned to 8 bytes, device
//   memory for CUDA tensors and host memory for CPU tensors; the library never allocates tensors
//   (cuFFT plans are the one exception, see fbp).
// - determinism: no atomics; every value is computed in an order fixed by the shapes, so a call
//   gives the same bits every time on the same device and thread count is irrelevant. CPU and
//   CUDA agree to rounding.
// - errors: fieldfuse::Error whose message starts with "sirt(): " or "fbp(): " and names the
//   argument, what was expected and what was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "fieldfuse/core.h"

namespace fieldfuse {

/// The pose of one projection of a tilt series: R = Rz(-z1)·Rx(tilt)·Rz(-z3), angles in degrees,
/// written row-major into out[9] (specs/tomography.md pose convention). Rx and Rz are the
/// right-handed rotations about x and z (Rx(φ) = [[1, 0, 0], [0, cos φ, -sin φ], [0, sin φ,
/// cos φ]]). Host function, double precision; any finite or non-finite angle is accepted (NaN in,
/// NaN out). z1 = z3 = 0 gives a tilt about the x axis, i.e. about the detector's u axis (detector
/// rows, along v, are then perpendicular to it), and the ray direction R·e_z = (0, -sin φ, cos φ).
void tilt_rotation(double tilt_degrees, double z1_degrees, double z3_degrees, double* out);

// ---------------------------------------------------------------------------------------------
// SIRT: x ← x + λ·C·Aᵀ·R·(b − A·x)
// ---------------------------------------------------------------------------------------------

struct SirtOptions {
  int iterations = 50;      ///< >= 0; 0 leaves `volume` unchanged.
  double relaxation = 1.0;  ///< λ in x ← x + λ·C·Aᵀ·R·(b − A·x); finite, in (0, 2).
  bool positivity = false;  ///< Clamp x at 0 after each update.
};

/// Called after each SIRT iteration with (iteration, 1-based; ‖b − A·x‖₂ / ‖b‖₂ of the estimate
/// before that iteration's update, or ‖b − A·x‖₂ itself when ‖b‖₂ = 0); return false to stop early.
/// When it is absent no residual is computed: no host synchronisation per iteration, the loop is
/// pure enqueue.
using SirtProgress = std::function<bool(int iteration, double relative_residual)>;

/// Bytes of scratch `sirt` needs for these shapes and dtype (row sums A·1 [n, Hd, Wd], column sums
/// Aᵀ·1 [D, H, W], a residual stack [n, Hd, Wd] and a back-projected update [D, H, W]; >= 1).
/// Reads only metadata (data pointers may be null).
std::size_t sirt_workspace_size(const TensorRef& projections, const TensorRef& volume);

/// SIRT (simultaneous iterative reconstruction) on the voxel grid with the `project` family's
/// operator A (Joseph's method): R = diag(1 / A·1), C = diag(1 / Aᵀ·1), each zero where the sum is
/// 0 (pixels whose ray misses the volume, voxels no ray reaches), so those entries never change.
///
/// projections b [n, Hd, Wd]; rotations [n, 3, 3]; shifts [n, 2] or absent (a default-constructed
/// TensorRef); `volume [D, H, W]` is the initial estimate on entry (zeros for a cold start) and the
/// result on exit. dtypes: float32 or float64, every tensor the same. With positivity, x is clamped
/// at 0 after every update (not before the first one). A NaN in b or the initial volume spreads
/// through A and Aᵀ to the voxels its rays reach. `progress` (optional) is called after every
/// iteration and may stop the loop; on CUDA, computing its residual synchronises `stream` once per
/// iteration.
void sirt(const TensorRef& projections, const TensorRef& rotations, const TensorRef& shifts,
          const SirtOptions& options, const TensorRef& volume, void* workspace,
          std::size_t workspace_bytes, Stream stream = {}, const SirtProgress& progress = {});

// ---------------------------------------------------------------------------------------------
// FBP: filtered back-projection
// ---------------------------------------------------------------------------------------------

/// The filter applied along each detector column: the Ram-Lak ramp (from its discrete spatial
/// kernel), or the ramp times a Shepp–Logan (sinc) or Hann window.
enum class FbpFilter : int32_t { Ramp, SheppLogan, Hann };

/// "ramp", "shepp-logan", "hann" -> FbpFilter; throws a Value error naming `filter` otherwise
/// (message prefix "fbp(): ").
FbpFilter fbp_filter_from_name(const std::string& name);

/// Bytes of scratch `fbp` needs (the filtered stack and the FFT buffers; >= 1). Reads only
/// metadata.
std::size_t fbp_workspace_size(const TensorRef& projections, const TensorRef& volume);

/// Filtered back-projection: each detector column (along v, the detector height, perpendicular to
/// the tilt axis in the spec's convention) is filtered with `filter` (zero-padded to a power of two
/// >= 2·Hd, FFT: cuFFT on CUDA, KissFFT on CPU), then back projected with `backproject_forward`
/// and weighted by each projection's angular interval (docs/tomo.md, FBP weighting), so that FBP of
/// complete, noiseless parallel-beam data reproduces the density (units: the volume's values, box
/// [-1, 1]^3).
///
/// projections [n, Hd, Wd]; rotations [n, 3, 3]; shifts [n, 2] or absent; volume [D, H, W]
/// (written, never read). float32 only (KissFFT from Debian is single precision). n = 0 gives a
/// zero volume. A NaN pixel makes its filtered column NaN, which back projection spreads to every
/// voxel that column's rays reach.
void fbp(const TensorRef& projections, const TensorRef& rotations, const TensorRef& shifts,
         FbpFilter filter, const TensorRef& volume, void* workspace, std::size_t workspace_bytes,
         Stream stream = {});

}  // namespace fieldfuse
