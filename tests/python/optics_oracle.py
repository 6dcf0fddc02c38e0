# SPDX-License-Identifier: Apache-2.0
"""Float64 / complex128 pure-PyTorch oracle of the optics family, written from specs/optics.md.

Every function spells one formula of the spec out with plain torch operations, literally and
without the identities the kernels exploit (H2 is computed by its own FFTs, the filter both in
closed form and by a batched SVD), so it stays an independent check. It is differentiable through
autograd and imports nothing from `fieldfuse`. Conventions: unshifted Fourier grids (DC at [0, 0]),
frequencies fftfreq(N, pixel_size), lengths in one unit (e.g. micrometres), angles in radians.
Where the spec leaves a detail open it follows waveorder 3.0.2 (the reference package; see
scripts/make_waveorder_reference.py and tests/python/test_optics_oracle.py, which check this module
against it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

F64 = torch.float64

# The tilted illumination pupil's logistic roll-off spans this many frequency pixels (the spec's
# 4/Δf slope).
TILT_SLOPE_PIXELS = 4.0
# Guards of the spec: per-slice normalisation mean, the Green's function denominator, the 2×2
# determinant of the closed-form filter.
MEAN_FLOOR = 1e-12
GREENS_EPS = 1e-15
DET_FLOOR = 1e-30
# The thin model replaces NAi >= NAd by this fraction of NAd.
NA_CLAMP_FRACTION = 0.9


@dataclasses.dataclass(kw_only=True)
class Microscope:
    """The microscope shared by every tile (mirrors `fieldfuse.optics.Microscope`)."""

    pixel_size: float
    wavelength: float
    index_medium: float = 1.0
    na_illumination: float
    na_detection: float
    pupil_steepness: float = 1e4
    invert_phase_contrast: bool = False


def _tensor(value, dtype=F64, device=None) -> torch.Tensor:
    """`value` as a tensor of `dtype`; an existing tensor keeps its autograd graph."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype=dtype, device=device if device is not None else value.device)
    return torch.tensor(value, dtype=dtype, device=device)


# --- building blocks -----------------------------------------------------------------------------


def z_positions(Z: int, z_spacing: float, offset=0.0) -> torch.Tensor:
    """z_k = (−k + ⌊Z/2⌋ + offset)·Δz for k = 0..Z−1: [Z] for a float offset, [B, Z] for [B]."""
    offset = _tensor(offset)
    k = torch.arange(Z, dtype=offset.dtype, device=offset.device)
    return (-k + Z // 2 + offset[..., None]) * z_spacing


def frequencies(yx_shape: Sequence[int], pixel_size: float, device=None):
    """(fyy, fxx) [Y, X]: the unshifted fftfreq grids, meshgrid "ij"."""
    fy = torch.fft.fftfreq(yx_shape[0], pixel_size, dtype=F64, device=device)
    fx = torch.fft.fftfreq(yx_shape[1], pixel_size, dtype=F64, device=device)
    return torch.meshgrid(fy, fx, indexing="ij")


def radial_frequency(fyy: torch.Tensor, fxx: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(fyy**2 + fxx**2)


def detection_pupil(fr, na_detection, wavelength: float, steepness: float) -> torch.Tensor:
    """P(f) = σ(s·(NAd/λ − |f|))."""
    return torch.sigmoid(steepness * (_tensor(na_detection) / wavelength - fr))


def tilted_pupil(fxx, fyy, pixel_size, na_illumination, wavelength, index_medium, zenith, azimuth):
    """The spec's tilted illumination pupil S(f) on the Ewald sphere.

    zenith and azimuth broadcast against [Y, X] (pass [B, 1, 1] for a batch). Δf is the x
    frequency step 1/(X·pixel_size), which equals |fx[1] − fx[0]| and stays defined for X = 1.
    """
    na = _tensor(na_illumination)
    zenith, azimuth = _tensor(zenith), _tensor(azimuth)
    K = index_medium / wavelength
    cos_alpha = torch.sqrt(torch.clamp(1 - (na / index_medium) ** 2, min=0.0))
    delta_f = 1.0 / (fxx.shape[-1] * pixel_size)
    fz_sq = K**2 - fxx**2 - fyy**2
    inside = (fz_sq >= 0).to(F64)
    fz = torch.sqrt(torch.clamp(fz_sq, min=0.0))
    sx = torch.sin(zenith) * torch.cos(azimuth)
    sy = torch.sin(zenith) * torch.sin(azimuth)
    sz = torch.cos(zenith)
    dot = fxx * sx + fyy * sy + fz * sz
    return torch.sigmoid(TILT_SLOPE_PIXELS / delta_f * (dot - K * cos_alpha)) * inside


def oblique_factor(fr, wavelength_medium: float) -> torch.Tensor:
    """ob(f) = sqrt(max(0, 1 − λm²|f|²))/λm."""
    return torch.sqrt(torch.clamp(1 - wavelength_medium**2 * fr**2, min=0.0)) / wavelength_medium


def _phase_factor(z: torch.Tensor, ob: torch.Tensor) -> torch.Tensor:
    """exp(i2πz·ob), [..., Z, Y, X] for z [..., Z]."""
    return torch.exp(1j * (2 * math.pi) * z[..., None, None] * ob)


def propagation_kernel(fr, pupil, wavelength_medium: float, z) -> torch.Tensor:
    """Hz(z, f) = P(f)·exp(i2πz·ob(f)), [..., Z, Y, X] for z [..., Z]."""
    return pupil * _phase_factor(_tensor(z), oblique_factor(fr, wavelength_medium))


def greens_function(fr, pupil, wavelength_medium: float, z, axially_even: bool = False):
    """G(z, f) = −i/(4π)·P·exp(i2πz′·ob)/(ob + (1 − P) + 1e−15), z′ = |z| or z."""
    z = _tensor(z)
    ob = oblique_factor(fr, wavelength_medium)
    z_prime = torch.abs(z) if axially_even else z
    return (
        (-1j / (4 * math.pi)) * pupil * _phase_factor(z_prime, ob) / (ob + (1 - pupil) + GREENS_EPS)
    )


def fourier_central_crop(tf: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The central `shape` frequencies of the trailing dims: fftshift, crop starting at
    (N − n)//2, ifftshift (waveorder's nd_fourier_central_cuboid)."""
    dims = tuple(range(tf.ndim - len(shape), tf.ndim))
    shifted = torch.fft.fftshift(tf, dim=dims)
    for dim, n in zip(dims, shape, strict=True):
        shifted = shifted.narrow(dim, (tf.shape[dim] - n) // 2, n)
    return torch.fft.ifftshift(shifted, dim=dims)


# --- thin-object (2-D to 3-D) transfer functions -------------------------------------------------


def transverse_nyquist(wavelength: float, na_illumination: float, na_detection: float) -> float:
    return wavelength / (2 * (na_detection + na_illumination))


def axial_nyquist(wavelength: float, na_detection: float, index_medium: float) -> float:
    n_on_lambda = index_medium / wavelength
    cutoff = n_on_lambda - math.sqrt(n_on_lambda**2 - (na_detection / wavelength) ** 2)
    return 1 / (2 * cutoff)


def thin_upsampling_factor(pixel_size, wavelength, na_illumination, na_detection) -> int:
    """ceil(pixel_size / (λ / (2·(NAd + NAi)))) with the unclamped NAi."""
    nyquist = transverse_nyquist(wavelength, float(na_illumination), float(na_detection))
    return int(math.ceil(pixel_size / nyquist))


def weak_object_transfer_functions_2d(illumination, defocus_pupil):
    """(Hu, Hp) of the spec's thin model from S [..., Y, X] and D [..., Y, X] (broadcast)."""
    sd_hat = torch.fft.fft2(illumination * defocus_pupil)
    d_hat = torch.fft.fft2(defocus_pupil)
    h1 = torch.fft.ifft2(torch.conj(sd_hat) * d_hat)
    h2 = torch.fft.ifft2(sd_hat * torch.conj(d_hat))
    i0 = torch.sum(
        illumination * defocus_pupil * torch.conj(defocus_pupil), dim=(-2, -1), keepdim=True
    )
    return (h1 + h2) / i0, 1j * (h1 - h2) / i0


def clamped_na_illumination(na_illumination, na_detection) -> torch.Tensor:
    """NAi, or 0.9·NAd where NAi >= NAd (the thin model's guard against a singular I0)."""
    na_i, na_d = _tensor(na_illumination), _tensor(na_detection)
    return torch.where(na_i >= na_d, NA_CLAMP_FRACTION * na_d, na_i)


def thin_transfer_functions(
    yx_shape,
    pixel_size,
    z_positions,
    wavelength,
    index_medium,
    na_illumination,
    na_detection,
    *,
    zenith=0.0,
    azimuth=0.0,
    pupil_steepness=1e4,
    invert_phase_contrast=False,
):
    """(absorption_tf, phase_tf), complex128 [Z, Y, X], or [B, Z, Y, X] when z_positions is
    [B, Z] or zenith / azimuth is a 1-D tensor (B = 1 included)."""
    Y, X = yx_shape
    z = _tensor(z_positions)
    zenith, azimuth = _tensor(zenith), _tensor(azimuth)
    batched = z.ndim == 2 or zenith.ndim == 1 or azimuth.ndim == 1
    if invert_phase_contrast:
        z = -z
    factor = thin_upsampling_factor(pixel_size, wavelength, na_illumination, na_detection)
    up_pixel = pixel_size / factor
    fyy, fxx = frequencies((Y * factor, X * factor), up_pixel, device=z.device)
    fr = radial_frequency(fyy, fxx)
    pupil = detection_pupil(fr, na_detection, wavelength, pupil_steepness)
    # D = P·Hz: the detection pupil enters twice, as in the reference.
    defocus = pupil * propagation_kernel(
        fr, pupil, wavelength / index_medium, z if z.ndim == 2 else z[None]
    )
    na_i = clamped_na_illumination(na_illumination, na_detection)
    illumination = tilted_pupil(
        fxx,
        fyy,
        up_pixel,
        na_i,
        wavelength,
        index_medium,
        zenith.reshape(-1, 1, 1),
        azimuth.reshape(-1, 1, 1),
    )
    hu, hp = weak_object_transfer_functions_2d(illumination[:, None], defocus)
    hu, hp = fourier_central_crop(hu, (Y, X)), fourier_central_crop(hp, (Y, X))
    if not batched:
        hu, hp = hu[0], hp[0]
    return hu, hp


# --- thick-object (3-D) model ---------------------------------------------------------------------


def thick_z_list(Zt: int, z_pixel_size: float, invert_phase_contrast: bool) -> torch.Tensor:
    """ifftshift((k − ⌊Zt/2⌋)·Δz), flipped when invert_phase_contrast."""
    z = torch.fft.ifftshift((torch.arange(Zt, dtype=F64) - Zt // 2) * z_pixel_size)
    return torch.flip(z, dims=(0,)) if invert_phase_contrast else z


def shared_optics_3d(
    zyx_shape,
    yx_pixel_size,
    z_pixel_size,
    wavelength,
    index_medium,
    na_detection,
    *,
    z_padding=0,
    pupil_steepness=1e4,
    invert_phase_contrast=False,
):
    """(detection_pupil [Y, X], propagation_kernel [Zt, Y, X], greens_function [Zt, Y, X]),
    Zt = Z + 2·z_padding, no upsampling; the Green's function is signed in z."""
    Z, Y, X = zyx_shape
    fr = radial_frequency(*frequencies((Y, X), yx_pixel_size))
    z = thick_z_list(Z + 2 * z_padding, z_pixel_size, invert_phase_contrast)
    pupil = detection_pupil(fr, na_detection, wavelength, pupil_steepness)
    wavelength_medium = wavelength / index_medium
    return (
        pupil,
        propagation_kernel(fr, pupil, wavelength_medium, z),
        greens_function(fr, pupil, wavelength_medium, z, axially_even=False),
    )


def thick_upsampling_factors(yx_pixel_size, z_pixel_size, wavelength, index_medium, na_i, na_d):
    """(z factor, yx factor): ceil(pixel size / Nyquist spacing) per axis (NAi unclamped)."""
    yx = math.ceil(yx_pixel_size / transverse_nyquist(wavelength, float(na_i), float(na_d)))
    z = math.ceil(z_pixel_size / axial_nyquist(wavelength, float(na_d), index_medium))
    return int(z), int(yx)


def thick_transfer_function(
    zyx_shape,
    yx_pixel_size,
    z_pixel_size,
    wavelength,
    index_medium,
    na_illumination,
    na_detection,
    *,
    z_padding=0,
    zenith=0.0,
    azimuth=0.0,
    pupil_steepness=1e4,
    invert_phase_contrast=False,
):
    """(real_potential_tf, imag_potential_tf) complex128 [Z + 2·z_padding, Y, X].

    As the reference builds it: the stack [Z·fz, Y·f, X·f] at pixel sizes divided by the Nyquist
    factors, padded by z_padding slices at each end (the padding is not upsampled), the 3-D weak
    object transfer functions with a symmetric Hann window along z, scaled by the upsampled z
    pixel, then the central [Z + 2·z_padding, Y, X] frequencies.
    """
    Z, Y, X = zyx_shape
    z_factor, yx_factor = thick_upsampling_factors(
        yx_pixel_size, z_pixel_size, wavelength, index_medium, na_illumination, na_detection
    )
    up_yx, up_z = yx_pixel_size / yx_factor, z_pixel_size / z_factor
    pupil, kernel, greens = shared_optics_3d(
        (Z * z_factor, Y * yx_factor, X * yx_factor),
        up_yx,
        up_z,
        wavelength,
        index_medium,
        na_detection,
        z_padding=z_padding,
        pupil_steepness=pupil_steepness,
        invert_phase_contrast=invert_phase_contrast,
    )
    fyy, fxx = frequencies((Y * yx_factor, X * yx_factor), up_yx)
    illumination = tilted_pupil(
        fxx, fyy, up_yx, na_illumination, wavelength, index_medium, zenith, azimuth
    )
    window = torch.fft.ifftshift(torch.hann_window(kernel.shape[0], periodic=False, dtype=F64))
    window = window[:, None, None]
    sph_hat = torch.fft.fft2(illumination * pupil * kernel)
    pg_hat = torch.fft.fft2(pupil * greens)
    h1 = torch.fft.fft(torch.fft.ifft2(torch.conj(sph_hat) * pg_hat) * window, dim=-3)
    h2 = torch.fft.fft(torch.fft.ifft2(sph_hat * torch.conj(pg_hat)) * window, dim=-3)
    direct = torch.sum(illumination * pupil * torch.conj(pupil))
    real_tf = (h1 + h2) / direct * up_z
    imag_tf = 1j * (h1 - h2) / direct * up_z
    out_shape = (Z + 2 * z_padding, Y, X)
    return fourier_central_crop(real_tf, out_shape), fourier_central_crop(imag_tf, out_shape)


# --- Tikhonov inverse -----------------------------------------------------------------------------


def _stack_rows(absorption_tf, phase_tf) -> torch.Tensor:
    """M = [Hu; Hp] as [..., 2, Z, Y, X]."""
    return torch.stack(torch.broadcast_tensors(absorption_tf, phase_tf), dim=-4)


def tikhonov_filter(absorption_tf, phase_tf, regularization=1e-3) -> torch.Tensor:
    """G = (M·Mᴴ + λI)⁻¹·M per frequency, closed form, [..., 2, Z, Y, X] (row 0 absorption)."""
    hu, hp = torch.broadcast_tensors(absorption_tf, phase_tf)
    a = torch.sum(hu.abs() ** 2, dim=-3) + regularization
    d = torch.sum(hp.abs() ** 2, dim=-3) + regularization
    c = torch.sum(hu * torch.conj(hp), dim=-3)
    det = torch.clamp(a * d - c.abs() ** 2, min=DET_FLOOR)[..., None, :, :]
    a, d, c = a[..., None, :, :], d[..., None, :, :], c[..., None, :, :]
    return torch.stack(((d * hu - c * hp) / det, (a * hp - torch.conj(c) * hu) / det), dim=-4)


def svd_filter(absorption_tf, phase_tf, regularization=1e-3) -> torch.Tensor:
    """The reference's filter U·diag(S/(S² + λ))·Vh from a batched SVD of each 2 × Z matrix."""
    m = _stack_rows(absorption_tf, phase_tf)
    lead = m.ndim - 4
    matrices = m.permute(*range(lead), lead + 2, lead + 3, lead, lead + 1)  # [..., Y, X, 2, Z]
    u, s, vh = torch.linalg.svd(matrices, full_matrices=False)
    g = u @ ((s / (s**2 + regularization))[..., None] * vh)
    return g.permute(*range(lead), lead + 2, lead + 3, lead, lead + 1)


def normalize_intensity(data: torch.Tensor) -> torch.Tensor:
    """x / max(mean_yx x, 1e−12) − 1 per slice."""
    return data / torch.clamp(data.mean(dim=(-2, -1), keepdim=True), min=MEAN_FLOOR) - 1


def tikhonov_inverse(
    data, absorption_tf, phase_tf, regularization=1e-3, *, normalize=True, filter_fn=tikhonov_filter
):
    """(absorption, phase) [..., Y, X] = real(IFFT2[Σ_z G[s, z]·FFT2[x̃_z]]), G unconjugated.

    data [Z, Y, X] or [B, Z, Y, X]; the transfer functions [Z, Y, X] (shared) or [B, Z, Y, X].
    """
    x = normalize_intensity(data) if normalize else data
    spectrum = torch.fft.fft2(x).unsqueeze(-4)  # [..., 1, Z, Y, X]
    g = filter_fn(absorption_tf, phase_tf, regularization)  # [..., 2, Z, Y, X]
    out = torch.real(torch.fft.ifft2(torch.sum(g * spectrum, dim=-3)))
    return out[..., 0, :, :], out[..., 1, :, :]


def tikhonov_inverse_3d(data, transfer_function, regularization=1e-3) -> torch.Tensor:
    """real(IFFT3[conj(H)·FFT3[x]/(|H|² + λ)]) over the last three dims (H conjugated in 3-D)."""
    dims = (-3, -2, -1)
    h = transfer_function
    filtered = torch.fft.fftn(data, dim=dims) * torch.conj(h) / (h.abs() ** 2 + regularization)
    return torch.real(torch.fft.ifftn(filtered, dim=dims))


def normalize_intensity_3d(data: torch.Tensor) -> torch.Tensor:
    """x / max(mean_zyx x, 1e−12) − 1 per stack (the reference's 3-D normalisation)."""
    return data / torch.clamp(data.mean(dim=(-3, -2, -1), keepdim=True), min=MEAN_FLOOR) - 1


# --- sharpness loss, forward model and the per-tile loss -----------------------------------------


def midband_mask(yx_shape, pixel_size, wavelength, na_detection, band=(0.125, 0.25)):
    """[Y, X] bool: low·2NAd/λ < |f| < high·2NAd/λ, strict on both sides."""
    fr = radial_frequency(*frequencies(yx_shape, pixel_size))
    cutoff = 2 * na_detection / wavelength
    return (fr > band[0] * cutoff) & (fr < band[1] * cutoff)


def midband_power(image, pixel_size, wavelength, na_detection, band=(0.125, 0.25)):
    """Mean of |FFT2[image]| over the mid-band annulus, [...] for [..., Y, X]; 0 if it is empty."""
    mask = midband_mask(image.shape[-2:], pixel_size, wavelength, na_detection, band)
    count = int(mask.sum())
    amplitude = torch.fft.fft2(image).abs()[..., mask]
    if count == 0:
        return amplitude.sum(dim=-1)  # an empty sum: 0, still attached to the graph
    return amplitude.sum(dim=-1) / count


def thin_forward_model(absorption, phase, absorption_tf, phase_tf, background=10.0):
    """data_z = real(IFFT2[FFT2[a]·Hu_z]) + real(IFFT2[FFT2[p]·Hp_z]) + background."""
    a_hat = torch.fft.fft2(absorption).unsqueeze(-3)
    p_hat = torch.fft.fft2(phase).unsqueeze(-3)
    a_part = torch.real(torch.fft.ifft2(a_hat * absorption_tf))
    p_part = torch.real(torch.fft.ifft2(p_hat * phase_tf))
    return a_part + p_part + background


def tile_transfer_functions(
    microscope: Microscope, yx_shape, Z, z_spacing, z_offset, zenith, azimuth
):
    """Per-tile thin transfer functions [B, Z, Y, X] at the optimiser's parameters ([B] each)."""
    m = microscope
    return thin_transfer_functions(
        yx_shape,
        m.pixel_size,
        z_positions(Z, z_spacing, z_offset),
        m.wavelength,
        m.index_medium,
        m.na_illumination,
        m.na_detection,
        zenith=zenith,
        azimuth=azimuth,
        pupil_steepness=m.pupil_steepness,
        invert_phase_contrast=m.invert_phase_contrast,
    )


def tile_loss(
    tiles,
    microscope: Microscope,
    z_spacing,
    z_offset,
    zenith,
    azimuth,
    *,
    regularization=1e-3,
    band=(0.125, 0.25),
):
    """The optimiser's loss [B]: −midband_power of the Tikhonov phase of each tile [B, Z, Y, X]
    reconstructed with its own z offset, zenith and azimuth ([B] each)."""
    B, Z, Y, X = tiles.shape
    hu, hp = tile_transfer_functions(microscope, (Y, X), Z, z_spacing, z_offset, zenith, azimuth)
    _, phase = tikhonov_inverse(tiles, hu, hp, regularization)
    m = microscope
    return -midband_power(phase, m.pixel_size, m.wavelength, m.na_detection, band)
