# SPDX-License-Identifier: Apache-2.0
"""Tomographic reconstruction on a voxel grid: :func:`sirt`, :func:`fbp` and the tilt poses
:func:`tilt_rotations` (the C++ implementation of ``include/fieldfuse/tomo.h``, shared with the
``fieldfuse`` CLI; docs/tomo.md has the formulas).

These are solvers, not differentiable ops: they run under ``torch.no_grad()``, return new tensors
that do not require grad, and never record autograd history. Geometry is the projectors'
(:func:`fieldfuse.project`, :func:`fieldfuse.backproject`): ``volume [D, H, W]`` fills the box
[-1, 1]³, ``projections [n, Hd, Wd]`` the detector [-1, 1]², pose m is ``rotations[m]`` (applied as
R·p) with optional ``shifts[m]`` = (s_u, s_v).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from ._backend import _C, check_tensor, dl, float_list, real_number, stream_of, workspace

__all__ = ["fbp", "sirt", "tilt_rotations"]


def _shape3(op: str, volume_shape) -> tuple[int, int, int]:
    """volume_shape as three ints: the output is allocated from it before the C++ front runs."""
    if isinstance(volume_shape, (str, bytes)) or not isinstance(volume_shape, Sequence):
        raise TypeError(f"{op}(): expected volume_shape to be a sequence of 3 ints (D, H, W), but "
                        f"got {type(volume_shape).__name__}")
    if len(volume_shape) != 3 or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                         for s in volume_shape):
        raise ValueError(f"{op}(): expected volume_shape to be 3 ints (D, H, W), but got "
                         f"{tuple(volume_shape)!r}")
    if any(int(s) < 0 for s in volume_shape):
        raise ValueError(f"{op}(): expected volume_shape to have sizes >= 0, but got "
                         f"{tuple(int(s) for s in volume_shape)!r}")
    return tuple(int(s) for s in volume_shape)


def _inputs(op: str, projections, rotations, shifts) -> None:
    check_tensor(op, "projections", projections)
    check_tensor(op, "rotations", rotations)
    if shifts is not None:
        check_tensor(op, "shifts", shifts)


def _optional(shifts: Tensor | None):
    return None if shifts is None else dl(shifts.detach())


@torch.no_grad()
def sirt(projections: Tensor, rotations: Tensor, shifts: Tensor | None = None, *,
         volume_shape: Sequence[int], iterations: int = 50, relaxation: float = 1.0,
         positivity: bool = False, initial: Tensor | None = None) -> Tensor:
    """SIRT reconstruction ``x ← x + λ·C·Aᵀ·R·(b − A·x)`` with the projector A.

    R = diag(1 / A·1) and C = diag(1 / Aᵀ·1), each 0 where the sum is 0 (pixels whose ray misses the
    volume, voxels no ray reaches: those keep their value).

    Args:
        projections: b ``[n, Hd, Wd]``, float32 or float64, CPU or CUDA (any strides).
        rotations: ``[n, 3, 3]``, same dtype and device. shifts: ``[n, 2]`` or None.
        volume_shape: ``(D, H, W)`` of the result.
        iterations: >= 0 (0 returns the initial estimate). relaxation: λ in (0, 2).
        positivity: clamp the estimate at 0 after every update.
        initial: ``[D, H, W]`` starting estimate (copied, not modified); None: zeros.

    Returns:
        A new ``[D, H, W]`` tensor of projections' dtype and device (no autograd). Deterministic;
        NaN in projections spreads to the voxels its rays reach.
    """
    op = "sirt"
    _inputs(op, projections, rotations, shifts)
    shape = _shape3(op, volume_shape)
    if not isinstance(iterations, numbers.Integral) or isinstance(iterations, bool):
        raise TypeError(f"{op}(): expected iterations to be an int, but got "
                        f"{type(iterations).__name__}")
    if not isinstance(positivity, bool):
        raise TypeError(f"{op}(): expected positivity to be a bool, but got "
                        f"{type(positivity).__name__}")
    relaxation = real_number(op, "relaxation", relaxation)
    if initial is None:
        volume = projections.new_zeros(shape)
    else:
        check_tensor(op, "initial", initial)
        # The solver updates its volume in place: a private contiguous copy keeps `initial` intact
        # (its dtype and device are checked by the C++ front, as the volume's).
        if tuple(initial.shape) != shape:
            raise ValueError(f"{op}(): expected initial to have shape volume_shape {list(shape)}, "
                             f"but got shape {list(initial.shape)}")
        volume = initial.detach().clone(memory_format=torch.contiguous_format)
    b = projections.detach()
    scratch = workspace(_C.sirt_workspace_size(dl(b), dl(volume)), b.device)
    _C.sirt(dl(b), dl(rotations.detach()), _optional(shifts), int(iterations), relaxation,
            positivity, dl(volume), dl(scratch), stream_of(b))
    return volume


@torch.no_grad()
def fbp(projections: Tensor, rotations: Tensor, shifts: Tensor | None = None, *,
        volume_shape: Sequence[int], filter: str = "ramp") -> Tensor:
    """Filtered back-projection: each detector column (along v, the height) is filtered, then back
    projected with :func:`fieldfuse.backproject`, weighted by its projection's angular interval, so
    FBP of complete noiseless data reproduces the density.

    Args:
        projections: ``[n, Hd, Wd]`` float32, CPU or CUDA (any strides).
        rotations: ``[n, 3, 3]`` float32. shifts: ``[n, 2]`` or None.
        volume_shape: ``(D, H, W)`` of the result.
        filter: ``"ramp"`` (Ram-Lak), ``"shepp-logan"`` or ``"hann"``.

    Returns:
        A new ``[D, H, W]`` float32 tensor (no autograd). Deterministic. A NaN pixel makes its
        filtered column NaN, which spreads to every voxel that column's rays reach.
    """
    op = "fbp"
    _inputs(op, projections, rotations, shifts)
    shape = _shape3(op, volume_shape)
    if not isinstance(filter, str):
        raise TypeError(f"{op}(): expected filter to be a str, but got {type(filter).__name__}")
    b = projections.detach()
    volume = b.new_empty(shape)  # every element is written
    scratch = workspace(_C.fbp_workspace_size(dl(b), dl(volume)), b.device)
    _C.fbp(dl(b), dl(rotations.detach()), _optional(shifts), filter, dl(volume), dl(scratch),
           stream_of(b))
    return volume


def tilt_rotations(angles_degrees, z1=None, z3=None) -> Tensor:
    """Poses ``R = Rz(−z1)·Rx(tilt)·Rz(−z3)`` of a tilt series, ``[n, 3, 3]`` float64 on the CPU.

    Angles in degrees (specs/tomography.md). ``angles_degrees``: n tilts (a sequence or a 1-D
    tensor); ``z1``, ``z3``: in-plane angles, a number for all projections, n numbers, or None (0).
    With z1 = z3 = 0 the tilt axis is x, the detector's u axis.
    """
    op = "tilt_rotations"
    if isinstance(angles_degrees, Tensor):
        angles_degrees = angles_degrees.detach().reshape(-1).tolist()
    tilts = float_list(op, "angles_degrees", angles_degrees)

    def per_projection(arg: str, value) -> list[float]:
        if value is None:
            return [0.0] * len(tilts)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return [float(value)] * len(tilts)
        if isinstance(value, Tensor):
            value = value.detach().reshape(-1).tolist()
        values = float_list(op, arg, value)
        if len(values) != len(tilts):
            raise ValueError(f"{op}(): expected {arg} to have {len(tilts)} values (one per tilt), "
                             f"but got {len(values)}")
        return values

    z1s, z3s = per_projection("z1", z1), per_projection("z3", z3)
    rows = [_C.tilt_rotation(t, a, c) for t, a, c in zip(tilts, z1s, z3s)]
    return torch.tensor(rows, dtype=torch.float64).reshape(len(tilts), 3, 3)
