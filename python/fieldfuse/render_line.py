# SPDX-License-Identifier: Apache-2.0
"""X-ray line integrals of packed rays: ``line_integral`` and its op table (Note [op table]).

Ops: ``fieldfuse::line_integral_forward`` and ``fieldfuse::line_integral_backward``, whose bool
arguments ``grad_values`` and ``grad_delta_ts`` say which gradients to compute (the others are
0-element tensors on the library path and None on the eager path).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _registry
from ._backend import _C, check_tensor, dl, stream_of
from ._render_common import check_device_offsets, empty, nothing, num_rays

__all__ = ["line_integral"]


def _projection(values: Tensor, offsets: Tensor) -> Tensor:
    """The uninitialised output: [R] or [R, C] like values."""
    return values.new_empty((num_rays(offsets),) + tuple(values.shape[1:]))


def _forward(values, delta_ts, offsets):
    out = _projection(values, offsets)
    _C.line_integral_forward(dl(values), dl(delta_ts), dl(offsets), dl(out), stream_of(values))
    return out


def _gradient_outputs(values, delta_ts, grad_values, grad_delta_ts, absent):
    return (torch.empty_like(values) if grad_values else absent(values),
            torch.empty_like(delta_ts) if grad_delta_ts else absent(values))


def _backward(absent, values, delta_ts, offsets, grad_out, grad_values, grad_delta_ts):
    gv, gd = _gradient_outputs(values, delta_ts, grad_values, grad_delta_ts, absent)
    _C.line_integral_backward(dl(values), dl(delta_ts), dl(offsets), dl(grad_out),
                              dl(gv) if grad_values else None, dl(gd) if grad_delta_ts else None,
                              stream_of(values))
    return gv, gd


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _gradient(ctx, grad_out):
    values, delta_ts, offsets = ctx.saved_tensors
    want_values, want_delta_ts = (bool(n) for n in _registry.needs_input_grad(ctx)[:2])
    if not (want_values or want_delta_ts):
        return None, None, None
    gv, gd = _registry.call_in_backward(ctx, _ops["line_integral_backward"], values, delta_ts,
                                        offsets, grad_out, want_values, want_delta_ts)
    return (gv if want_values else None), (gd if want_delta_ts else None), None


# Note [op table]
_ops = _registry.register([
    _registry.OpSpec(
        "line_integral_forward", _forward, lambda v, d, o: _projection(v, o),
        _setup_context, _gradient,
        schema="(Tensor values, Tensor delta_ts, Tensor offsets) -> Tensor",
    ),
    _registry.OpSpec(
        "line_integral_backward",
        lambda *args: _backward(empty, *args),
        lambda v, d, o, g, gv, gd: _gradient_outputs(v, d, gv, gd, empty),
        schema="(Tensor values, Tensor delta_ts, Tensor offsets, Tensor grad_out, "
               "bool grad_values, bool grad_delta_ts) -> (Tensor, Tensor)",
        eager_impl=lambda *args: _backward(nothing, *args),
    ),
])


def line_integral(values: Tensor, delta_ts: Tensor, offsets: Tensor, *,
                  validate: bool = True) -> Tensor:
    """X-ray projection of packed rays: ``P_r = Σ_{s ∈ r} v_s·δ_s``.

    Args:
        values: ``[N]`` or ``[N, C]``. Differentiable (``dL/dv_s = δ_s·dL/dP_r``).
        delta_ts: ``[N]``. Differentiable (``dL/dδ_s = Σ_c v_s,c·dL/dP_r,c``).
        offsets: ``[R + 1]`` int64 ray boundaries.
        validate: as in :func:`volume_render`.

    Returns:
        ``[R]`` or ``[R, C]``; deterministic (each ray summed in float64 in a fixed order).
    """
    op = "line_integral"
    # Allocation reads these (shapes, dtype, device; requires_grad on the eager path).
    check_tensor(op, "values", values)
    check_tensor(op, "delta_ts", delta_ts)
    check_tensor(op, "offsets", offsets)
    if validate:
        check_device_offsets(op, offsets, values.shape[0] if values.dim() in (1, 2) else None)
    return _ops["line_integral_forward"](values, delta_ts, offsets)
