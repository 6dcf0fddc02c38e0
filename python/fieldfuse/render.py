# SPDX-License-Identifier: Apache-2.0
"""Ray integration: volume rendering, X-ray line integrals and ray–box sampling (packed rays).

Rays are packed: the samples of ray ``r`` occupy ``[offsets[r], offsets[r+1])`` of every
per-sample tensor; ``offsets`` is int64 ``[R+1]`` with ``offsets[0] = 0``, ``offsets[R] = N``,
non-decreasing (empty rays allowed). Inputs may be float32 or float64 on CPU and CUDA, and float16
or bfloat16 on CUDA; every ray is accumulated in float64 in a fixed order (deterministic, no
atomics). Outputs have the inputs' dtype.

Raw ops (each with a fake impl, so ``torch.compile(fullgraph=True)`` traces them):
``torch.ops.fieldfuse.volume_render_forward`` / ``_backward``, ``line_integral_forward`` /
``_backward``, ``ray_box_counts``, ``ray_box_samples_forward`` / ``_backward`` and
``ray_box_samples_padded``. Eager calls of ``volume_render`` and ``line_integral`` run the same
functions through an ``autograd.Function`` instead, which halves their host time per call; under
torch.compile they go through the ops.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ._backend import _C, check_tensor, dl, reduced_dtype, stream_of

__all__ = [
    "RenderOutput",
    "volume_render",
    "volume_render_alpha",
    "line_integral",
    "ray_box_samples",
    "ray_box_samples_padded",
    "parallel_beam_rays",
    "tilt_rotations",
]


def _opt(t: Tensor | None):
    return None if t is None else dl(t)


def _empty(like: Tensor) -> Tensor:
    """A fresh 0-element placeholder for an output nobody asked for (the registered ops must return
    a tensor for every output, and outputs must not alias)."""
    return like.new_empty((0,))


def _nothing(like: Tensor) -> None:
    """No placeholder: eager calls return None for outputs nobody asked for, and spare an
    allocation each (2–4 µs on CUDA, up to nine in a training step)."""
    return None


def _check_offsets(op: str, offsets: Tensor, num_samples: int) -> None:
    """Full offsets checks for CUDA tensors (the core checks host offsets itself). Reading device
    offsets synchronises, so it is skipped while compiling or capturing a CUDA graph."""
    check_tensor(op, "offsets", offsets)
    if offsets.dtype != torch.int64:
        raise TypeError(f"{op}(): expected offsets to be int64, but got {offsets.dtype}")
    if offsets.dim() != 1 or offsets.numel() < 1:
        raise ValueError(
            f"{op}(): expected offsets to have shape [R + 1] (at least one entry), but got shape "
            f"{list(offsets.shape)}"
        )
    if offsets.device.type != "cuda" or torch.compiler.is_compiling():
        return
    if torch.cuda.is_current_stream_capturing():
        return
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0:
        raise ValueError(f"{op}(): expected offsets[0] == 0, but got {first}")
    if bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError(f"{op}(): expected offsets to be non-decreasing")
    if last != num_samples:
        raise ValueError(
            f"{op}(): expected offsets[-1] to equal the number of samples N = {num_samples}, but "
            f"got {last}"
        )


# --- volume_render ----------------------------------------------------------------------------

_OUTPUT_NAMES = ("opacity", "depth", "weights", "total_samples", "transmittance")


class RenderOutput(NamedTuple):
    """Per-ray results; outputs that were not requested are None."""

    rgb: Tensor  # [R, C]
    opacity: Tensor  # [R], Σ w
    depth: Tensor | None  # [R], Σ w·t (not divided by the opacity)
    weights: Tensor | None  # [N], 0 past termination
    total_samples: Tensor | None  # [R] int64
    transmittance: Tensor | None  # [R], the final T


# Columns of the per-ray state a training forward hands its backward (Note [ray state] in
# src/render/render_ray.h).
_RAY_STATE_FIELDS = 4


def _render_outputs(sigmas: Tensor, rgbs: Tensor, offsets: Tensor, wants: list[bool],
                    placeholder=_empty):
    """rgb, then opacity, depth, weights, total_samples, transmittance and the ray state, each
    `placeholder(sigmas)` where not wanted."""
    r, n, c = offsets.shape[0] - 1, sigmas.shape[0], rgbs.shape[1]
    shapes = ((r,), (r,), (n,), (r,), (r,), (r, _RAY_STATE_FIELDS))
    dtypes = (sigmas.dtype, sigmas.dtype, sigmas.dtype, torch.int64, sigmas.dtype, torch.float64)
    rest = [
        sigmas.new_empty(shape, dtype=dtype) if want else placeholder(sigmas)
        for want, shape, dtype in zip(wants, shapes, dtypes, strict=True)
    ]
    return (sigmas.new_empty((r, c)), *rest)


def _render_forward(
    sigmas: Tensor,
    rgbs: Tensor,
    delta_ts: Tensor | None,
    ts: Tensor | None,
    offsets: Tensor,
    threshold: float,
    background: Tensor | None,
    prefix: Tensor | None,
    alpha_input: bool,
    wants: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _run_render_forward(_empty, sigmas, rgbs, delta_ts, ts, offsets, threshold, background,
                               prefix, alpha_input, wants)


def _run_render_forward(placeholder, sigmas, rgbs, delta_ts, ts, offsets, threshold, background,
                        prefix, alpha_input, wants):
    """The forward, with `placeholder(sigmas)` for the outputs not wanted."""
    outs = _render_outputs(sigmas, rgbs, offsets, wants, placeholder)
    optional = [dl(o) if want else None for o, want in zip(outs[1:], wants, strict=True)]
    _C.volume_render_forward(
        dl(sigmas), alpha_input, dl(rgbs), _opt(delta_ts), _opt(ts), dl(offsets), threshold,
        _opt(background), _opt(prefix), dl(outs[0]), *optional, stream_of(sigmas),
    )
    return outs


volume_render_forward = torch.library.custom_op("fieldfuse::volume_render_forward",
                                                mutates_args=())(_render_forward)


@volume_render_forward.register_fake
def _(sigmas, rgbs, delta_ts, ts, offsets, threshold, background, prefix, alpha_input, wants):
    return _render_outputs(sigmas, rgbs, offsets, wants)


def _render_gradients(sigmas, rgbs, delta_ts, ts, background, prefix, offsets, wants,
                      placeholder=_empty):
    r, c = offsets.shape[0] - 1, rgbs.shape[1]
    inputs = (sigmas, rgbs, delta_ts, ts, background, prefix)
    grads = []
    for i, (want, t) in enumerate(zip(wants, inputs, strict=True)):
        if not want or t is None:
            grads.append(placeholder(sigmas))
        elif i == 4:
            # Per-ray background gradients, in float32 for 16-bit inputs: a shared background
            # sums them, and that sum must round once, not once per ray.
            grads.append(sigmas.new_empty((r, c), dtype=reduced_dtype(sigmas.dtype)))
        else:
            grads.append(torch.empty_like(t))
    return tuple(grads)


def _render_backward(
    grad_rgb: Tensor,
    grad_opacity: Tensor | None,
    grad_depth: Tensor | None,
    grad_weights: Tensor | None,
    grad_transmittance: Tensor | None,
    ray_state: Tensor | None,
    sigmas: Tensor,
    rgbs: Tensor,
    delta_ts: Tensor | None,
    ts: Tensor | None,
    offsets: Tensor,
    threshold: float,
    background: Tensor | None,
    prefix: Tensor | None,
    alpha_input: bool,
    wants: list[bool],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _run_render_backward(_empty, grad_rgb, grad_opacity, grad_depth, grad_weights,
                                grad_transmittance, ray_state, sigmas, rgbs, delta_ts, ts, offsets,
                                threshold, background, prefix, alpha_input, wants)


def _run_render_backward(placeholder, grad_rgb, grad_opacity, grad_depth, grad_weights,
                         grad_transmittance, ray_state, sigmas, rgbs, delta_ts, ts, offsets,
                         threshold, background, prefix, alpha_input, wants):
    """The backward, with `placeholder(sigmas)` for the gradients not wanted."""
    grads = _render_gradients(sigmas, rgbs, delta_ts, ts, background, prefix, offsets, wants,
                              placeholder)
    inputs = (sigmas, rgbs, delta_ts, ts, background, prefix)
    out = [dl(g) if want and t is not None else None
           for g, want, t in zip(grads, wants, inputs, strict=True)]
    _C.volume_render_backward(
        dl(sigmas), alpha_input, dl(rgbs), _opt(delta_ts), _opt(ts), dl(offsets), threshold,
        _opt(background), _opt(prefix), dl(grad_rgb), _opt(grad_opacity), _opt(grad_depth),
        _opt(grad_weights), _opt(grad_transmittance), _opt(ray_state), *out, stream_of(sigmas),
    )
    return grads


volume_render_backward = torch.library.custom_op("fieldfuse::volume_render_backward",
                                                 mutates_args=())(_render_backward)


@volume_render_backward.register_fake
def _(grad_rgb, grad_opacity, grad_depth, grad_weights, grad_transmittance, ray_state, sigmas,
      rgbs, delta_ts, ts, offsets, threshold, background, prefix, alpha_input, wants):
    return _render_gradients(sigmas, rgbs, delta_ts, ts, background, prefix, offsets, wants)


def _setup_render(ctx, inputs, output):
    sigmas, rgbs, delta_ts, ts, offsets, threshold, background, prefix, alpha_input, wants = inputs
    ctx.threshold, ctx.alpha_input, ctx.output_wants = threshold, alpha_input, wants
    state = output[6] if wants[5] else None
    ctx.save_for_backward(sigmas, rgbs, delta_ts, ts, offsets, background, prefix, state)


def _render_grad(ctx, grad_rgb, grad_opacity, grad_depth, grad_weights, _grad_total, grad_trans,
                 _grad_state):
    sigmas, rgbs, delta_ts, ts, offsets, background, prefix, state = ctx.saved_tensors
    needs = ctx.needs_input_grad
    wants = [needs[0], needs[1], needs[2] and not ctx.alpha_input, needs[3], needs[6], needs[7]]
    if not any(wants):
        return (None,) * 10
    if grad_rgb is None:
        grad_rgb = rgbs.new_zeros((offsets.shape[0] - 1, rgbs.shape[1]))
    # Gradients of outputs that were not computed (0-element placeholders) are not used.
    upstream = [g if want else None for g, want in
                zip((grad_opacity, grad_depth, grad_weights, grad_trans),
                    (ctx.output_wants[0], ctx.output_wants[1], ctx.output_wants[2],
                     ctx.output_wants[4]), strict=True)]
    args = (grad_rgb, *upstream, state, sigmas, rgbs, delta_ts, ts, offsets, ctx.threshold,
            background, prefix, ctx.alpha_input, [bool(w) for w in wants])
    if getattr(ctx, "eager", False):
        grads = _run_render_backward(_nothing, *args)
    else:
        grads = volume_render_backward(*args)
    g_sigmas, g_rgbs, g_delta, g_ts, g_bg, g_prefix = (
        g if w else None for g, w in zip(grads, wants, strict=True)
    )
    if g_bg is not None:
        if background.dim() == 1:
            g_bg = g_bg.sum(0)  # a shared background: the per-ray gradients, summed in order
        g_bg = g_bg.to(background.dtype)
    return g_sigmas, g_rgbs, g_delta, g_ts, None, None, g_bg, g_prefix, None, None


volume_render_forward.register_autograd(_render_grad, setup_context=_setup_render)


def _through_library(t: Tensor) -> bool:
    """Whether a call goes through the registered custom ops: under torch.compile or tracing,
    which see them by their fake impls, for tensor subclasses (fake tensors of export, functional
    wrappers) and for devices the kernels do not run on (meta). Plain eager calls take an
    autograd.Function over the same functions instead: torch.library's per-call dispatch (argument
    defaults, redispatch, the autograd wrapper) costs more host time than the kernels take at
    typical sizes, and a small training step is bound by the host."""
    return (torch.compiler.is_compiling() or torch.jit.is_tracing()
            or type(t) not in (torch.Tensor, torch.nn.Parameter)
            or t.device.type not in ("cpu", "cuda"))


class _VolumeRender(torch.autograd.Function):
    """volume_render_forward with its registered backward, for eager calls (_through_library)."""

    @staticmethod
    def forward(ctx, *inputs):
        outs = _run_render_forward(_nothing, *inputs)
        _setup_render(ctx, inputs, outs)
        ctx.eager = True
        ctx.set_materialize_grads(False)
        # total_samples and the ray state (None where not computed).
        ctx.mark_non_differentiable(*(o for o in (outs[4], outs[6]) if o is not None))
        return outs

    @staticmethod
    def backward(ctx, *grads):
        return _render_grad(ctx, *grads)


def _render(op, sigmas, rgbs, delta_ts, ts, offsets, thresh, background, prefix, alpha_input,
            depth, weights, total_samples, transmittance, validate):
    first = "alphas" if alpha_input else "sigmas"
    check_tensor(op, first, sigmas)
    check_tensor(op, "rgbs", rgbs)
    # Shapes the output allocation reads, checked here so the message names the argument.
    if sigmas.dim() != 1:
        raise ValueError(f"{op}(): expected {first} to have shape [N], but got shape "
                         f"{list(sigmas.shape)}")
    if rgbs.dim() != 2:
        raise ValueError(f"{op}(): expected rgbs to have shape [N, C], but got shape "
                         f"{list(rgbs.shape)}")
    for name, t in (("delta_ts", delta_ts), ("ts", ts), ("background", background),
                    ("prefix_transmittance", prefix)):
        if t is not None:
            check_tensor(op, name, t)
    if validate:
        _check_offsets(op, offsets, sigmas.shape[0])
    if depth and ts is None:
        depth = False  # depth needs the sample depths
    # A forward that autograd will differentiate also writes the ray state, which spares its
    # backward a second march over σ and δ. Not an output: the results are the same either way.
    differentiable = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (sigmas, rgbs, delta_ts, ts, background, prefix))
    wants = [True, bool(depth), bool(weights), bool(total_samples), bool(transmittance),
             differentiable]
    args = (sigmas, rgbs, delta_ts, ts, offsets, float(thresh), background, prefix, alpha_input,
            wants)
    if _through_library(sigmas):
        outs = volume_render_forward(*args)
    else:
        outs = (_VolumeRender.apply(*args) if differentiable
                else _run_render_forward(_nothing, *args))
    return RenderOutput(outs[0], outs[1], *(o if w else None
                                            for o, w in zip(outs[2:6], wants[1:5], strict=True)))


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
        validate: check the offsets (one device sync on CUDA; skipped while compiling or
            capturing).

    Returns:
        :class:`RenderOutput`. The backward is exact and stable on long opaque rays; samples past
        termination get exactly zero gradient.
    """
    return _render("volume_render", sigmas, rgbs, delta_ts, ts, offsets, transmittance_thresh,
                   background, prefix_transmittance, False, depth, weights, total_samples,
                   transmittance, validate)


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
    return _render("volume_render_alpha", alphas, rgbs, None, ts, offsets, transmittance_thresh,
                   background, prefix_transmittance, True, depth, weights, total_samples,
                   transmittance, validate)


# --- line_integral ----------------------------------------------------------------------------


def _line_output(values: Tensor, offsets: Tensor) -> Tensor:
    r = offsets.shape[0] - 1
    return values.new_empty((r,) + tuple(values.shape[1:]))


def _line_forward(values: Tensor, delta_ts: Tensor, offsets: Tensor) -> Tensor:
    out = _line_output(values, offsets)
    _C.line_integral_forward(dl(values), dl(delta_ts), dl(offsets), dl(out), stream_of(values))
    return out


line_integral_forward = torch.library.custom_op("fieldfuse::line_integral_forward",
                                                mutates_args=())(_line_forward)


line_integral_forward.register_fake(lambda values, delta_ts, offsets: _line_output(values, offsets))


def _line_backward(grad_out: Tensor, values: Tensor, delta_ts: Tensor, offsets: Tensor,
                   wants: list[bool]) -> tuple[Tensor, Tensor]:
    gv = torch.empty_like(values) if wants[0] else _empty(values)
    gd = torch.empty_like(delta_ts) if wants[1] else _empty(values)
    _C.line_integral_backward(dl(values), dl(delta_ts), dl(offsets), dl(grad_out),
                              dl(gv) if wants[0] else None, dl(gd) if wants[1] else None,
                              stream_of(values))
    return gv, gd


line_integral_backward = torch.library.custom_op("fieldfuse::line_integral_backward",
                                                 mutates_args=())(_line_backward)


@line_integral_backward.register_fake
def _(grad_out, values, delta_ts, offsets, wants):
    return (torch.empty_like(values) if wants[0] else _empty(values),
            torch.empty_like(delta_ts) if wants[1] else _empty(values))


def _setup_line(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _line_grad(ctx, grad_out):
    values, delta_ts, offsets = ctx.saved_tensors
    wants = [bool(ctx.needs_input_grad[0]), bool(ctx.needs_input_grad[1])]
    if not any(wants):
        return None, None, None
    backward = _line_backward if getattr(ctx, "eager", False) else line_integral_backward
    gv, gd = backward(grad_out, values, delta_ts, offsets, wants)
    return (gv if wants[0] else None), (gd if wants[1] else None), None


line_integral_forward.register_autograd(_line_grad, setup_context=_setup_line)


class _LineIntegral(torch.autograd.Function):
    """line_integral_forward with its registered backward, for eager calls (_through_library)."""

    @staticmethod
    def forward(ctx, values, delta_ts, offsets):
        out = _line_forward(values, delta_ts, offsets)
        _setup_line(ctx, (values, delta_ts, offsets), out)
        ctx.eager = True
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return _line_grad(ctx, grad_out)


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
    check_tensor(op, "values", values)
    check_tensor(op, "delta_ts", delta_ts)
    if values.dim() not in (1, 2):
        raise ValueError(f"{op}(): expected values to have shape [N] or [N, C], but got shape "
                         f"{list(values.shape)}")
    if validate:
        _check_offsets(op, offsets, values.shape[0])
    if _through_library(values):
        return line_integral_forward(values, delta_ts, offsets)
    if torch.is_grad_enabled() and (values.requires_grad or delta_ts.requires_grad):
        return _LineIntegral.apply(values, delta_ts, offsets)
    return _line_forward(values, delta_ts, offsets)


# --- ray-box sampling -------------------------------------------------------------------------


@torch.library.custom_op("fieldfuse::ray_box_counts", mutates_args=())
def ray_box_counts(origins: Tensor, directions: Tensor, ds: float) -> Tensor:
    counts = origins.new_empty((origins.shape[0],), dtype=torch.int64)
    _C.ray_box_counts(dl(origins), dl(directions), ds, dl(counts), stream_of(origins))
    return counts


ray_box_counts.register_fake(
    lambda origins, directions, ds: origins.new_empty((origins.shape[0],), dtype=torch.int64))


@torch.library.custom_op("fieldfuse::ray_box_samples_forward", mutates_args=())
def ray_box_samples_forward(origins: Tensor, directions: Tensor, ds: float, offsets: Tensor,
                            num_samples: int) -> tuple[Tensor, Tensor]:
    points = origins.new_empty((num_samples, 3))
    delta = origins.new_empty((num_samples,))
    _C.ray_box_samples_forward(dl(origins), dl(directions), ds, dl(offsets), dl(points),
                               dl(delta), None, stream_of(origins))
    return points, delta


@ray_box_samples_forward.register_fake
def _(origins, directions, ds, offsets, num_samples):
    return origins.new_empty((num_samples, 3)), origins.new_empty((num_samples,))


def _padded_outputs(origins: Tensor, ds: float):
    r, s = origins.shape[0], _C.ray_box_capacity(ds)
    return (origins.new_empty((r, s, 3)), origins.new_empty((r, s)),
            origins.new_empty((r, s), dtype=torch.bool))


@torch.library.custom_op("fieldfuse::ray_box_samples_padded", mutates_args=())
def ray_box_samples_padded_op(origins: Tensor, directions: Tensor,
                              ds: float) -> tuple[Tensor, Tensor, Tensor]:
    points, delta, valid = _padded_outputs(origins, ds)
    _C.ray_box_samples_forward(dl(origins), dl(directions), ds, None, dl(points), dl(delta),
                               dl(valid), stream_of(origins))
    return points, delta, valid


ray_box_samples_padded_op.register_fake(lambda origins, directions, ds: _padded_outputs(origins, ds))


@torch.library.custom_op("fieldfuse::ray_box_samples_backward", mutates_args=())
def ray_box_samples_backward(grad_points: Tensor, grad_delta_ts: Tensor, origins: Tensor,
                             directions: Tensor, ds: float, offsets: Tensor | None,
                             wants: list[bool]) -> tuple[Tensor, Tensor]:
    go = torch.empty_like(origins) if wants[0] else _empty(origins)
    gd = torch.empty_like(directions) if wants[1] else _empty(origins)
    _C.ray_box_samples_backward(dl(origins), dl(directions), ds, _opt(offsets), dl(grad_points),
                                dl(grad_delta_ts), dl(go) if wants[0] else None,
                                dl(gd) if wants[1] else None, stream_of(origins))
    return go, gd


@ray_box_samples_backward.register_fake
def _(grad_points, grad_delta_ts, origins, directions, ds, offsets, wants):
    return (torch.empty_like(origins) if wants[0] else _empty(origins),
            torch.empty_like(directions) if wants[1] else _empty(origins))


def _box_grad(ctx, grad_points, grad_delta, offsets):
    origins, directions = ctx.saved_tensors[:2]
    wants = [bool(ctx.needs_input_grad[0]), bool(ctx.needs_input_grad[1])]
    if not any(wants):
        return None
    grad_points = grad_points if grad_points is not None else ctx.points_zeros()
    grad_delta = grad_delta if grad_delta is not None else ctx.delta_zeros()
    go, gd = ray_box_samples_backward(grad_points, grad_delta, origins, directions, ctx.ds,
                                      offsets, wants)
    return (go if wants[0] else None), (gd if wants[1] else None)


def _setup_packed(ctx, inputs, output):
    origins, directions, ds, offsets, num_samples = inputs
    ctx.ds = ds
    ctx.save_for_backward(origins, directions, offsets)
    ctx.points_zeros = lambda: origins.new_zeros((num_samples, 3))
    ctx.delta_zeros = lambda: origins.new_zeros((num_samples,))


def _packed_grad(ctx, grad_points, grad_delta):
    grads = _box_grad(ctx, grad_points, grad_delta, ctx.saved_tensors[2])
    return (None,) * 5 if grads is None else (*grads, None, None, None)


ray_box_samples_forward.register_autograd(_packed_grad, setup_context=_setup_packed)


def _setup_padded(ctx, inputs, output):
    origins, directions, ds = inputs
    ctx.ds = ds
    ctx.save_for_backward(origins, directions)
    s = output[1].shape[1]
    ctx.points_zeros = lambda: origins.new_zeros((origins.shape[0], s, 3))
    ctx.delta_zeros = lambda: origins.new_zeros((origins.shape[0], s))


def _padded_grad(ctx, grad_points, grad_delta, _grad_valid):
    grads = _box_grad(ctx, grad_points, grad_delta, None)
    return (None,) * 3 if grads is None else (*grads, None)


ray_box_samples_padded_op.register_autograd(_padded_grad, setup_context=_setup_padded)


def _check_rays(op: str, origins: Tensor, directions: Tensor, ds: float) -> None:
    check_tensor(op, "origins", origins)
    check_tensor(op, "directions", directions)
    if not (isinstance(ds, (int, float)) and math.isfinite(ds) and ds > 0):
        raise ValueError(f"{op}(): expected ds to be finite and > 0, but got {ds!r}")


def ray_box_samples(origins: Tensor, directions: Tensor,
                    ds: float) -> tuple[Tensor, Tensor, Tensor]:
    """Uniform samples of parallel-beam rays through the box [−1, 1]³, packed.

    Per ray ``o + t·d``: the slab intersection ``[t_in, t_out]`` (a ray parallel to a face within
    1e-8 is inside only if ``|o| <= 1`` on that axis; touching only an edge or corner misses),
    ``n = ceil(len/ds) + 1`` (>= 2) samples ``t_in + k·δ``, ``δ = len/(n − 1)``. Rays that miss
    produce no samples.

    Args:
        origins, directions: ``[R, 3]``. Differentiable (through the points and δ, including the
            movement of t_in and t_out; n is piecewise constant).
        ds: the step, > 0.

    Returns:
        ``(points [N, 3], delta_ts [N], offsets [R + 1])``. N is data-dependent: this reads the
        counts back (one device sync); use :func:`ray_box_samples_padded` for static shapes.
    """
    op = "ray_box_samples"
    _check_rays(op, origins, directions, ds)
    counts = ray_box_counts(origins, directions, float(ds))
    offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    points, delta = ray_box_samples_forward(origins, directions, float(ds), offsets,
                                            int(offsets[-1]))
    return points, delta, offsets


def ray_box_samples_padded(origins: Tensor, directions: Tensor,
                           ds: float) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`ray_box_samples` padded to ``S = ceil(2√3/ds) + 1`` samples per ray.

    Returns:
        ``(points [R, S, 3], delta_ts [R, S], valid [R, S] bool)``; padding slots are zeros.
        Shapes depend only on R and ds, so CUDA graphs and ``torch.compile`` handle it.
    """
    _check_rays("ray_box_samples_padded", origins, directions, ds)
    return ray_box_samples_padded_op(origins, directions, float(ds))


def tilt_rotations(angles: Tensor, axis: str = "y") -> Tensor:
    """Rotation matrices ``[M, 3, 3]`` for tilt angles (radians) about a coordinate axis.

    Differentiable with respect to the angles.
    """
    if axis not in ("x", "y", "z"):
        raise ValueError(f'tilt_rotations(): expected axis to be "x", "y" or "z", but got {axis!r}')
    c, s = torch.cos(angles), torch.sin(angles)
    one, zero = torch.ones_like(angles), torch.zeros_like(angles)
    if axis == "x":
        rows = ((one, zero, zero), (zero, c, -s), (zero, s, c))
    elif axis == "y":
        rows = ((c, zero, s), (zero, one, zero), (-s, zero, c))
    else:
        rows = ((c, -s, zero), (s, c, zero), (zero, zero, one))
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def parallel_beam_rays(rotations: Tensor, shifts: Tensor | None,
                       detector_size: int) -> tuple[Tensor, Tensor]:
    """Origins and directions of a parallel-beam tilt series (specs/render.md).

    Pixel ``(i, j)`` of projection ``m``: ``o = R_m·(x_j, y_i, 0) + shift_m``, ``d = R_m·e_z``,
    with ``x = 2j/(n − 1) − 1`` and ``y = 2i/(n − 1) − 1`` for ``n = detector_size``.

    Args:
        rotations: ``[M, 3, 3]``. Differentiable.
        shifts: ``[M, 3]`` or None. Differentiable.
        detector_size: pixels per side, >= 1.

    Returns:
        ``(origins, directions)``, each ``[M·n·n, 3]`` in (m, i, j) order.
    """
    if detector_size < 1:
        raise ValueError(f"parallel_beam_rays(): expected detector_size >= 1, got {detector_size}")
    n = detector_size
    grid = (torch.arange(n, dtype=rotations.dtype, device=rotations.device) * (2.0 / (n - 1)) - 1.0
            if n > 1 else rotations.new_zeros(1))
    y, x = torch.meshgrid(grid, grid, indexing="ij")
    pixels = torch.stack([x, y, torch.zeros_like(x)], dim=-1).reshape(-1, 3)  # [n·n, 3]
    origins = torch.einsum("mij,pj->mpi", rotations, pixels)
    if shifts is not None:
        origins = origins + shifts[:, None, :]
    directions = rotations[:, :, 2][:, None, :].expand(-1, n * n, -1)
    return origins.reshape(-1, 3), directions.reshape(-1, 3)
