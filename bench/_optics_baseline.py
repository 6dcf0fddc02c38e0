# SPDX-License-Identifier: Apache-2.0
"""Plain-PyTorch phase imaging written the way waveorder 3.0.2 computes it: the baselines of
bench_optics.py (transfer functions, inverse filters, mid-band loss, the per-tile NAdam iteration).

Nothing here imports fieldfuse or waveorder. The formulas follow specs/optics.md; the structure
follows waveorder (one tensor op per formula step, fftfreq grids, sigmoid pupils, the weak-object
transfer function through four FFTs, the central Fourier crop after Nyquist upsampling). Where
waveorder does per-tile Python loops (filter application, the loss) the baselines are vectorised
over tiles, and constants of an optimisation (frequency grids, pupil, normalised data spectrum)
are built once outside the iteration: the baselines are faster than waveorder itself, so ratios
against them understate fieldfuse's lead over the reference package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Settings:
    """The microscope; field names match fieldfuse.optics.Microscope so one builds the other."""

    pixel_size: float
    wavelength: float
    index_medium: float
    na_illumination: float
    na_detection: float


def upsampling_factor(s: Settings) -> int:
    """waveorder's transverse Nyquist factor, ceil(pixel_size / (λ / (2·(NAd + NAi))))."""
    return math.ceil(s.pixel_size / (s.wavelength / (2 * (s.na_detection + s.na_illumination))))


def z_positions(z_count: int, z_spacing: float, offset: Tensor | float = 0.0,
                device: torch.device | None = None) -> Tensor:
    """(−k + ⌊Z/2⌋ + offset)·Δz for k = 0..Z−1: [Z], or [B, Z] for a [B] offset."""
    k = torch.arange(z_count, device=device, dtype=torch.float32)
    index = z_count // 2 - k
    if isinstance(offset, Tensor) and offset.ndim == 1:
        return (index[None, :] + offset[:, None]) * z_spacing
    return (index + offset) * z_spacing


@dataclass
class ThinGrid:
    """Everything of the thin transfer functions that the optimised parameters do not change, on
    the upsampled grid [f·Y, f·X]."""

    settings: Settings
    yx_shape: tuple[int, int]
    factor: int
    fyy: Tensor
    fxx: Tensor
    pupil: Tensor          # detection pupil P
    oblique: Tensor        # ob = sqrt(max(0, 1 − λm²|f|²))/λm
    fz: Tensor             # sqrt(max(0, K² − |f|²)) on the Ewald sphere
    inside: Tensor         # [K² − |f|² ≥ 0]
    pixel_slope: float     # 4/Δf of the tilted pupil's sigmoid


def thin_grid(s: Settings, yx_shape: tuple[int, int], steepness: float,
              device: torch.device) -> ThinGrid:
    factor = upsampling_factor(s)
    ny, nx = yx_shape[0] * factor, yx_shape[1] * factor
    ps = s.pixel_size / factor
    fy = torch.fft.fftfreq(ny, ps, device=device)
    fx = torch.fft.fftfreq(nx, ps, device=device)
    fyy, fxx = torch.meshgrid(fy, fx, indexing="ij")
    fr = torch.sqrt(fyy**2 + fxx**2)
    pupil = torch.sigmoid(steepness * (s.na_detection / s.wavelength - fr))
    lam_m = s.wavelength / s.index_medium
    oblique = torch.sqrt(torch.clamp(1 - lam_m**2 * fr**2, min=0.0)) / lam_m
    k = s.index_medium / s.wavelength
    fz_sq = k**2 - fr**2
    return ThinGrid(s, tuple(yx_shape), factor, fyy, fxx, pupil, oblique,
                    torch.sqrt(torch.clamp(fz_sq, min=0.0)), (fz_sq >= 0).to(fr.dtype),
                    4.0 / (1.0 / (nx * ps)))


def _angle(value: Tensor | float, like: Tensor) -> Tensor:
    """A tilt angle as a tensor that broadcasts against [B, Z, Y, X] when it is [B]."""
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return t[:, None, None, None] if t.ndim == 1 else t


def tilted_pupil(grid: ThinGrid, zenith: Tensor | float, azimuth: Tensor | float) -> Tensor:
    """S(f) = σ((4/Δf)·(f·ŝ − K cosα))·inside, NAi ≥ NAd clamped to 0.9·NAd (the thin model)."""
    s = grid.settings
    na_ill = s.na_illumination if s.na_illumination < s.na_detection else 0.9 * s.na_detection
    k = s.index_medium / s.wavelength
    cos_alpha = math.sqrt(max(0.0, 1 - (na_ill / s.index_medium) ** 2))
    theta, phi = _angle(zenith, grid.fxx), _angle(azimuth, grid.fxx)
    dot = (grid.fxx * (torch.sin(theta) * torch.cos(phi)) +
           grid.fyy * (torch.sin(theta) * torch.sin(phi)) + grid.fz * torch.cos(theta))
    return torch.sigmoid(grid.pixel_slope * (dot - k * cos_alpha)) * grid.inside


def central_crop(spectrum: Tensor, yx_shape: tuple[int, int]) -> Tensor:
    """The central [Y, X] frequencies of an unshifted spectrum (waveorder's central cuboid)."""
    if tuple(spectrum.shape[-2:]) == tuple(yx_shape):
        return spectrum
    dims = (-2, -1)
    shifted = torch.fft.fftshift(spectrum, dim=dims)
    (ny, nx), (oy, ox) = spectrum.shape[-2:], yx_shape
    y0, x0 = (ny - oy) // 2, (nx - ox) // 2
    return torch.fft.ifftshift(shifted[..., y0:y0 + oy, x0:x0 + ox], dim=dims)


def thin_transfer_functions(grid: ThinGrid, z: Tensor, zenith: Tensor | float = 0.0,
                            azimuth: Tensor | float = 0.0) -> tuple[Tensor, Tensor]:
    """(Hu, Hp) [Z, Y, X], or [B, Z, Y, X] when z is [B, Z] or an angle is [B]."""
    phase = (2j * math.pi) * z[..., :, None, None] * grid.oblique
    detection = grid.pupil * (grid.pupil * torch.exp(phase))       # D = P·(P·e^{i2πz·ob})
    illumination = tilted_pupil(grid, zenith, azimuth)
    if illumination.ndim == 4 and detection.ndim == 3:
        detection = detection[None]
    a_hat = torch.fft.fft2(illumination * detection)
    b_hat = torch.fft.fft2(detection)
    h1 = torch.fft.ifft2(torch.conj(a_hat) * b_hat)
    h2 = torch.fft.ifft2(a_hat * torch.conj(b_hat))
    norm = 1 / torch.sum(illumination * detection * torch.conj(detection), dim=(-2, -1),
                         keepdim=True)
    absorption = (h1 + h2) * norm
    phase_tf = (h1 - h2) * (norm * 1j)
    return central_crop(absorption, grid.yx_shape), central_crop(phase_tf, grid.yx_shape)


# --- inverse filters (G [..., rows, Z, Y, X], applied unconjugated: Ŷ_s = Σ_z G[s, z]·X̂_z) -----


def svd_filter(hu: Tensor, hp: Tensor, regularization: float) -> Tensor:
    """U·diag(S/(S² + λ))·Vh of M = [Hu; Hp] per frequency by a batched complex SVD (waveorder's
    final reconstruction)."""
    m = torch.stack((hu, hp), dim=-4).movedim((-4, -3), (-2, -1))  # [..., Y, X, 2, Z]
    u, sv, vh = torch.linalg.svd(m, full_matrices=False)
    g = (u * (sv / (sv**2 + regularization)).to(u.dtype)[..., None, :]) @ vh
    return g.movedim((-2, -1), (-4, -3))


def closed_form_filter(hu: Tensor, hp: Tensor, regularization: float,
                       rows: tuple[int, ...] = (0, 1)) -> Tensor:
    """(M Mᴴ + λI)⁻¹ M through the 2 × 2 Hermitian inverse, only the requested rows."""
    a = torch.sum(hu.real**2 + hu.imag**2, dim=-3, keepdim=True) + regularization
    d = torch.sum(hp.real**2 + hp.imag**2, dim=-3, keepdim=True) + regularization
    c = torch.sum(hu * torch.conj(hp), dim=-3, keepdim=True)
    inv_det = 1 / torch.clamp(a * d - (c.real**2 + c.imag**2), min=1e-30)
    formulas = {0: lambda: (d * hu - c * hp) * inv_det,
                1: lambda: (a * hp - torch.conj(c) * hu) * inv_det}
    return torch.stack([formulas[r]() for r in rows], dim=-4)


def decoupled_filter(hu: Tensor, hp: Tensor, regularization: float) -> Tensor:
    """waveorder's gradient-path approximation: each row H_k·S_k/((S_k² + λ)(S_k + 1e−12)) with
    S_k = ‖H_k‖, i.e. U = I and the coupling between absorption and phase dropped."""
    m = torch.stack((hu, hp), dim=-4)
    norm = torch.sqrt(torch.clamp(torch.sum(torch.abs(m) ** 2, dim=-3, keepdim=True), min=1e-12))
    return m / (norm + 1e-12) * (norm / (norm**2 + regularization))


FILTERS = {"svd": svd_filter, "closed form": closed_form_filter, "decoupled": decoupled_filter}


def normalize(data: Tensor) -> Tensor:
    """x / max(mean_yx x, 1e−12) − 1 per slice."""
    return data / torch.clamp(data.mean(dim=(-2, -1), keepdim=True), min=1e-12) - 1


def apply_filter(filt: Tensor, data_hat: Tensor) -> Tensor:
    """real(IFFT2[Σ_z G[s, z]·X̂_z]): [..., rows, Y, X]."""
    return torch.fft.ifft2(torch.sum(filt * data_hat.unsqueeze(-4), dim=-3)).real


def reconstruct(tiles: Tensor, grid: ThinGrid, z: Tensor, zenith: Tensor | float,
                azimuth: Tensor | float, regularization: float, method: str) -> Tensor:
    """Absorption and phase [B, 2, Y, X] of tiles [B, Z, Y, X] with the named filter."""
    hu, hp = thin_transfer_functions(grid, z, zenith, azimuth)
    filt = FILTERS[method](hu, hp, regularization)
    return apply_filter(filt, torch.fft.fft2(normalize(tiles)))


def midband_mask(yx_shape: tuple[int, int], s: Settings, band: tuple[float, float],
                 device: torch.device) -> Tensor:
    """The strict annulus band[0]·2NAd/λ < |f| < band[1]·2NAd/λ on the tiles' fftfreq grid."""
    fy = torch.fft.fftfreq(yx_shape[0], s.pixel_size, device=device)
    fx = torch.fft.fftfreq(yx_shape[1], s.pixel_size, device=device)
    fr = torch.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2)
    cutoff = 2 * s.na_detection / s.wavelength
    return ((fr > band[0] * cutoff) & (fr < band[1] * cutoff)).to(fr.dtype)


def midband_loss(image: Tensor, mask: Tensor) -> Tensor:
    """−Σ_mask |FFT2(image)| / n_mask per image (a float mask: no host sync, graph-capturable)."""
    return -(torch.abs(torch.fft.fft2(image)) * mask).sum(dim=(-2, -1)) / mask.sum().clamp(min=1)


def forward_model(absorption: Tensor, phase: Tensor, hu: Tensor, hp: Tensor,
                  background: float = 10.0) -> Tensor:
    """A defocus stack: real(IFFT2[FFT2[a]·Hu_z]) + real(IFFT2[FFT2[p]·Hp_z]) + background."""
    a_hat = torch.fft.fft2(absorption).unsqueeze(-3)
    p_hat = torch.fft.fft2(phase).unsqueeze(-3)
    return (torch.fft.ifft2(a_hat * hu).real + torch.fft.ifft2(p_hat * hp).real) + background


class TileIteration:
    """waveorder's batched optimisation step in plain PyTorch: per-tile z offset, zenith and
    azimuth as [B] tensors, thin transfer functions batched over tiles, the phase row of the
    named inverse filter, the mid-band loss summed over tiles (so each tile's gradient is its own
    loss's), one backward and one torch.optim.NAdam step with a learning rate per parameter.

    `capturable=True` makes the step CUDA-graph capturable (NAdam(capturable=True)); the data's
    normalised spectrum, the grids and the loss mask are built once here.
    """

    def __init__(self, tiles: Tensor, grid: ThinGrid, z_spacing: float,
                 parameters: dict[str, tuple[float, float]], *, regularization: float,
                 band: tuple[float, float], method: str = "closed form",
                 capturable: bool = False):
        b, z_count = tiles.shape[:2]
        self.grid, self.z_count, self.z_spacing = grid, z_count, z_spacing
        self.regularization, self.method = regularization, method
        self.data_hat = torch.fft.fft2(normalize(tiles))
        self.mask = midband_mask(tuple(tiles.shape[-2:]), grid.settings, band, tiles.device)
        self.params = {name: torch.full((b,), float(parameters.get(name, (0.0, 0.0))[0]),
                                        device=tiles.device, requires_grad=True)
                       for name in ("z_offset", "zenith", "azimuth")}
        groups = [{"params": [p], "lr": parameters.get(name, (0.0, 0.0))[1]}
                  for name, p in self.params.items()]
        self.optimizer = torch.optim.NAdam(groups, capturable=capturable)

    def loss(self) -> Tensor:
        z = z_positions(self.z_count, self.z_spacing, self.params["z_offset"],
                        self.data_hat.device)
        hu, hp = thin_transfer_functions(self.grid, z, self.params["zenith"],
                                         self.params["azimuth"])
        if self.method == "closed form":
            phase_row = closed_form_filter(hu, hp, self.regularization, rows=(1,))
        else:
            phase_row = FILTERS[self.method](hu, hp, self.regularization)[..., 1:, :, :, :]
        phase = apply_filter(phase_row, self.data_hat)[..., 0, :, :]
        return midband_loss(phase, self.mask).sum()

    def step(self, _unused: object = None) -> Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        self.optimizer.step()
        return loss.detach()


def shared_optics_3d(zyx_shape: tuple[int, int, int], yx_pixel_size: float, z_pixel_size: float,
                     s: Settings, steepness: float, device: torch.device
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """waveorder's shared 3-D optics built on the device: detection pupil [Y, X], propagation
    kernel and Green's function [Z, Y, X] (z signed, no padding, no upsampling)."""
    z_count, ny, nx = zyx_shape
    fy = torch.fft.fftfreq(ny, yx_pixel_size, device=device)
    fx = torch.fft.fftfreq(nx, yx_pixel_size, device=device)
    fyy, fxx = torch.meshgrid(fy, fx, indexing="ij")
    fr = torch.sqrt(fyy**2 + fxx**2)
    z = torch.fft.ifftshift((torch.arange(z_count, device=device) - z_count // 2) * z_pixel_size)
    pupil = torch.sigmoid(steepness * (s.na_detection / s.wavelength - fr))
    lam_m = s.wavelength / s.index_medium
    oblique = torch.sqrt(torch.clamp(1 - lam_m**2 * fr**2, min=0.0)) / lam_m
    wave = torch.exp(2j * math.pi * z[:, None, None] * oblique)
    propagation = pupil * wave
    greens = (-1j / 4 / math.pi) * pupil * wave / (oblique + (1 - pupil) + 1e-15)
    return pupil, propagation, greens
