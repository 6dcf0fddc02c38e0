# SPDX-License-Identifier: Apache-2.0
"""Second-order K-Planes derivatives: the backward of the fused backward.

The fused kernels give exact first derivatives. Their own derivative (needed for double backward,
e.g. gradient penalties or Hessian-vector products in pose refinement) is formed here by PyTorch
autograd through a twice-differentiable restatement of the same math: bilinear taps written with
gathers and arithmetic (``F.grid_sample`` has no double backward), with PyTorch's border rule (a
coordinate on or beyond ±1 has zero coordinate gradient, to every order). It is exact but not
fused; it runs only when a second derivative is actually requested.
"""

from __future__ import annotations

import torch
from torch import Tensor

# (gx, gy) as indices into the rotated point, per plane: tilted "XY", "ZX", "YZ"; axis-aligned.
_TILTED_PAIRS = ((0, 1), (2, 0), (1, 2))
_AXIS_PAIRS = ((0, 1), (0, 2), (1, 2))


def _index(g: Tensor, size: int) -> Tensor:
    """The clamped continuous index of grid coordinate g; its derivative is (size − 1)/2 strictly
    inside the axis and 0 elsewhere (detach), as grid_sample's clip."""
    if size == 1:
        return torch.zeros_like(g)
    last = size - 1
    u = (g + 1) * 0.5 * last
    inside = (u > 0) & (u < last)
    return torch.where(inside, u, u.detach().clamp(0, last))


def _sample(plane: Tensor, gx: Tensor, gy: Tensor) -> Tensor:
    """Bilinear samples [..., C] of `plane` [C, H, W] at grid points (gx, gy) [...]."""
    _, height, width = plane.shape
    ix, iy = _index(gx, width), _index(gy, height)
    x0 = ix.detach().floor().long().clamp(0, width - 1)
    y0 = iy.detach().floor().long().clamp(0, height - 1)
    x1, y1 = (x0 + 1).clamp(max=width - 1), (y0 + 1).clamp(max=height - 1)
    tx, ty = (ix - x0)[..., None], (iy - y0)[..., None]
    values = plane.permute(1, 2, 0)  # [H, W, C]
    v00, v01, v10, v11 = values[y0, x0], values[y0, x1], values[y1, x0], values[y1, x1]
    return (1 - tx) * (1 - ty) * v00 + tx * (1 - ty) * v01 + (1 - tx) * ty * v10 + tx * ty * v11


def _positions(pts: Tensor, rotations: Tensor | None, tap: int, h: float) -> Tensor:
    """[T, B, 3] sample positions: R·p (+ h·R[:, tap − 1]); axis-aligned: p (+ h·e)."""
    if rotations is None:
        r = pts[None]
        if tap > 0:
            r = r + h * torch.eye(3, dtype=pts.dtype, device=pts.device)[tap - 1]
        return r
    r = torch.einsum("tij,bj->tbi", rotations, pts)
    if tap > 0:
        r = r + h * rotations[:, None, :, tap - 1]
    return r


def _features(positions: Tensor, planes, gates, tilted: bool) -> Tensor:
    pairs = _TILTED_PAIRS if tilted else _AXIS_PAIRS
    blocks = []
    for level, grid in enumerate(planes):
        per_tilt = []
        for t in range(positions.shape[0]):
            f = None
            for p, (a, b) in enumerate(pairs):
                s = _sample(grid[3 * t + p], positions[t, :, a], positions[t, :, b])
                f = s if f is None else f * s
            per_tilt.append(f)
        block = torch.cat(per_tilt, dim=1)
        blocks.append(block if gates is None else block * gates[level])
    return torch.cat(blocks, dim=1)


def features_and_taps(pts, tap_pts, rotations, planes, gates, h):
    """What the fused forward computes, twice differentiable: ([B, F] or None, [4, N, F] or None)."""
    tilted = rotations is not None
    features = None
    if pts is not None:
        features = _features(_positions(pts, rotations, 0, h), planes, gates, tilted)
    taps = None
    if tap_pts is not None:
        taps = torch.stack([
            _features(_positions(tap_pts, rotations, tap, h), planes, gates, tilted)
            for tap in range(4)
        ])
    return features, taps


_ROLES = ("pts", "tap_pts", "rotations")


def backward_of_backward(grad_outputs, inputs, planes, gates, h, wants, wants_planes, seeds,
                         plane_seeds):
    """The VJP of a fused backward (Note in the module docstring), in the kernels' roles.

    ``grad_outputs`` maps ``features`` / ``tap_features`` to the upstream gradients the backward
    received; ``inputs``, ``wants`` and ``seeds`` map the roles ``pts``, ``tap_pts`` and
    ``rotations`` the function has to its tensors, whether the backward returned their gradient,
    and the incoming gradient of that gradient; ``plane_seeds`` is the one of the plane gradients.
    Returns (gradient per grad output, gradient per role, plane gradients), None where none flows.
    """
    with torch.enable_grad():
        upstream = {k: g.detach().requires_grad_() for k, g in grad_outputs.items()}
        x = {role: inputs[role].detach().requires_grad_() if role in inputs else None
             for role in _ROLES}
        x_planes = [p.detach().requires_grad_() for p in planes]
        features, taps = features_and_taps(x["pts"], x["tap_pts"], x["rotations"], x_planes,
                                           gates, h)
        computed = {"features": features, "tap_features": taps}
        names = list(upstream)
        # The first derivatives the fused backward returned, rebuilt with a graph.
        targets = [r for r in _ROLES if r in inputs and wants[r]]
        first = torch.autograd.grad([computed[k] for k in names], [x[r] for r in targets]
                                    + (x_planes if wants_planes else []),
                                    [upstream[k] for k in names], create_graph=True)
        seed_list = [seeds[r] for r in targets] + (list(plane_seeds) if wants_planes else [])
        pairs = [(f, s) for f, s in zip(first, seed_list, strict=True) if s is not None]
        present = [r for r in _ROLES if r in inputs]
        variables = [upstream[k] for k in names] + [x[r] for r in present] + x_planes
        if not pairs:
            second = [None] * len(variables)
        else:
            second = torch.autograd.grad([f for f, _ in pairs], variables, [s for _, s in pairs],
                                         allow_unused=True)
    second = list(second)
    d_outputs = {k: second.pop(0) for k in names}
    d_inputs = {r: second.pop(0) for r in present}
    return d_outputs, d_inputs, second
