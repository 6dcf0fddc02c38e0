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

from . import _registry
from ._backend import (
    _C,
    check_tensor,
    dl,
    float_list,
    real_number,
    reduced_dtype,
    stream_of,
    workspace,
)


def _reduced_output(x: Tensor, num_outputs: int) -> Tensor:
    """The uninitialised output of a reduction over x (the real and the fake impls share it)."""
    return x.new_empty(() if num_outputs == 1 else (num_outputs,), dtype=reduced_dtype(x.dtype))


def _functional(name: str, arg: str, options: str, num_outputs: int = 1, workspace_options=None):
    """The forward and backward entries of one functional ``name(arg, *options)``.

    ``options`` is the schema of the arguments after the input (e.g. ``", float eps"``); both ops
    pass them to ``_C.<name>_forward`` / ``_C.<name>_backward`` unchanged. ``workspace_options``
    maps them to what ``_C.<name>_workspace_size`` takes after the input (default: nothing).
    """
    workspace_size = getattr(_C, f"{name}_workspace_size")
    forward_fn, backward_fn = getattr(_C, f"{name}_forward"), getattr(_C, f"{name}_backward")
    workspace_options = workspace_options or (lambda *options: ())
    
    def forward(x, *options):
        out = _reduced_output(x, num_outputs)
        scratch = workspace(workspace_size(dl(x), *workspace_options(*options)), x.device)
        forward_fn(dl(x), *options, dl(out), dl(scratch), stream_of(x))
        return out

    def forward_fake(x, *options):
        return _reduced_output(x, num_outputs)

    def backward(x, *options_and_grad_out):
        grad = torch.empty_like(x)  # every element is written
        *options, grad_out = options_and_grad_out
        backward_fn(dl(x), *options, dl(grad_out), dl(grad), stream_of(x))
        return grad

    def backward_fake(x, *options_and_grad_out):
        return torch.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.options = inputs[1:]

    def gradient(ctx, grad_out):
        (x,) = ctx.saved_tensors
        grad = _registry.call_in_backward(ctx, _ops[f"{name}_backward"], x, *ctx.options, grad_out)
        return (grad,) + (None,) * len(ctx.options)

    return [
        _registry.OpSpec(
            f"{name}_forward", forward, forward_fake, setup_context, gradient,
            schema=f"(Tensor {arg}{options}) -> Tensor",
        ),
        _registry.OpSpec(
            f"{name}_backward", backward, backward_fake,
            schema=f"(Tensor {arg}{options}, Tensor grad_out) -> Tensor",
        ),
    ]


# Note [op table]: every TV op, registered once (custom op, fake, autograd, eager fast path).
_ops = _registry.register(
    _functional("tv_sq_3d", "vol", "")
    + _functional("tv_iso_3d", "vol", ", float eps")
    + _functional("tv_l1_3d", "vol", "", num_outputs=3)
    + _functional("tv_weighted_l1", "array", ", float[] weights",
                  workspace_options=lambda weights: (len(weights),))
)


def tv_sq_3d(vol: Tensor) -> Tensor:
    """Squared anisotropic TV: ``S = Σ_n [Σ Δd² + Σ Δh² + Σ Δw²]`` (an unnormalised sum).

    Args:
        vol: ``[..., D, H, W]`` (differentiable). A size-1 axis contributes 0.

    Returns:
        A 0-d tensor (float32 for 16-bit inputs, else vol's dtype). Gradient:
        ``2·Σ_axes [(v − prev)·[prev exists] − (next − v)·[next exists]]``.
    """
    check_tensor("tv_sq_3d", "vol", vol)  # allocating the output reads its dtype and device
    return _ops["tv_sq_3d_forward"](vol)


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
    check_tensor("tv_iso_3d", "vol", vol)  # allocating the output reads its dtype and device
    return _ops["tv_iso_3d_forward"](vol, real_number("tv_iso_3d", "eps", eps))


def tv_l1_3d(vol: Tensor) -> Tensor:
    """Per-axis L1 TV: the raw sums ``[Σ|Δd|, Σ|Δh|, Σ|Δw|]`` over all slices.

    Callers that normalise divide by ``N_d = B(D−1)HW``, ``N_h = BD(H−1)W``, ``N_w = BDH(W−1)``.

    Args:
        vol: ``[..., D, H, W]`` (differentiable). Size-1 axes give 0.

    Returns:
        A tensor of 3 sums (float32 for 16-bit inputs, else vol's dtype). The gradient uses
        ``sign(Δ)`` with ``sign(0) = 0``, so a constant volume gets an exactly-zero gradient.
    """
    check_tensor("tv_l1_3d", "vol", vol)  # allocating the output reads its dtype and device
    return _ops["tv_l1_3d_forward"](vol)


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
    check_tensor("tv_weighted_l1", "array", array)  # allocating the output reads it
    # The schema's float[] needs real numbers; the C++ front checks their count and values.
    return _ops["tv_weighted_l1_forward"](array, float_list("tv_weighted_l1", "weights", weights))
