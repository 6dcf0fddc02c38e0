# SPDX-License-Identifier: Apache-2.0
"""Microscope transfer functions of the optics family (specs/optics.md, include/fieldfuse/optics.h).

The thin-object transfer functions are differentiable to the defocus positions, the illumination
tilt (zenith, azimuth) and both numerical apertures. Their backward is exact: the C++ core
carries forward-mode derivatives through the pupils, the FFTs and the normalisation and contracts
them with the output gradients.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch
from torch import Tensor

from .._backend import _C, dl, real_number, stream_of, workspace

__all__ = [
    "Microscope",
    "shared_optics_3d",
    "thick_transfer_function",
    "thin_transfer_functions",
    "thin_upsampling_factor",
    "z_positions",
]


@dataclasses.dataclass(frozen=True)
class Microscope:
    """The optical settings shared by every tile. Lengths share one unit (e.g. micrometres).

    pupil_steepness is s in the detection pupil σ(s·(NAd/λ − |f|)): 1e4 is nearly binary (final
    reconstructions), about 100 gives the smoother landscape an optimiser wants.
    """

    pixel_size: float
    wavelength: float
    na_detection: float
    na_illumination: float = 0.0
    index_medium: float = 1.0
    pupil_steepness: float = 1e4
    invert_phase_contrast: bool = False

    def settings(self, op: str = "Microscope") -> tuple:
        """The tuple the C++ bindings take."""
        return (
            real_number(op, "pixel_size", self.pixel_size),
            real_number(op, "wavelength", self.wavelength),
            real_number(op, "index_medium", self.index_medium),
            real_number(op, "na_illumination", self.na_illumination),
            real_number(op, "na_detection", self.na_detection),
            real_number(op, "pupil_steepness", self.pupil_steepness),
            bool(self.invert_phase_contrast),
        )


def thin_upsampling_factor(microscope: Microscope) -> int:
    """ceil(pixel_size / (λ / (2·(NAd + NAi)))): the thin model builds its transfer functions on a grid
    this many times finer and keeps the central frequencies (waveorder's Nyquist upsampling)."""
    return _C.thin_upsampling_factor(microscope.settings("thin_upsampling_factor"))


def z_positions(Z: int, z_spacing: float, offset=0.0, *, device=None, dtype=None) -> Tensor:
    """Defocus of slice k: (−k + ⌊Z/2⌋ + offset)·z_spacing, k = 0..Z−1.

    offset: a number (-> [Z]) or a [B] tensor (-> [B, Z], differentiable, on its device and dtype).
    device, dtype: for a number offset (default cpu and torch's default dtype, float32 unless
    changed); built on the device, no copy.
    """
    if isinstance(offset, Tensor):
        base = torch.arange(Z, device=offset.device, dtype=offset.dtype)
        return ((Z // 2) - base + offset.unsqueeze(-1)) * z_spacing
    base = torch.arange(Z, device=device, dtype=dtype or torch.get_default_dtype())
    return ((Z // 2) - base + float(offset)) * float(z_spacing)


def _tensor_like(op: str, arg: str, value, dtype, device) -> Tensor:
    if isinstance(value, Tensor):
        if value.is_complex() or not value.is_floating_point():
            raise TypeError(f"{op}(): expected {arg} to be a real floating tensor, but got {value.dtype}")
        return value
    return torch.tensor(real_number(op, arg, value), dtype=dtype, device=device)


class _ThinTransfer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, settings, yx_shape, z, zenith, azimuth, na_ill, na_det):
        B, Z = z.shape
        Y, X = yx_shape
        complex_dtype = torch.complex128 if z.dtype == torch.float64 else torch.complex64
        hu = torch.empty(B, Z, Y, X, dtype=complex_dtype, device=z.device)
        hp = torch.empty_like(hu)
        ws = workspace(_C.thin_transfer_functions_workspace_size(settings, B, Z, Y, X, dl(z)), z.device)
        _C.thin_transfer_functions(settings, dl(z), dl(zenith), dl(azimuth), dl(hu), dl(hp), dl(ws), stream_of(z))
        ctx.settings = settings
        ctx.save_for_backward(z, zenith, azimuth)
        ctx.shapes = (B, Z, Y, X)
        return hu, hp

    @staticmethod
    def backward(ctx, g_hu, g_hp):
        z, zenith, azimuth = ctx.saved_tensors
        B, Z, Y, X = ctx.shapes
        needs = ctx.needs_input_grad
        if not any(needs[2:]):
            return (None,) * 7
        if g_hu is None:
            g_hu = torch.zeros(B, Z, Y, X, dtype=g_hp.dtype, device=g_hp.device)
        if g_hp is None:
            g_hp = torch.zeros_like(g_hu)

        def out(flag, shape):
            return torch.empty(shape, dtype=z.dtype, device=z.device) if flag else None

        gz, gzen, gazi = out(needs[2], (B, Z)), out(needs[3], (B,)), out(needs[4], (B,))
        gna_i, gna_d = out(needs[5], (B,)), out(needs[6], (B,))
        ws = workspace(
            _C.thin_transfer_functions_backward_workspace_size(ctx.settings, B, Z, Y, X, dl(z)), z.device
        )
        _C.thin_transfer_functions_backward(
            ctx.settings, dl(z), dl(zenith), dl(azimuth), dl(g_hu), dl(g_hp),
            *(None if g is None else dl(g) for g in (gz, gzen, gazi, gna_i, gna_d)),
            dl(ws), stream_of(z),
        )
        return (
            None,
            None,
            gz,
            gzen,
            gazi,
            None if gna_i is None else gna_i.sum(),
            None if gna_d is None else gna_d.sum(),
        )


def thin_transfer_functions(
    yx_shape: Sequence[int],
    pixel_size: float,
    z_positions,
    wavelength: float,
    index_medium: float,
    na_illumination,
    na_detection,
    *,
    zenith=0.0,
    azimuth=0.0,
    pupil_steepness: float = 1e4,
    invert_phase_contrast: bool = False,
    device=None,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """The absorption and phase transfer functions of the thin-object model (waveorder's
    isotropic_thin_3d.calculate_transfer_function, same numbers).

    z_positions: [Z] or [B, Z] defocus distances. zenith, azimuth: numbers or [B] tensors (radians).
    na_illumination, na_detection: numbers or 0-d tensors. Returns complex [Z, Y, X], or
    [B, Z, Y, X] when z_positions is 2-D or a tilt is a [B] tensor. Differentiable to every tensor
    argument; dtype (default: that of the first floating tensor argument, else float32) float64
    gives complex128.
    """
    op = "thin_transfer_functions"
    tensors = [t for t in (z_positions, zenith, azimuth, na_illumination, na_detection) if isinstance(t, Tensor)]
    if device is None:
        device = tensors[0].device if tensors else torch.device("cpu")
    device = torch.device(device)
    if dtype is None:
        floating = [t.dtype for t in tensors if t.is_floating_point()]
        dtype = floating[0] if floating else torch.float32
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{op}(): expected dtype to be torch.float32 or torch.float64, but got {dtype}")
    if (
        not isinstance(yx_shape, (tuple, list, torch.Size))
        or len(yx_shape) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in yx_shape)
    ):
        raise ValueError(f"{op}(): expected yx_shape to be two ints (Y, X), but got {yx_shape!r}")
    if yx_shape[0] < 1 or yx_shape[1] < 1:
        raise ValueError(f"{op}(): expected yx_shape to be positive, but got {tuple(yx_shape)}")

    z = z_positions if isinstance(z_positions, Tensor) else torch.as_tensor(z_positions, dtype=torch.float64)
    z = z.to(device=device, dtype=dtype)
    if z.dim() not in (1, 2):
        raise ValueError(f"{op}(): expected z_positions to be [Z] or [B, Z], but got shape {list(z.shape)}")
    # Numbers become device tensors by fills, never by host-to-device copies, so a call can be
    # captured in a CUDA graph (NAs given as tensors are read on the host: that synchronises).
    tilts = []
    for name, value in (("zenith", zenith), ("azimuth", azimuth)):
        if isinstance(value, Tensor):
            t = _tensor_like(op, name, value, dtype, device).to(device=device, dtype=dtype)
            if t.dim() > 1:
                raise ValueError(f"{op}(): expected {name} to be a number or a [B] tensor, but got shape {list(t.shape)}")
            tilts.append(t)
        else:
            tilts.append(real_number(op, name, value))
    batch_sizes = {t.shape[0] for t in tilts if isinstance(t, Tensor) and t.dim() == 1}
    batch_sizes |= {z.shape[0]} if z.dim() == 2 else set()
    if len(batch_sizes) > 1:
        raise ValueError(
            f"{op}(): expected z_positions, zenith and azimuth to agree on B, but got sizes {sorted(batch_sizes)}"
        )
    batched = bool(batch_sizes)
    B = batch_sizes.pop() if batched else 1
    z2 = z.expand(B, z.shape[-1]) if z.dim() == 1 else z
    zen1, azi1 = (
        t.expand(B) if isinstance(t, Tensor) else torch.full((B,), t, dtype=dtype, device=device) for t in tilts
    )
    nas = []
    for name, value in (("na_illumination", na_illumination), ("na_detection", na_detection)):
        if isinstance(value, Tensor):
            t = _tensor_like(op, name, value, dtype, device)
            if t.numel() != 1:
                raise ValueError(f"{op}(): expected {name} to be a number or a 1-element tensor, but got shape {list(t.shape)}")
            nas.append((float(t.detach()), t.reshape(()).to(device=device, dtype=dtype)))
        else:
            nas.append((real_number(op, name, value), None))
    settings = Microscope(
        pixel_size=pixel_size,
        wavelength=wavelength,
        index_medium=index_medium,
        na_illumination=nas[0][0],
        na_detection=nas[1][0],
        pupil_steepness=pupil_steepness,
        invert_phase_contrast=invert_phase_contrast,
    ).settings(op)
    hu, hp = _ThinTransfer.apply(
        settings, (int(yx_shape[0]), int(yx_shape[1])), z2, zen1, azi1, nas[0][1], nas[1][1]
    )
    if not batched:
        return hu[0], hp[0]
    return hu, hp


def _check_zyx_shape_and_dtype(op: str, zyx_shape, dtype) -> None:
    """The 3-D builders' Python-side checks (the C++ front checks the values)."""
    if (
        not isinstance(zyx_shape, (tuple, list, torch.Size))
        or len(zyx_shape) != 3
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in zyx_shape)
    ):
        raise ValueError(f"{op}(): expected zyx_shape to be three ints (Z, Y, X), but got {zyx_shape!r}")
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{op}(): expected dtype to be torch.float32 or torch.float64, but got {dtype}")


def shared_optics_3d(
    zyx_shape: Sequence[int],
    yx_pixel_size: float,
    z_pixel_size: float,
    wavelength: float,
    index_medium: float,
    na_detection: float,
    *,
    z_padding: int = 0,
    pupil_steepness: float = 1e4,
    invert_phase_contrast: bool = False,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor, Tensor]:
    """The thick model's shared optics on the device, in one kernel (waveorder's
    phase_thick_3d._compute_shared_optics): detection pupil [Y, X], propagation kernel and Green's
    function (z signed) [Z + 2·z_padding, Y, X], z list ifftshift((k − Zt/2)·Δz), reversed when
    invert_phase_contrast. No upsampling."""
    op = "shared_optics_3d"
    _check_zyx_shape_and_dtype(op, zyx_shape, dtype)
    device = torch.device("cpu" if device is None else device)
    Z, Y, X = (int(n) for n in zyx_shape)
    if Z < 0 or Y < 1 or X < 1 or not isinstance(z_padding, int) or z_padding < 0:
        raise ValueError(f"{op}(): expected Z >= 0, Y, X >= 1 and an int z_padding >= 0, but got {zyx_shape!r}, z_padding={z_padding!r}")
    Zt = Z + 2 * z_padding
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    pupil = torch.empty(Y, X, dtype=dtype, device=device)
    kernel = torch.empty(Zt, Y, X, dtype=complex_dtype, device=device)
    greens = torch.empty_like(kernel)
    settings = Microscope(
        pixel_size=yx_pixel_size, wavelength=wavelength, index_medium=index_medium,
        na_detection=na_detection, pupil_steepness=pupil_steepness,
        invert_phase_contrast=invert_phase_contrast,
    ).settings(op)
    _C.shared_optics_3d(settings, Z, Y, X, real_number(op, "z_pixel_size", z_pixel_size), z_padding,
                        dl(pupil), dl(kernel), dl(greens), stream_of(pupil))
    return pupil, kernel, greens


def thick_transfer_function(
    zyx_shape: Sequence[int],
    yx_pixel_size: float,
    z_pixel_size: float,
    wavelength: float,
    index_medium: float,
    na_illumination: float,
    na_detection: float,
    *,
    z_padding: int = 0,
    zenith: float = 0.0,
    azimuth: float = 0.0,
    pupil_steepness: float = 1e4,
    invert_phase_contrast: bool = False,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """The 3-D weak-object transfer functions (real_potential_tf, imag_potential_tf), complex
    [Z + 2·z_padding, Y, X] (waveorder's phase_thick_3d.calculate_transfer_function, one tilt).

    Built on the device on waveorder's Nyquist-upsampled grid [Z·fz + 2·z_padding, Y·f, X·f]
    (f = ceil(yx_pixel_size / (λ/(2·(NAd + NAi)))), fz = ceil(z_pixel_size / axial Nyquist
    spacing); the padding is not upsampled): the shared optics of `shared_optics_3d`, the tilted
    illumination pupil S (NAi not clamped), SPHz = S·P·Hz, PG = P·G,
    H1 = FFT_z[w·IFFT2[conj(FFT2 SPHz)·FFT2 PG]] with the ifftshifted symmetric Hann window w,
    H2(k) = conj(H1(−k)), I = Σ S·P², real = (H1 + H2)/I·Δz_up, imag = i·(H1 − H2)/I·Δz_up, then
    the central [Z + 2·z_padding, Y, X] frequencies. zenith, azimuth: numbers (radians).
    dtype float32 gives complex64, float64 complex128. Not differentiable: the outputs carry no
    autograd history, whatever the inputs.
    """
    op = "thick_transfer_function"
    _check_zyx_shape_and_dtype(op, zyx_shape, dtype)
    if not isinstance(z_padding, int) or isinstance(z_padding, bool):
        raise TypeError(f"{op}(): expected z_padding to be an int, but got {type(z_padding).__name__}")
    device = torch.device("cpu" if device is None else device)
    settings = (
        real_number(op, "yx_pixel_size", yx_pixel_size),
        real_number(op, "wavelength", wavelength),
        real_number(op, "index_medium", index_medium),
        real_number(op, "na_illumination", na_illumination),
        real_number(op, "na_detection", na_detection),
        real_number(op, "pupil_steepness", pupil_steepness),
        bool(invert_phase_contrast),
    )
    Z, Y, X = (int(n) for n in zyx_shape)
    geometry = (
        Z, Y, X, real_number(op, "z_pixel_size", z_pixel_size), z_padding,
        real_number(op, "zenith", zenith), real_number(op, "azimuth", azimuth),
    )
    # Validates settings and geometry in C++ before any allocation.
    nbytes = _C.thick_transfer_function_workspace_size(settings, geometry, dtype == torch.float64)
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    real_tf = torch.empty(Z + 2 * z_padding, Y, X, dtype=complex_dtype, device=device)
    imag_tf = torch.empty_like(real_tf)
    _C.thick_transfer_function(
        settings, geometry, dl(real_tf), dl(imag_tf), dl(workspace(nbytes, device)), stream_of(real_tf)
    )
    return real_tf, imag_tf
