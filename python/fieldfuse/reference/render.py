# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch oracles for the ray-integration (render) family, written from specs/render.md.

Each function here spells out the contract of the fused op of the same name in `fieldfuse` with
plain torch operations, one ray at a time (clarity over speed): it is differentiable through
autograd, runs on any device and in any floating dtype, and imports nothing from `fieldfuse`, so
it stays an independent check of the kernels. Call it in float64 to get an oracle.

Conventions shared by every function:

- Rays are **packed**: the samples of ray r occupy `[offsets[r], offsets[r+1])` of every
  per-sample tensor. `offsets` is a 1-D int64 tensor `[R+1]` with `offsets[0] = 0`,
  `offsets[R] = N`, non-decreasing; empty rays (and R = 0) are allowed. Its values are read with
  `tolist()`, so it may live on any device.
- Floating inputs of one call must share one dtype and device; nothing is upcast.
- Only *decisions* (where a ray terminates, whether a ray hits the box, how many samples it gets)
  are taken on plain Python numbers; every output value is formed with torch ops, so gradients
  flow to every floating input while the decisions themselves carry no gradient.

Volume rendering (emission-absorption), per ray, front to back, with `a_s` the sample's opacity
(`1 − exp(−σ_s δ_s)`, or the given alpha in `volume_render_alpha`):

    T = T0 (1, or prefix_transmittance[r]);  n = 0
    if T <= thresh: the ray is already terminated and composites nothing
    for each sample s of the ray:
        w = a_s·T;  rgb += w·rgb_s;  depth += w·t_s;  opacity += w;  weights[s] = w
        T = T·(1 − a_s);  n += 1
        if T <= thresh: break          # the terminating sample IS composited and counted
    rgb += T·background;  transmittance = T;  total_samples = n

Example:
    >>> import math, torch
    >>> from fieldfuse.reference import render
    >>> f64 = dict(dtype=torch.float64)
    >>> sigmas = torch.full((4,), math.log(2.0), **f64)  # with δ = 1, every a = 1/2
    >>> out = render.volume_render(sigmas, torch.ones(4, 1, **f64), torch.ones(4, **f64),
    ...                            torch.arange(1.0, 5.0, **f64), torch.tensor([0, 4]),
    ...                            transmittance_thresh=0.2)
    >>> out.weights  # T = 1/8 <= 0.2 after the third sample: the fourth is never reached
    tensor([0.5000, 0.2500, 0.1250, 0.0000], dtype=torch.float64)
    >>> out.total_samples
    tensor([3])
    >>> torch.stack([out.opacity, out.depth, out.transmittance])  # Σw, Σw·t (undivided), T
    tensor([[0.8750],
            [1.3750],
            [0.1250]], dtype=torch.float64)
    >>> render.line_integral(torch.ones(4, **f64), torch.full((4,), 0.5, **f64),
    ...                      torch.tensor([0, 1, 1, 4]))
    tensor([0.5000, 0.0000, 1.5000], dtype=torch.float64)
    >>> points, delta_ts, offsets = render.ray_box_samples(
    ...     torch.zeros(1, 3, **f64), torch.tensor([[0.0, 0.0, 1.0]], **f64), ds=0.5)
    >>> offsets  # through the centre: len 2, n = ceil(2/0.5) + 1 = 5 samples, δ = 2/4
    tensor([0, 5])
    >>> torch.cat([points[:, 2:], delta_ts[:, None]], dim=1)  # z of each point, δ
    tensor([[-1.0000,  0.5000],
            [-0.5000,  0.5000],
            [ 0.0000,  0.5000],
            [ 0.5000,  0.5000],
            [ 1.0000,  0.5000]], dtype=torch.float64)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import NamedTuple

import torch

__all__ = [
    "SLAB_EPS",
    "VolumeRenderOutput",
    "volume_render",
    "volume_render_alpha",
    "line_integral",
    "ray_box_samples",
    "ray_box_samples_padded",
    "padded_capacity",
    "parallel_beam_rays",
    "tilt_rotations",
]

# |d_k| at or below this makes the ray parallel to the slab pair of axis k (specs/render.md).
SLAB_EPS = 1e-8

_AXES = ("x", "y", "z")


class VolumeRenderOutput(NamedTuple):
    """What `volume_render` and `volume_render_alpha` return (R rays, N samples, C channels)."""

    rgb: torch.Tensor  # [R, C]: Σ w·rgb_s, plus T_final·background when one is given
    opacity: torch.Tensor  # [R]: Σ w (= T0 − T_final; 1 − T_final without a prefix)
    depth: torch.Tensor  # [R]: Σ w·t_s, not divided by the opacity
    weights: torch.Tensor  # [N]: w of each sample, exactly 0 past termination
    total_samples: torch.Tensor  # [R] int64: samples composited, the terminating one included
    transmittance: torch.Tensor  # [R]: T_final, the transmittance after the last composited sample


# --- argument checks -------------------------------------------------------------------------


def _fail_shape(op: str, name: str, layout: str, value: torch.Tensor) -> None:
    raise ValueError(
        f"{op}(): expected {name} to have shape {layout}, but got shape {list(value.shape)}"
    )


def _check_tensor(op: str, name: str, value: object) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{op}(): expected {name} to be a torch.Tensor, but got {type(value).__name__}"
        )


def _check_float(op: str, name: str, value: object, like: torch.Tensor | None, like_name: str):
    """A floating tensor with the dtype and device of `like` (when given)."""
    _check_tensor(op, name, value)
    if not value.is_floating_point():
        raise TypeError(f"{op}(): expected {name} to be a floating tensor, but got {value.dtype}")
    if like is not None and value.dtype != like.dtype:
        raise TypeError(
            f"{op}(): expected {name} to have dtype {like.dtype} (that of {like_name}), "
            f"but got {value.dtype}"
        )
    if like is not None and value.device != like.device:
        raise ValueError(
            f"{op}(): expected {name} to be on {like.device} (where {like_name} is), "
            f"but got {value.device}"
        )


def _check_offsets(op: str, offsets: object, num_samples: int) -> list[int]:
    """Validates `offsets` against N and returns its values as Python ints."""
    _check_tensor(op, "offsets", offsets)
    if offsets.dtype != torch.int64:
        raise TypeError(
            f"{op}(): expected offsets to have dtype torch.int64, but got {offsets.dtype}"
        )
    if offsets.dim() != 1 or offsets.numel() < 1:
        _fail_shape(op, "offsets", "[R+1] (at least one entry)", offsets)
    bounds = offsets.tolist()
    if bounds[0] != 0:
        raise ValueError(f"{op}(): expected offsets[0] to be 0, but got {bounds[0]}")
    for r in range(len(bounds) - 1):
        if bounds[r + 1] < bounds[r]:
            raise ValueError(
                f"{op}(): expected offsets to be non-decreasing, but offsets[{r + 1}] = "
                f"{bounds[r + 1]} < offsets[{r}] = {bounds[r]}"
            )
    if bounds[-1] != num_samples:
        raise ValueError(
            f"{op}(): expected offsets[-1] to equal the number of samples N = {num_samples}, "
            f"but got {bounds[-1]}"
        )
    return bounds


def _check_per_sample(op: str, name: str, value: object, like: torch.Tensor, like_name: str):
    _check_float(op, name, value, like, like_name)
    if value.dim() != 1 or value.shape[0] != like.shape[0]:
        _fail_shape(op, name, f"[N] = [{like.shape[0]}] (N from {like_name})", value)


def _check_threshold(op: str, thresh: float) -> float:
    thresh = float(thresh)
    if not (math.isfinite(thresh) and 0.0 <= thresh < 1.0):
        raise ValueError(
            f"{op}(): expected transmittance_thresh to be finite and in [0, 1), but got {thresh}"
        )
    return thresh


def _check_render_args(op, first, first_name, rgbs, ts, offsets, background, prefix):
    """Checks shared by both volume renderers; returns (bounds, R, C)."""
    _check_float(op, first_name, first, None, first_name)
    if first.dim() != 1:
        _fail_shape(op, first_name, "[N]", first)
    num_samples = first.shape[0]
    _check_float(op, "rgbs", rgbs, first, first_name)
    if rgbs.dim() != 2 or rgbs.shape[0] != num_samples:
        _fail_shape(op, "rgbs", f"[N, C] with N = {num_samples}", rgbs)
    channels = rgbs.shape[1]
    if channels < 1:
        raise ValueError(
            f"{op}(): expected rgbs to have C >= 1 channels, but got shape {list(rgbs.shape)}"
        )
    _check_per_sample(op, "ts", ts, first, first_name)
    bounds = _check_offsets(op, offsets, num_samples)
    num_rays = len(bounds) - 1
    if background is not None:
        _check_float(op, "background", background, first, first_name)
        if tuple(background.shape) not in ((channels,), (num_rays, channels)):
            _fail_shape(
                op, "background", f"[C] = [{channels}] or [R, C] = [{num_rays}, {channels}]",
                background,
            )
    if prefix is not None:
        _check_float(op, "prefix_transmittance", prefix, first, first_name)
        if tuple(prefix.shape) != (num_rays,):
            _fail_shape(op, "prefix_transmittance", f"[R] = [{num_rays}]", prefix)
    return bounds, num_rays, channels


# --- volume rendering ------------------------------------------------------------------------


def _march(alphas, keeps, rgbs, ts, bounds, thresh, background, prefix) -> VolumeRenderOutput:
    """The compositing loop of the module docstring, given each sample's a and (1 − a)."""
    num_rays, channels = len(bounds) - 1, rgbs.shape[1]
    zero = rgbs.new_zeros(())
    rgb_rows, depths, opacities, finals, counts = [], [], [], [], []
    weights: list[torch.Tensor] = []
    for r in range(num_rays):
        start, end = bounds[r], bounds[r + 1]
        trans = rgbs.new_ones(()) if prefix is None else prefix[r]
        color, depth, opacity = rgbs.new_zeros(channels), zero, zero
        ray_weights: list[torch.Tensor] = []
        # A ray that arrives already at or below the threshold (a prefix from a previous chunk
        # that terminated) composites nothing, so chunked marching equals one pass.
        if trans.item() > thresh:
            for s in range(start, end):
                w = alphas[s] * trans
                color = color + w * rgbs[s]
                depth = depth + w * ts[s]
                opacity = opacity + w
                ray_weights.append(w)
                trans = trans * keeps[s]
                if trans.item() <= thresh:
                    break
        weights.extend(ray_weights)
        weights.extend([zero] * (end - start - len(ray_weights)))
        if background is not None:
            color = color + trans * (background if background.dim() == 1 else background[r])
        rgb_rows.append(color)
        depths.append(depth)
        opacities.append(opacity)
        finals.append(trans)
        counts.append(len(ray_weights))

    def rows(values, empty):
        return torch.stack(values) if values else empty

    return VolumeRenderOutput(
        rgb=rows(rgb_rows, rgbs.new_zeros(0, channels)),
        opacity=rows(opacities, rgbs.new_zeros(0)),
        depth=rows(depths, rgbs.new_zeros(0)),
        weights=rows(weights, rgbs.new_zeros(0)),
        total_samples=torch.tensor(counts, dtype=torch.int64, device=rgbs.device),
        transmittance=rows(finals, rgbs.new_zeros(0)),
    )


def volume_render(
    sigmas: torch.Tensor,
    rgbs: torch.Tensor,
    delta_ts: torch.Tensor,
    ts: torch.Tensor,
    offsets: torch.Tensor,
    transmittance_thresh: float = 0.0,
    background: torch.Tensor | None = None,
    prefix_transmittance: torch.Tensor | None = None,
) -> VolumeRenderOutput:
    """Emission-absorption volume rendering of packed rays with early termination.

    Runs the loop of the module docstring with `a_s = 1 − exp(−σ_s δ_s)`. Decisions taken here
    where the spec leaves room:

    - `a_s` is formed as `−expm1(−σ_s δ_s)` and the transmittance factor `1 − a_s` as
      `exp(−σ_s δ_s)` (equal in exact arithmetic; both accurate in floating point).
    - `σ_s = +∞` is a fully opaque sample: `a_s = 1`, `1 − a_s = 0`, with a zero gradient to
      σ_s and δ_s (the limits), never NaN, whatever δ_s is.
    - The termination test `T <= thresh` runs after each composited sample, so the terminating
      sample is composited and counted; it also runs once before the first sample, which can only
      stop a ray whose prefix transmittance is already at or below the threshold (T0 = 1 never
      is, since thresh < 1). Such a ray composites nothing: 0 samples, zero weights,
      transmittance = T0. This makes rendering a ray in chunks, each with the previous chunk's
      final transmittance as its prefix, equal to rendering it in one pass.
    - `weights[s]` is exactly 0 (and gets no gradient) for every sample past termination; so do
      the samples' σ, δ, rgb and t.
    - An empty ray has rgb = T0·background (0 without one), opacity = depth = 0,
      total_samples = 0 and transmittance = T0.
    - `opacity = Σ w`, which is `T0 − T_final` (`1 − T_final` only without a prefix); `depth =
      Σ w·t` is not divided by the opacity. With a background,
      `rgb = Σ w·rgb_s + T_final·background`, where T_final includes the prefix.
    - Negative σ or δ are not rejected; they just enter the formula.

    Args:
        sigmas: `[N]` densities σ ≥ 0 (may be +∞). Differentiable.
        rgbs: `[N, C]` per-sample colours (any C ≥ 1). Differentiable.
        delta_ts: `[N]` step lengths δ. Differentiable.
        ts: `[N]` sample distances, used for the depth only. Differentiable.
        offsets: `[R+1]` int64 packing offsets.
        transmittance_thresh: early-termination threshold, finite and in [0, 1); 0 stops a ray
            only where T reaches exactly 0.
        background: optional `[C]` (shared) or `[R, C]` (per ray) colour. Differentiable.
        prefix_transmittance: optional `[R]` transmittance each ray starts with (chunked
            marching), nominally in [0, 1]. Differentiable.

    Returns:
        A `VolumeRenderOutput` (rgb `[R, C]`, opacity `[R]`, depth `[R]`, weights `[N]`,
        total_samples `[R]` int64, transmittance `[R]`), floating outputs in the inputs' dtype.

    Raises:
        TypeError: a non-tensor, a non-floating or mismatched dtype, or offsets not int64.
        ValueError: a shape mismatch, C = 0, bad offsets (offsets[0] != 0, decreasing,
            offsets[-1] != N), or a threshold outside [0, 1).
    """
    op = "volume_render"
    bounds, _, _ = _check_render_args(
        op, sigmas, "sigmas", rgbs, ts, offsets, background, prefix_transmittance
    )
    _check_per_sample(op, "delta_ts", delta_ts, sigmas, "sigmas")
    thresh = _check_threshold(op, transmittance_thresh)
    opaque = torch.isposinf(sigmas)
    # Zero the infinite σ before the product, so neither it nor δ sees 0·∞ in the backward.
    tau = torch.where(opaque, 0.0, sigmas) * delta_ts
    alphas = torch.where(opaque, 1.0, -torch.expm1(-tau))
    keeps = torch.where(opaque, 0.0, torch.exp(-tau))
    return _march(alphas, keeps, rgbs, ts, bounds, thresh, background, prefix_transmittance)


def volume_render_alpha(
    alphas: torch.Tensor,
    rgbs: torch.Tensor,
    ts: torch.Tensor,
    offsets: torch.Tensor,
    transmittance_thresh: float = 0.0,
    background: torch.Tensor | None = None,
    prefix_transmittance: torch.Tensor | None = None,
) -> VolumeRenderOutput:
    """`volume_render` with per-sample opacities given directly: `a_s = alphas[s]`.

    Same loop, decisions and outputs as `volume_render`, with `T ← T·(1 − α_s)`. The
    transmittance is a running product, never a quotient, so the gradient is exact and finite at
    α = 1: for a ray whose sample i has α_i = 1 (T drops to 0 there, which terminates the ray
    for any threshold ≥ 0), `∂w_i/∂α_i = T_i`, `∂T_final/∂α_i = −T_i`, and an earlier sample
    j < i gets `∂rgb/∂α_j = T_j·(rgb_j − Σ_{j<k≤i} Π_{j<m<k}(1 − α_m)·α_k·rgb_k)`, which for
    i = j + 1 is `T_j·(rgb_j − rgb_i)`. No δ is involved. Alphas outside [0, 1] are not rejected.

    With `transmittance_thresh = 0`, α_i = 1 sits on the termination boundary (any α_i < 1 lets
    the ray go on), so the loss is only one-sidedly differentiable there; the gradient returned is
    that of the path taken (the ray terminated at i), the same as for any threshold > 0, where
    the path is stable around α_i = 1 and the gradient is the ordinary derivative.

    Args:
        alphas: `[N]` opacities α, nominally in [0, 1]. Differentiable.
        rgbs, ts, offsets, transmittance_thresh, background, prefix_transmittance: as in
            `volume_render`.

    Returns:
        A `VolumeRenderOutput`, as `volume_render`.
    """
    op = "volume_render_alpha"
    bounds, _, _ = _check_render_args(
        op, alphas, "alphas", rgbs, ts, offsets, background, prefix_transmittance
    )
    thresh = _check_threshold(op, transmittance_thresh)
    return _march(alphas, 1.0 - alphas, rgbs, ts, bounds, thresh, background, prefix_transmittance)


# --- line integral ---------------------------------------------------------------------------


def line_integral(
    values: torch.Tensor, delta_ts: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor:
    """X-ray / tomography projection of packed rays: `P_r = Σ_{s ∈ ray r} v_s · δ_s`.

    Each ray's terms are summed by one `torch.sum`, in a fixed order (deterministic). An empty ray
    projects to 0 (with a zero gradient). The gradients are `∂P_r/∂v_s = δ_s` and
    `∂P_r/∂δ_s = v_s` (per channel).

    Args:
        values: `[N]` or `[N, C]` (C ≥ 1) sample values. Differentiable.
        delta_ts: `[N]` step lengths. Differentiable.
        offsets: `[R+1]` int64 packing offsets.

    Returns:
        `[R]` for 1-D values, `[R, C]` for 2-D ones, in the values' dtype.
    """
    op = "line_integral"
    _check_float(op, "values", values, None, "values")
    if values.dim() not in (1, 2):
        _fail_shape(op, "values", "[N] or [N, C]", values)
    if values.dim() == 2 and values.shape[1] < 1:
        raise ValueError(
            f"{op}(): expected values to have C >= 1 channels, but got shape {list(values.shape)}"
        )
    _check_per_sample(op, "delta_ts", delta_ts, values, "values")
    bounds = _check_offsets(op, offsets, values.shape[0])
    steps = delta_ts if values.dim() == 1 else delta_ts[:, None]
    rows = [
        (values[bounds[r] : bounds[r + 1]] * steps[bounds[r] : bounds[r + 1]]).sum(dim=0)
        for r in range(len(bounds) - 1)
    ]
    return torch.stack(rows) if rows else values.new_zeros(0, *values.shape[1:])


# --- ray-box sampling ------------------------------------------------------------------------


def _check_rays(op: str, origins: object, directions: object, ds: float) -> float:
    _check_float(op, "origins", origins, None, "origins")
    if origins.dim() != 2 or origins.shape[1] != 3:
        _fail_shape(op, "origins", "[R, 3]", origins)
    _check_float(op, "directions", directions, origins, "origins")
    if tuple(directions.shape) != tuple(origins.shape):
        layout = f"[R, 3] = {list(origins.shape)} (that of origins)"
        _fail_shape(op, "directions", layout, directions)
    ds = float(ds)
    if not (math.isfinite(ds) and ds > 0.0):
        raise ValueError(f"{op}(): expected ds to be finite and > 0, but got {ds}")
    return ds


def _slab_interval(origin: torch.Tensor, direction: torch.Tensor):
    """(t_enter, t_exit) of the line `origin + t·direction` in [−1, 1]³, or None on a miss."""
    enters, exits = [], []
    for k in range(3):
        if abs(direction[k].item()) <= SLAB_EPS:
            # Parallel to slab k: inside it for every t (faces included) or for none.
            if abs(origin[k].item()) > 1.0:
                return None
            continue
        t_a = (-1.0 - origin[k]) / direction[k]
        t_b = (1.0 - origin[k]) / direction[k]
        enters.append(torch.minimum(t_a, t_b))
        exits.append(torch.maximum(t_a, t_b))
    if not enters:  # a zero direction is no line
        return None
    t_enter, t_exit = torch.stack(enters).max(), torch.stack(exits).min()
    if not t_exit.item() > t_enter.item():  # touching an edge or a corner only: length 0
        return None
    return t_enter, t_exit


def _norm(direction: torch.Tensor) -> float:
    """|d| in float64, scaled by the largest component (no overflow of the squares), summed in the
    kernels' order so that the sample counts agree to the bit."""
    d = [abs(x) for x in direction.tolist()]
    m = max(d)
    if m == 0.0 or not math.isfinite(m):
        return m
    total = 0.0
    for x in d:
        total += (x / m) * (x / m)
    return m * math.sqrt(total)


def _max_steps(ds: float) -> int:
    """ceil(2√3/ds): the steps of the longest chord, the box's diagonal."""
    return math.ceil(2.0 * 1.7320508075688772 / ds)


def _ray_samples(origin, direction, ds):
    """Points `[n, 3]` and steps `[n]` of one ray (n = 0 on a miss)."""
    interval = _slab_interval(origin, direction)
    if interval is None:
        return origin.new_zeros(0, 3), origin.new_zeros(0)
    t_enter, t_exit = interval
    length = t_exit - t_enter
    count = min(math.ceil(length.item() * _norm(direction) / ds), _max_steps(ds)) + 1
    step = length / (count - 1)
    t = t_enter + torch.arange(count, dtype=origin.dtype, device=origin.device) * step
    return origin + t[:, None] * direction, step.expand(count)


def ray_box_samples(
    origins: torch.Tensor, directions: torch.Tensor, ds: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uniform samples of rays through the box [−1, 1]³ (slab method), packed.

    Each ray is the whole line `o + t·d`, t ∈ ℝ (no `t ≥ 0` clamp: parallel-beam origins lie on
    a plane through the box centre). Slab method with `SLAB_EPS = 1e-8`, per axis k:

    - `|d_k| <= SLAB_EPS`: the ray is taken as parallel to slab k; it misses if `|o_k| > 1`,
      else slab k puts no bound on t. The slab is closed, so a ray running along a face or an
      edge (`|o_k| = 1` exactly) hits, with the full length of the box along it (2 for an
      axis-aligned ray). A ray tilted by `|d_k| <= 1e-8` is treated exactly as a parallel one;
      with `|d_k|` just above 1e-8 it is intersected normally (so a ray starting on the face
      y = 1 with a tiny positive d_y spans only t ∈ [t_enter, 0] of the x-extent).
    - otherwise `t_k± = (±1 − o_k)/d_k`, `t_enter = max_k min(t_k±)`, `t_exit = min_k max(t_k±)`.

    The ray hits iff `t_exit > t_enter` strictly: a line that only touches an edge or a corner
    (length 0) misses, and so does a zero direction (all |d_k| <= eps). A hit gets
    `n = min(ceil(ℓ/ds), ceil(2√3/ds)) + 1` samples (≥ 2) for the chord length
    `ℓ = |d|·(t_exit − t_enter)` (ds is a distance; the min only absorbs rounding, since no chord
    of the box is longer than its diagonal 2√3; evaluated in float64), at `t_k = t_enter + k·δ`,
    k = 0..n−1, with `δ = (t_exit − t_enter)/(n−1)` for every sample (so Σδ = n·len/(n−1)): the
    first and last samples lie on the box surface. δ is a step of t: the distance between samples
    only for unit directions (which `parallel_beam_rays` gives; directions are not normalised).

    Points and δ are differentiable with respect to origins and directions through t_enter and
    t_exit (the gradient goes to the axes that attain the max/min); the hit decision and the
    sample count are not.

    Args:
        origins: `[R, 3]` ray origins. Differentiable.
        directions: `[R, 3]` ray directions (nominally unit), same dtype/device. Differentiable.
        ds: target step, finite and > 0.

    Returns:
        `(points [N, 3], delta_ts [N], offsets [R+1] int64)`, rays in input order, missing rays
        empty.
    """
    op = "ray_box_samples"
    ds = _check_rays(op, origins, directions, ds)
    points, steps, counts = [], [], [0]
    for r in range(origins.shape[0]):
        ray_points, ray_steps = _ray_samples(origins[r], directions[r], ds)
        points.append(ray_points)
        steps.append(ray_steps)
        counts.append(counts[-1] + ray_points.shape[0])
    offsets = torch.tensor(counts, dtype=torch.int64, device=origins.device)
    if not points:
        return origins.new_zeros(0, 3), origins.new_zeros(0), offsets
    return torch.cat(points), torch.cat(steps), offsets


def padded_capacity(ds: float) -> int:
    """`S = ceil(2√3/ds) + 1`: the most samples any ray can get (the box diagonal)."""
    ds = float(ds)
    if not (math.isfinite(ds) and ds > 0.0):
        raise ValueError(f"padded_capacity(): expected ds to be finite and > 0, but got {ds}")
    return _max_steps(ds) + 1


def ray_box_samples_padded(
    origins: torch.Tensor, directions: torch.Tensor, ds: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`ray_box_samples` laid out at a fixed capacity `S = padded_capacity(ds)` per ray.

    Row r holds ray r's samples in its first n_r slots (same values and gradients as the packed
    variant); the rest are padding with point `(0, 0, 0)` (the box centre, safe to query) and
    δ = 0, so `Σ_s v·δ` over a padded row equals the packed line integral without looking at the
    mask. A missing ray is all padding.

    Args:
        origins, directions, ds: as in `ray_box_samples`.

    Returns:
        `(points [R, S, 3], delta_ts [R, S], valid [R, S] bool)`.

    Every ray fits: counts are chord lengths over ds, and no chord is longer than 2√3.
    """
    op = "ray_box_samples_padded"
    ds = _check_rays(op, origins, directions, ds)
    capacity = padded_capacity(ds)
    points, steps, valid = [], [], []
    for r in range(origins.shape[0]):
        ray_points, ray_steps = _ray_samples(origins[r], directions[r], ds)
        count = ray_points.shape[0]
        pad = capacity - count
        points.append(torch.cat([ray_points, origins.new_zeros(pad, 3)]))
        steps.append(torch.cat([ray_steps, origins.new_zeros(pad)]))
        mask = torch.zeros(capacity, dtype=torch.bool, device=origins.device)
        mask[:count] = True
        valid.append(mask)
    if not points:
        return (
            origins.new_zeros(0, capacity, 3),
            origins.new_zeros(0, capacity),
            torch.zeros(0, capacity, dtype=torch.bool, device=origins.device),
        )
    return torch.stack(points), torch.stack(steps), torch.stack(valid)


# --- parallel-beam geometry ------------------------------------------------------------------


def parallel_beam_rays(
    rotations: torch.Tensor, shifts: torch.Tensor | None, detector_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rays of an N×N parallel-beam detector for each of M projections.

    Pixel (i, j) of projection m: `o = R_m·(x_j, y_i, 0) + shift_m`, `d = R_m·e_z` (the third
    column of R_m), with `x_j = 2j/(N−1) − 1` and `y_i = 2i/(N−1) − 1`, so the border pixels sit
    at ±1 exactly (with R = I they run along the faces and edges of the box and hit it, with
    length 2, under the closed-slab rule of `ray_box_samples`). Rays are ordered by m, then i,
    then j (j fastest): ray `m·N² + i·N + j`. R_m is used as given (not assumed orthogonal).

    Args:
        rotations: `[M, 3, 3]` row-major. Differentiable.
        shifts: `[M, 3]` translation per projection, or None for none. Differentiable.
        detector_size: N ≥ 2 pixels per side.

    Returns:
        `(origins [M·N·N, 3], directions [M·N·N, 3])` in the rotations' dtype.
    """
    op = "parallel_beam_rays"
    _check_float(op, "rotations", rotations, None, "rotations")
    if rotations.dim() != 3 or tuple(rotations.shape[1:]) != (3, 3):
        _fail_shape(op, "rotations", "[M, 3, 3]", rotations)
    num_views = rotations.shape[0]
    if shifts is not None:
        _check_float(op, "shifts", shifts, rotations, "rotations")
        if tuple(shifts.shape) != (num_views, 3):
            _fail_shape(op, "shifts", f"[M, 3] = [{num_views}, 3]", shifts)
    try:
        n = operator.index(detector_size)
    except TypeError:
        n = None
    if n is None or isinstance(detector_size, bool) or n < 2:
        raise ValueError(
            f"{op}(): expected detector_size to be an int >= 2, but got {detector_size!r}"
        )
    coords = 2.0 * torch.arange(n, dtype=rotations.dtype, device=rotations.device) / (n - 1) - 1.0
    y, x = torch.meshgrid(coords, coords, indexing="ij")  # [N, N]: row i, column j
    plane = torch.stack([x, y, torch.zeros_like(x)], dim=-1).reshape(n * n, 3)
    origins = torch.einsum("mab,pb->mpa", rotations, plane)
    if shifts is not None:
        origins = origins + shifts[:, None, :]
    directions = rotations[:, None, :, 2].expand(num_views, n * n, 3)
    return origins.reshape(-1, 3), directions.reshape(-1, 3)


def tilt_rotations(angles: torch.Tensor | Sequence[float], axis: str = "y") -> torch.Tensor:
    """Right-handed rotation matrices `[M, 3, 3]` by `angles` (radians) about one axis.

    About y: `[[c, 0, s], [0, 1, 0], [−s, 0, c]]`; about x: `[[1, 0, 0], [0, c, −s], [0, s, c]]`;
    about z: `[[c, −s, 0], [s, c, 0], [0, 0, 1]]`, with c = cos θ, s = sin θ. So a tilt θ about
    y sends the beam direction e_z to `(sin θ, 0, cos θ)`.

    Args:
        angles: `[M]` floating tensor (differentiable; its dtype is kept) or a sequence of
            floats (float64).
        axis: `"x"`, `"y"` or `"z"`.
    """
    op = "tilt_rotations"
    if axis not in _AXES:
        raise ValueError(f"{op}(): expected axis to be one of {_AXES}, but got {axis!r}")
    if not isinstance(angles, torch.Tensor):
        angles = torch.tensor([float(a) for a in angles], dtype=torch.float64)
    _check_float(op, "angles", angles, None, "angles")
    if angles.dim() != 1:
        _fail_shape(op, "angles", "[M]", angles)
    c, s = torch.cos(angles), torch.sin(angles)
    one, zero = torch.ones_like(angles), torch.zeros_like(angles)
    rows = {
        "x": ((one, zero, zero), (zero, c, -s), (zero, s, c)),
        "y": ((c, zero, s), (zero, one, zero), (-s, zero, c)),
        "z": ((c, -s, zero), (s, c, zero), (zero, zero, one)),
    }[axis]
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)
