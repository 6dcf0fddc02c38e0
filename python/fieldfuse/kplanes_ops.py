# SPDX-License-Identifier: Apache-2.0
"""K-Planes feature interpolation: differentiable functions over `torch.library` custom ops.

A field has L levels; level l is a tensor of logical shape ``[3T, C_l, H_l, W_l]`` (plane
``k = 3t + p``; T = 1 for the axis-aligned variant) stored NCHW or channels-last
(``planes.to(memory_format=torch.channels_last)``, read in place and faster on CUDA). A point's
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

Raw ops: ``torch.ops.fieldfuse.kplanes_forward`` / ``kplanes_backward`` and
``plane_tv_forward`` / ``plane_tv_backward``, each with a fake impl, so
``torch.compile(fullgraph=True)`` traces them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import _kplanes_second_order as _second_order
from ._backend import _C, check_tensor, dl, float_list, reduced_dtype, stream_of, workspace

__all__ = ["kplanes_tilted", "kplanes", "kplanes_tilted_taps", "kplanes_tilted_with_taps", "plane_tv"]


def _num_features(planes: Sequence[Tensor], num_tilts: int) -> int:
    return num_tilts * sum(int(p.shape[1]) for p in planes)


def _feature_dtype(pts: Tensor, planes: Sequence[Tensor], plane_dtype_features: bool):
    return planes[0].dtype if plane_dtype_features else pts.dtype


def _optional_dl(t: Tensor | None):
    return None if t is None else dl(t)


def _empty_features(pts, tap_pts, rotations, planes, plane_dtype_features):
    """The two uninitialised outputs (shared by the real and the fake impls)."""
    tilts = 1 if rotations is None else rotations.shape[0]
    f = _num_features(planes, tilts)
    dtype = _feature_dtype(pts, planes, plane_dtype_features)
    n = 0 if tap_pts is None else tap_pts.shape[0]
    return pts.new_empty((pts.shape[0], f), dtype=dtype), pts.new_empty((4, n, f), dtype=dtype)


@torch.library.custom_op("fieldfuse::kplanes_forward", mutates_args=())
def kplanes_forward(
    pts: Tensor,
    tap_pts: Tensor | None,
    rotations: Tensor | None,
    planes: list[Tensor],
    gates: list[float] | None,
    h: float,
    plane_dtype_features: bool,
    deterministic: bool,
) -> tuple[Tensor, Tensor]:
    features, tap_features = _empty_features(pts, tap_pts, rotations, planes, plane_dtype_features)
    _C.kplanes_forward(
        rotations is not None,
        dl(pts),
        _optional_dl(tap_pts),
        h,
        _optional_dl(rotations),
        [dl(p) for p in planes],
        gates,
        dl(features),
        None if tap_pts is None else dl(tap_features),
        stream_of(pts),
    )
    return features, tap_features


@kplanes_forward.register_fake
def _(pts, tap_pts, rotations, planes, gates, h, plane_dtype_features, deterministic):
    return _empty_features(pts, tap_pts, rotations, planes, plane_dtype_features)


def _gradient_buffers(pts, tap_pts, rotations, planes, wants):
    """Uninitialised gradients in their inputs' layouts; an unwanted one is an empty tensor."""
    want_pts, want_tap_pts, want_rotations, want_planes = wants

    def empty():  # a fresh one each time: custom-op outputs must not alias each other
        return pts.new_empty((0,))

    return (
        torch.empty_like(pts) if want_pts else empty(),
        torch.empty_like(tap_pts) if want_tap_pts and tap_pts is not None else empty(),
        torch.empty_like(rotations) if want_rotations and rotations is not None else empty(),
        [torch.empty_like(p) for p in planes] if want_planes else [],
    )


@torch.library.custom_op("fieldfuse::kplanes_backward", mutates_args=())
def kplanes_backward(
    grad_features: Tensor,
    grad_tap_features: Tensor,
    pts: Tensor,
    tap_pts: Tensor | None,
    rotations: Tensor | None,
    planes: list[Tensor],
    gates: list[float] | None,
    h: float,
    wants: list[bool],
    deterministic: bool,
) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    grad_pts, grad_tap_pts, grad_rotations, grad_planes = _gradient_buffers(
        pts, tap_pts, rotations, planes, wants
    )
    want_pts, want_tap_pts, want_rotations, want_planes = wants
    tilted = rotations is not None
    plane_refs = [dl(p) for p in planes]
    size = _C.kplanes_backward_workspace_size(
        tilted, dl(pts), _optional_dl(tap_pts), h, _optional_dl(rotations), plane_refs, gates,
        want_planes, deterministic,
    )
    scratch = workspace(size, pts.device)
    has_taps = tap_pts is not None
    _C.kplanes_backward(
        tilted,
        dl(pts),
        _optional_dl(tap_pts),
        h,
        _optional_dl(rotations),
        [dl(p) for p in planes],
        gates,
        dl(grad_features),
        dl(grad_tap_features) if has_taps else None,
        dl(grad_pts) if want_pts else None,
        dl(grad_tap_pts) if want_tap_pts and has_taps else None,
        dl(grad_rotations) if want_rotations and tilted else None,
        [dl(g) for g in grad_planes] if want_planes else None,
        deterministic,
        dl(scratch),
        stream_of(pts),
    )
    return grad_pts, grad_tap_pts, grad_rotations, grad_planes


@kplanes_backward.register_fake
def _(grad_features, grad_tap_features, pts, tap_pts, rotations, planes, gates, h, wants,
      deterministic):
    return _gradient_buffers(pts, tap_pts, rotations, planes, wants)


def _setup_kplanes(ctx, inputs, output):
    pts, tap_pts, rotations, planes, gates, h, plane_dtype_features, deterministic = inputs
    ctx.has_taps = tap_pts is not None
    ctx.tilted = rotations is not None
    ctx.num_levels = len(planes)
    ctx.gates, ctx.h, ctx.deterministic = gates, h, deterministic
    ctx.save_for_backward(pts, tap_pts, rotations, *planes)


def _needs(flag) -> bool:
    """needs_input_grad of one input: a bool, or a list of bools for a list of tensors."""
    return any(flag) if isinstance(flag, (list, tuple)) else bool(flag)


def _kplanes_grad(ctx, grad_features, grad_tap_features):
    pts, tap_pts, rotations, *planes = ctx.saved_tensors
    needs = ctx.needs_input_grad
    wants = [_needs(needs[0]), _needs(needs[1]) and ctx.has_taps,
             _needs(needs[2]) and ctx.tilted, _needs(needs[3])]
    no_planes = [None] * ctx.num_levels  # a list input gets a list of gradients back
    if not any(wants):
        return None, None, None, no_planes, None, None, None, None
    features_dtype = grad_features.dtype if grad_features is not None else grad_tap_features.dtype
    if grad_features is None:
        grad_features = torch.zeros(
            (pts.shape[0], _num_features(planes, rotations.shape[0] if ctx.tilted else 1)),
            dtype=features_dtype, device=pts.device,
        )
    if grad_tap_features is None:
        n = tap_pts.shape[0] if ctx.has_taps else 0
        grad_tap_features = grad_features.new_zeros((4, n, grad_features.shape[1]))
    grad_pts, grad_tap_pts, grad_rotations, grad_planes = kplanes_backward(
        grad_features, grad_tap_features, pts, tap_pts, rotations, planes, ctx.gates, ctx.h, wants,
        ctx.deterministic,
    )
    return (
        grad_pts if wants[0] else None,
        grad_tap_pts if wants[1] else None,
        grad_rotations if wants[2] else None,
        grad_planes if wants[3] else no_planes,
        None,
        None,
        None,
        None,
    )


kplanes_forward.register_autograd(_kplanes_grad, setup_context=_setup_kplanes)


def _setup_kplanes_backward(ctx, inputs, output):
    (grad_features, grad_tap_features, pts, tap_pts, rotations, planes, gates, h, wants,
     deterministic) = inputs
    ctx.gates, ctx.h, ctx.wants = gates, h, wants
    ctx.save_for_backward(grad_features, grad_tap_features, pts, tap_pts, rotations, *planes)


# Double backward: exact, through a twice-differentiable PyTorch restatement of the same math.
kplanes_backward.register_autograd(_second_order.backward_of_backward,
                                   setup_context=_setup_kplanes_backward)


# --- public functions -------------------------------------------------------------------------


def _levels(op: str, planes) -> list[Tensor]:
    if isinstance(planes, Tensor):
        return [planes]
    try:  # any sequence of tensors: a list, a tuple, an nn.ParameterList, ...
        planes = list(planes)
    except TypeError:
        raise TypeError(
            f"{op}(): expected planes to be a tensor or a sequence of tensors (one per level), but "
            f"got {type(planes).__name__}"
        ) from None
    if len(planes) == 0:
        raise ValueError(f"{op}(): expected at least one level of planes, but got an empty list")
    for i, p in enumerate(planes):
        check_tensor(op, f"planes[{i}]", p)
    return list(planes)


def _gates(op: str, gates, num_levels: int):
    """Float gates (fused into the kernels), a gate tensor (applied outside, differentiable and
    free to change under torch.compile), or None."""
    if gates is None:
        return None
    if isinstance(gates, Tensor):
        if gates.shape != (num_levels,):
            raise ValueError(
                f"{op}(): expected gates to have one entry per level ({num_levels}), but got "
                f"shape {list(gates.shape)}"
            )
        return gates
    values = float_list(op, "gates", gates)
    if len(values) != num_levels:
        raise ValueError(
            f"{op}(): expected gates to have one entry per level ({num_levels}), but got "
            f"{len(values)}"
        )
    return values


def _apply_gates(outputs, gates: Tensor, planes: list[Tensor], num_tilts: int):
    """Multiplies each level's feature columns by its gate (the tensor-gates path)."""
    scale = torch.cat([g.expand(num_tilts * p.shape[1]) for g, p in zip(gates, planes, strict=True)])
    return tuple(o * scale.to(o.dtype) for o in outputs)


def _deterministic(deterministic: bool) -> bool:
    return bool(deterministic) or torch.are_deterministic_algorithms_enabled()


def _run(op, pts, tap_pts, rotations, planes, gates, h, features_dtype, deterministic):
    check_tensor(op, "pts", pts)
    if tap_pts is not None:
        check_tensor(op, "tap_pts", tap_pts)
    if rotations is not None:
        check_tensor(op, "rotations", rotations)
    planes = _levels(op, planes)
    gates = _gates(op, gates, len(planes))
    if features_dtype is None:
        plane_dtype_features = False
    elif features_dtype == planes[0].dtype:
        plane_dtype_features = True
    elif features_dtype == pts.dtype:
        plane_dtype_features = False
    else:
        raise TypeError(
            f"{op}(): expected features_dtype to be None, {pts.dtype} (the dtype of pts) or "
            f"{planes[0].dtype} (the dtype of planes), but got {features_dtype}"
        )
    # h is checked for finiteness by the core; here only its type (a SymFloat under compile).
    if isinstance(h, bool) or not isinstance(h, (int, float, torch.SymInt, torch.SymFloat)):
        raise TypeError(f"{op}(): expected h to be a real number, but got {type(h).__name__}")
    fused_gates = gates if not isinstance(gates, Tensor) else None
    try:
        outputs = kplanes_forward(
            pts, tap_pts, rotations, planes, fused_gates, float(h) if isinstance(h, int) else h,
            plane_dtype_features, _deterministic(deterministic),
        )
    except (ValueError, TypeError, NotImplementedError) as error:
        # The core names its variant ("kplanes_tilted(): ..."); name the function called instead.
        core = "kplanes_tilted(): " if rotations is not None else "kplanes(): "
        message = str(error)
        if op + "(): " != core and message.startswith(core):
            raise type(error)(op + "(): " + message[len(core):]) from None
        raise
    if isinstance(gates, Tensor):
        outputs = _apply_gates(outputs, gates, planes, 1 if rotations is None else rotations.shape[0])
    return outputs


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
    return _run("kplanes_tilted", pts, None, rotations, planes, gates, 0.0, features_dtype,
                deterministic)[0]


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
    return _run("kplanes", pts, None, None, planes, gates, 0.0, features_dtype, deterministic)[0]


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
    op = "kplanes_tilted_taps"
    check_tensor(op, "pts", pts)
    # pts travels as the op's tap points; check its shape here so the message names it.
    if pts.dim() != 2 or pts.shape[1] != 3:
        raise ValueError(f"{op}(): expected pts to have shape [B, 3], but got shape {list(pts.shape)}")
    no_points = pts.new_empty((0, 3))
    return _run("kplanes_tilted_taps", no_points, pts, rotations, planes, gates, h,
                features_dtype, deterministic)[1]


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
    return _run("kplanes_tilted_with_taps", pts, tap_pts, rotations, planes, gates, h,
                features_dtype, deterministic)


# --- plane_tv ---------------------------------------------------------------------------------


def _level_terms(planes: list[Tensor]) -> Tensor:
    return planes[0].new_empty((len(planes),), dtype=reduced_dtype(planes[0].dtype))


@torch.library.custom_op("fieldfuse::plane_tv_forward", mutates_args=())
def plane_tv_forward(planes: list[Tensor], num_tilts: int, norm: str) -> Tensor:
    out = _level_terms(planes)
    refs = [dl(p) for p in planes]
    scratch = workspace(_C.plane_tv_workspace_size(refs), planes[0].device)
    _C.plane_tv_forward([dl(p) for p in planes], num_tilts, norm, dl(out), dl(scratch),
                        stream_of(planes[0]))
    return out


@plane_tv_forward.register_fake
def _(planes, num_tilts, norm):
    return _level_terms(planes)


@torch.library.custom_op("fieldfuse::plane_tv_backward", mutates_args=())
def plane_tv_backward(planes: list[Tensor], num_tilts: int, norm: str,
                      grad_out: Tensor) -> list[Tensor]:
    grads = [torch.empty_like(p) for p in planes]
    _C.plane_tv_backward([dl(p) for p in planes], num_tilts, norm, dl(grad_out),
                         [dl(g) for g in grads], stream_of(planes[0]))
    return grads


@plane_tv_backward.register_fake
def _(planes, num_tilts, norm, grad_out):
    return [torch.empty_like(p) for p in planes]


def _setup_plane_tv(ctx, inputs, output):
    planes, num_tilts, norm = inputs
    ctx.num_tilts, ctx.norm = num_tilts, norm
    ctx.save_for_backward(*planes)


def _plane_tv_grad(ctx, grad_out):
    planes = list(ctx.saved_tensors)
    return plane_tv_backward(planes, ctx.num_tilts, ctx.norm, grad_out), None, None


plane_tv_forward.register_autograd(_plane_tv_grad, setup_context=_setup_plane_tv)


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
    if norm not in ("mean", "percell"):
        raise ValueError(f'{op}(): expected norm to be "mean" or "percell", but got {norm!r}')
    if isinstance(num_tilts, bool) or not isinstance(num_tilts, int):
        raise TypeError(f"{op}(): expected num_tilts to be an int, but got {type(num_tilts).__name__}")
    return plane_tv_forward(planes, num_tilts, norm).sum()
