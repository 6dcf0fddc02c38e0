# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch oracles for the total-variation family, written straight from specs/tv.md.

Each function here is the contract of the fused op of the same name in `fieldfuse`, spelled out
with plain torch operations: it is differentiable through autograd, runs on any device and in any
floating dtype, and imports nothing from `fieldfuse`, so it stays an independent check of the
kernels. Call it in float64 to get an oracle; in lower precision it only shows what a naive
PyTorch implementation would return.

All of them use forward differences `Δd v[i,j,k] = v[i+1,j,k] − v[i,j,k]` (likewise Δh on j and
Δw on k) over the trailing axes, and treat leading dims as independent slices whose terms are
summed (or averaged) together. Autograd through `abs` uses sign(0) = 0, the convention the kernels
follow.

Example:
    >>> import torch
    >>> from fieldfuse.reference import tv
    >>> vol = torch.tensor([[[0.0, 1.0, 3.0]]], dtype=torch.float64)  # D = H = 1, W = 3
    >>> tv.tv_sq_3d(vol)
    tensor(5., dtype=torch.float64)
    >>> tv.tv_l1_3d(vol)
    tensor([0., 0., 3.], dtype=torch.float64)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["tv_sq_3d", "tv_iso_3d", "tv_l1_3d", "tv_weighted_l1"]

# The last three dims of a `[..., D, H, W]` volume, in the order of the spec's (Δd, Δh, Δw).
_VOLUME_DIMS = (-3, -2, -1)


def _check_tensor(op: str, name: str, value: object, min_dims: int, layout: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{op}(): expected {name} to be a torch.Tensor, but got {type(value).__name__}"
        )
    if value.dim() < min_dims:
        raise ValueError(
            f"{op}(): expected {name} to have at least {min_dims} dims {layout}, "
            f"but got shape {list(value.shape)}"
        )


def _check_volume(op: str, vol: object) -> None:
    _check_tensor(op, "vol", vol, 3, "[..., D, H, W]")


def tv_sq_3d(vol: torch.Tensor) -> torch.Tensor:
    """Squared anisotropic total variation of a volume (unnormalised).

    `S = Σ_n [ Σ_{i<D−1} Δd² + Σ_{j<H−1} Δh² + Σ_{k<W−1} Δw² ]`, summed over every leading slice
    n. Callers that want a mean apply `weight / numel` themselves. A size-1 (or empty) axis
    contributes 0.

    Args:
        vol: `[..., D, H, W]` floating tensor; differentiable.

    Returns:
        0-d tensor of `vol`'s dtype. Its gradient is
        `2·Σ_axes [(v − prev)·[prev exists] − (next − v)·[next exists]]` per voxel.
    """
    _check_volume("tv_sq_3d", vol)
    total = vol.new_zeros(())
    for dim in _VOLUME_DIMS:
        total = total + torch.diff(vol, dim=dim).square().sum()
    return total


def tv_iso_3d(vol: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Isotropic total variation of a volume, averaged over its corners.

    For every corner `(i, j, k)` with `i ≤ D−2, j ≤ H−2, k ≤ W−2` of every leading slice, the three
    differences are anchored at that same voxel and combined as
    `s = sqrt(Δd² + Δh² + Δw² + eps)` (eps inside the square root);
    `L = Σ s / N` with `N = B·(D−1)(H−1)(W−1)` and B the product of the leading dims.
    If any of D, H, W is below 2 there are no corners: L = 0 and the gradient is zero.

    Args:
        vol: `[..., D, H, W]` floating tensor; differentiable.
        eps: smoothing term, finite and >= 0. With eps = 0, a corner whose differences are all
            zero has an undefined (NaN) gradient.

    Returns:
        0-d tensor of `vol`'s dtype.
    """
    _check_volume("tv_iso_3d", vol)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"tv_iso_3d(): expected eps to be finite and >= 0, but got {eps}")
    # Crop each difference to the shared corner grid [..., D−1, H−1, W−1].
    dd = torch.diff(vol, dim=-3)[..., :, :-1, :-1]
    dh = torch.diff(vol, dim=-2)[..., :-1, :, :-1]
    dw = torch.diff(vol, dim=-1)[..., :-1, :-1, :]
    s = torch.sqrt(dd.square() + dh.square() + dw.square() + eps)
    # With no corners s is empty: its sum is a graph-connected 0 whose gradient is exactly 0.
    return s.sum() / max(s.numel(), 1)


def tv_l1_3d(vol: torch.Tensor) -> torch.Tensor:
    """Per-axis L1 total variation of a volume, as raw sums.

    Returns `[Σ|Δd|, Σ|Δh|, Σ|Δw|]` over all leading slices. The gradient uses sign(Δ) with
    sign(0) = 0, so a constant volume gets an exactly-zero gradient. Size-1 axes give 0. Callers
    that normalise divide by `N_d = B(D−1)HW`, `N_h = BD(H−1)W`, `N_w = BDH(W−1)`.

    Args:
        vol: `[..., D, H, W]` floating tensor; differentiable.

    Returns:
        Tensor of shape `[3]` and `vol`'s dtype.
    """
    _check_volume("tv_l1_3d", vol)
    return torch.stack([torch.diff(vol, dim=dim).abs().sum() for dim in _VOLUME_DIMS])


def tv_weighted_l1(array: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """Weighted per-axis L1 total variation (the ptychography object constraint).

    With `k = len(weights)` ∈ {2, 3} trailing axes of `array`,
    `L = Σ_a w_a · mean|Δ_a| / max(1, #{a : w_a > 0})`, where axes with `w_a == 0` are skipped
    and each mean runs over every difference along axis a, leading dims included. This is the
    spec's loop generalised to k trailing axes; `weights = (w_z, w_xy, w_xy)` on a `(slices, y, x)`
    array or `(w_xy, w_xy)` on a `(y, x)` array reproduce the ptychography constraint exactly.

    Args:
        array: `[..., *k axes]` floating tensor; differentiable. For a complex object, apply this
            to `abs()` and `angle()` with separate weights.
        weights: 2 or 3 finite, non-negative floats, one per trailing axis.

    Returns:
        0-d tensor of `array`'s dtype. The gradient uses sign(0) = 0.

    Raises:
        ValueError: for a bad `weights`, too few dims, or an axis with a nonzero weight that has
            no differences (size 0 or 1, or an empty leading dim), where PyTorch's mean would
            silently return NaN.
    """
    op = "tv_weighted_l1"
    if isinstance(weights, torch.Tensor):
        weights = weights.tolist()
    weights = [float(w) for w in weights]
    k = len(weights)
    if k not in (2, 3):
        raise ValueError(f"{op}(): expected weights to have 2 or 3 entries, but got {k}")
    for w in weights:
        if not (math.isfinite(w) and w >= 0.0):
            raise ValueError(f"{op}(): expected weights to be finite and >= 0, but got {weights}")
    _check_tensor(op, "array", array, k, f"[..., *{k} axes] for {k} weights")

    # An empty slice's sum: a 0 of array's dtype that stays in the autograd graph, so the
    # gradient is a zero tensor (not None) even when every weight is 0.
    loss = array.reshape(-1)[:0].sum()
    n = 0
    for axis, w in enumerate(weights):
        if w > 0:
            dim = array.dim() - k + axis
            diff = torch.diff(array, dim=dim)
            if diff.numel() == 0:
                raise ValueError(
                    f"{op}(): axis {dim} of array (shape {list(array.shape)}) has weight {w} but "
                    "no differences to penalise; give it weight 0"
                )
            n += 1
            loss = loss + w * diff.abs().mean()
    if n > 0:
        loss = loss / n
    return loss
