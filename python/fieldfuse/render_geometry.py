# SPDX-License-Identifier: Apache-2.0
"""Parallel-beam tilt-series geometry in plain PyTorch: ``tilt_rotations`` and
``parallel_beam_rays`` (the rays ``ray_box_samples`` takes; specs/render.md).

These have no C++ entry (a few tensor ops, differentiable by autograd), so their arguments are
validated here, with fieldfuse's messages.
"""

from __future__ import annotations

import operator

import torch
from torch import Tensor

from ._backend import check_tensor

__all__ = ["parallel_beam_rays", "tilt_rotations"]


def tilt_rotations(angles: Tensor, axis: str = "y") -> Tensor:
    """Rotation matrices ``[M, 3, 3]`` for tilt angles (radians) about a coordinate axis.

    Differentiable with respect to the angles.
    """
    if axis not in ("x", "y", "z"):
        raise ValueError(f'tilt_rotations(): expected axis to be "x", "y" or "z", but got {axis!r}')
    c, s = torch.cos(angles), torch.sin(angles)
    one, zero = torch.ones_like(angles), torch.zeros_like(angles)
    if axis == "x":
        rows = ((one, zero, zero), (zero, c, -s), (zero, s, c))
    elif axis == "y":
        rows = ((c, zero, s), (zero, one, zero), (-s, zero, c))
    else:
        rows = ((c, -s, zero), (s, c, zero), (zero, zero, one))
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def _check_geometry(rotations, shifts, detector_size) -> int:
    """The checks of parallel_beam_rays; returns detector_size as an int."""
    op = "parallel_beam_rays"
    check_tensor(op, "rotations", rotations)
    if not rotations.is_floating_point():
        raise TypeError(f"{op}(): expected rotations to be a floating tensor, but got "
                        f"{rotations.dtype}")
    if rotations.dim() != 3 or tuple(rotations.shape[1:]) != (3, 3):
        raise ValueError(f"{op}(): expected rotations to have shape [M, 3, 3], but got shape "
                         f"{list(rotations.shape)}")
    if shifts is not None:
        check_tensor(op, "shifts", shifts)
        if shifts.dtype != rotations.dtype:
            raise TypeError(f"{op}(): expected shifts to have the dtype of rotations "
                            f"({rotations.dtype}), but got {shifts.dtype}")
        if shifts.device != rotations.device:
            raise ValueError(f"{op}(): expected shifts to be on the device of rotations "
                             f"({rotations.device}), but got {shifts.device}")
        if tuple(shifts.shape) != (rotations.shape[0], 3):
            raise ValueError(f"{op}(): expected shifts to have shape [M, 3] = "
                             f"[{rotations.shape[0]}, 3], but got shape {list(shifts.shape)}")
    if isinstance(detector_size, bool):
        raise TypeError(f"{op}(): expected detector_size to be an int, but got bool")
    try:
        n = operator.index(detector_size)
    except TypeError:
        raise TypeError(f"{op}(): expected detector_size to be an int, but got "
                        f"{detector_size!r} ({type(detector_size).__name__})") from None
    if n < 1:
        raise ValueError(f"{op}(): expected detector_size >= 1, but got {n}")
    return n


def parallel_beam_rays(rotations: Tensor, shifts: Tensor | None,
                       detector_size: int) -> tuple[Tensor, Tensor]:
    """Origins and directions of a parallel-beam tilt series (specs/render.md).

    Pixel ``(i, j)`` of projection ``m``: ``o = R_m·(x_j, y_i, 0) + shift_m``, ``d = R_m·e_z``,
    with ``x = 2j/(n − 1) − 1`` and ``y = 2i/(n − 1) − 1`` for ``n = detector_size`` (0 for
    ``n = 1``).

    Args:
        rotations: ``[M, 3, 3]`` floating. Differentiable.
        shifts: ``[M, 3]`` (rotations' dtype and device) or None. Differentiable.
        detector_size: pixels per side, an int >= 1.

    Returns:
        ``(origins, directions)``, each ``[M·n·n, 3]`` in (m, i, j) order.
    """
    n = _check_geometry(rotations, shifts, detector_size)
    grid = (torch.arange(n, dtype=rotations.dtype, device=rotations.device) * (2.0 / (n - 1)) - 1.0
            if n > 1 else rotations.new_zeros(1))
    y, x = torch.meshgrid(grid, grid, indexing="ij")
    pixels = torch.stack([x, y, torch.zeros_like(x)], dim=-1).reshape(-1, 3)  # [n·n, 3]
    origins = torch.einsum("mij,pj->mpi", rotations, pixels)
    if shifts is not None:
        origins = origins + shifts[:, None, :]
    directions = rotations[:, :, 2][:, None, :].expand(-1, n * n, -1)
    return origins.reshape(-1, 3), directions.reshape(-1, 3)
