# SPDX-License-Identifier: Apache-2.0
"""K-Planes feature interpolation: differentiable functions over `torch.library` custom ops.

A field has L levels; level l is a tensor of logical shape ``[3T, C_l, H_l, W_l]`` (plane
``k = 3t + p``; T = 1 for the axis-aligned variant) stored NCHW or channels-last
(``planes.to(memory_format=torch.channels_last)``) or any other strides, all at the same speed:
on CUDA a level not stored channels-last is copied channels-last into the op's workspace first,
and its gradient accumulated there and copied back into the planes' layout. A point's
features are, per level and tilt, the channel-wise product of its bilinear samples on the tilt's
three planes (``F.grid_sample(align_corners=True, padding_mode="border")``), laid out level-major,
then tilt-major, channel fastest: column ``offset_l + t·C_l + c``.

- tilted: ``r = R_t·p``; planes (gx, gy) = (r_x, r_y), (r_z, r_x), (r_y, r_z).
- axis-aligned: planes (gx, gy) = (x, y), (x, z), (y, z) (plane 1 differs from the tilted one).

Points and rotations are float32 or float64; planes have their dtype or, on CUDA with float32
points, float16/bfloat16 (computed in float32, plane gradients accumulated in float32). Gradients
flow to points, rotations and planes (and to gates given as a tensor); the backward is itself
differentiable (double backward, through ``_kplanes_second_order``). The plane gradient has the
planes' layout. On CUDA the default backward scatters with float atomics (exact sums, run-to-run rounding
differences); ``deterministic=True`` (or ``torch.use_deterministic_algorithms(True)``) gathers
each cell in a fixed order instead. CPU results are always deterministic.

Raw ops, named after their public function (``<name>_forward`` / ``<name>_backward``, each with a
fake impl, so ``torch.compile(fullgraph=True)`` traces them and CUDA graphs capture them):
``torch.ops.fieldfuse.kplanes_tilted_forward``, ``kplanes_forward``, ``kplanes_tilted_taps_forward``,
``kplanes_tilted_with_taps_forward``, ``plane_tv_forward`` and their ``_backward`` ops. The backward
ops are differentiable themselves (double backward).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from . import _kplanes_second_order as _second_order
from . import _registry
from ._backend import _C, check_tensor, dl, dls, float_list, reduced_dtype, stream_of, workspace

__all__ = ["kplanes_tilted", "kplanes", "kplanes_tilted_taps", "kplanes_tilted_with_taps", "plane_tv"]


@dataclasses.dataclass(frozen=True)
class _Function:
    """One public feature function, as its ops see it.

    Each evaluates some of three roles of the shared kernels: points evaluated once (output
    ``features``), tap points evaluated at the four volume-TV taps (output ``tap_features``, with
    the step ``h``), and, tilted, rotations. ``geometry`` lists the function's tensor arguments
    before ``planes`` in signature order; ``tap_arg`` is the one that plays the tap points.
    """

    name: str
    geometry: tuple[str, ...]
    tap_arg: str | None = None

    # Cached: the impls read these on every call.
    @functools.cached_property
    def tilted(self) -> bool:
        return "rotations" in self.geometry

    @functools.cached_property
    def has_points(self) -> bool:
        return self.tap_arg != "pts"

    @functools.cached_property
    def outputs(self) -> tuple[str, ...]:
        return (("features",) if self.has_points else ()) + (
            ("tap_features",) if self.tap_arg else ())

    @functools.cached_property
    def rotations_index(self) -> int | None:
        """Where rotations sits in ``geometry`` (None: axis-aligned)."""
        return self.geometry.index("rotations") if self.tilted else None

    @functools.cached_property
    def tap_index(self) -> int | None:
        """Where the tap points sit in ``geometry`` (None: no taps)."""
        return self.geometry.index(self.tap_arg) if self.tap_arg else None

    def role(self, arg: str) -> str:
        """The shared kernels' name for argument ``arg``: pts, tap_pts or rotations."""
        return "tap_pts" if arg == self.tap_arg else arg


_FUNCTIONS = (
    _Function("kplanes_tilted", ("pts", "rotations")),
    _Function("kplanes", ("pts",)),
    _Function("kplanes_tilted_taps", ("pts", "rotations"), tap_arg="pts"),
    _Function("kplanes_tilted_with_taps", ("pts", "tap_pts", "rotations"), tap_arg="tap_pts"),
)


def _rows(t: Tensor) -> int:
    return int(t.shape[0]) if t.dim() > 0 else 0


def _num_features(planes: Sequence[Tensor], num_tilts: int) -> int:
    return num_tilts * sum([int(p.shape[1]) if p.dim() > 1 else 0 for p in planes])


def _feature_outputs(fn: _Function, geometry, planes, features_dtype) -> list[Tensor]:
    """The uninitialised outputs (shared by the real and the fake impls)."""
    # The C++ front validates every shape before it looks at the outputs; these allocation sizes
    # need only be right for valid inputs, and must not fail first on invalid ones (a 0-d pts
    # must reach the front's message, not an IndexError): those take the careful helpers. Valid
    # ones skip them (0.5 µs of the eager forward's host time, CPU).
    pts = geometry[0]
    try:
        rows = int(pts.shape[0])
        f = sum([int(p.shape[1]) for p in planes])
        if fn.rotations_index is not None:
            f *= int(geometry[fn.rotations_index].shape[0]) or 1
    except IndexError:
        rows = _rows(pts)
        rotations = None if fn.rotations_index is None else geometry[fn.rotations_index]
        f = _num_features(planes, 1 if rotations is None else (_rows(rotations) or 1))
    # Sizes as separate ints: torch parses them faster than a tuple (0.9 against 1.2 µs, CPU).
    if fn.tap_arg is None:
        return [pts.new_empty(rows, f, dtype=features_dtype)]
    taps = pts.new_empty(4, _rows(geometry[fn.tap_index]), f, dtype=features_dtype)
    return [pts.new_empty(rows, f, dtype=features_dtype), taps] if fn.has_points else [taps]


def _gradient_outputs(geometry, planes, wants, absent):
    """Uninitialised gradients in their inputs' layouts; an unwanted one is ``absent(input)``: an
    empty tensor on the library path (a fresh one each: custom-op outputs must not alias each
    other), None on the eager path (Note [op table], eager_impl; 1.3 µs each on CPU)."""
    grads = [torch.empty_like(t) if w else absent(t) for t, w in zip(geometry, wants)]
    return grads, [torch.empty_like(p) for p in planes] if wants[-1] else []


def _specs(fn: _Function) -> list[_registry.OpSpec]:
    """The forward and backward ops of one public function (Note [op table]).

    Forward: ``(*geometry, planes, [h], gates, features_dtype, deterministic) -> outputs``.
    Backward: ``(*grad_outputs, *geometry, planes, [h], gates, wants, deterministic) ->
    (*grad_geometry, grad_planes)``, ``wants`` one bool per geometry argument and one for planes.

    The impls index their arguments at positions fixed here rather than unpacking them into
    named groups: they run on every eager call, where each such step cost host time (Note
    [eager argument plan] in _registry.py).
    """
    n_geo, n_out = len(fn.geometry), len(fn.outputs)
    has_h = fn.tap_arg is not None
    # Argument positions after the geometry (and, in the backward, after the grad outputs).
    i_planes, i_gates = n_geo, n_geo + 1 + has_h
    c_forward = getattr(_C, f"{fn.name}_forward")
    c_backward = getattr(_C, f"{fn.name}_backward")
    c_forward_workspace_size = getattr(_C, f"{fn.name}_forward_workspace_size")
    c_backward_workspace_size = getattr(_C, f"{fn.name}_backward_workspace_size")

    def forward(*args):
        geometry, planes = args[:n_geo], args[i_planes]
        outputs = _feature_outputs(fn, geometry, planes, args[i_gates + 1])
        pts = geometry[0]
        # The staging copies of planes not in the fast layout (Note [plane staging]); a DLPack
        # capsule is consumed by the call it is passed to: one set per call.
        size = c_forward_workspace_size(*dls(geometry), dls(planes))
        scratch = workspace(size, pts.device)
        c_forward(*dls(geometry), dls(planes), *args[n_geo + 1:i_gates + 1], *dls(outputs),
                  dl(scratch), stream_of(pts))
        return outputs[0] if n_out == 1 else tuple(outputs)

    def forward_fake(*args):
        outputs = _feature_outputs(fn, args[:n_geo], args[i_planes], args[i_gates + 1])
        return outputs[0] if n_out == 1 else tuple(outputs)

    def backward_with(absent):
        """The backward impl; ``absent(input)`` stands for a gradient nobody asked for."""

        def backward(*args):
            grad_outputs, args = args[:n_out], args[n_out:]
            geometry, planes, wants = args[:n_geo], args[i_planes], args[i_gates + 1]
            grads, grad_planes = _gradient_outputs(geometry, planes, wants, absent)
            pts, deterministic = geometry[0], args[i_gates + 2]
            # A DLPack capsule is consumed by the call it is passed to: one set per call.
            size = c_backward_workspace_size(*dls(geometry), dls(planes), wants[-1],
                                             deterministic)
            scratch = workspace(size, pts.device)
            c_backward(*dls(geometry), dls(planes), *args[n_geo + 1:i_gates + 1],
                       *dls(grad_outputs), *[dl(g) if w else None for g, w in zip(grads, wants)],
                       dls(grad_planes) if wants[-1] else None, deterministic, dl(scratch),
                       stream_of(pts))
            return (*grads, grad_planes)

        return backward

    def backward_fake(*args):
        args = args[n_out:]
        grads, grad_planes = _gradient_outputs(args[:n_geo], args[i_planes], args[i_gates + 1],
                                               _placeholder)
        return (*grads, grad_planes)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:n_geo], *inputs[i_planes])
        ctx.options = inputs[n_geo + 1:]  # [h], gates, features_dtype, deterministic

    options = (None,) * (has_h + 3)  # no gradient for [h], gates, features_dtype, deterministic
    backward_name = f"{fn.name}_backward"  # in _ops once every table is registered

    def gradient(ctx, *grad_outputs):
        saved = ctx.saved_tensors
        geometry, planes = saved[:n_geo], list(saved[n_geo:])
        wants = _registry.wants_input_grad(ctx)[:n_geo + 1]  # geometry, then planes
        if True not in wants:
            return (None,) * n_geo + ([None] * len(planes),) + options
        if any([g is None for g in grad_outputs]):  # not `None in`: Tensor == None costs 10 µs
            # Only then: the outputs' shapes come from allocating them (features-sized: 75 MiB at
            # the tomography benchmark, 1.1 GiB at production), which every backward paid before.
            outputs = _feature_outputs(fn, geometry, planes, None)
            grad_outputs = [
                g if g is not None else torch.zeros_like(o, dtype=_grad_dtype(grad_outputs))
                for g, o in zip(grad_outputs, outputs, strict=True)
            ]
        *h_gates, _, deterministic = ctx.options
        result = _registry.call_in_backward(ctx, _ops[backward_name], *grad_outputs, *geometry,
                                            planes, *h_gates, wants, deterministic)
        # Unwanted gradients are None on the eager path, 0-element placeholders on the library's.
        grads = [g if w else None for g, w in zip(result[:n_geo], wants)]
        return (*grads, result[n_geo] if wants[-1] else [None] * len(planes), *options)

    def setup_backward(ctx, inputs, output):
        args = inputs[n_out:]
        ctx.save_for_backward(*inputs[:n_out], *args[:n_geo], *args[i_planes])
        ctx.h, ctx.gates, ctx.wants = args[n_geo + 1:i_gates], args[i_gates], args[i_gates + 1]

    def gradient_of_backward(ctx, *seeds):
        saved = ctx.saved_tensors
        grad_outputs = dict(zip(fn.outputs, saved[:n_out]))
        geometry = saved[n_out:n_out + n_geo]
        planes = list(saved[n_out + n_geo:])
        roles = {fn.role(arg): t for arg, t in zip(fn.geometry, geometry, strict=True)}
        wants = {fn.role(arg): w for arg, w in zip(fn.geometry, ctx.wants)}
        seeded = {fn.role(arg): s for arg, s in zip(fn.geometry, seeds)}
        d_outputs, d_roles, d_planes = _second_order.backward_of_backward(
            grad_outputs, roles, planes, ctx.gates, ctx.h[0] if has_h else 0.0,
            wants, ctx.wants[-1], seeded, seeds[n_geo],
        )
        return (*[d_outputs[o] for o in fn.outputs],
                *[d_roles[fn.role(arg)] for arg in fn.geometry], d_planes,
                *(None,) * (has_h + 3))  # [h], gates, wants, deterministic

    h_schema = "float h, " if has_h else ""
    geometry_schema = "".join(f"Tensor {arg}, " for arg in fn.geometry)
    outputs_schema = ", ".join("Tensor" for _ in fn.outputs)
    grads_schema = "".join(f"Tensor grad_{o}, " for o in fn.outputs)
    return [
        # deterministic changes nothing in the forward: it is an argument of the forward op so that
        # the op's autograd formula can hand it to the backward op (autograd gives the formula the
        # forward's inputs and nothing else, on both call paths and under torch.compile).
        _registry.OpSpec(
            f"{fn.name}_forward", forward, forward_fake, setup_context, gradient,
            schema=f"({geometry_schema}Tensor[] planes, {h_schema}float[]? gates, "
                   f"ScalarType features_dtype, bool deterministic) -> "
                   f"{outputs_schema if n_out == 1 else f'({outputs_schema})'}",
        ),
        # Double backward: exact, through a twice-differentiable PyTorch restatement of the math.
        _registry.OpSpec(
            f"{fn.name}_backward", backward_with(_placeholder), backward_fake,
            setup_backward, gradient_of_backward,
            schema=f"({grads_schema}{geometry_schema}Tensor[] planes, {h_schema}float[]? gates, "
                   f"bool[] wants, bool deterministic) -> "
                   f"({', '.join('Tensor' for _ in fn.geometry)}, Tensor[])",
            eager_impl=backward_with(_absent),
        ),
    ]


def _placeholder(t: Tensor) -> Tensor:
    return t.new_empty((0,))


def _absent(t: Tensor) -> None:
    return None


def _grad_dtype(grad_outputs) -> torch.dtype:
    return next(g.dtype for g in grad_outputs if g is not None)


# --- plane_tv ---------------------------------------------------------------------------------


def _level_terms(planes: list[Tensor]) -> Tensor:
    return planes[0].new_empty((len(planes),), dtype=reduced_dtype(planes[0].dtype))


def _plane_tv_forward(planes: list[Tensor], num_tilts: int, norm: str) -> Tensor:
    out = _level_terms(planes)
    # A DLPack capsule is consumed by the call it is passed to: one set per call.
    scratch = workspace(_C.plane_tv_workspace_size(dls(planes)), planes[0].device)
    _C.plane_tv_forward(dls(planes), num_tilts, norm, dl(out), dl(scratch), stream_of(planes[0]))
    return out


def _plane_tv_backward(planes: list[Tensor], num_tilts: int, norm: str,
                       grad_out: Tensor) -> list[Tensor]:
    grads = [torch.empty_like(p) for p in planes]
    _C.plane_tv_backward(dls(planes), num_tilts, norm, dl(grad_out), dls(grads),
                         stream_of(planes[0]))
    return grads


def _setup_plane_tv(ctx, inputs, output):
    planes, num_tilts, norm = inputs
    ctx.num_tilts, ctx.norm = num_tilts, norm
    ctx.save_for_backward(*planes)


def _plane_tv_grad(ctx, grad_out):
    planes = list(ctx.saved_tensors)
    grads = _registry.call_in_backward(ctx, _ops["plane_tv_backward"], planes, ctx.num_tilts,
                                       ctx.norm, grad_out)
    return grads, None, None


# Note [op table]: every K-Planes op, registered once (custom op, fake, autograd, eager fast path).
_ops = _registry.register(
    [spec for fn in _FUNCTIONS for spec in _specs(fn)]
    + [
        _registry.OpSpec("plane_tv_forward", _plane_tv_forward,
                         lambda planes, num_tilts, norm: _level_terms(planes),
                         _setup_plane_tv, _plane_tv_grad),
        _registry.OpSpec("plane_tv_backward", _plane_tv_backward,
                         lambda planes, num_tilts, norm, grad_out: [torch.empty_like(p)
                                                                    for p in planes]),
    ]
)


# --- public functions -------------------------------------------------------------------------

_FORWARD_OPS = {fn.name: _ops[f"{fn.name}_forward"] for fn in _FUNCTIONS}


def _levels(op: str, planes) -> list[Tensor]:
    """The levels as a list of tensors: the outputs' shapes and dtype are read from them."""
    if isinstance(planes, Tensor):
        return [planes]
    try:  # any sequence of tensors: a list, a tuple, an nn.ParameterList, ...
        planes = list(planes)
    except TypeError:
        raise TypeError(
            f"{op}(): expected planes to be a tensor or a sequence of tensors (one per level), but "
            f"got {type(planes).__name__}"
        ) from None
    if len(planes) == 0:  # the outputs' dtype and device come from planes[0]
        raise ValueError(f"{op}(): expected at least one level of planes, but got an empty list")
    if not all([isinstance(p, Tensor) for p in planes]):  # the argument's name only when needed
        for i, p in enumerate(planes):
            check_tensor(op, f"planes[{i}]", p)
    return planes


def _gates(op: str, gates, num_levels: int):
    """Float gates (fused into the kernels; their count and values are checked by the C++ entry),
    a gate tensor (applied here, outside the kernels: differentiable and free to change under
    torch.compile), or None."""
    if gates is None:
        return None
    if isinstance(gates, Tensor):
        if gates.shape != (num_levels,):
            raise ValueError(
                f"{op}(): expected gates to have one entry per level ({num_levels}), but got "
                f"shape {list(gates.shape)}"
            )
        return gates
    return float_list(op, "gates", gates)  # the schema's float[] needs real numbers


def _apply_gates(outputs, gates: Tensor, planes: list[Tensor], num_tilts: int):
    """Multiplies each level's feature columns by its gate (the tensor-gates path)."""
    scale = torch.cat([g.expand(num_tilts * p.shape[1]) for g, p in zip(gates, planes, strict=True)])
    return tuple(o * scale.to(o.dtype) for o in outputs)


def _features_dtype(op: str, features_dtype, pts: Tensor, planes: list[Tensor]) -> torch.dtype:
    """The outputs' dtype, which the allocation needs before the C++ entry runs."""
    if features_dtype is None:
        return pts.dtype
    if features_dtype in (pts.dtype, planes[0].dtype):
        return features_dtype
    raise TypeError(
        f"{op}(): expected features_dtype to be None, {pts.dtype} (the dtype of pts) or "
        f"{planes[0].dtype} (the dtype of planes), but got {features_dtype}"
    )


def _run(fn: _Function, geometry: list, planes, h, gates, features_dtype, deterministic):
    """Calls fn's forward op: Python checks only what allocating the outputs reads."""
    op = fn.name
    if not all([isinstance(t, Tensor) for t in geometry]):  # their shapes etc. size the outputs
        for arg, t in zip(fn.geometry, geometry, strict=True):
            check_tensor(op, arg, t)
    planes = _levels(op, planes)
    gates = _gates(op, gates, len(planes))
    h_option = []
    if fn.tap_arg:
        # The schema's float needs a real number (a SymFloat under compile); the C++ entry checks
        # that it is finite.
        if isinstance(h, bool) or not isinstance(h, (int, float, torch.SymInt, torch.SymFloat)):
            raise TypeError(f"{op}(): expected h to be a real number, but got {type(h).__name__}")
        h_option = [float(h) if isinstance(h, int) else h]
    fused_gates = gates if not isinstance(gates, Tensor) else None
    outputs = _FORWARD_OPS[op](
        *geometry, planes, *h_option, fused_gates,
        _features_dtype(op, features_dtype, geometry[0], planes),
        bool(deterministic) or torch.are_deterministic_algorithms_enabled(),
    )
    outputs = (outputs,) if isinstance(outputs, Tensor) else outputs
    if isinstance(gates, Tensor):
        num_tilts = geometry[fn.geometry.index("rotations")].shape[0] if fn.tilted else 1
        outputs = _apply_gates(outputs, gates, planes, num_tilts)
    return outputs


_BY_NAME = {fn.name: fn for fn in _FUNCTIONS}


def kplanes_tilted(
    pts: Tensor,
    rotations: Tensor,
    planes: Sequence[Tensor] | Tensor,
    gates: Sequence[float] | Tensor | None = None,
    *,
    features_dtype: torch.dtype | None = None,
    deterministic: bool = False,
) -> Tensor:
    """Tilted multiscale K-Planes features, all levels in one fused call.

    ``f[b, offset_l + t·C_l + c] = gate_l · Π_{p=0..2} sample(3t+p, c, gx_p, gy_p)`` with
    ``r = R_t·p`` and planes (gx, gy) = (r_x, r_y), (r_z, r_x), (r_y, r_z).

    Args:
        pts: ``[B, 3]`` points; outside [−1, 1] reads the border. Differentiable.
        rotations: ``[T, 3, 3]`` row-major (not assumed orthogonal). Differentiable.
        planes: L ≥ 1 levels ``[3T, C_l, H_l, W_l]`` (NCHW or channels-last). Differentiable.
        gates: optional per-level factors: floats (constants, fused into the kernels) or a tensor
            ``[L]`` (applied to the features outside the kernels: differentiable, and its values
            may change between calls under ``torch.compile`` without recompiling).
        features_dtype: ``None`` (pts' dtype) or the planes' dtype (16-bit features).
        deterministic: same bits from every CUDA backward (slower); CPU always is.

    Returns:
        ``[B, T·Σ_l C_l]``.
    """
    return _run(_BY_NAME["kplanes_tilted"], [pts, rotations], planes, None, gates,
                features_dtype, deterministic)[0]


def kplanes(
    pts: Tensor,
    planes: Sequence[Tensor] | Tensor,
    gates: Sequence[float] | Tensor | None = None,
    *,
    features_dtype: torch.dtype | None = None,
    deterministic: bool = False,
) -> Tensor:
    """Axis-aligned multiscale K-Planes features (planes (x, y), (x, z), (y, z)).

    Args:
        pts: ``[B, 3]``. Differentiable.
        planes: L ≥ 1 levels ``[3, C_l, H_l, W_l]``. Differentiable.
        gates, features_dtype, deterministic: as in :func:`kplanes_tilted`.

    Returns:
        ``[B, Σ_l C_l]``.
    """
    return _run(_BY_NAME["kplanes"], [pts], planes, None, gates, features_dtype, deterministic)[0]


def kplanes_tilted_taps(
    pts: Tensor,
    rotations: Tensor,
    planes: Sequence[Tensor] | Tensor,
    h: float,
    gates: Sequence[float] | Tensor | None = None,
    *,
    features_dtype: torch.dtype | None = None,
    deterministic: bool = False,
) -> Tensor:
    """The four volume-TV taps of every point in one call: ``[4, B, F]``.

    Tap 0 is ``kplanes_tilted(pts, ...)`` bit for bit; tap i = 1..3 evaluates
    ``R(p + h·e_i) = R·p + h·R[:, i]``. Gradients reach points, rotations (including the
    ``h·R[:, i]`` term) and planes; h is a constant.
    """
    return _run(_BY_NAME["kplanes_tilted_taps"], [pts, rotations], planes, h, gates,
                features_dtype, deterministic)[0]


def kplanes_tilted_with_taps(
    pts: Tensor,
    tap_pts: Tensor,
    rotations: Tensor,
    planes: Sequence[Tensor] | Tensor,
    h: float,
    gates: Sequence[float] | Tensor | None = None,
    *,
    features_dtype: torch.dtype | None = None,
    deterministic: bool = False,
) -> tuple[Tensor, Tensor]:
    """A training batch and its volume-TV taps in one fused call (one backward into the planes).

    Returns ``(kplanes_tilted(pts, ...) [B, F], kplanes_tilted_taps(tap_pts, ...) [4, N, F])``,
    each bit-identical to the separate calls.
    """
    return _run(_BY_NAME["kplanes_tilted_with_taps"], [pts, tap_pts, rotations], planes, h, gates,
                features_dtype, deterministic)


def plane_tv(planes: Sequence[Tensor] | Tensor, num_tilts: int, norm: str = "mean") -> Tensor:
    """Smoothness of the planes: squared forward differences along H and W.

    Per level: ``(1/T)·Σ_k [mean(ΔH²) + mean(ΔW²)]`` over the 3T planes (denominators
    ``C(H−1)W`` and ``CH(W−1)``; a size-1 axis contributes 0); ``norm="percell"`` weighs level l
    by ``H_l·W_l / max_m(H_m·W_m)``. Returns the sum over levels (0-d; float32 for 16-bit planes).
    Sums are float64 in a fixed order (deterministic).

    Args:
        planes: L ≥ 1 levels ``[3T, C, H, W]``, any layout. Differentiable.
        num_tilts: T (1 for axis-aligned planes).
        norm: ``"mean"`` or ``"percell"``.
    """
    op = "plane_tv"
    planes = _levels(op, planes)
    # The schema takes an int and a str; the binding checks norm's value, the C++ entry num_tilts'.
    if not isinstance(norm, str):
        raise ValueError(f'{op}(): expected norm to be "mean" or "percell", but got {norm!r}')
    if isinstance(num_tilts, bool) or not isinstance(num_tilts, int):
        raise TypeError(f"{op}(): expected num_tilts to be an int, but got {type(num_tilts).__name__}")
    return _ops["plane_tv_forward"](planes, num_tilts, norm).sum()
