# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch oracle of the parallel-beam projectors (``fieldfuse.project`` / ``backproject``).

Written from the contract, not from the kernels: for each projection the sample points are built
in world coordinates (the ray of pixel (i, j) meets the centre plane of every slice of the dominant
axis), converted to index coordinates, and interpolated bilinearly with zero padding by explicit
indexing; the back projection is the autograd gradient of the projection, so it is the transpose
by construction. Meant for float64 and small sizes (it holds every sample of a projection at once)
and for finite inputs (out-of-slice corners are read clamped and masked by a zero weight).

>>> import torch
>>> from fieldfuse.reference import project as ref
>>> volume = torch.rand(4, 5, 6, dtype=torch.float64)
>>> identity = torch.eye(3, dtype=torch.float64)[None]
>>> bool(torch.allclose(ref.project(volume, identity), volume.sum(0) * 2 / 4))
True
>>> stack = torch.rand(1, 5, 6, dtype=torch.float64)
>>> back = ref.backproject(stack, identity, volume_shape=(4, 5, 6))
>>> bool(torch.allclose((ref.project(volume, identity) * stack).sum(), (volume * back).sum()))
True
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["backproject", "dominant_axis", "project"]


def _centres(count: int, like: Tensor) -> Tensor:
    """Cell centres of `count` cells on [-1, 1] (align_corners=False)."""
    return -1 + (2 * torch.arange(count, dtype=like.dtype, device=like.device) + 1) / count


def dominant_axis(direction: Tensor) -> int:
    """The volume dim (0 = z, 1 = y, 2 = x) along which the ray `direction` (world x, y, z) moves
    fastest; a tie goes to z, then y."""
    z, y, x = (abs(float(direction[c])) for c in (2, 1, 0))
    axis, best = 0, z
    if y > best:
        axis, best = 1, y
    if x > best:
        axis = 2
    return axis


def _bilinear(slices: Tensor, index_b: Tensor, index_c: Tensor) -> Tensor:
    """Bilinear interpolation of slices [K, Nb, Nc] at per-slice points index_b, index_c
    [K, ...], zero outside each slice."""
    k_count, nb, nc = slices.shape
    k = torch.arange(k_count, device=slices.device).view(-1, *([1] * (index_b.dim() - 1)))
    k = k.expand_as(index_b)
    floor_b, floor_c = index_b.floor(), index_c.floor()
    fb, fc = index_b - floor_b, index_c - floor_c
    out = torch.zeros_like(index_b)
    for db, wb in ((0, 1 - fb), (1, fb)):
        for dc, wc in ((0, 1 - fc), (1, fc)):
            ib = floor_b.long() + db
            ic = floor_c.long() + dc
            inside = (ib >= 0) & (ib < nb) & (ic >= 0) & (ic < nc)
            value = slices[k, ib.clamp(0, nb - 1), ic.clamp(0, nc - 1)]
            out = out + torch.where(inside, wb * wc, torch.zeros_like(wb)) * value
    return out


def _project_one(volume: Tensor, rotation: Tensor, shift: Tensor, detector: tuple) -> Tensor:
    height, width = detector
    sizes = volume.shape  # (D, H, W) = sizes along z, y, x
    direction = rotation[:, 2]
    a = dominant_axis(direction)
    b, c = [q for q in range(3) if q != a]
    world = {q: 2 - q for q in range(3)}  # volume dim q is world component 2 - q
    u = _centres(width, volume) - shift[0]
    v = _centres(height, volume) - shift[1]
    # Ray origins on the detector plane t = 0, [Hd, Wd, 3] in world (x, y, z).
    origins = u[None, :, None] * rotation[:, 0] + v[:, None, None] * rotation[:, 1]
    planes = _centres(sizes[a], volume)  # world coordinate of each slice's centre plane
    da = direction[world[a]]
    t = (planes[:, None, None] - origins[None, ..., world[a]]) / da  # [N_a, Hd, Wd]
    points = origins[None] + t[..., None] * direction  # [N_a, Hd, Wd, 3]

    def index(q):
        return (points[..., world[q]] + 1) * sizes[q] / 2 - 0.5

    slices = volume.permute(a, b, c)
    delta = (2 / sizes[a]) / da.abs()
    return delta * _bilinear(slices, index(b), index(c)).sum(0)


def project(volume: Tensor, rotations: Tensor, shifts: Tensor | None = None,
            detector_shape: tuple | None = None) -> Tensor:
    """Forward projection ``[n, Hd, Wd]`` of ``volume [D, H, W]`` (contract of
    :func:`fieldfuse.project`)."""
    detector = tuple(detector_shape) if detector_shape is not None else tuple(volume.shape[1:])
    if shifts is None:
        shifts = rotations.new_zeros(rotations.shape[0], 2)
    if 0 in volume.shape:
        return volume.new_zeros(rotations.shape[0], *detector)
    if rotations.shape[0] == 0 or 0 in detector:
        return volume.new_zeros(rotations.shape[0], *detector)
    return torch.stack([_project_one(volume, r, s, detector)
                        for r, s in zip(rotations, shifts, strict=True)])


def backproject(projections: Tensor, rotations: Tensor, shifts: Tensor | None = None, *,
                volume_shape: tuple) -> Tensor:
    """Back projection ``[D, H, W]``: the gradient of ``<project(x), projections>`` in x, the
    exact transpose of :func:`project`."""
    x = projections.new_zeros(tuple(volume_shape), requires_grad=True)
    with torch.enable_grad():
        forward = project(x, rotations, shifts, tuple(projections.shape[1:]))
    if not forward.requires_grad:  # an empty volume, detector or stack: nothing to spread
        return torch.zeros(tuple(volume_shape), dtype=projections.dtype, device=projections.device)
    (grad,) = torch.autograd.grad(forward, x, projections)
    return grad
