// SPDX-License-Identifier: Apache-2.0
// Microscope optics for quantitative phase imaging from a defocus stack (the `optics` family,
// specs/optics.md): the thin- and thick-object transfer functions, the exact Tikhonov inverse and
// its adjoint, sharpness losses, and a batched per-tile optimiser of focus and illumination tilt.
//
// Conventions (specs/optics.md):
// - Fourier grids are unshifted (DC at [0, 0]); frequencies are fftfreq(N, pixel_size), so lengths
//   (pixel sizes, wavelength, z positions) share one unit, e.g. micrometres.
// - complex tensors are Complex64 / Complex128 (interleaved pairs); a real tensor's complex
//   partner has the matching precision (float32 <-> complex64, float64 <-> complex128).
// - FFTs: cuFFT on CUDA, Eigen's FFT (header-only, MPL-2.0) on the CPU in float and double; the
//   forward transform is unnormalised and the inverse divides by the number of points (numpy's and
//   PyTorch's "backward" norm).
// - devices: every tensor of a call on the same device; CUDA work is enqueued on `stream` and the
//   host never synchronises it (cuFFT plans are made per call; TileOptimizer keeps its own).
// - workspace: caller-allocated, at least `*_workspace_size` bytes, aligned to 16 bytes, device
//   memory for CUDA tensors and host memory for CPU tensors.
// - determinism: no atomics; CPU results do not depend on the thread count.
// - errors: fieldfuse::Error whose message starts with the op's name ("tikhonov_inverse(): ") and
//   names the argument, what was expected and what was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "fieldfuse/core.h"

namespace fieldfuse {

/// The microscope, shared by every tile of a call.
struct MicroscopeSettings {
  double pixel_size = 0.0;             ///< transverse object-space pixel size (> 0)
  double wavelength = 0.0;             ///< vacuum illumination wavelength λ (> 0)
  double index_medium = 1.0;           ///< refractive index n of the medium (> 0)
  double na_illumination = 0.0;        ///< NAi, >= 0 (the thin model clamps NAi >= NAd to 0.9·NAd)
  double na_detection = 0.0;           ///< NAd, > 0 and < n
  double pupil_steepness = 1e4;        ///< s in P(f) = σ(s·(NAd/λ − |f|)); 1e4 nearly binary
  bool invert_phase_contrast = false;  ///< negates z (thin) or flips the z list (thick)
};

/// Nyquist upsampling factor of the thin model's transverse grid: ceil(pixel_size /
/// (λ / (2·(NAd + NAi)))) with the unclamped NAi, as waveorder computes it. The transfer functions
/// are built on the grid [f·Y, f·X] with pixel size pixel_size / f and cropped to their central
/// [Y, X] frequencies.
int thin_upsampling_factor(const MicroscopeSettings& settings);

// ---------------------------------------------------------------------------------------------
// Thin-object (2-D to 3-D) transfer functions
// ---------------------------------------------------------------------------------------------

/// The per-tile inputs of the thin transfer functions; all on the outputs' device, of their real
/// dtype (float32 for complex64 outputs, float64 for complex128), read through their strides.
struct ThinTransferInputs {
  TensorRef z_positions;  ///< [B, Z] defocus distance of each slice of each tile
  TensorRef zenith;       ///< [B] illumination tilt θ (radians)
  TensorRef azimuth;      ///< [B] illumination tilt φ (radians)
};

/// Gradients of a real loss with respect to the thin inputs and the two NAs (outputs; any may be
/// absent, i.e. default-constructed, and is then not computed). Contiguous, the inputs' dtype.
struct ThinTransferGrads {
  TensorRef z_positions;      ///< [B, Z]
  TensorRef zenith;           ///< [B]
  TensorRef azimuth;          ///< [B]
  TensorRef na_illumination;  ///< [B]: tile b's share; the NA's gradient is their sum
  TensorRef na_detection;     ///< [B]: likewise
};

/// Bytes of scratch `thin_transfer_functions` needs for B tiles of Z slices of [Y, X] (>= 1).
std::size_t thin_transfer_functions_workspace_size(const MicroscopeSettings& settings, int64_t B,
                                                   int64_t Z, int64_t Y, int64_t X, DType dtype);

/// The weak-object transfer functions of absorption and phase for each tile and slice (spec "thin
/// object"): D = P²·exp(i2πz·ob), S the tilted illumination pupil, Â = FFT2[S·D], B̂ = FFT2[D],
/// H1 = IFFT2[conj(Â)·B̂], H2(k) = conj(H1(−k)), I0 = Σ S·|D|², Hu = (H1 + H2)/I0,
/// Hp = i·(H1 − H2)/I0, on the upsampled grid and cropped to [Y, X]. Outputs `absorption_tf` and
/// `phase_tf` [B, Z, Y, X], complex, contiguous.
void thin_transfer_functions(const MicroscopeSettings& settings, const ThinTransferInputs& inputs,
                             const TensorRef& absorption_tf, const TensorRef& phase_tf,
                             void* workspace, std::size_t workspace_bytes, Stream stream = {});

/// Bytes of scratch `thin_transfer_functions_backward` needs (>= 1).
std::size_t thin_transfer_functions_backward_workspace_size(const MicroscopeSettings& settings,
                                                            int64_t B, int64_t Z, int64_t Y,
                                                            int64_t X, DType dtype);

/// Vector-Jacobian product of `thin_transfer_functions`: given the gradients of a real loss with
/// respect to the outputs (PyTorch's convention for complex tensors: ∂L/∂Re + i·∂L/∂Im),
/// writes those with respect to the inputs, exactly (forward-mode derivatives through the FFTs,
/// contracted with the output gradients).
void thin_transfer_functions_backward(const MicroscopeSettings& settings,
                                      const ThinTransferInputs& inputs,
                                      const TensorRef& grad_absorption_tf,
                                      const TensorRef& grad_phase_tf,
                                      const ThinTransferGrads& grads, void* workspace,
                                      std::size_t workspace_bytes, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// The thick (3-D) model's shared optics
// ---------------------------------------------------------------------------------------------

/// The thick model's geometry: a [Z, Y, X] stack with z spacing `z_pixel_size`, padded by
/// `z_padding` slices at each end.
struct ThickGeometry {
  int64_t Z = 0, Y = 0, X = 0;
  double z_pixel_size = 0.0;
  int64_t z_padding = 0;
  double zenith = 0.0, azimuth = 0.0;  ///< illumination tilt (radians)
};

/// The spec's shared optics on a [Zt, Y, X] grid (Zt = Z + 2·z_padding, pixel sizes as given,
/// no upsampling): z list ifftshift((k − Zt/2)·Δz) (flipped when invert_phase_contrast), detection
/// pupil P [Y, X] (real), propagation kernel P·exp(i2πz·ob) [Zt, Y, X] and Green's function
/// −i/(4π)·P·exp(i2πz·ob)/(ob + (1 − P) + 1e−15) [Zt, Y, X] (z signed), all written by one fused
/// kernel. Outputs contiguous; pupil real, the two kernels complex of the matching precision.
void shared_optics_3d(const MicroscopeSettings& settings, const ThickGeometry& geometry,
                      const TensorRef& detection_pupil, const TensorRef& propagation_kernel,
                      const TensorRef& greens_function, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// The thick (3-D) model
// ---------------------------------------------------------------------------------------------

/// Bytes of scratch `thick_transfer_function` needs (>= 1): two complex stacks of the upsampled
/// grid [Z·fz + 2·z_padding, Y·f, X·f] and the direct intensity. Validates the settings and the
/// geometry as `thick_transfer_function` does; dtype is the real dtype (float32 or float64).
std::size_t thick_transfer_function_workspace_size(const MicroscopeSettings& settings,
                                                   const ThickGeometry& geometry, DType dtype);

/// The 3-D weak-object transfer functions of the real and imaginary scattering potential
/// (waveorder 3.0.2 phase_thick_3d.calculate_transfer_function, one scalar tilt):
/// - Nyquist upsampling: f = ceil(pixel_size / (λ/(2·(NAd + NAi)))) in y, x and
///   fz = ceil(z_pixel_size / (1/(2·(n/λ − sqrt((n/λ)² − (NAd/λ)²))))) in z; the grid is
///   [Zu, Y·f, X·f] with Zu = Z·fz + 2·z_padding (the padding is not upsampled), pixel sizes
///   pixel_size/f and Δz_up = z_pixel_size/fz;
/// - on it, the shared optics of `shared_optics_3d` (P, Hz, signed-z G) and the tilted
///   illumination pupil S (NAi as given: the thick model does not clamp it), SPHz = S·P·Hz,
///   PG = P·G, H1 = FFT_z[w·IFFT2[conj(FFT2 SPHz)·FFT2 PG]] with w = ifftshift(symmetric Hann
///   window of Zu points), H2(k) = conj(H1(−k)) (equal to waveorder's H2 with the conjugates
///   swapped), I = Σ_yx S·P²;
/// - real_potential_tf = (H1 + H2)/I·Δz_up, imag_potential_tf = i·(H1 − H2)/I·Δz_up, cropped to
///   their central [Z + 2·z_padding, Y, X] frequencies.
/// settings.pixel_size is the transverse pixel size (yx_pixel_size); geometry.zenith/azimuth
/// the tilt. Outputs complex64 or complex128 (both the same), contiguous, distinct; the precision
/// of the whole computation follows them. Not differentiable (no backward). Deterministic.
void thick_transfer_function(const MicroscopeSettings& settings, const ThickGeometry& geometry,
                             const TensorRef& real_potential_tf, const TensorRef& imag_potential_tf,
                             void* workspace, std::size_t workspace_bytes, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Tikhonov inverse
// ---------------------------------------------------------------------------------------------

/// The closed-form regularised inverse filter G = (M·Mᴴ + λ·I)⁻¹·M of every M = [Hu; Hp]
/// (2 × Z) per tile and frequency; equals the SVD filter U·diag(S/(S² + λ))·Vh exactly, rank
/// deficient matrices included. `absorption_tf`, `phase_tf` [B, Z, Y, X] complex (any strides);
/// `filter` [B, 2, Z, Y, X] complex, contiguous (row 0 absorption, row 1 phase). λ > 0.
void tikhonov_filter(const TensorRef& absorption_tf, const TensorRef& phase_tf,
                     double regularization, const TensorRef& filter, Stream stream = {});

std::size_t tikhonov_inverse_workspace_size(const TensorRef& data, const TensorRef& absorption_tf);

/// The 2-D Tikhonov reconstruction: x̃ = x / max(mean_yx x, 1e−12) − 1 per slice when `normalize`,
/// X̂ = FFT2[x̃], Ŷ_s = Σ_z G[s, z]·X̂_z (G applied unconjugated, as waveorder does), outputs
/// real(IFFT2[Ŷ_s]). data [B, Z, Y, X] real; transfer functions [B, Z, Y, X] or [1, Z, Y, X]
/// (shared) complex; absorption, phase [B, Y, X] real, contiguous. G is never materialised.
void tikhonov_inverse(const TensorRef& data, const TensorRef& absorption_tf,
                      const TensorRef& phase_tf, double regularization, bool normalize,
                      const TensorRef& absorption, const TensorRef& phase, void* workspace,
                      std::size_t workspace_bytes, Stream stream = {});

std::size_t tikhonov_inverse_backward_workspace_size(const TensorRef& data,
                                                     const TensorRef& absorption_tf);

/// The exact adjoint of `tikhonov_inverse`: gradients with respect to data [B, Z, Y, X] and the
/// transfer functions (their shapes; for shared transfer functions, summed over B). Any output may
/// be absent.
void tikhonov_inverse_backward(const TensorRef& data, const TensorRef& absorption_tf,
                               const TensorRef& phase_tf, double regularization, bool normalize,
                               const TensorRef& grad_absorption, const TensorRef& grad_phase,
                               const TensorRef& grad_data, const TensorRef& grad_absorption_tf,
                               const TensorRef& grad_phase_tf, void* workspace,
                               std::size_t workspace_bytes, Stream stream = {});

std::size_t tikhonov_inverse_3d_workspace_size(const TensorRef& data,
                                               const TensorRef& transfer_function);

/// The 3-D Tikhonov reconstruction: real(IFFT3[conj(H)·FFT3[x]/(|H|² + λ)]) (conjugated, as
/// waveorder does in 3-D). data [B, Z, Y, X] real, transfer_function [Z, Y, X] complex, out
/// [B, Z, Y, X] real contiguous. No normalisation (do it before).
void tikhonov_inverse_3d(const TensorRef& data, const TensorRef& transfer_function,
                         double regularization, const TensorRef& out, void* workspace,
                         std::size_t workspace_bytes, Stream stream = {});

/// Adjoint of `tikhonov_inverse_3d` with respect to data and the transfer function.
void tikhonov_inverse_3d_backward(const TensorRef& data, const TensorRef& transfer_function,
                                  double regularization, const TensorRef& grad_out,
                                  const TensorRef& grad_data,
                                  const TensorRef& grad_transfer_function, void* workspace,
                                  std::size_t workspace_bytes, Stream stream = {});

std::size_t thin_forward_model_workspace_size(const TensorRef& absorption,
                                              const TensorRef& absorption_tf);

/// The thin forward model (waveorder's apply_transfer_function): data_z =
/// real(IFFT2[FFT2[a]·Hu_z]) + real(IFFT2[FFT2[p]·Hp_z]) + background. absorption, phase [B, Y, X]
/// real; transfer functions [B, Z, Y, X] or [1, Z, Y, X] complex; data [B, Z, Y, X] real,
/// contiguous. Used to simulate defocus stacks.
void thin_forward_model(const TensorRef& absorption, const TensorRef& phase,
                        const TensorRef& absorption_tf, const TensorRef& phase_tf,
                        double background, const TensorRef& data, void* workspace,
                        std::size_t workspace_bytes, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Sharpness losses (higher is sharper; the optimiser minimises their negative)
// ---------------------------------------------------------------------------------------------

/// The mid-band annulus: f_lo·2NAd/λ < |f| < f_hi·2NAd/λ, strict on both sides.
struct MidbandBand {
  double low = 0.125;
  double high = 0.25;
};

std::size_t midband_power_workspace_size(const TensorRef& images);

/// Mean amplitude of FFT2[image] over the mid-band annulus, per image: images [B, Y, X] real,
/// out [B] real. An empty annulus gives 0.
void midband_power(const TensorRef& images, double pixel_size, double wavelength,
                   double na_detection, MidbandBand band, const TensorRef& out, void* workspace,
                   std::size_t workspace_bytes, Stream stream = {});

std::size_t midband_power_backward_workspace_size(const TensorRef& images);

void midband_power_backward(const TensorRef& images, double pixel_size, double wavelength,
                            double na_detection, MidbandBand band, const TensorRef& grad_out,
                            const TensorRef& grad_images, void* workspace,
                            std::size_t workspace_bytes, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Per-tile optimisation of focus and illumination tilt
// ---------------------------------------------------------------------------------------------

enum class TileOptimizerMethod : int32_t { Adam, NAdam, Newton };

/// One optimised parameter: its per-tile initial values ([B], the tiles' real dtype and device;
/// absent for `initial_value` on every tile) and its learning rate; learning_rate = 0 freezes it.
/// For Newton the learning rate is the damping floor and the step cap (see TileOptimizerOptions).
struct TileParameter {
  TensorRef initial;
  double initial_value = 0.0;
  double learning_rate = 0.0;
};

struct TileOptimizerOptions {
  TileOptimizerMethod method = TileOptimizerMethod::NAdam;
  int iterations = 50;           ///< >= 0
  double regularization = 1e-3;  ///< λ of the Tikhonov inverse
  MidbandBand band{};
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  ///< Adam / NAdam
  double momentum_decay = 4e-3;                   ///< NAdam's ψ (PyTorch's default)
  /// Early stopping per tile: a tile stops once its loss improved by less than
  /// `tolerance`·|loss| for `patience` consecutive iterations (tolerance 0 disables it).
  double tolerance = 0.0;
  int patience = 3;
};

/// Every optimisable parameter of a tile. The apertures are optional: left as they are, they stay
/// at the microscope's settings (initial_value NaN means "the microscope's NA" on every tile).
/// Their upsampling factor is the microscope's (thin_upsampling_factor), fixed for the call, and
/// the mid-band annulus is always the microscope's 2·NAd/λ.
struct TileParameterSet {
  TileParameter z_offset, zenith, azimuth;
  TileParameter na_illumination{{}, std::numeric_limits<double>::quiet_NaN(), 0.0};
  TileParameter na_detection{{}, std::numeric_limits<double>::quiet_NaN(), 0.0};
};

/// Per-tile results (outputs, contiguous, on the tiles' device): the final parameters [B] (real
/// dtype; the two apertures optional: absent ones are not written), the final losses [B] (real
/// dtype: the negative mid-band power of the phase reconstruction at the returned parameters) and
/// iterations run [B] (int32).
struct TileOptimizerResult {
  TensorRef z_offset, zenith, azimuth, loss, iterations;
  TensorRef na_illumination, na_detection;
};

/// Optimises focus offset (in slices: z_k = (−k + ⌊Z/2⌋ + offset)·z_spacing, negated when
/// invert_phase_contrast), zenith, azimuth and optionally the two numerical apertures (the thin
/// model's clamp NAi >= NAd -> 0.9·NAd applies per tile) of each tile independently, maximising the
/// mid-band power of its Tikhonov phase reconstruction. tiles [B, Z, Y, X] real. Derivatives (first
/// and, for Newton, diagonal second order) are exact, computed forward-mode through the transfer
/// functions, the closed-form inverse and the loss. A tile whose loss or step turns non-finite gets
/// its last good parameters back and stops. The optimiser allocates its own scratch and cuFFT
/// plans.
void optimize_tiles(const TensorRef& tiles, const MicroscopeSettings& settings, double z_spacing,
                    const TileParameterSet& parameters, const TileOptimizerOptions& options,
                    const TileOptimizerResult& result, Stream stream = {});

}  // namespace fieldfuse
