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
_NO_FLAG_GRADIENTS = (None,) * len(_Wanted._fields)  # the forward's bool arguments


class _Variant(NamedTuple):
    """How volume_render and volume_render_alpha differ: names and whether δ exists."""

    name: str  # the public function: op, binding and error prefix
    first: str  # "sigmas" or "alphas"
    alpha_input: bool

    def inputs(self, args) -> _Inputs:
        """The first inputs of an op call as _Inputs (delta_ts None for the alpha variant)."""
        if self.alpha_input:
            return _Inputs(args[0], args[1], None, args[2], args[3], args[4], args[5], args[6])
        return _Inputs._make(args[:_NUM_INPUTS])

    def op_inputs(self, x: _Inputs) -> tuple:
        """_Inputs as the op takes them."""
        return (x[:2] + x[3:]) if self.alpha_input else tuple(x)

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
        if self.alpha_input:
            g = op_grads
            return _Gradients(g[0], g[1], None, g[2], g[3], g[4])
        return _Gradients._make(op_grads)

    def op_gradients(self, g: _Gradients) -> tuple:
        """_Gradients as the backward op returns them."""
        return (g[:2] + g[3:]) if self.alpha_input else tuple(g)

    @property
    def num_op_inputs(self) -> int:
        return _NUM_INPUTS - (1 if self.alpha_input else 0)


def _capsule(t):
    return None if t is None else dl(t)


def _forward_outputs(x: _Inputs, wanted: _Wanted, absent) -> _Outputs:
    """The forward's outputs, uninitialised; ``absent(first)`` for those not wanted. Written out
    (no helper per output): the eager path runs this on every forward."""
    first = x.first
    r, n = num_rays(x.offsets), leading_size(first, 1)
    rgbs = x.rgbs
    c = rgbs.shape[1] if rgbs.dim() == 2 else 1
    return _Outputs(
        first.new_empty((r, c)),
        first.new_empty((r,)),
        first.new_empty((r,)) if wanted.depth else absent(first),
        first.new_empty((n,)) if wanted.weights else absent(first),
        first.new_empty((r,), dtype=torch.int64) if wanted.total_samples else absent(first),
        first.new_empty((r,)) if wanted.transmittance else absent(first),
        first.new_empty((r, _RAY_STATE_FIELDS), dtype=torch.float64) if wanted.ray_state
        else absent(first),
    )


def _gradients(x: _Inputs, wanted: _Gradients, absent) -> _Gradients:
    """The backward's outputs, uninitialised; ``absent(first)`` for those not wanted."""
    first = x.first
    background = absent(first)
    if wanted.background and x.background is not None:
        # Per-ray background gradients, in float32 for 16-bit inputs: a shared background sums
        # them, and that sum must round once, not once per ray.
        r, c = num_rays(x.offsets), x.rgbs.shape[1]
        background = first.new_empty((r, c), dtype=reduced_dtype(first.dtype))
    # Written out (no helper per gradient): the eager path runs this on every backward.
    delta_ts, ts, prefix = x.delta_ts, x.ts, x.prefix_transmittance
    return _Gradients(
        torch.empty_like(first) if wanted.first else absent(first),
        torch.empty_like(x.rgbs) if wanted.rgbs else absent(first),
        torch.empty_like(delta_ts) if wanted.delta_ts and delta_ts is not None else absent(first),
        torch.empty_like(ts) if wanted.ts and ts is not None else absent(first),
        background,
        torch.empty_like(prefix) if wanted.prefix_transmittance and prefix is not None
        else absent(first),
    )


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
    no_input_gradients = (None,) * (k + len(_Wanted._fields))
    backward_op = f"{v.name}_backward"  # in _ops, which exists once the tables are registered

    def split_forward(args):
        return v.inputs(args), _Wanted._make(args[k:])

    def forward(absent, *args):
        x, wanted = split_forward(args)
        out = _forward_outputs(x, wanted, absent)
        rgb, opacity, depth, weights, total_samples, transmittance, ray_state = out
        c_forward(*v.c_inputs(x), dl(rgb), dl(opacity),
                  dl(depth) if wanted.depth else None,
                  dl(weights) if wanted.weights else None,
                  dl(total_samples) if wanted.total_samples else None,
                  dl(transmittance) if wanted.transmittance else None,
                  dl(ray_state) if wanted.ray_state else None,
                  stream_of(x.first))
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
        # Only the gradients asked for reach the binding (a placeholder is not one). Written out:
        # this runs on every eager backward.
        g_first, g_rgbs, g_delta_ts, g_ts, g_background, g_prefix = grads
        computed = (
            dl(g_first) if wanted.first else None,
            dl(g_rgbs) if wanted.rgbs else None,
            dl(g_delta_ts) if wanted.delta_ts and x.delta_ts is not None else None,
            dl(g_ts) if wanted.ts and x.ts is not None else None,
            dl(g_background) if wanted.background and x.background is not None else None,
            dl(g_prefix) if wanted.prefix_transmittance and x.prefix_transmittance is not None
            else None,
        )
        grad_rgb, grad_opacity, grad_depth, grad_weights, grad_transmittance, state = upstream
        c_backward(*v.c_inputs(x), dl(grad_rgb), _capsule(grad_opacity), _capsule(grad_depth),
                   _capsule(grad_weights), _capsule(grad_transmittance), _capsule(state),
                   *v.op_gradients(computed), stream_of(x.first))
        return v.op_gradients(grads)

    def setup_context(ctx, inputs, output):
        # Indexes the op's arguments directly (no _Inputs/_Wanted): runs on every eager forward.
        # inputs: first, rgbs, [delta_ts], ts, offsets, transmittance_thresh, background,
        # prefix_transmittance, then the _Wanted flags; ray_state is the last flag and output.
        wanted = _Wanted._make(inputs[k:])
        ctx.transmittance_thresh, ctx.wanted = inputs[k - 3], wanted
        state = output[6] if wanted.ray_state else None
        delta_ts = None if v.alpha_input else inputs[2]
        ctx.save_for_backward(inputs[0], inputs[1], delta_ts, inputs[k - 5], inputs[k - 4],
                              inputs[k - 2], inputs[k - 1], state)

    def gradient(ctx, grad_rgb, grad_opacity, grad_depth, grad_weights, _grad_total_samples,
                 grad_transmittance, _grad_ray_state):
        first, rgbs, delta_ts, ts, offsets, background, prefix, state = ctx.saved_tensors
        # The flags straight from needs_input_grad in op order (as the backward op takes them):
        # this runs on every eager backward, so no _Inputs/_Gradients round trip.
        needs = _registry.needs_input_grad(ctx)
        if v.alpha_input:
            flags = (bool(needs[0]), bool(needs[1]), bool(needs[2]), bool(needs[5]),
                     bool(needs[6]))
        else:
            flags = (bool(needs[0]), bool(needs[1]), bool(needs[2]), bool(needs[3]),
                     bool(needs[6]), bool(needs[7]))
        if not any(flags):
            return no_input_gradients
        if grad_rgb is None:
            grad_rgb = rgbs.new_zeros((offsets.shape[0] - 1, rgbs.shape[1]))
        # Gradients of outputs that were not computed (None, or 0-element placeholders) are unused.
        w = ctx.wanted
        inputs = (first, rgbs, ts, offsets, ctx.transmittance_thresh, background, prefix) \
            if v.alpha_input else \
            (first, rgbs, delta_ts, ts, offsets, ctx.transmittance_thresh, background, prefix)
        grads = _registry.call_in_backward(
            ctx, _ops[backward_op], *inputs, grad_rgb, grad_opacity,
            grad_depth if w.depth else None, grad_weights if w.weights else None,
            grad_transmittance if w.transmittance else None, state, *flags)
        # One gradient per differentiable input in op order; None where not asked for (the
        # library path returns 0-element placeholders there).
        grads = [g if want else None for g, want in zip(grads, flags, strict=True)]
        g_background = grads[-2]
        if g_background is not None:
            if background.dim() == 1:
                g_background = g_background.sum(0)  # a shared background: the rays' gradients
            g_background = g_background.to(background.dtype)
        # By input: the gradients of the tensors before offsets, none for offsets and the
        # threshold, then background and prefix_transmittance; none for the flags.
        return (*grads[:-2], None, None, g_background, grads[-1], *_NO_FLAG_GRADIENTS)

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


def _check_tensors(v: _Variant, x: _Inputs) -> None:
    """TypeError naming the first argument, in signature order, that is not a tensor (the optional
    ones may be None)."""
    required = {"first", "rgbs", "offsets"} | (set() if v.alpha_input else {"delta_ts"})
    for name, t in zip(_Inputs._fields, x, strict=True):
        if name != "transmittance_thresh" and (name in required or t is not None):
            check_tensor(v.name, v.first if name == "first" else name, t)


def _render(v: _Variant, op: _registry.Op, x: _Inputs, depth, weights, total_samples,
            transmittance, validate):
    # Allocating the outputs reads the shapes, dtype and device of these, and the eager path
    # requires_grad of every tensor; the binding takes tensors only where its entry has them.
    # The common case is one straight-line test (this runs on every call); _check_tensors finds
    # the culprit otherwise.
    first, rgbs, delta_ts, ts, offsets, transmittance_thresh, background, prefix = x
    if not isinstance(first, Tensor) \
            or not isinstance(rgbs, Tensor) or not isinstance(offsets, Tensor) \
            or not (isinstance(delta_ts, Tensor) or (v.alpha_input and delta_ts is None)) \
            or not (ts is None or isinstance(ts, Tensor)) \
            or not (background is None or isinstance(background, Tensor)) \
            or not (prefix is None or isinstance(prefix, Tensor)):
        _check_tensors(v, x)
    transmittance_thresh = real_number(v.name, "transmittance_thresh", transmittance_thresh)
    if validate:
        samples = first.shape[0] if first.dim() == 1 else None
        check_device_offsets(v.name, offsets, samples)
    # A forward that autograd will differentiate also writes the ray state; the results are the
    # same either way.
    differentiable = torch.is_grad_enabled() and (
        first.requires_grad or rgbs.requires_grad
        or (delta_ts is not None and delta_ts.requires_grad)
        or (ts is not None and ts.requires_grad)
        or (background is not None and background.requires_grad)
        or (prefix is not None and prefix.requires_grad))
    want_depth = bool(depth) and ts is not None  # depth needs the sample depths
    weights, total_samples, transmittance = bool(weights), bool(total_samples), bool(transmittance)
    # The forward op's arguments and outputs in schema order (_Inputs, _Wanted, _Outputs), written
    # out: building and splitting those tuples cost more host time than this whole function.
    if v.alpha_input:
        out = op(first, rgbs, ts, offsets, transmittance_thresh, background, prefix,
                 want_depth, weights, total_samples, transmittance, differentiable)
    else:
        out = op(first, rgbs, delta_ts, ts, offsets, transmittance_thresh, background, prefix,
                 want_depth, weights, total_samples, transmittance, differentiable)
    # The library path returns 0-element placeholders for outputs not asked for: None here.
    return RenderOutput(
        out[0], out[1],
        out[2] if want_depth else None,
        out[3] if weights else None,
        out[4] if total_samples else None,
        out[5] if transmittance else None,
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
    return _render(_VOLUME_RENDER, _ops["volume_render_forward"], x, depth, weights,
                   total_samples, transmittance, validate)


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
    return _render(_VOLUME_RENDER_ALPHA, _ops["volume_render_alpha_forward"], x, depth, weights,
                   total_samples, transmittance, validate)
