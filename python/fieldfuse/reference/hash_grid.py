# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch oracle of the hash-grid encoding, written straight from specs/mlp.md and
tiny-cuda-nn's documented layout (see `fieldfuse.hash_grid` for the contract).

Straightforward on purpose: one level at a time, every corner gathered with plain indexing, the
weights built from autograd-friendly operations, so first and second derivatives (to ``x`` and
``params``) come from PyTorch's autograd (which walks the table again for each order). It imports
nothing from the compiled extension. Call it in float64 to get an oracle. NaN coordinates are not
supported here (the fused op defines them).

Example:
    >>> import torch
    >>> from fieldfuse.reference import hash_grid as ref
    >>> ref.hash_grid_num_params(2, n_levels=2, log2_hashmap_size=8, base_resolution=4)
    80
    >>> params = torch.zeros(80, 2, dtype=torch.float64)
    >>> params[:, 0] = 1.0  # a constant first feature interpolates to 1 everywhere
    >>> x = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    >>> ref.hash_grid(x, params, n_levels=2, log2_hashmap_size=8, base_resolution=4)
    tensor([[1., 0., 1., 0.]], dtype=torch.float64)
"""

from __future__ import annotations

import dataclasses
import math
import struct

import torch

__all__ = ["Level", "hash_grid", "hash_grid_num_params", "levels"]

_PRIMES = (1, 2654435761, 805459861)
_MAX_DENSE = 2**31 - 1  # tiny-cuda-nn clamps a dense level's size to UINT32_MAX / 2


def _f32(value: float) -> float:
    """`value` rounded to float32 (tiny-cuda-nn evaluates the level scales in float32)."""
    return struct.unpack("f", struct.pack("f", value))[0]


@dataclasses.dataclass(frozen=True)
class Level:
    """One level's geometry: float32 scale, resolution, rows, first row, dense or hashed."""

    scale: float
    res: int
    rows: int
    offset: int
    dense: bool


def levels(n_input_dims: int, *, n_levels: int = 16, log2_hashmap_size: int = 19,
           base_resolution: int = 16, per_level_scale: float = 2.0) -> list[Level]:
    """Every level's geometry: ``scale_l = exp2f(l·log2f(b))·N − 1`` in float32,
    ``res_l = ceil(scale_l) + 1``, ``rows_l = min(next_multiple(res_l^D, 8), 2^T)``."""
    log2_b = _f32(math.log2(_f32(per_level_scale)))
    out, offset = [], 0
    for level in range(n_levels):
        scale = _f32(_f32(_f32(2.0 ** _f32(level * log2_b)) * base_resolution) - 1.0)
        res = math.ceil(scale) + 1
        dense = min(res**n_input_dims, _MAX_DENSE)
        rows = min((dense + 7) // 8 * 8, 2**log2_hashmap_size)
        out.append(Level(scale, res, rows, offset, res**n_input_dims <= rows))
        offset += rows
    return out


def hash_grid_num_params(n_input_dims: int, *, n_levels: int = 16, n_features_per_level: int = 2,
                         log2_hashmap_size: int = 19, base_resolution: int = 16,
                         per_level_scale: float = 2.0) -> int:
    """Rows of the params table (``n_features_per_level`` does not change it)."""
    table = levels(n_input_dims, n_levels=n_levels, log2_hashmap_size=log2_hashmap_size,
                   base_resolution=base_resolution, per_level_scale=per_level_scale)
    return sum(level.rows for level in table)


def _rows_of(vertices: torch.Tensor, level: Level) -> torch.Tensor:
    """Rows (within the level) of integer vertices ``[..., D]``."""
    if level.dense:
        index = torch.zeros_like(vertices[..., 0])
        for i in range(vertices.shape[-1]):
            index = index + vertices[..., i] * level.res**i
    else:
        index = torch.zeros_like(vertices[..., 0])
        for i in range(vertices.shape[-1]):
            index = index ^ ((vertices[..., i] * _PRIMES[i]) & 0xFFFFFFFF)
    return index % level.rows


def hash_grid(x: torch.Tensor, params: torch.Tensor, *, n_levels: int = 16,
              n_features_per_level: int = 2, log2_hashmap_size: int = 19,
              base_resolution: int = 16, per_level_scale: float = 2.0,
              interpolation: str = "linear") -> torch.Tensor:
    """``[B, L·F]`` features of ``x [B, D]`` (clamped to [0, 1]) from ``params [rows, F]``."""
    if interpolation not in ("linear", "smoothstep"):
        raise ValueError(f"unknown interpolation {interpolation!r}")
    dims = x.shape[1]
    table = levels(dims, n_levels=n_levels, log2_hashmap_size=log2_hashmap_size,
                   base_resolution=base_resolution, per_level_scale=per_level_scale)
    assert params.shape == (sum(level.rows for level in table), n_features_per_level)
    clamped = x.clamp(0.0, 1.0)  # autograd: gradient 1 inside [0, 1] (ends included), else 0
    corners = torch.tensor([[(c >> i) & 1 for i in range(dims)] for c in range(2**dims)],
                           device=x.device)
    features = []
    for level in table:
        pos = clamped * level.scale + 0.5
        cell = pos.detach().floor()
        t = pos - cell
        s = t * t * (3 - 2 * t) if interpolation == "smoothstep" else t
        vertices = cell.long()[:, None, :] + corners[None]  # [B, 2^D, D]
        upper = corners[None].to(x.dtype)
        weights = (upper * s[:, None, :] + (1 - upper) * (1 - s[:, None, :])).prod(-1)
        rows = level.offset + _rows_of(vertices, level)  # [B, 2^D]
        features.append((weights[..., None] * params[rows]).sum(1))
    return torch.cat(features, dim=1)
