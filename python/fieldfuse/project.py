# SPDX-License-Identifier: Apache-2.0
"""Parallel-beam projection on a voxel grid: :func:`project` and :func:`backproject`, each the
other's adjoint, and their op table (Note [op table] in ``_registry.py``).

Ops: ``fieldfuse::project_forward`` and ``fieldfuse::backproject_forward``. The gradient of one is
the other (the back projection is the exact transpose of the projection), so each op's backward
calls the other op, and derivatives of any order come out of the same two kernels.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from . import _registry
from ._backend import _C, check_tensor, dl, stream_of

__all__ = ["backproject", "project"]


def _count(rotations: Tensor) -> int:
    """n of rotations [n, 3, 3] for allocating the output; 0 where the C++ front will reject
    rotations (it checks every input before it writes anything, and names the argument)."""
    return rotations.shape[0] if rotations.dim() == 3 else 0


def _stack(volume: Tensor, rotations: Tensor, detector_shape: Sequence[int]) -> Tensor:
    """The uninitialised projections [n, Hd, Wd] (the real and the fake impls share it)."""
    return volume.new_empty((_count(rotations), *detector_shape))


def _volume(projections: Tensor, volume_shape: Sequence[int]) -> Tensor:
    """The uninitialised volume [D, H, W]."""
    return projections.new_empty(tuple(volume_shape))


def _project(volume, rotations, shifts, detector_shape):
    out = _stack(volume, rotations, detector_shape)  # every element is written
    _C.project_forward(dl(volume), dl(rotations), None if shifts is None else dl(shifts), dl(out),
                       stream_of(volume))
    return out


def _backproject(projections, rotations, shifts, volume_shape):
    out = _volume(projections, volume_shape)  # every element is written
    _C.backproject_forward(dl(projections), dl(rotations),
                           None if shifts is None else dl(shifts), dl(out),
                           stream_of(projections))
    return out


def _refuse_pose_gradients(ctx, op: str) -> None:
    """The projectors differentiate the volume or the stack only; a gradient asked of the pose
    (not implemented) is an error naming the argument, never a silent None."""
    needs = _registry.needs_input_grad(ctx)
    for position, arg in ((1, "rotations"), (2, "shifts")):
        if needs[position]:
            raise NotImplementedError(
                f"{op}(): the gradient with respect to {arg} is not implemented (only the "
                f"{'volume' if op == 'project' else 'projections'} is differentiable); pass "
                f"{arg}.detach() or a tensor that does not require grad"
            )


def _save_pose(ctx, inputs, shape) -> None:
    _, rotations, shifts, _ = inputs
    ctx.save_for_backward(rotations, shifts)
    ctx.shape = shape


def _gradient(op: str, other: str):
    """The backward of `op`: the other projector (`other`) of the upstream gradient, with the
    poses and the shape of op's first input."""

    def backward(ctx, grad):
        _refuse_pose_gradients(ctx, op)
        if not _registry.needs_input_grad(ctx)[0]:
            return None, None, None, None
        rotations, shifts = ctx.saved_tensors
        first = _registry.call_in_backward(ctx, _ops[other], grad, rotations, shifts, ctx.shape)
        return first, None, None, None

    return backward


# Note [op table]
_ops = _registry.register([
    _registry.OpSpec(
        "project_forward", _project, lambda v, r, s, shape: _stack(v, r, shape),
        lambda ctx, inputs, output: _save_pose(ctx, inputs, list(inputs[0].shape)),
        _gradient("project", "backproject_forward"),
        schema="(Tensor volume, Tensor rotations, Tensor? shifts, SymInt[] detector_shape) "
               "-> Tensor",
    ),
    _registry.OpSpec(
        "backproject_forward", _backproject, lambda p, r, s, shape: _volume(p, shape),
        lambda ctx, inputs, output: _save_pose(ctx, inputs, list(inputs[0].shape[1:])),
        _gradient("backproject", "project_forward"),
        schema="(Tensor projections, Tensor rotations, Tensor? shifts, SymInt[] volume_shape) "
               "-> Tensor",
    ),
])


def _sizes(op: str, arg: str, value, names: str) -> list:
    """`value` as a list of len(names) non-negative integers (symbolic ones pass under
    torch.compile): the output's shape, which only Python knows, so Python checks it."""
    count = len(names.split(", "))
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{op}(): expected {arg} to be a sequence of {count} integers ({names}), "
                        f"but got {type(value).__name__}")
    sizes = list(value)
    for size in sizes:
        integral = isinstance(size, (numbers.Integral, torch.SymInt)) and not isinstance(size, bool)
        if not integral:
            raise TypeError(f"{op}(): expected {arg} to contain integers ({names}), but got "
                            f"{size!r} ({type(size).__name__})")
    if len(sizes) != count or any(isinstance(s, numbers.Integral) and s < 0 for s in sizes):
        raise ValueError(f"{op}(): expected {arg} to be {count} non-negative integers ({names}), "
                         f"but got {sizes}")
    return [s if isinstance(s, torch.SymInt) else int(s) for s in sizes]


def _check_inputs(op: str, first: str, tensor, rotations, shifts) -> None:
    # The allocation reads the first tensor's dtype and device and rotations' shape; the eager
    # path hands shifts to DLPack. Everything else is checked once, in the C++ front.
    check_tensor(op, first, tensor)
    check_tensor(op, "rotations", rotations)
    if shifts is not None:
        check_tensor(op, "shifts", shifts)


def project(volume: Tensor, rotations: Tensor, shifts: Tensor | None = None, *,
            detector_shape: Sequence[int] | None = None) -> Tensor:
    """Parallel-beam forward projection (Joseph's method) of a volume onto n detectors.

    Coordinates: ``volume [D, H, W]`` (z, y, x) fills ``[-1, 1]^3`` with voxel centres at
    ``-1 + (2j+1)/W`` etc. (align_corners=False), trilinear between centres and 0 outside;
    detector pixel ``(m, i, j)`` sits at ``(u, v) = (-1 + (2j+1)/Wd, -1 + (2i+1)/Hd)`` and
    integrates along the line ``{R_m·(u - s_u, v - s_v, t) : t}``; with ``R = I`` the rays run
    along z, ``P = ∫ f dz``.

    Discretisation: the ray meets each voxel-centre plane of the axis a with the largest
    ``|d_a|``, ``d = R_m·e_z`` (ties: z, then y), and ``P = Δ·Σ_planes bilinear(slice, point)``,
    zero padding, ``Δ = (2/N_a)/|d_a|``. :func:`backproject` is the exact transpose.

    Args:
        volume: ``[D, H, W]``, float32 or float64, CPU or CUDA (differentiable: the gradient is
            :func:`backproject` of the upstream gradient).
        rotations: ``[n, 3, 3]`` poses ``R_m``, same dtype and device (not differentiable: asking
            for its gradient raises NotImplementedError).
        shifts: ``[n, 2]`` detector shifts ``(s_u, s_v)`` in detector units, or None (zeros).
            Not differentiable, as rotations.
        detector_shape: ``(Hd, Wd)``; default ``(H, W)``.

    Returns:
        ``[n, Hd, Wd]`` in volume's dtype. Deterministic (each ray summed in slice order, no
        atomics); a NaN voxel poisons only the rays that give it a non-zero weight.
    """
    op = "project"
    _check_inputs(op, "volume", volume, rotations, shifts)
    if detector_shape is None:
        # A volume of the wrong rank gets an empty detector here; the C++ front then names it.
        shape = list(volume.shape[1:]) if volume.dim() == 3 else [0, 0]
    else:
        shape = _sizes(op, "detector_shape", detector_shape, "Hd, Wd")
    return _ops["project_forward"](volume, rotations, shifts, shape)


def backproject(projections: Tensor, rotations: Tensor, shifts: Tensor | None = None, *,
                volume_shape: Sequence[int]) -> Tensor:
    """Parallel-beam back projection, the exact adjoint (transpose) of :func:`project`.

    ``volume[v] = Σ_m Δ_m·Σ_pixels w_m(pixel, v)·projections[m, pixel]``, with ``w`` the bilinear
    weight :func:`project` gives voxel v on that pixel's ray, so
    ``<project(x), y> = <x, backproject(y)>`` to the rounding of the sums. Computed as a gather
    (each voxel sums its pixels, projections in order), deterministic, no atomics.

    Args:
        projections: ``[n, Hd, Wd]``, float32 or float64, CPU or CUDA (differentiable: the
            gradient is :func:`project` of the upstream gradient).
        rotations: ``[n, 3, 3]``, as in :func:`project` (not differentiable).
        shifts: ``[n, 2]`` or None, as in :func:`project` (not differentiable).
        volume_shape: ``(D, H, W)`` of the volume to return.

    Returns:
        ``[D, H, W]`` in projections' dtype.
    """
    op = "backproject"
    _check_inputs(op, "projections", projections, rotations, shifts)
    shape = _sizes(op, "volume_shape", volume_shape, "D, H, W")
    return _ops["backproject_forward"](projections, rotations, shifts, shape)
