# SPDX-License-Identifier: Apache-2.0
"""Batched per-tile optimisation of focus and illumination tilt (specs/optics.md, "Per-tile
optimisation"): B independent optimisers in one call, exact derivatives (forward mode through
the transfer functions, the closed-form inverse and the loss), all iterations on the device."""

from __future__ import annotations

import dataclasses
from typing import Mapping

import torch
from torch import Tensor

from .._backend import _C, dl, real_number, stream_of
from .inverse import tikhonov_inverse
from .transfer import Microscope, thin_transfer_functions, z_positions

__all__ = ["TileOptimization", "optimize_tiles", "reconstruct_phase"]

_METHODS = {"adam": 0, "nadam": 1, "newton": 2}
_PARAMETERS = ("z_offset", "zenith", "azimuth", "na_illumination", "na_detection")


@dataclasses.dataclass
class TileOptimization:
    """Per-tile results, each [B]: the parameters (the apertures too: the microscope's where they
    were not optimised), the loss at them (−mean mid-band amplitude of the phase reconstruction)
    and the number of updates each tile ran."""

    z_offset: Tensor
    zenith: Tensor
    azimuth: Tensor
    loss: Tensor
    iterations: Tensor
    na_illumination: Tensor
    na_detection: Tensor


def optimize_tiles(
    tiles: Tensor,
    microscope: Microscope,
    z_spacing: float,
    parameters: Mapping[str, tuple] | None = None,
    *,
    method: str = "nadam",
    iterations: int = 50,
    regularization: float = 1e-3,
    band: tuple[float, float] = (0.125, 0.25),
    tolerance: float = 0.0,
    patience: int = 3,
) -> TileOptimization:
    """Optimise each tile's focus offset (slices), zenith and azimuth (radians) by maximising the
    mid-band power of its Tikhonov phase reconstruction.

    tiles: [B, Z, Y, X] defocus stacks, float32 or float64, CPU or CUDA.
    parameters: maps "z_offset", "zenith", "azimuth" (and optionally "na_illumination",
    "na_detection") to (initial, learning_rate); initial a number or a [B] tensor (warm starts),
    learning_rate 0 freezes the parameter; absent: (0.0, 0.0), and for the apertures the
    microscope's NA, frozen. The upsampling factor and the mid-band annulus stay the microscope's.
    method: "adam", "nadam" (PyTorch's update rules, one per tile) or "newton": the damped
    diagonal step −g/max(h, lr) capped at ±lr, with exact second derivatives.
    A tile whose loss or derivatives turn non-finite gets its last good parameters back and stops;
    with tolerance > 0 a tile stops after `patience` updates that improved its loss by less than
    tolerance·|loss|.
    """
    op = "optimize_tiles"
    if not isinstance(tiles, Tensor):
        raise TypeError(f"{op}(): expected tiles to be a torch.Tensor, but got {type(tiles).__name__}")
    if not isinstance(microscope, Microscope):
        raise TypeError(f"{op}(): expected microscope to be a fieldfuse.optics.Microscope, but got {type(microscope).__name__}")
    if method not in _METHODS:
        raise ValueError(f"{op}(): expected method to be one of {sorted(_METHODS)}, but got {method!r}")
    if tiles.dim() != 4:
        raise ValueError(f"{op}(): expected tiles to be [B, Z, Y, X], but got shape {list(tiles.shape)}")
    parameters = dict(parameters or {})
    unknown = sorted(set(parameters) - set(_PARAMETERS))
    if unknown:
        raise ValueError(f"{op}(): expected parameters keys among {list(_PARAMETERS)}, but got {unknown}")
    initial, values, rates = [], [], []
    for name in _PARAMETERS:
        default = (float("nan"), 0.0) if name.startswith("na_") else (0.0, 0.0)  # NaN: the microscope's
        entry = parameters.get(name, default)
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise ValueError(f"{op}(): expected parameters[{name!r}] to be (initial, learning_rate), but got {entry!r}")
        init, lr = entry
        if isinstance(init, Tensor) and init.dim() > 0:
            init_t = init.detach()
            initial.append(dl(init_t.to(device=tiles.device, dtype=tiles.dtype)))
            values.append(0.0)
        else:
            initial.append(None)
            values.append(real_number(op, f"parameters[{name!r}] initial", init))
        rates.append(real_number(op, f"parameters[{name!r}] learning_rate", lr))
    B = tiles.shape[0]
    params = [torch.empty(B, dtype=tiles.dtype, device=tiles.device) for _ in _PARAMETERS]
    loss = torch.empty(B, dtype=tiles.dtype, device=tiles.device)
    its = torch.empty(B, dtype=torch.int32, device=tiles.device)
    _C.optimize_tiles(
        microscope.settings(op), dl(tiles), real_number(op, "z_spacing", z_spacing), initial,
        values, rates, _METHODS[method], int(iterations),
        real_number(op, "regularization", regularization), real_number(op, "band[0]", band[0]),
        real_number(op, "band[1]", band[1]), real_number(op, "tolerance", tolerance), int(patience),
        [dl(t) for t in params], dl(loss), dl(its), stream_of(tiles),
    )
    z, zen, azi, na_i, na_d = params
    return TileOptimization(z, zen, azi, loss, its, na_i, na_d)


def reconstruct_phase(
    tiles: Tensor,
    microscope: Microscope,
    z_spacing: float,
    *,
    z_offset=0.0,
    zenith=0.0,
    azimuth=0.0,
    regularization: float = 1e-3,
) -> tuple[Tensor, Tensor]:
    """Absorption and phase of each tile at its parameters (e.g. those optimize_tiles returned):
    thin_transfer_functions at z_positions(Z, z_spacing, z_offset) and the tilt, then
    tikhonov_inverse. tiles [B, Z, Y, X] or [Z, Y, X]; z_offset, zenith, azimuth numbers or [B]
    tensors. Returns [B, Y, X] (or [Y, X]) each; differentiable like its two parts."""
    op = "reconstruct_phase"
    if not isinstance(tiles, Tensor) or tiles.dim() not in (3, 4):
        shape = list(tiles.shape) if isinstance(tiles, Tensor) else type(tiles).__name__
        raise ValueError(f"{op}(): expected tiles to be a [B, Z, Y, X] or [Z, Y, X] tensor, but got {shape}")
    if not isinstance(microscope, Microscope):
        raise TypeError(f"{op}(): expected microscope to be a fieldfuse.optics.Microscope, but got {type(microscope).__name__}")
    Z, Y, X = tiles.shape[-3:]
    offset = z_offset.to(tiles) if isinstance(z_offset, Tensor) else real_number(op, "z_offset", z_offset)
    z = z_positions(Z, real_number(op, "z_spacing", z_spacing), offset, device=tiles.device, dtype=tiles.dtype)
    zen = zenith.to(tiles) if isinstance(zenith, Tensor) else real_number(op, "zenith", zenith)
    azi = azimuth.to(tiles) if isinstance(azimuth, Tensor) else real_number(op, "azimuth", azimuth)
    hu, hp = thin_transfer_functions(
        (Y, X), microscope.pixel_size, z, microscope.wavelength, microscope.index_medium,
        microscope.na_illumination, microscope.na_detection, zenith=zen, azimuth=azi,
        pupil_steepness=microscope.pupil_steepness,
        invert_phase_contrast=microscope.invert_phase_contrast, device=tiles.device, dtype=tiles.dtype,
    )
    return tikhonov_inverse(tiles, hu, hp, regularization)
