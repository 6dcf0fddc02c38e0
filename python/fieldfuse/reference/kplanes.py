# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch oracles for the K-Planes family, written straight from specs/kplanes.md.

Each function here spells out the contract of the fused op of the same name in `fieldfuse` with
plain torch operations (einsum rotate → `F.grid_sample` → product over planes → concatenation):
it is differentiable through autograd to every tensor input, runs on any device and in any
floating dtype, and imports nothing from `fieldfuse`, so it stays an independent check of the
kernels. Call it in float64 to get an oracle.

Conventions shared by every function:

- Points are `(x, y, z)`; a level is a logical-NCHW tensor `[3T, C, H, W]` with plane index
  `k = 3t + p` (T = 1 for the axis-aligned variant).
- Sampling is `F.grid_sample(mode="bilinear", align_corners=True, padding_mode="border")`:
  `ix = (gx + 1)/2·(W − 1)`, `iy = (gy + 1)/2·(H − 1)`, each clamped to the plane, so a
  coordinate outside [−1, 1] reads the border. `gx` indexes W and `gy` indexes H.
- PyTorch's clip semantics hold for the coordinate gradient: `∂ix/∂gx = (W − 1)/2` only when
  strictly `0 < ix < W − 1`, else 0 (likewise iy), so a coordinate exactly on ±1 or outside gets
  a zero gradient, and so does every coordinate of a size-1 axis.
- Features are the product of the three plane samples, then concatenated **level-major, then
  tilt-major, channel fastest**: column `offset_l + t·C_l + c` with `offset_l = T·Σ_{m<l} C_m`.

Example:
    >>> import torch
    >>> from fieldfuse.reference import kplanes
    >>> pts = torch.tensor([[0.0, 0.0, 0.0]], dtype=torch.float64)
    >>> planes = [torch.full((3, 2, 4, 4), 0.5, dtype=torch.float64)]  # T = 1, C = 2
    >>> kplanes.kplanes_tilted(pts, torch.eye(3, dtype=torch.float64)[None], planes)
    tensor([[0.1250, 0.1250]], dtype=torch.float64)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "kplanes_tilted",
    "kplanes",
    "kplanes_tilted_taps",
    "tv_tap_coords",
    "plane_tv",
    "volume_tv_from_taps",
]

# (gx, gy) as indices into the rotated point r, per plane p: "XY", "ZX", "YZ".
_TILTED_PAIRS = ((0, 1), (2, 0), (1, 2))
# The axis-aligned variant reads plane 1 as (x, z), not (z, x): the two are not interchangeable.
_AXIS_PAIRS = ((0, 1), (0, 2), (1, 2))

_NORMS = ("mean", "percell")


def _fail_shape(op: str, name: str, layout: str, value: torch.Tensor) -> None:
    raise ValueError(
        f"{op}(): expected {name} to have shape {layout}, but got shape {list(value.shape)}"
    )


def _check_tensor(op: str, name: str, value: object) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{op}(): expected {name} to be a torch.Tensor, but got {type(value).__name__}"
        )


def _check_pts(op: str, pts: object) -> None:
    _check_tensor(op, "pts", pts)
    if pts.dim() != 2 or pts.shape[1] != 3:
        _fail_shape(op, "pts", "[B, 3]", pts)


def _check_levels(op: str, planes: Sequence[torch.Tensor], num_tilts: int) -> None:
    if len(planes) == 0:
        raise ValueError(f"{op}(): expected planes to hold at least one level, but got none")
    for level, grid in enumerate(planes):
        _check_tensor(op, f"planes[{level}]", grid)
        if grid.dim() != 4 or grid.shape[0] != 3 * num_tilts:
            _fail_shape(op, f"planes[{level}]", f"[3T = {3 * num_tilts}, C, H, W]", grid)


def _check_tilted(op: str, pts: object, rotations: object, planes) -> None:
    _check_pts(op, pts)
    _check_tensor(op, "rotations", rotations)
    if rotations.dim() != 3 or rotations.shape[1:] != (3, 3):
        _fail_shape(op, "rotations", "[T, 3, 3]", rotations)
    _check_levels(op, planes, rotations.shape[0])


def _gate_list(op: str, gates, num_levels: int) -> list:
    if gates is None:
        return [None] * num_levels
    if len(gates) != num_levels:
        raise ValueError(
            f"{op}(): expected gates to have one entry per level ({num_levels}), "
            f"but got {len(gates)}"
        )
    return list(gates)


def _rotate(pts: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    # r[t, b] = R_t · p_b, row-major R_t.
    return torch.einsum("tij,bj->tbi", rotations, pts)


def _level_features(coords: torch.Tensor, grid: torch.Tensor, pairs) -> torch.Tensor:
    """`[T, B, 3]` plane-frame points and a `[3T, C, H, W]` level → `[B, T·C]`, column t·C + c."""
    num_tilts, batch = coords.shape[:2]
    # [T, B, 3 planes, 2] → [3T, B, 1, 2]: plane k = 3t + p samples at (gx, gy) of its pair.
    uv = torch.stack([coords[..., list(pair)] for pair in pairs], dim=2)
    uv = uv.transpose(1, 2).reshape(3 * num_tilts, batch, 1, 2)
    # [3T, C, B, 1]
    samples = F.grid_sample(grid, uv, mode="bilinear", padding_mode="border", align_corners=True)
    channels = grid.shape[1]
    product = samples.reshape(num_tilts, 3, channels, batch).prod(dim=1)  # [T, C, B]
    return product.permute(2, 0, 1).reshape(batch, num_tilts * channels)


def _features(coords: torch.Tensor, planes, pairs, gates) -> torch.Tensor:
    blocks = []
    for grid, gate in zip(planes, gates, strict=True):
        block = _level_features(coords, grid, pairs)
        blocks.append(block if gate is None else block * gate)
    return torch.cat(blocks, dim=1)


def kplanes_tilted(
    pts: torch.Tensor,
    rotations: torch.Tensor,
    planes: Sequence[torch.Tensor],
    gates: Sequence[float] | torch.Tensor | None = None,
) -> torch.Tensor:
    """Tilted K-Planes features: T rotations, each with its own 3 planes, over L levels.

    Per level l, point b, tilt t and channel c, with `r = R_t · p`:
    plane p=0 "XY" samples at `(gx, gy) = (r_x, r_y)`, p=1 "ZX" at `(r_z, r_x)` and p=2 "YZ" at
    `(r_y, r_z)`, and `f[b, offset_l + t·C_l + c] = gate_l · Π_{p=0..2} sample(3t+p, c, gx, gy)`.

    Args:
        pts: `[B, 3]` points (x, y, z), nominally in [−1, 1]³; outside values read the border.
            Differentiable.
        rotations: `[T, 3, 3]`, row-major, `r = R_t · p`; not assumed orthogonal.
            Differentiable.
        planes: sequence of L ≥ 1 levels, level l `[3T, C_l, H_l, W_l]` (logical NCHW, plane
            k = 3t + p). Differentiable.
        gates: optional per-level scalars multiplied into that level's features: a sequence of
            L floats or a tensor `[L]` (differentiable if it requires grad).

    Returns:
        `[B, T·Σ_l C_l]`: level-major, then tilt-major, channel fastest.
    """
    op = "kplanes_tilted"
    _check_tilted(op, pts, rotations, planes)
    gates = _gate_list(op, gates, len(planes))
    return _features(_rotate(pts, rotations), planes, _TILTED_PAIRS, gates)


def kplanes(pts: torch.Tensor, planes: Sequence[torch.Tensor]) -> torch.Tensor:
    """Axis-aligned K-Planes features over L levels.

    Plane pairs `(gx, gy)` are `(p0, p1)`, `(p0, p2)`, `(p1, p2)`: plane 1 is (x, z), not the
    tilted (z, x), so this is **not** `kplanes_tilted` with an identity rotation. Same sampling,
    product and level concatenation: `f[b, offset_l + c] = Π_p sample(p, c, gx, gy)`.

    Args:
        pts: `[B, 3]` points (x, y, z); outside [−1, 1] reads the border. Differentiable.
        planes: sequence of L ≥ 1 levels, level l `[3, C_l, H_l, W_l]`. Differentiable.

    Returns:
        `[B, Σ_l C_l]`, level-major, channel fastest.
    """
    op = "kplanes"
    _check_pts(op, pts)
    _check_levels(op, planes, 1)
    return _features(pts[None], planes, _AXIS_PAIRS, [None] * len(planes))


def tv_tap_coords(pts: torch.Tensor, h: float) -> torch.Tensor:
    """The volume-TV tap points `[4, B, 3]`: tap 0 is `pts`, tap i = 1..3 is `pts + h·e_i`.

    Args:
        pts: `[B, 3]` points (x, y, z). Differentiable.
        h: step, a constant.
    """
    _check_pts("tv_tap_coords", pts)
    steps = torch.cat([pts.new_zeros(1, 3), torch.eye(3, dtype=pts.dtype, device=pts.device)])
    return pts[None] + h * steps[:, None, :]


def kplanes_tilted_taps(
    pts: torch.Tensor,
    rotations: torch.Tensor,
    planes: Sequence[torch.Tensor],
    h: float,
    gates: Sequence[float] | torch.Tensor | None = None,
) -> torch.Tensor:
    """`kplanes_tilted` at the four volume-TV taps of every point, in one call.

    Tap 0 is `kplanes_tilted(pts, rotations, planes, gates)` (bit-identical: same code path);
    taps i = 1..3 are the features at `pts + h·e_i` (i = x, y, z), with the rotated point formed
    as the spec writes it, `R(p + h e_i) = R p + h·R[:, i]`. This equals
    `kplanes_tilted(tv_tap_coords(pts, h)[i], ...)` up to the rounding of that identity.
    Gradients flow through all taps to planes, rotations (including the `h·R[:, i]` term), points
    and tensor gates; `h` is a constant.

    Args:
        pts, rotations, planes, gates: as in `kplanes_tilted`.
        h: tap step, a finite float (the spec uses one finest-plane cell, `2 / min(resolution)`).

    Returns:
        `[4, B, T·Σ_l C_l]`.
    """
    op = "kplanes_tilted_taps"
    _check_tilted(op, pts, rotations, planes)
    if not math.isfinite(h):
        raise ValueError(f"{op}(): expected h to be finite, but got {h}")
    gates = _gate_list(op, gates, len(planes))
    base = _rotate(pts, rotations)  # [T, B, 3]
    taps = [base] + [base + h * rotations[:, None, :, i] for i in range(3)]
    return torch.stack([_features(r, planes, _TILTED_PAIRS, gates) for r in taps])


def _mean_square_diff(grid: torch.Tensor, dim: int) -> torch.Tensor:
    """Per plane k: mean over (c, h, w) of the squared forward difference along `dim`."""
    diffs = torch.diff(grid, dim=dim).flatten(1)  # [3T, C·(H−1)·W] or [3T, C·H·(W−1)]
    # A size-1 axis has no differences: it contributes 0 rather than 0/0.
    return diffs.square().sum(dim=1) / max(diffs.shape[1], 1)


def plane_tv(planes: Sequence[torch.Tensor], num_tilts: int, norm: str = "mean") -> torch.Tensor:
    """Smoothness of the feature planes: squared forward differences along H and W.

    For each level and each of its 3T planes k:
    `TV_k = mean_{c, h<H−1, w}(ΔH)² + mean_{c, h, w<W−1}(ΔW)²` (denominators `C(H−1)W` and
    `CH(W−1)`); `level = (1/T)·Σ_k TV_k`; `L = Σ_levels level`. The spec's axis-aligned rule
    (T = 1, 3 planes: `level = Σ_k TV_k`) is this same formula at `num_tilts = 1`, so both
    variants go through one code path and need no flag. `norm="percell"` multiplies each level by
    `H_l·W_l / max_l(H_l·W_l)`. A size-1 axis (H or W = 1) has no differences and contributes 0.

    Args:
        planes: sequence of L ≥ 1 levels, level l `[3T, C_l, H_l, W_l]`. Differentiable.
        num_tilts: T (1 for the axis-aligned variant).
        norm: `"mean"` or `"percell"`.

    Returns:
        0-d tensor of the planes' dtype.
    """
    op = "plane_tv"
    if norm not in _NORMS:
        raise ValueError(f"{op}(): expected norm to be one of {_NORMS}, but got {norm!r}")
    if num_tilts < 1:
        raise ValueError(f"{op}(): expected num_tilts to be >= 1, but got {num_tilts}")
    _check_levels(op, planes, num_tilts)
    max_cells = max(grid.shape[2] * grid.shape[3] for grid in planes)
    total = planes[0].new_zeros(())
    for grid in planes:
        per_plane = _mean_square_diff(grid, 2) + _mean_square_diff(grid, 3)  # [3T]
        level = per_plane.sum() / num_tilts
        if norm == "percell":
            level = level * (grid.shape[2] * grid.shape[3] / max_cells)
        total = total + level
    return total


def volume_tv_from_taps(tap_densities: torch.Tensor, h: float, weight: float) -> torch.Tensor:
    """Volume TV from densities at the four taps of `kplanes_tilted_taps`.

    `grad_i = (ρ(p + h e_i) − ρ(p)) / h` for i = x, y, z, and
    `L = weight · mean_{n,c} sqrt(Σ_i grad_i²)`, with no eps: the gradient is NaN wherever all
    three differences are zero, as in the spec.

    Args:
        tap_densities: `[4, N, C]` or `[4, N]`, tap-major (tap 0 at p). Differentiable.
        h: the tap step used for the taps, a finite nonzero float.
        weight: loss weight.

    Returns:
        0-d tensor of `tap_densities`' dtype.
    """
    op = "volume_tv_from_taps"
    _check_tensor(op, "tap_densities", tap_densities)
    if tap_densities.dim() not in (2, 3) or tap_densities.shape[0] != 4:
        _fail_shape(op, "tap_densities", "[4, N, C] or [4, N]", tap_densities)
    if not (math.isfinite(h) and h != 0.0):
        raise ValueError(f"{op}(): expected h to be finite and nonzero, but got {h}")
    grads = (tap_densities[1:] - tap_densities[0]) / h
    return weight * grads.square().sum(dim=0).sqrt().mean()
