# SPDX-License-Identifier: Apache-2.0
"""Rotation parameterisations of the tilted K-Planes fields: nearest rotation (special orthogonal
Procrustes, with its derivative), unit quaternions, and the default initial tilts."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["default_rotations", "nearest_rotation", "quaternion_to_rotation"]

# Default tilts t >= 1 turn by this angle about their own axis. Below π/4 no tilt is equivalent to
# another one up to the 24 axis permutations/sign flips that map a tilt's three planes onto
# themselves (their smallest nontrivial rotation is π/2), so every tilt adds new plane orientations.
_DEFAULT_TILT_ANGLE = math.pi / 5

# The golden angle spreads the default tilt axes over the sphere without clustering.
_GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))


class _NearestRotation(torch.autograd.Function):
    """Special orthogonal Procrustes: ``argmin_{R ∈ SO(3)} ||R − M||_F`` and its derivative.

    Note [Procrustes derivative]: with the SVD ``M = U S Vᵀ`` and ``d = sign(det(U Vᵀ))``, write
    ``U' = U·diag(1, 1, d)`` and ``S' = diag(s1, s2, d·s3)``; then ``M = U' S' Vᵀ`` and
    ``R = U' Vᵀ``. Differentiating ``M = R·P`` with ``P = V S' Vᵀ`` symmetric gives
    ``dR = U' W Vᵀ`` with ``W_ij = (X_ij − X_ji) / (s'_i + s'_j)`` and ``X = U'ᵀ dM V``, so the
    vector-Jacobian product is ``∂L/∂M = U' [(K − Kᵀ) ⊘ (s'_i + s'_j)] Vᵀ`` with
    ``K = U'ᵀ (∂L/∂R) V``. Only sums of singular values appear, so the derivative is finite at
    repeated singular values (an exact rotation, where every s_i = 1), unlike autograd through
    ``torch.linalg.svd``, whose backward divides by their differences and gives NaN there.
    A zero denominator (a rank-deficient M, where the nearest rotation is not unique) gets a zero
    gradient for that entry.
    """

    @staticmethod
    def forward(ctx, matrices: Tensor) -> Tensor:
        u, s, vh = torch.linalg.svd(matrices)
        d = torch.sign(torch.linalg.det(u @ vh))  # ±1: U Vᵀ is orthogonal
        flip = torch.cat([torch.ones_like(s[..., :2]), d[..., None]], dim=-1)
        u = u * flip[..., None, :]
        s = s * flip
        ctx.save_for_backward(u, s, vh)
        return u @ vh

    @staticmethod
    def backward(ctx, grad_rotations: Tensor) -> Tensor:
        u, s, vh = ctx.saved_tensors
        k = u.mT @ grad_rotations @ vh.mT
        denom = s[..., :, None] + s[..., None, :]
        skew = k - k.mT
        w = torch.where(denom != 0, skew / torch.where(denom != 0, denom, 1.0), 0.0)
        return u @ w @ vh


def nearest_rotation(matrices: Tensor) -> Tensor:
    """The rotation nearest to each 3×3 matrix (special orthogonal Procrustes, det = +1).

    ``R = U·diag(1, 1, sign(det(U Vᵀ)))·Vᵀ`` from the SVD ``M = U S Vᵀ``. The derivative is the
    analytic one of Note [Procrustes derivative]: finite at exact rotations, where autograd through
    ``torch.linalg.svd`` is not.

    Args:
        matrices: ``[..., 3, 3]`` float32 or float64. Differentiable.

    Returns:
        ``[..., 3, 3]`` rotation matrices (orthonormal, det +1), same dtype and device.
    """
    if not isinstance(matrices, Tensor):
        raise TypeError(
            "nearest_rotation(): expected matrices to be a torch.Tensor, but got "
            f"{type(matrices).__name__}"
        )
    if matrices.dim() < 2 or matrices.shape[-2:] != (3, 3):
        raise ValueError(
            "nearest_rotation(): expected matrices to have shape [..., 3, 3], but got shape "
            f"{list(matrices.shape)}"
        )
    return _NearestRotation.apply(matrices)


def quaternion_to_rotation(quaternions: Tensor) -> Tensor:
    """Rotation matrices of quaternions ``(w, x, y, z)``, normalised first (any nonzero length).

    Args:
        quaternions: ``[..., 4]`` float32 or float64, scalar part first. Differentiable; the
            gradient is tangent to the unit sphere (a zero quaternion gives NaN).

    Returns:
        ``[..., 3, 3]`` rotation matrices acting as ``r = R·p``.
    """
    if not isinstance(quaternions, Tensor):
        raise TypeError(
            "quaternion_to_rotation(): expected quaternions to be a torch.Tensor, but got "
            f"{type(quaternions).__name__}"
        )
    if quaternions.dim() < 1 or quaternions.shape[-1] != 4:
        raise ValueError(
            "quaternion_to_rotation(): expected quaternions to have shape [..., 4], but got "
            f"shape {list(quaternions.shape)}"
        )
    q = quaternions / torch.linalg.vector_norm(quaternions, dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def _rotation_to_quaternion(rotation: Tensor) -> Tensor:
    """``[3, 3]`` rotation → unit quaternion ``(w, x, y, z)`` with w ≥ 0 (init only, not traced).

    Takes the square root of the largest of 4w², 4x², 4y², 4z² (read off the trace and diagonal)
    and the other components from off-diagonal sums and differences divided by it, so no division
    is by a small number.
    """
    m = rotation.tolist()
    four_squares = [  # 4w², 4x², 4y², 4z²
        1 + m[0][0] + m[1][1] + m[2][2],
        1 + m[0][0] - m[1][1] - m[2][2],
        1 - m[0][0] + m[1][1] - m[2][2],
        1 - m[0][0] - m[1][1] + m[2][2],
    ]
    # Off-diagonal combinations, each 4 times a product of two components.
    wx, wy, wz = m[2][1] - m[1][2], m[0][2] - m[2][0], m[1][0] - m[0][1]
    xy, xz, yz = m[0][1] + m[1][0], m[0][2] + m[2][0], m[1][2] + m[2][1]
    products = [[None, wx, wy, wz], [wx, None, xy, xz], [wy, xy, None, yz], [wz, xz, yz, None]]
    largest = max(range(4), key=lambda i: four_squares[i])
    four_q = 2.0 * math.sqrt(max(four_squares[largest], 0.0))  # 4·|q_largest|
    q = [four_q / 4 if i == largest else products[largest][i] / four_q for i in range(4)]
    if q[0] < 0:
        q = [-v for v in q]
    return torch.tensor(q, dtype=torch.float64)


def _axis_angle(axis: Sequence[float], angle: float) -> Tensor:
    """Rodrigues: rotation by `angle` about the unit `axis`, float64 ``[3, 3]``."""
    k = torch.tensor(axis, dtype=torch.float64)
    k = k / k.norm()
    cross = torch.tensor(
        [[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]], dtype=torch.float64
    )
    return torch.eye(3, dtype=torch.float64) + math.sin(angle) * cross + (
        1 - math.cos(angle)
    ) * (cross @ cross)


def default_rotations(num_tilts: int) -> Tensor:
    """The default initial rotations ``[T, 3, 3]`` (float64): deterministic and distinct.

    Tilt 0 is the identity. Tilt t ≥ 1 turns by π/5 about axis a_t, the t-th of T − 1 points of a
    golden-angle spiral over the sphere: distinct axes give distinct rotations, and the angle, below
    π/4, keeps every tilt away from the axis permutations that would map its planes onto another
    tilt's (see ``_DEFAULT_TILT_ANGLE``).
    """
    rotations = [torch.eye(3, dtype=torch.float64)]
    n = num_tilts - 1
    for i in range(n):
        z = 1.0 - (2 * i + 1) / n
        radius = math.sqrt(max(0.0, 1.0 - z * z))
        phi = i * _GOLDEN_ANGLE
        rotations.append(_axis_angle((radius * math.cos(phi), radius * math.sin(phi), z),
                                     _DEFAULT_TILT_ANGLE))
    return torch.stack(rotations)
