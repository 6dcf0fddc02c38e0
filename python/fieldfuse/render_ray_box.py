# SPDX-License-Identifier: Apache-2.0
"""Uniform samples of rays through the box [−1, 1]³: ``ray_box_samples`` (packed) and
``ray_box_samples_padded`` (fixed capacity), and their op tables (Note [op table]).

Ops: ``fieldfuse::ray_box_samples_counts`` (the per-ray counts the packed layout is built from),
``ray_box_samples_forward`` / ``_backward`` and ``ray_box_samples_padded_forward`` / ``_backward``.
The backward ops' bools ``grad_origins`` and ``grad_directions`` say which gradients to compute.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _registry
from ._backend import _C, check_tensor, dl, real_number, stream_of
from ._render_common import empty, leading_size, nothing

__all__ = ["ray_box_samples", "ray_box_samples_padded"]


def _counts(origins, directions, ds):
    return origins.new_empty((leading_size(origins, 2),), dtype=torch.int64)


def _counts_impl(origins, directions, ds):
    counts = _counts(origins, directions, ds)
    _C.ray_box_samples_counts(dl(origins), dl(directions), ds, dl(counts), stream_of(origins))
    return counts


def _packed(origins, directions, ds, offsets, num_samples):
    return origins.new_empty((num_samples, 3)), origins.new_empty((num_samples,))


def _packed_impl(origins, directions, ds, offsets, num_samples):
    points, delta_ts = _packed(origins, directions, ds, offsets, num_samples)
    _C.ray_box_samples_forward(dl(origins), dl(directions), ds, dl(offsets), dl(points),
                               dl(delta_ts), stream_of(origins))
    return points, delta_ts


def _padded(origins, directions, ds):
    # The capacity S = ceil(2√3/ds) + 1 (the C++ front computes it, and rejects a bad ds).
    r, s = leading_size(origins, 2), _C.ray_box_samples_padded_capacity(ds)
    return (origins.new_empty((r, s, 3)), origins.new_empty((r, s)),
            origins.new_empty((r, s), dtype=torch.bool))


def _padded_impl(origins, directions, ds):
    points, delta_ts, valid = _padded(origins, directions, ds)
    _C.ray_box_samples_padded_forward(dl(origins), dl(directions), ds, dl(points), dl(delta_ts),
                                      dl(valid), stream_of(origins))
    return points, delta_ts, valid


def _ray_gradients(origins, directions, grad_origins, grad_directions, absent):
    return (torch.empty_like(origins) if grad_origins else absent(origins),
            torch.empty_like(directions) if grad_directions else absent(origins))


def _backward(c_backward, absent, origins, directions, ds, *layout_and_grads):
    *layout, grad_points, grad_delta_ts, want_origins, want_directions = layout_and_grads
    go, gd = _ray_gradients(origins, directions, want_origins, want_directions, absent)
    c_backward(dl(origins), dl(directions), ds, *(dl(t) for t in layout), dl(grad_points),
               None if grad_delta_ts is None else dl(grad_delta_ts),
               dl(go) if want_origins else None, dl(gd) if want_directions else None,
               stream_of(origins))
    return go, gd


def _gradient_table(name, layout_schema):
    """The backward op of one layout and the autograd formula of its forward."""
    c_backward = getattr(_C, f"{name}_backward")

    def setup_context(ctx, inputs, output):
        origins, directions, ds, *layout = inputs
        ctx.ds, ctx.layout_args = ds, layout[1:]  # num_samples (packed), nothing (padded)
        ctx.save_for_backward(origins, directions, *layout[:1])

    def gradient(ctx, grad_points, grad_delta_ts, *_grad_valid):
        origins, directions, *offsets = ctx.saved_tensors
        want_origins, want_directions = (bool(n) for n in _registry.needs_input_grad(ctx)[:2])
        rest = (None,) * (1 + len(offsets) + len(ctx.layout_args))
        if not (want_origins or want_directions):
            return (None, None) + rest
        go, gd = _registry.call_in_backward(ctx, _ops[f"{name}_backward"], origins, directions,
                                            ctx.ds, *offsets, grad_points, grad_delta_ts,
                                            want_origins, want_directions)
        return (go if want_origins else None, gd if want_directions else None) + rest

    backward = _registry.OpSpec(
        f"{name}_backward",
        lambda *args: _backward(c_backward, empty, *args),
        lambda o, d, ds, *rest: _ray_gradients(o, d, rest[-2], rest[-1], empty),
        schema=f"(Tensor origins, Tensor directions, float ds{layout_schema}, Tensor grad_points, "
               "Tensor? grad_delta_ts, bool grad_origins, bool grad_directions) -> (Tensor, Tensor)",
        eager_impl=lambda *args: _backward(c_backward, nothing, *args),
    )
    return setup_context, gradient, backward


_packed_setup, _packed_gradient, _packed_backward = _gradient_table(
    "ray_box_samples", ", Tensor offsets")
_padded_setup, _padded_gradient, _padded_backward = _gradient_table("ray_box_samples_padded", "")

# Note [op table]
_ops = _registry.register([
    _registry.OpSpec(
        "ray_box_samples_counts", _counts_impl, _counts,
        schema="(Tensor origins, Tensor directions, float ds) -> Tensor",
    ),
    _registry.OpSpec(
        "ray_box_samples_forward", _packed_impl, _packed, _packed_setup, _packed_gradient,
        schema="(Tensor origins, Tensor directions, float ds, Tensor offsets, int num_samples) "
               "-> (Tensor, Tensor)",
    ),
    _packed_backward,
    _registry.OpSpec(
        "ray_box_samples_padded_forward", _padded_impl, _padded, _padded_setup, _padded_gradient,
        non_differentiable=(2,),  # valid
        schema="(Tensor origins, Tensor directions, float ds) -> (Tensor, Tensor, Tensor)",
    ),
    _padded_backward,
])


def _check_rays(op: str, origins, directions, ds) -> float:
    # Allocation reads the shapes, dtype and device of both; the schema needs a float ds (whose
    # value the C++ front checks).
    check_tensor(op, "origins", origins)
    check_tensor(op, "directions", directions)
    return real_number(op, "ds", ds)


def ray_box_samples(origins: Tensor, directions: Tensor,
                    ds: float) -> tuple[Tensor, Tensor, Tensor]:
    """Uniform samples of rays through the box [−1, 1]³, packed.

    Per ray ``o + t·d``: the slab intersection ``[t_in, t_out]`` (a ray parallel to a face within
    1e-8 is inside only if ``|o| <= 1`` on that axis; touching only an edge or corner misses),
    ``n = ceil(ℓ/ds) + 1`` (>= 2) samples for the chord length ``ℓ = |d|·(t_out − t_in)`` (ds is a
    distance, so n does not depend on the length of d), at ``t_in + k·δ`` with
    ``δ = (t_out − t_in)/(n − 1)`` (a step of t: the distance between samples for unit d). Rays
    that miss produce no samples.

    Args:
        origins, directions: ``[R, 3]``. Differentiable (through the points and δ, including the
            movement of t_in and t_out; n is piecewise constant).
        ds: the step, a distance > 0 (and not so small that R·(ceil(2√3/ds) + 1)·3 overflows
            int64).

    Returns:
        ``(points [N, 3], delta_ts [N], offsets [R + 1])``. N is data-dependent: this reads the
        counts back (one device sync); use :func:`ray_box_samples_padded` for static shapes.
    """
    ds = _check_rays("ray_box_samples", origins, directions, ds)
    counts = _ops["ray_box_samples_counts"](origins, directions, ds)
    offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    points, delta_ts = _ops["ray_box_samples_forward"](origins, directions, ds, offsets,
                                                       int(offsets[-1]))
    return points, delta_ts, offsets


def ray_box_samples_padded(origins: Tensor, directions: Tensor,
                           ds: float) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`ray_box_samples` padded to ``S = ceil(2√3/ds) + 1`` samples per ray.

    A chord of the box is at most its diagonal, 2√3 long, so S holds every sample
    :func:`ray_box_samples` gives any ray, whatever the length of its direction (Note [ray-box
    sample count] in ``src/render/render_math.h``).

    Returns:
        ``(points [R, S, 3], delta_ts [R, S], valid [R, S] bool)``; padding slots are zeros.
        Shapes depend only on R and ds, so CUDA graphs and ``torch.compile`` handle it.
    """
    ds = _check_rays("ray_box_samples_padded", origins, directions, ds)
    return _ops["ray_box_samples_padded_forward"](origins, directions, ds)
