# SPDX-License-Identifier: Apache-2.0
"""Volume total variation: differentiable functions over `torch.library` custom ops.

Every functional uses forward differences ``Δd v[i,j,k] = v[i+1,j,k] − v[i,j,k]`` (likewise Δh, Δw)
over the last three dims of a ``[..., D, H, W]`` tensor; leading dims are independent slices whose
terms are summed together. Inputs may be float32 or float64 on CPU and CUDA, and float16 or
bfloat16 on CUDA (computed in float32 and returned as float32; gradients keep the input dtype).
Non-contiguous inputs are read in place. Sums are accumulated in float64 in an order fixed by the
shape (and, on CUDA, by whether the layout takes the vectorised path), so the same input gives the
same bits on every run of a device; CPU and CUDA agree to rounding.

Raw ops (forward and backward, each with a fake impl, so ``torch.compile(fullgraph=True)`` traces
them and CUDA graphs capture them): ``torch.ops.fieldfuse.tv_sq_3d_forward`` / ``_backward`` and the
same for ``tv_iso_3d``, ``tv_l1_3d`` and ``tv_weighted_l1``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ._backend import _C, check_tensor, dl, float_list, reduced_dtype, stream_of, workspace


def _reduced_output(x: Tensor, num_outputs: int = 1) -> Tensor:
    """The uninitialised output of a reduction over x (the real and the fake impls share it)."""
    return x.new_empty(() if num_outputs == 1 else (num_outputs,), dtype=reduced_dtype(x.dtype))


def _gradient_like(x: Tensor, *_) -> Tensor:
    """The uninitialised gradient of x, in x's layout; the fake impl of every backward op."""
    return torch.empty_like(x)


def _forward(x: Tensor, size_fn, forward_fn, *options, num_outputs: int = 1) -> Tensor:
    """Allocates the reduced output and workspace, then runs a core forward on x's stream.

    A DLPack capsule is consumed by the call it is passed to, so x is exported once per call.
    """
    out = _reduced_output(x, num_outputs)
    scratch = workspace(size_fn(dl(x)), x.device)
    forward_fn(dl(x), *options, dl(out), dl(scratch), stream_of(x))
    return out


def _backward(x: Tensor, backward_fn, *options_and_grad_out: Tensor) -> Tensor:
    """Runs a core backward into a fresh gradient with x's layout (every element is written)."""
    grad = _gradient_like(x)
    args = [dl(a) if isinstance(a, Tensor) else a for a in options_and_grad_out]
    backward_fn(dl(x), *args, dl(grad), stream_of(x))
    return grad


def _save_input(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.options = inputs[1:]


# --- tv_sq_3d ---------------------------------------------------------------------------------


@torch.library.custom_op("fieldfuse::tv_sq_3d_forward", mutates_args=())
def tv_sq_3d_forward(vol: Tensor) -> Tensor:
    return _forward(vol, _C.tv_sq_3d_workspace_size, _C.tv_sq_3d_forward)


@torch.library.custom_op("fieldfuse::tv_sq_3d_backward", mutates_args=())
def tv_sq_3d_backward(vol: Tensor, grad_out: Tensor) -> Tensor:
    return _backward(vol, _C.tv_sq_3d_backward, grad_out)


tv_sq_3d_backward.register_fake(_gradient_like)


@tv_sq_3d_forward.register_fake
def _(vol):
    return _reduced_output(vol)


def _tv_sq_3d_grad(ctx, grad_out):
    (vol,) = ctx.saved_tensors
    return tv_sq_3d_backward(vol, grad_out)


tv_sq_3d_forward.register_autograd(_tv_sq_3d_grad, setup_context=_save_input)


def tv_sq_3d(vol: Tensor) -> Tensor:
    """Squared anisotropic TV: ``S = Σ_n [Σ Δd² + Σ Δh² + Σ Δw²]`` (an unnormalised sum).

    Args:
        vol: ``[..., D, H, W]`` (differentiable). A size-1 axis contributes 0.

    Returns:
        A 0-d tensor (float32 for 16-bit inputs, else vol's dtype). Gradient:
        ``2·Σ_axes [(v − prev)·[prev exists] − (next − v)·[next exists]]``.
    """
    check_tensor("tv_sq_3d", "vol", vol)
    return tv_sq_3d_forward(vol)


# --- tv_iso_3d --------------------------------------------------------------------------------


@torch.library.custom_op("fieldfuse::tv_iso_3d_forward", mutates_args=())
def tv_iso_3d_forward(vol: Tensor, eps: float) -> Tensor:
    return _forward(vol, _C.tv_iso_3d_workspace_size, _C.tv_iso_3d_forward, eps)


@torch.library.custom_op("fieldfuse::tv_iso_3d_backward", mutates_args=())
def tv_iso_3d_backward(vol: Tensor, eps: float, grad_out: Tensor) -> Tensor:
    return _backward(vol, _C.tv_iso_3d_backward, eps, grad_out)


tv_iso_3d_backward.register_fake(_gradient_like)


@tv_iso_3d_forward.register_fake
def _(vol, eps):
    return _reduced_output(vol)


def _tv_iso_3d_grad(ctx, grad_out):
    (vol,) = ctx.saved_tensors
    (eps,) = ctx.options
    return tv_iso_3d_backward(vol, eps, grad_out), None


tv_iso_3d_forward.register_autograd(_tv_iso_3d_grad, setup_context=_save_input)


def tv_iso_3d(vol: Tensor, *, eps: float = 1e-8) -> Tensor:
    """Isotropic TV, a mean over corners: ``L = Σ sqrt(Δd² + Δh² + Δw² + eps) / N``.

    The corners are ``i < D−1, j < H−1, k < W−1`` of every slice, all three differences anchored at
    the corner voxel, and ``N = B·(D−1)(H−1)(W−1)`` with B the product of the leading dims. Any of
    D, H, W < 2 gives 0 and a zero gradient.

    Args:
        vol: ``[..., D, H, W]`` (differentiable).
        eps: smoothing inside the sqrt, finite and >= 0 (with 0, a flat corner's gradient is 0/0).

    Returns:
        A 0-d tensor (float32 for 16-bit inputs, else vol's dtype).
    """
    check_tensor("tv_iso_3d", "vol", vol)
    return tv_iso_3d_forward(vol, float(eps))


# --- tv_l1_3d ---------------------------------------------------------------------------------


@torch.library.custom_op("fieldfuse::tv_l1_3d_forward", mutates_args=())
def tv_l1_3d_forward(vol: Tensor) -> Tensor:
    return _forward(vol, _C.tv_l1_3d_workspace_size, _C.tv_l1_3d_forward, num_outputs=3)


@torch.library.custom_op("fieldfuse::tv_l1_3d_backward", mutates_args=())
def tv_l1_3d_backward(vol: Tensor, grad_out: Tensor) -> Tensor:
    return _backward(vol, _C.tv_l1_3d_backward, grad_out)


tv_l1_3d_backward.register_fake(_gradient_like)


@tv_l1_3d_forward.register_fake
def _(vol):
    return _reduced_output(vol, num_outputs=3)


def _tv_l1_3d_grad(ctx, grad_out):
    (vol,) = ctx.saved_tensors
    return tv_l1_3d_backward(vol, grad_out)


tv_l1_3d_forward.register_autograd(_tv_l1_3d_grad, setup_context=_save_input)


def tv_l1_3d(vol: Tensor) -> Tensor:
    """Per-axis L1 TV: the raw sums ``[Σ|Δd|, Σ|Δh|, Σ|Δw|]`` over all slices.

    Callers that normalise divide by ``N_d = B(D−1)HW``, ``N_h = BD(H−1)W``, ``N_w = BDH(W−1)``.

    Args:
        vol: ``[..., D, H, W]`` (differentiable). Size-1 axes give 0.

    Returns:
        A tensor of 3 sums (float32 for 16-bit inputs, else vol's dtype). The gradient uses
        ``sign(Δ)`` with ``sign(0) = 0``, so a constant volume gets an exactly-zero gradient.
    """
    check_tensor("tv_l1_3d", "vol", vol)
    return tv_l1_3d_forward(vol)


# --- tv_weighted_l1 ---------------------------------------------------------------------------


@torch.library.custom_op("fieldfuse::tv_weighted_l1_forward", mutates_args=())
def tv_weighted_l1_forward(array: Tensor, weights: list[float]) -> Tensor:
    def size_fn(capsule):
        return _C.tv_weighted_l1_workspace_size(capsule, len(weights))

    return _forward(array, size_fn, _C.tv_weighted_l1_forward, weights)


@torch.library.custom_op("fieldfuse::tv_weighted_l1_backward", mutates_args=())
def tv_weighted_l1_backward(array: Tensor, weights: list[float], grad_out: Tensor) -> Tensor:
    return _backward(array, _C.tv_weighted_l1_backward, weights, grad_out)


tv_weighted_l1_backward.register_fake(_gradient_like)


@tv_weighted_l1_forward.register_fake
def _(array, weights):
    return _reduced_output(array)


def _tv_weighted_l1_grad(ctx, grad_out):
    (array,) = ctx.saved_tensors
    (weights,) = ctx.options
    return tv_weighted_l1_backward(array, weights, grad_out), None


tv_weighted_l1_forward.register_autograd(_tv_weighted_l1_grad, setup_context=_save_input)


def tv_weighted_l1(array: Tensor, weights: Sequence[float]) -> Tensor:
    """Weighted L1 TV over the trailing ``k = len(weights)`` axes (ptychography object constraint).

    ``L = Σ_a w_a · mean|Δ_a| / max(1, #{a : w_a > 0})``, axes with ``w_a == 0`` skipped; the mean
    runs over every difference along axis a, leading dims included. With
    ``weights = (w_z, w_xy, w_xy)`` on a ``(slices, y, x)`` array, or ``(w_xy, w_xy)`` on ``(y, x)``,
    this is exactly the ptychography TV constraint. For a complex object apply it to ``abs()`` and
    ``angle()`` with separate weights.

    Args:
        array: ``[..., *k axes]`` (differentiable).
        weights: 2 or 3 finite non-negative numbers, one per trailing axis. An axis of size 1 with a
            nonzero weight has no differences to average and raises ValueError.

    Returns:
        A 0-d tensor (float32 for 16-bit inputs, else array's dtype). The gradient uses sign(0) = 0.
    """
    check_tensor("tv_weighted_l1", "array", array)
    return tv_weighted_l1_forward(array, float_list("tv_weighted_l1", "weights", weights))
