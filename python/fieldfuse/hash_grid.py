# SPDX-License-Identifier: Apache-2.0
"""The multiresolution hash-grid encoding: a differentiable function over `torch.library` ops.

Level l of L has ``scale_l = b^l·N − 1`` (float32, as tiny-cuda-nn computes it),
``res_l = ceil(scale_l) + 1`` and ``rows_l = min(next_multiple(res_l^D, 8), 2^T)`` rows of F
features; ``params [Σ_l rows_l, F]`` holds the levels one after the other in tiny-cuda-nn's
layout, so tables trained there can be loaded here and back. A point is clamped to [0, 1]^D,
placed at ``x·scale_l + 0.5``, and its cell's 2^D corners are looked up densely
(``Σ_i v_i·res_l^i``, when ``res_l^D ≤ rows_l``) or by the spatial hash ``XOR_i v_i·π_i``, both
modulo ``rows_l``, and interpolated multilinearly (``"linear"``) or with smoothstep weights.
The output ``[B, L·F]`` is level-major.

Gradients flow to ``x`` (0 where a coordinate was clamped) and ``params``; the backward is itself
differentiable (double backward to the upstream gradient, ``x`` and ``params``), e.g. for an
Eikonal loss. Raw ops: ``torch.ops.fieldfuse.hash_grid_forward``, ``hash_grid_backward`` and
``hash_grid_double_backward``, each with a fake impl (``torch.compile(fullgraph=True)``, CUDA
graphs). On CUDA the params gradient and the levels' x-gradients are summed with float atomics
(run-to-run rounding differences); the CPU is deterministic.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _registry
from ._backend import _C, check_tensor, dl, real_number, stream_of, workspace

__all__ = ["hash_grid", "hash_grid_num_params"]

INTERPOLATIONS = ("linear", "smoothstep")  # the C++ front's names (src/encoding/hash_grid.cpp)

# The config options in the order every op and C++ entry takes them after the tensors.
_CONFIG_SCHEMA = ("int n_levels, int n_features_per_level, int log2_hashmap_size, "
                  "int base_resolution, float per_level_scale, str interpolation")
_NUM_CONFIG = 6


def _rows(t: Tensor) -> int:
    # The C++ front validates every shape; the allocation must not fail first on a bad one (a
    # 0-d x must reach the front's message, not an IndexError).
    return int(t.shape[0]) if t.dim() > 0 else 0


def _features(x: Tensor, n_levels: int, n_features_per_level: int) -> Tensor:
    # Negative counts are rejected by the C++ front; the allocation must not reject them first.
    return x.new_empty((_rows(x), max(n_levels, 0) * max(n_features_per_level, 0)))


def _forward(x, params, *config) -> Tensor:
    out = _features(x, config[0], config[1])
    _C.hash_grid_forward(dl(x), dl(params), *config, dl(out), stream_of(x))
    return out


def _forward_fake(x, params, *config) -> Tensor:
    return _features(x, config[0], config[1])


def _grad_like(t: Tensor, wanted: bool) -> Tensor:
    """A contiguous gradient buffer for t (the kernels write outputs row-major), or an empty
    tensor when nobody wants it (a fresh one each: custom-op outputs must not alias)."""
    return t.new_empty(t.shape) if wanted else t.new_empty((0,))


def _backward_outputs(x, params, wants) -> tuple[Tensor, Tensor]:
    return _grad_like(x, wants[0]), _grad_like(params, wants[1])


def _backward(grad_out, x, params, *config_and_wants) -> tuple[Tensor, Tensor]:
    *config, wants = config_and_wants
    grad_x, grad_params = _backward_outputs(x, params, wants)
    size = _C.hash_grid_backward_workspace_size(dl(x), dl(params), *config, wants[1])
    scratch = workspace(size, x.device)
    _C.hash_grid_backward(dl(x), dl(params), *config, dl(grad_out),
                          dl(grad_x) if wants[0] else None, dl(grad_params) if wants[1] else None,
                          dl(scratch), stream_of(x))
    return grad_x, grad_params


def _backward_fake(grad_out, x, params, *config_and_wants):
    return _backward_outputs(x, params, config_and_wants[-1])


def _double_backward(grad_grad_x, grad_grad_params, grad_out, x, params, *config_and_wants):
    *config, wants = config_and_wants
    grad_grad_out = _grad_like(grad_out, wants[0])
    grad_x, grad_params = _backward_outputs(x, params, wants[1:])
    size = _C.hash_grid_double_backward_workspace_size(dl(x), dl(params), *config, wants[2])
    scratch = workspace(size, x.device)
    _C.hash_grid_double_backward(
        dl(x), dl(params), *config, dl(grad_out),
        dl(grad_grad_x) if grad_grad_x is not None else None,
        dl(grad_grad_params) if grad_grad_params is not None else None,
        dl(grad_grad_out) if wants[0] else None, dl(grad_x) if wants[1] else None,
        dl(grad_params) if wants[2] else None, dl(scratch), stream_of(x))
    return grad_grad_out, grad_x, grad_params


def _double_backward_fake(grad_grad_x, grad_grad_params, grad_out, x, params, *config_and_wants):
    wants = config_and_wants[-1]
    return (_grad_like(grad_out, wants[0]), *_backward_outputs(x, params, wants[1:]))


def _setup_forward(ctx, inputs, output):
    x, params, *config = inputs
    ctx.save_for_backward(x, params)
    ctx.config = config


def _gradient(ctx, grad_out):
    x, params = ctx.saved_tensors
    needs = _registry.needs_input_grad(ctx)
    wants = [bool(needs[0]), bool(needs[1])]
    if not any(wants):
        return (None, None) + (None,) * _NUM_CONFIG
    grad_x, grad_params = _ops["hash_grid_backward"](grad_out, x, params, *ctx.config, wants)
    return ((grad_x if wants[0] else None, grad_params if wants[1] else None)
            + (None,) * _NUM_CONFIG)


def _setup_backward(ctx, inputs, output):
    grad_out, x, params, *config_and_wants = inputs
    ctx.save_for_backward(grad_out, x, params)
    *ctx.config, ctx.wants = config_and_wants


def _gradient_of_backward(ctx, grad_grad_x, grad_grad_params):
    grad_out, x, params = ctx.saved_tensors
    needs = _registry.needs_input_grad(ctx)
    wants = [bool(needs[0]), bool(needs[1]), bool(needs[2])]
    nothing = (None,) * (_NUM_CONFIG + 1)  # the config and wants
    # A seed of an output nobody asked for (a 0-element placeholder) carries no gradient.
    grad_grad_x = grad_grad_x if ctx.wants[0] else None
    grad_grad_params = grad_grad_params if ctx.wants[1] else None
    if not any(wants) or (grad_grad_x is None and grad_grad_params is None):
        return (None, None, None) + nothing
    grads = _ops["hash_grid_double_backward"](grad_grad_x, grad_grad_params, grad_out, x, params,
                                              *ctx.config, wants)
    return tuple(g if w else None for g, w in zip(grads, wants, strict=True)) + nothing


# Note [op table]: the hash-grid ops, registered once (custom op, fake, autograd, eager path).
_ops = _registry.register([
    _registry.OpSpec(
        "hash_grid_forward", _forward, _forward_fake, _setup_forward, _gradient,
        schema=f"(Tensor x, Tensor params, {_CONFIG_SCHEMA}) -> Tensor",
    ),
    # Differentiable: its backward is the fused double backward (one table walk on CUDA).
    _registry.OpSpec(
        "hash_grid_backward", _backward, _backward_fake, _setup_backward, _gradient_of_backward,
        materialize_grads=False,
        schema=f"(Tensor grad_out, Tensor x, Tensor params, {_CONFIG_SCHEMA}, bool[] wants) -> "
               "(Tensor, Tensor)",
    ),
    _registry.OpSpec(
        "hash_grid_double_backward", _double_backward, _double_backward_fake,
        schema=f"(Tensor? grad_grad_x, Tensor? grad_grad_params, Tensor grad_out, Tensor x, "
               f"Tensor params, {_CONFIG_SCHEMA}, bool[] wants) -> (Tensor, Tensor, Tensor)",
    ),
])


def _int(op: str, arg: str, value) -> int:
    """A Python int (a SymInt under compile passes through), or a TypeError naming op and arg: the
    schema's int needs one; the C++ front checks its range."""
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{op}(): expected {arg} to be an int, but got {type(value).__name__}")
    return value


def _config(op: str, n_levels, n_features_per_level, log2_hashmap_size, base_resolution,
            per_level_scale, interpolation=None) -> list:
    config = [
        _int(op, "n_levels", n_levels),
        _int(op, "n_features_per_level", n_features_per_level),
        _int(op, "log2_hashmap_size", log2_hashmap_size),
        _int(op, "base_resolution", base_resolution),
        real_number(op, "per_level_scale", per_level_scale),
    ]
    if interpolation is not None or op == "hash_grid":
        # The schema's str needs a string; the C++ front checks its value.
        if not isinstance(interpolation, str):
            raise TypeError(f'{op}(): expected interpolation to be "linear" or "smoothstep", '
                            f"but got {type(interpolation).__name__}")
        config.append(interpolation)
    return config


def hash_grid_num_params(
    n_input_dims: int,
    *,
    n_levels: int = 16,
    n_features_per_level: int = 2,
    log2_hashmap_size: int = 19,
    base_resolution: int = 16,
    per_level_scale: float = 2.0,
) -> int:
    """Rows of the params table: ``Σ_l min(next_multiple(res_l^D, 8), 2^T)`` (tiny-cuda-nn's rule).

    ``n_features_per_level`` is validated but does not change the count (params is
    ``[rows, n_features_per_level]``).
    """
    op = "hash_grid_num_params"
    config = _config(op, n_levels, n_features_per_level, log2_hashmap_size, base_resolution,
                     per_level_scale)
    return int(_C.hash_grid_num_params(_int(op, "n_input_dims", n_input_dims), *config))


def hash_grid(
    x: Tensor,
    params: Tensor,
    *,
    n_levels: int = 16,
    n_features_per_level: int = 2,
    log2_hashmap_size: int = 19,
    base_resolution: int = 16,
    per_level_scale: float = 2.0,
    interpolation: str = "linear",
) -> Tensor:
    """Multiresolution hash-grid features of points, all levels in one fused call.

    Args:
        x: ``[B, D]`` points, D = 2 or 3, nominally in [0, 1]^D; coordinates outside are clamped
            to [0, 1] (their gradient is 0), a NaN coordinate gives NaN features (and adds
            nothing to the params gradient). float32 or float64. Differentiable.
        params: ``[hash_grid_num_params(D, ...), n_features_per_level]``, tiny-cuda-nn's layout;
            x's dtype, or float16 on CUDA with float32 x (computed in float32; its gradient is
            accumulated in float32 and rounded once). Differentiable.
        n_levels: L, 1 to 32. n_features_per_level: F ∈ {1, 2, 4, 8}.
        log2_hashmap_size: T, 1 to 31 (table rows per level at most 2^T).
        base_resolution: N ≥ 1. per_level_scale: b ≥ 1 (``scale_l = b^l·N − 1``).
        interpolation: ``"linear"`` (multilinear) or ``"smoothstep"`` (weights ``s(t) =
            t²(3 − 2t)`` per axis: a continuous x-gradient).

    Returns:
        ``[B, L·F]`` in x's dtype, level-major (level l's F features at columns ``l·F ...``).
    """
    op = "hash_grid"
    check_tensor(op, "x", x)  # the output's shape, dtype and device come from x
    check_tensor(op, "params", params)
    config = _config(op, n_levels, n_features_per_level, log2_hashmap_size, base_resolution,
                     per_level_scale, interpolation)
    return _ops["hash_grid_forward"](x, params, *config)


def _input_grad(grad_out: Tensor, x: Tensor, params: Tensor, **options) -> Tensor:
    """``∂(Σ grad_out ⊙ hash_grid(x, params, **options))/∂x`` from the backward op alone, which is
    itself differentiable (to grad_out, x and params): what ``autograd.grad(...,
    create_graph=True)`` through the forward gives, without recording the forward, so it also runs
    under no_grad and inference_mode (and there records nothing)."""
    config = _config("hash_grid", **options)
    grad_x, _ = _ops["hash_grid_backward"](grad_out, x, params, *config, [True, False])
    return grad_x
