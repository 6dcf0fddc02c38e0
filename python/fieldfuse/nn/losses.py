# SPDX-License-Identifier: Apache-2.0
"""Regularisation losses for neural fields, built on the outputs of the `fieldfuse.nn` modules."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

__all__ = ["volume_tv_from_taps"]


def volume_tv_from_taps(tap_densities: Tensor, h: float, weight: float | Tensor = 1.0) -> Tensor:
    """Volume total variation from densities at the four finite-difference taps of each point.

    With ``ρ_0 = ρ(p)`` and ``ρ_i = ρ(p + h·e_i)`` (i = x, y, z, taps 1..3, the layout of
    :func:`fieldfuse.kplanes_tilted_taps` and of ``forward_with_tv_taps`` of the modules):
    ``grad_i = (ρ_i − ρ_0) / h`` and ``L = weight · mean_{n,c} sqrt(Σ_i grad_i²)``, with no eps
    (specs/kplanes.md), so the value equals :func:`fieldfuse.reference.kplanes.volume_tv_from_taps`.

    Gradient at the kink: where all three differences of a point are exactly zero, the square
    root is not differentiable; this function uses the subgradient 0 there (the convention of
    ``torch.linalg.vector_norm``) instead of the NaN that differentiating ``sqrt`` literally gives
    (as the float64 reference does). Flat regions (densities clamped at 0, planes read at the
    border) therefore do not poison the planes with NaN. Everywhere else the gradient is the
    reference's.

    Args:
        tap_densities: ``[4, N, C]`` or ``[4, N]``, tap-major (tap 0 at p), any floating dtype and
            device. Differentiable.
        h: the tap step the taps were taken with; a finite, nonzero float (a constant).
        weight: loss weight, a real number or a 0-d tensor (then differentiable).

    Returns:
        0-d tensor of ``tap_densities``' dtype. ``N = 0`` gives NaN (the mean of nothing), as the
        reference does.

    Raises:
        TypeError: ``tap_densities`` is not a tensor, ``h`` or ``weight`` is not a real number.
        ValueError: wrong shape of ``tap_densities``, or ``h`` not finite or zero.
    """
    op = "volume_tv_from_taps"
    if not isinstance(tap_densities, Tensor):
        raise TypeError(
            f"{op}(): expected tap_densities to be a torch.Tensor, but got "
            f"{type(tap_densities).__name__}"
        )
    if tap_densities.dim() not in (2, 3) or tap_densities.shape[0] != 4:
        raise ValueError(
            f"{op}(): expected tap_densities to have shape [4, N, C] or [4, N] (tap 0 at p, taps "
            f"1..3 at p + h·e_x, e_y, e_z), but got shape {list(tap_densities.shape)}"
        )
    if isinstance(h, bool) or not isinstance(h, numbers.Real):
        raise TypeError(f"{op}(): expected h to be a real number, but got {type(h).__name__}")
    if not (math.isfinite(h) and h != 0.0):
        raise ValueError(f"{op}(): expected h to be finite and nonzero, but got {h}")
    if not isinstance(weight, Tensor) and (
        isinstance(weight, bool) or not isinstance(weight, numbers.Real)
    ):
        raise TypeError(
            f"{op}(): expected weight to be a real number or a 0-d tensor, but got "
            f"{type(weight).__name__}"
        )
    grads = (tap_densities[1:] - tap_densities[0]) / float(h)  # [3, N(, C)]
    return weight * torch.linalg.vector_norm(grads, dim=0).mean()
