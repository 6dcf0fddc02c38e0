# SPDX-License-Identifier: Apache-2.0
"""Emission-absorption volume rendering of packed rays: ``volume_render`` and
``volume_render_alpha``, their op tables (Note [op table]) and what they return.

Each public function has a forward and a backward op, ``fieldfuse::<name>_forward`` and
``fieldfuse::<name>_backward``, calling ``_C.<name>_forward`` / ``_C.<name>_backward``. The
forward's trailing bool arguments say which optional outputs to compute (``depth``, ``weights``,
``total_samples``, ``transmittance``, ``ray_state``), the backward's which gradients
(``grad_<input>``). Outputs not asked for are 0-element tensors on the library path and None on
the eager path, which allocates nothing for them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _registry
from ._backend import _C, check_tensor, dl, real_number, reduced_dtype, stream_of
from ._render_common import check_device_offsets, empty, leading_size, nothing, num_rays

__all__ = ["RenderOutput", "volume_render", "volume_render_alpha"]


class RenderOutput(NamedTuple):
    """Per-ray results; outputs that were not requested are None."""

    rgb: Tensor  # [R, C]
    opacity: Tensor  # [R], Σ w
    depth: Tensor | None  # [R], Σ w·t (not divided by the opacity)
    weights: Tensor | None  # [N], 0 past termination
    total_samples: Tensor | None  # [R] int64
    transmittance: Tensor | None  # [R], the final T


class _Inputs(NamedTuple):
    """The inputs of either variant, in op order (the alpha variant has no delta_ts: None)."""

    first: Tensor  # sigmas, or alphas
    rgbs: Tensor
    delta_ts: Tensor | None
    ts: Tensor | None
    offsets: Tensor
    transmittance_thresh: float
    background: Tensor | None
    prefix_transmittance: Tensor | None


class _Wanted(NamedTuple):
    """The forward's optional outputs to compute (rgb and opacity always are)."""

    depth: bool
    weights: bool
    total_samples: bool
    transmittance: bool
    # The per-ray state a training forward hands its backward (Note [ray state] in
    # src/render/render_ray.h), sparing it a second march over σ and δ. Not a result.
    ray_state: bool


class _Outputs(NamedTuple):
    """The forward op's outputs, in schema order."""

    rgb: Tensor
    opacity: Tensor
    depth: Tensor | None
    weights: Tensor | None
    total_samples: Tensor | None
    transmittance: Tensor | None
    ray_state: Tensor | None


class _Gradients(NamedTuple):
    """The backward op's outputs, one per differentiable input (None: not computed)."""

    first: Tensor | None
    rgbs: Tensor | None
    delta_ts: Tensor | None
    ts: Tensor | None
    background: Tensor | None
    prefix_transmittance: Tensor | None


# Columns of the ray state (kRayStateFields in src/render/render_drivers.h).
_RAY_STATE_FIELDS = 4
_NUM_INPUTS = len(_Inputs._fields)


class _Variant(NamedTuple):
    """How volume_render and volume_render_alpha differ: names and whether δ exists."""

    name: str  # the public function: op, binding and error prefix
    first: str  # "sigmas" or "alphas"
    alpha_input: bool

    def inputs(self, args) -> _Inputs:
        """The first inputs of an op call as _Inputs (delta_ts None for the alpha variant)."""
        args = tuple(args)
        if self.alpha_input:
            args = args[:2] + (None,) + args[2 : _NUM_INPUTS - 1]
        return _Inputs(*args[:_NUM_INPUTS])

    def op_inputs(self, x: _Inputs) -> tuple:
        """_Inputs as the op takes them."""
        return tuple(x[:2]) + (() if self.alpha_input else (x.delta_ts,)) + tuple(x[3:])

    def c_inputs(self, x: _Inputs) -> tuple:
        """_Inputs as the binding takes them (DLPack capsules, None for absent tensors). Written
        out: this runs twice per training step, and host time is the cost at small sizes."""
        first, rgbs, delta_ts, ts, offsets, transmittance_thresh, background, prefix = x
        ts, background, prefix = _capsule(ts), _capsule(background), _capsule(prefix)
        if self.alpha_input:
            return (dl(first), dl(rgbs), ts, dl(offsets), transmittance_thresh, background, prefix)
        return (dl(first), dl(rgbs), dl(delta_ts), ts, dl(offsets), transmittance_thresh,
                background, prefix)

    def gradients(self, op_grads) -> _Gradients:
        """The backward op's outputs (or gradient flags) as _Gradients (delta_ts None for alpha)."""
        op_grads = tuple(op_grads)
        return _Gradients(*(op_grads[:2] + (None,) + op_grads[2:] if self.alpha_input
                            else op_grads))

    def op_gradients(self, g: _Gradients) -> tuple:
        """_Gradients as the backward op returns them."""
        return tuple(g[:2]) + (() if self.alpha_input else (g.delta_ts,)) + tuple(g[3:])

    @property
    def num_op_inputs(self) -> int:
        return _NUM_INPUTS - (1 if self.alpha_input else 0)


def _capsule(t):
    return None if t is None else dl(t)


def _forward_outputs(x: _Inputs, wanted: _Wanted, absent) -> _Outputs:
    """The forward's outputs, uninitialised; ``absent(first)`` for those not wanted."""
    r, n = num_rays(x.offsets), leading_size(x.first, 1)
    c = x.rgbs.shape[1] if x.rgbs.dim() == 2 else 1
    first = x.first

    def maybe(want, shape, dtype=None):
        return first.new_empty(shape, dtype=dtype or first.dtype) if want else absent(first)

    return _Outputs(
        rgb=first.new_empty((r, c)),
        opacity=first.new_empty((r,)),
        depth=maybe(wanted.depth, (r,)),
        weights=maybe(wanted.weights, (n,)),
        total_samples=maybe(wanted.total_samples, (r,), torch.int64),
        transmittance=maybe(wanted.transmittance, (r,)),
        ray_state=maybe(wanted.ray_state, (r, _RAY_STATE_FIELDS), torch.float64),
    )


def _gradients(x: _Inputs, wanted: _Gradients, absent) -> _Gradients:
    """The backward's outputs, uninitialised; ``absent(first)`` for those not wanted."""
    first = x.first

    def like(want, t):
        return torch.empty_like(t) if want and t is not None else absent(first)

    background = absent(first)
    if wanted.background and x.background is not None:
        # Per-ray background gradients, in float32 for 16-bit inputs: a shared background sums
        # them, and that sum must round once, not once per ray.
        r, c = num_rays(x.offsets), x.rgbs.shape[1]
        background = first.new_empty((r, c), dtype=reduced_dtype(first.dtype))
    return _Gradients(like(wanted.first, first), like(wanted.rgbs, x.rgbs),
                      like(wanted.delta_ts, x.delta_ts), like(wanted.ts, x.ts), background,
                      like(wanted.prefix_transmittance, x.prefix_transmittance))


def _differentiable(x: _Inputs) -> _Gradients:
    """The inputs _Gradients is about, in its order."""
    return _Gradients(x.first, x.rgbs, x.delta_ts, x.ts, x.background, x.prefix_transmittance)


def _table(v: _Variant) -> list[_registry.OpSpec]:
    """The forward and backward op of one variant."""
    c_forward = getattr(_C, f"{v.name}_forward")
    c_backward = getattr(_C, f"{v.name}_backward")
    delta = "" if v.alpha_input else "Tensor delta_ts, "
    inputs_schema = (
        f"Tensor {v.first}, Tensor rgbs, {delta}Tensor? ts, Tensor offsets, "
        "float transmittance_thresh, Tensor? background, Tensor? prefix_transmittance"
    )
    grad_flags = [f"grad_{v.first}", "grad_rgbs"] + ([] if v.alpha_input else ["grad_delta_ts"])
    grad_flags += ["grad_ts", "grad_background", "grad_prefix_transmittance"]
    k = v.num_op_inputs

    def split_forward(args):
        return v.inputs(args), _Wanted(*args[k:])

    def forward(absent, *args):
        x, wanted = split_forward(args)
        out = _forward_outputs(x, wanted, absent)
        computed = [dl(o) if want else None for o, want in zip(out[2:], wanted)]
        c_forward(*v.c_inputs(x), dl(out.rgb), dl(out.opacity), *computed, stream_of(x.first))
        return out

    def split_backward(args):
        x = v.inputs(args)
        upstream = args[k : k + 6]  # grad_rgb … grad_transmittance, ray_state
        return x, upstream, v.gradients(args[k + 6 :])

    def gradient_outputs(args, absent):
        x, _, wanted = split_backward(args)
        return _gradients(x, wanted, absent)

    def backward(absent, *args):
        x, upstream, wanted = split_backward(args)
        grads = _gradients(x, wanted, absent)
        # Only the gradients asked for reach the binding (a placeholder is not one).
        computed = [dl(g) if want and t is not None else None
                    for g, want, t in zip(v.op_gradients(grads), v.op_gradients(wanted),
                                          v.op_gradients(_differentiable(x)))]
        c_backward(*v.c_inputs(x), *map(_capsule, upstream), *computed, stream_of(x.first))
        return v.op_gradients(grads)

    def setup_context(ctx, inputs, output):
        x, wanted = split_forward(inputs)
        out = _Outputs(*output)
        ctx.transmittance_thresh, ctx.wanted = x.transmittance_thresh, wanted
        state = out.ray_state if wanted.ray_state else None
        ctx.save_for_backward(x.first, x.rgbs, x.delta_ts, x.ts, x.offsets, x.background,
                              x.prefix_transmittance, state)

    def gradient(ctx, grad_rgb, grad_opacity, grad_depth, grad_weights, _grad_total_samples,
                 grad_transmittance, _grad_ray_state):
        first, rgbs, delta_ts, ts, offsets, background, prefix, state = ctx.saved_tensors
        x = _Inputs(first, rgbs, delta_ts, ts, offsets, ctx.transmittance_thresh, background,
                    prefix)
        needs = v.inputs(_registry.needs_input_grad(ctx))
        wanted = _Gradients(*(bool(n) for n in _differentiable(needs)))
        none = (None,) * (k + len(_Wanted._fields))
        if not any(wanted):
            return none
        if grad_rgb is None:
            grad_rgb = rgbs.new_zeros((offsets.shape[0] - 1, rgbs.shape[1]))
        # Gradients of outputs that were not computed (None, or 0-element placeholders) are unused.
        w = ctx.wanted
        upstream = (grad_rgb, grad_opacity, grad_depth if w.depth else None,
                    grad_weights if w.weights else None,
                    grad_transmittance if w.transmittance else None, state)
        grads = v.gradients(_registry.call_in_backward(
            ctx, _ops[f"{v.name}_backward"], *v.op_inputs(x), *upstream, *v.op_gradients(wanted)))
        g = _Gradients(*(gi if want else None for gi, want in zip(grads, wanted, strict=True)))
        g_background = g.background
        if g_background is not None:
            if background.dim() == 1:
                g_background = g_background.sum(0)  # a shared background: the rays' gradients
            g_background = g_background.to(background.dtype)
        by_input = _Inputs(g.first, g.rgbs, g.delta_ts, g.ts, None, None, g_background,
                           g.prefix_transmittance)
        return v.op_inputs(by_input) + (None,) * len(_Wanted._fields)

    flags_schema = ", ".join(f"bool {f}" for f in _Wanted._fields)
    upstream_schema = ("Tensor grad_rgb, Tensor? grad_opacity, Tensor? grad_depth, "
                       "Tensor? grad_weights, Tensor? grad_transmittance, Tensor? ray_state")
    grads_schema = ", ".join(f"bool {f}" for f in grad_flags)
    return [
        _registry.OpSpec(
            f"{v.name}_forward",
            lambda *args: forward(empty, *args),
            lambda *args: _forward_outputs(*split_forward(args), empty),
            setup_context,
            gradient,
            non_differentiable=(4, 6),  # total_samples, ray_state
            materialize_grads=False,
            schema=f"({inputs_schema}, {flags_schema}) -> "
                   "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
            eager_impl=lambda *args: forward(nothing, *args),
        ),
        _registry.OpSpec(
            f"{v.name}_backward",
            lambda *args: backward(empty, *args),
            lambda *args: v.op_gradients(gradient_outputs(args, empty)),
            schema=f"({inputs_schema}, {upstream_schema}, {grads_schema}) -> "
                   f"({', '.join(['Tensor'] * len(grad_flags))})",
            eager_impl=lambda *args: backward(nothing, *args),
        ),
    ]


_VOLUME_RENDER = _Variant("volume_render", "sigmas", alpha_input=False)
_VOLUME_RENDER_ALPHA = _Variant("volume_render_alpha", "alphas", alpha_input=True)

# Note [op table]: both variants, registered once (custom op, fake, autograd, eager fast path).
_ops = _registry.register(_table(_VOLUME_RENDER) + _table(_VOLUME_RENDER_ALPHA))


def _render(v: _Variant, x: _Inputs, depth, weights, total_samples, transmittance, validate):
    # Allocating the outputs reads the shapes, dtype and device of these, and the eager path
    # requires_grad of every tensor; the binding takes tensors only where its entry has them.
    required = {"first", "rgbs", "offsets"} | (set() if v.alpha_input else {"delta_ts"})
    for name, t in zip(_Inputs._fields, x, strict=True):
        if name != "transmittance_thresh" and (name in required or t is not None):
            check_tensor(v.name, v.first if name == "first" else name, t)
    x = x._replace(transmittance_thresh=real_number(v.name, "transmittance_thresh",
                                                    x.transmittance_thresh))
    if validate:
        samples = x.first.shape[0] if x.first.dim() == 1 else None
        check_device_offsets(v.name, x.offsets, samples)
    # A forward that autograd will differentiate also writes the ray state; the results are the
    # same either way.
    differentiable = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in _differentiable(x))
    wanted = _Wanted(depth=bool(depth) and x.ts is not None,  # depth needs the sample depths
                     weights=bool(weights), total_samples=bool(total_samples),
                     transmittance=bool(transmittance), ray_state=differentiable)
    out = _Outputs(*_ops[f"{v.name}_forward"](*v.op_inputs(x), *wanted))
    return RenderOutput(
        out.rgb, out.opacity,
        depth=out.depth if wanted.depth else None,
        weights=out.weights if wanted.weights else None,
        total_samples=out.total_samples if wanted.total_samples else None,
        transmittance=out.transmittance if wanted.transmittance else None,
    )


def volume_render(
    sigmas: Tensor,
    rgbs: Tensor,
    delta_ts: Tensor,
    ts: Tensor | None,
    offsets: Tensor,
    transmittance_thresh: float = 0.0,
    background: Tensor | None = None,
    prefix_transmittance: Tensor | None = None,
    *,
    depth: bool = True,
    weights: bool = False,
    total_samples: bool = False,
    transmittance: bool = False,
    validate: bool = True,
) -> RenderOutput:
    """Emission-absorption volume rendering of packed rays, front to back.

    Per ray, with ``T = 1`` (or ``prefix_transmittance[r]``): ``a = 1 − exp(−σ·δ)``, ``w = a·T``,
    ``rgb += w·rgb_s``, ``depth += w·t_s``, ``opacity += w``, ``T ← T·(1 − a)``, and the ray stops
    after the first sample with ``T <= transmittance_thresh`` (that sample is composited and
    counted). Then ``rgb += T·background``.

    Args:
        sigmas: ``[N]`` densities. Differentiable.
        rgbs: ``[N, C]``, any C >= 1. Differentiable.
        delta_ts: ``[N]`` sample lengths. Differentiable.
        ts: ``[N]`` sample depths (for the depth output; None skips it). Differentiable.
        offsets: ``[R + 1]`` int64 ray boundaries.
        transmittance_thresh: early-termination threshold in [0, 1).
        background: optional ``[C]`` or ``[R, C]``. Differentiable.
        prefix_transmittance: optional ``[R]`` starting transmittance (chunked marching).
            Differentiable.
        depth, weights, total_samples, transmittance: which optional outputs to compute. They
            are chosen here, never by autograd state, so inference computes exactly these.
        validate: check the values of CUDA offsets (one device sync; skipped while compiling or
            capturing). Host offsets are always checked, and so is every other argument.

    Returns:
        :class:`RenderOutput`. The backward is exact and stable on long opaque rays; samples past
        termination get exactly zero gradient.
    """
    x = _Inputs(sigmas, rgbs, delta_ts, ts, offsets, transmittance_thresh, background,
                prefix_transmittance)
    return _render(_VOLUME_RENDER, x, depth, weights, total_samples, transmittance, validate)


def volume_render_alpha(
    alphas: Tensor,
    rgbs: Tensor,
    ts: Tensor | None,
    offsets: Tensor,
    transmittance_thresh: float = 0.0,
    background: Tensor | None = None,
    prefix_transmittance: Tensor | None = None,
    *,
    depth: bool = True,
    weights: bool = False,
    total_samples: bool = False,
    transmittance: bool = False,
    validate: bool = True,
) -> RenderOutput:
    """:func:`volume_render` with opacities ``α ∈ [0, 1]`` in place of ``1 − exp(−σ·δ)``.

    The gradient to ``α`` is ``T_i·q_i − V_i/(1 − α_i)`` (Note [stable backward] in
    ``render_math.h``), finite and exact at ``α = 1``.
    """
    x = _Inputs(alphas, rgbs, None, ts, offsets, transmittance_thresh, background,
                prefix_transmittance)
    return _render(_VOLUME_RENDER_ALPHA, x, depth, weights, total_samples, transmittance, validate)
