# SPDX-License-Identifier: Apache-2.0
"""Tests of the fieldfuse K-Planes ops against the float64 oracles of fieldfuse.reference.kplanes.

Contract: specs/kplanes.md and include/fieldfuse/kplanes.h. Float64 results are compared with the
oracle at the float64 tolerances of conftest. Float32 results follow the spec's parity target:
their error against the float64 oracle (evaluated on the same, already rounded, inputs) must stay
within twice the error of the PyTorch chain run in float32 (the oracle itself in float32), plus a
small absolute floor. Float32 gradient comparisons use points kept away from the kinks of the
bilinear interpolation (cell edges and the ±1 border), where one float32 rounding of R·p can flip
which cell's slope is used: there the gradient is not defined to float32 precision for either
implementation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from fieldfuse.reference import kplanes as ref
from device_params import CUDA_MARKS, DEVICES, FLOAT_DTYPES, capture_cuda_graph, cuda_only

F32, F64 = torch.float32, torch.float64
EPS32 = torch.finfo(torch.float32).eps


# (gx, gy) indices into the rotated point, per plane (specs/kplanes.md).
TILTED_PAIRS = ((0, 1), (2, 0), (1, 2))
AXIS_PAIRS = ((0, 1), (0, 2), (1, 2))

# Index-space distance to a kink below which a point is dropped for float32 gradient checks and
# gradcheck: float32 rounding of R·p moves an index by at most ~1e-4 cells on a 200-cell axis, and
# gradcheck's steps of 1e-6 far less.
KINK_MARGIN = 2e-3


# --- the spec's configurations ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Config:
    label: str
    batch: int
    tilts: int
    levels: tuple  # ((C, H, W), ...)
    gates: tuple | None = None

    def __str__(self) -> str:
        return self.label

    @property
    def num_features(self) -> int:
        return self.tilts * sum(c for c, _, _ in self.levels)


SMALL_CONFIGS = [
    Config("37x1x1x5x5", 37, 1, ((1, 5, 5),)),
    Config("257x3x5x7x9", 257, 3, ((5, 7, 9),)),
    Config("multiscale", 37, 3, ((3, 5, 7), (5, 11, 13), (7, 19, 23)), (0.25, 0.75, 1.0)),
]
LARGE_CONFIGS = [
    Config("4096x4x8x200x200", 4096, 4, ((8, 200, 200),)),
    Config("2000x8x32x50x33", 2000, 8, ((32, 50, 33),)),
]
MULTISCALE = SMALL_CONFIGS[2]


def _config_device_params():
    """Small configurations on both devices, the large ones on CUDA only."""
    params = []
    for config in SMALL_CONFIGS:
        for device in ("cpu", "cuda"):
            marks = CUDA_MARKS if device == "cuda" else ()
            params.append(pytest.param(config, device, id=f"{config}-{device}", marks=marks))
    for config in LARGE_CONFIGS:
        params.append(pytest.param(config, "cuda", id=f"{config}-cuda", marks=CUDA_MARKS))
    return params


CONFIG_DEVICES = _config_device_params()


# --- inputs -----------------------------------------------------------------------------------


def _uniform(shape, lo, hi, rng) -> torch.Tensor:
    """Uniform float64 values drawn on the CPU generator (reproducible on every device)."""
    return lo + (hi - lo) * torch.rand(shape, generator=rng, dtype=F64)


def _sizes(levels) -> list[tuple[int, int]]:
    return [(h, w) for _, h, w in levels]


def _kink_free(coords: torch.Tensor, pairs, sizes, margin: float = KINK_MARGIN) -> torch.Tensor:
    """`[B]` mask: every index of `coords [T, B, 3]` (float64) is `margin` away from a kink.

    A kink is an integer index (a cell edge, where the slope switches cells) or the clip at the
    border. A size-1 axis has no coordinate gradient and hence no kink.
    """
    keep = torch.ones(coords.shape[1], dtype=torch.bool)
    for height, width in sizes:
        for gx, gy in pairs:
            for axis, size in ((gx, width), (gy, height)):
                if size == 1:
                    continue
                index = (coords[..., axis].cpu() + 1) / 2 * (size - 1)
                nearest = index.clamp(0, size - 1).round()
                keep &= ((index - nearest).abs() > margin).all(dim=0)
    return keep


def _tap_coords(pts64, rot64, h):
    """Plane-frame coordinates `[4T, B, 3]` of a point and its three taps (R·p + h·R[:, i])."""
    base = torch.einsum("tij,bj->tbi", rot64, pts64)
    if h is None:
        return base
    return torch.cat([base] + [base + h * rot64[:, None, :, i] for i in range(3)])


def _points(batch, rng, dtype, *, lo=-1.1, hi=1.1, rotations=None, levels=None, h=None,
            axis_aligned=False):
    """`[B, 3]` points uniform in [lo, hi]; kink-free (see `_kink_free`) when levels are given.

    The mask is evaluated on the points and rotations as rounded to `dtype`, in float64.
    """
    if levels is None:
        return _uniform((batch, 3), lo, hi, rng).to(dtype)
    kept, count = [], 0
    for _ in range(50):
        candidates = _uniform((2 * batch + 16, 3), lo, hi, rng).to(dtype)
        pts64 = candidates.double()
        if axis_aligned:
            coords, pairs = _tap_coords(pts64, torch.eye(3, dtype=F64)[None], h), AXIS_PAIRS
        else:
            coords, pairs = _tap_coords(pts64, rotations.double().cpu(), h), TILTED_PAIRS
        mask = _kink_free(coords, pairs, _sizes(levels))
        kept.append(candidates[mask])
        count += int(mask.sum())
        if count >= batch:
            break
    assert count >= batch, "could not draw enough kink-free points"
    return torch.cat(kept)[:batch]


def _layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else t


@dataclasses.dataclass
class Inputs:
    pts: torch.Tensor
    rotations: torch.Tensor
    planes: list

    def tensors(self):
        return [self.pts, self.rotations, *self.planes]


def _inputs(config, rng, device="cpu", dtype=F64, *, layout="nchw", kink_free=False, h=None,
            lo=-1.1, hi=1.1) -> Inputs:
    """The spec's random inputs: rotations in [−1, 1], planes in [0.1, 0.5], points in ±1.1."""
    rotations = _uniform((config.tilts, 3, 3), -1.0, 1.0, rng).to(dtype)
    planes = [
        _layout(_uniform((3 * config.tilts, c, hh, w), 0.1, 0.5, rng).to(device, dtype), layout)
        for c, hh, w in config.levels
    ]
    pts = _points(
        config.batch, rng, dtype, lo=lo, hi=hi, rotations=rotations,
        levels=config.levels if kink_free else None, h=h,
    )
    return Inputs(pts.to(device), rotations.to(device), planes)


def _randn(shape, rng, device="cpu", dtype=F64) -> torch.Tensor:
    return torch.randn(shape, generator=rng, dtype=F64).to(device=device, dtype=dtype)


# --- evaluation helpers -----------------------------------------------------------------------


def _value_and_grads(fn, tensors, upstream):
    """`fn(*tensors)` and its gradients w.r.t. every tensor (views stay views, read in place)."""
    leaves = [t.detach().requires_grad_() for t in tensors]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, upstream)
    return out.detach(), list(grads)


def tilted_fn(impl=fieldfuse, gates=None, **kwargs):
    """`(pts, rotations, *planes) -> features` of `impl` (fieldfuse or the reference module)."""
    return lambda pts, rot, *planes: impl.kplanes_tilted(pts, rot, list(planes), gates, **kwargs)


def axis_fn(impl=fieldfuse, **kwargs):
    if impl is ref:
        return lambda pts, *planes: ref.kplanes(pts, list(planes))
    return lambda pts, *planes: fieldfuse.kplanes(pts, list(planes), **kwargs)


def taps_fn(h, impl=fieldfuse, gates=None, **kwargs):
    def fn(pts, rot, *planes):
        return impl.kplanes_tilted_taps(pts, rot, list(planes), h, gates, **kwargs)

    return fn


def _max_error(value: torch.Tensor, exact: torch.Tensor) -> float:
    if value.numel() == 0:
        return 0.0
    return (value.double() - exact).abs().max().item()


def _assert_within_twice_pytorch(name, ours, pytorch32, exact, floor_ulps=4):
    """The spec's float32 parity: error ≤ 2 × PyTorch-fp32's own error + a few-ulp floor."""
    assert ours.shape == exact.shape, name
    ours_err, torch_err = _max_error(ours, exact), _max_error(pytorch32, exact)
    scale = exact.abs().max().item() if exact.numel() else 0.0
    floor = floor_ulps * EPS32 * scale + 1e-30
    assert ours_err <= 2 * torch_err + floor, (
        f"{name}: fieldfuse float32 max error {ours_err:.3e} exceeds 2 × PyTorch float32's "
        f"{torch_err:.3e} + floor {floor:.3e}"
    )


def _check_against_reference(ours_fn, ref_fn, tensors, upstream, tolerances, *, names=None):
    """Forward and all gradients of `ours_fn` against `ref_fn` on the same input values.

    float64: within the float64 tolerances; float32: within twice PyTorch-fp32's own error (see
    the module docstring; gradients need kink-free inputs).
    """
    dtype = tensors[0].dtype
    out, grads = _value_and_grads(ours_fn, tensors, upstream)
    exact, exact_grads = _value_and_grads(
        ref_fn, [t.double() for t in tensors], upstream.double()
    )
    assert out.dtype == dtype and out.shape == exact.shape and out.device == tensors[0].device
    names = names or [f"input {i}" for i in range(len(tensors))]
    for t, g, name in zip(tensors, grads, names, strict=True):
        assert g.dtype == t.dtype and g.shape == t.shape, name
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and t.shape[1] > 1:
            assert g.is_contiguous(memory_format=torch.channels_last), name
    if dtype == F64:
        tol = tolerances(F64)
        assert_close(out, exact, **tol.forward)
        for g, e, name in zip(grads, exact_grads, names, strict=True):
            assert_close(g, e, **tol.grad, msg=lambda m, name=name: f"{name}: {m}")
        return out, grads
    torch_out, torch_grads = _value_and_grads(ref_fn, tensors, upstream)
    _assert_within_twice_pytorch("features", out, torch_out, exact)
    for g, tg, e, name in zip(grads, torch_grads, exact_grads, names, strict=True):
        _assert_within_twice_pytorch(name, g, tg, e)
    return out, grads


def _names(num_levels, prefix=("pts", "rotations")):
    return list(prefix) + [f"planes[{i}]" for i in range(num_levels)]


# --- 1 + 3: value and gradients against the reference -------------------------------------------


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("config,device", CONFIG_DEVICES)
def test_forward_matches_reference(config, device, dtype, layout, rng, tolerances):
    x = _inputs(config, rng, device, dtype, layout=layout)
    out = fieldfuse.kplanes_tilted(x.pts, x.rotations, x.planes, config.gates)
    exact = ref.kplanes_tilted(
        x.pts.double(), x.rotations.double(), [p.double() for p in x.planes], config.gates
    )
    assert out.shape == (config.batch, config.num_features)
    assert out.dtype == dtype and out.device == x.pts.device and out.is_contiguous()
    if dtype == F64:
        assert_close(out, exact, **tolerances(F64).forward)
    else:
        pytorch32 = ref.kplanes_tilted(x.pts, x.rotations, x.planes, config.gates)
        _assert_within_twice_pytorch("features", out, pytorch32, exact)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("config,device", CONFIG_DEVICES)
def test_gradients_match_reference(config, device, dtype, rng, tolerances):
    # Large configurations in float32 are the spec's gradient parity check (item 3): pts,
    # rotations and every level within twice PyTorch-fp32's own error.
    x = _inputs(config, rng, device, dtype, kink_free=dtype == F32)
    g = _randn((config.batch, config.num_features), rng, device, dtype)
    _check_against_reference(
        tilted_fn(gates=config.gates), tilted_fn(ref, config.gates), x.tensors(), g, tolerances,
        names=_names(len(x.planes)),
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_axis_aligned_matches_reference(device, dtype, rng, tolerances):
    config = Config("axis", 57, 1, ((3, 5, 7), (4, 9, 6)))
    x = _inputs(config, rng, device, dtype)
    if dtype == F32:
        x.pts = _points(57, rng, F32, levels=config.levels, axis_aligned=True).to(device)
    g = _randn((57, 7), rng, device, dtype)
    tensors = [x.pts, *(p[:3] for p in x.planes)]
    out, _ = _check_against_reference(
        axis_fn(), axis_fn(ref), tensors, g, tolerances, names=_names(2, ("pts",))
    )
    # Not interchangeable with the tilted variant under an identity rotation (plane 1 is (x, z)).
    eye = torch.eye(3, device=device, dtype=dtype)[None]
    tilted = fieldfuse.kplanes_tilted(x.pts, eye, [p[:3] for p in x.planes])
    assert not torch.allclose(out, tilted)


@pytest.mark.parametrize("h", [2.0, 1e-4])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_taps_match_reference(h, device, dtype, rng, tolerances):
    config = MULTISCALE
    x = _inputs(config, rng, device, dtype, kink_free=dtype == F32, h=h)
    g = _randn((4, config.batch, config.num_features), rng, device, dtype)
    _check_against_reference(
        taps_fn(h, gates=config.gates), taps_fn(h, ref, config.gates), x.tensors(), g,
        tolerances, names=_names(3),
    )


@pytest.mark.parametrize("h", [2.0, 1e-4])
@pytest.mark.parametrize("device", DEVICES)
def test_taps_crossing_the_border(h, device, rng, tolerances):
    # Base points at 0.98 on some coordinates: with h = 2 the taps leave the volume (border reads,
    # zero coordinate gradient); with h = 1e-4 they stay just inside.
    config = Config("border-taps", 24, 2, ((3, 6, 7), (2, 9, 5)), (0.5, 1.0))
    x = _inputs(config, rng, device, F64, lo=-0.9, hi=0.9)
    pts = x.pts.clone()
    pts[0::3, 0] = 0.98
    pts[1::3, :] = 0.98
    pts[2::3, 2] = 0.98
    x.pts = pts
    eye = torch.eye(3, device=device, dtype=F64)
    rotations = torch.cat([eye[None], x.rotations[1:]])  # identity: the taps cross ±1 exactly
    g = _randn((4, config.batch, config.num_features), rng, device, F64)
    tensors = [x.pts, rotations, *x.planes]
    out, _ = _check_against_reference(
        taps_fn(h, gates=config.gates), taps_fn(h, ref, config.gates), tensors, g, tolerances,
        names=_names(2),
    )
    if h == 2.0:
        # Tap 1 (+h along x) of the identity tilt reads at x ≥ 1.1: the border x = 1.
        at_border = x.pts.clone()
        at_border[:, 0] = 1.0
        expected = fieldfuse.kplanes_tilted(at_border, rotations, x.planes, config.gates)
        tilt0 = [offset + c for offset, (channels, _, _) in zip((0, 6), config.levels)
                 for c in range(channels)]  # column offset_l + 0·C_l + c, offsets T·C = 0, 6
        assert torch.equal(out[1][:, tilt0], expected[:, tilt0])


# --- points exactly on the border -------------------------------------------------------------


def _border_points(rng, dtype, device):
    """All 8 corners, every mix of exact ±1 with interior values, and points outside."""
    corners = torch.tensor(
        [[sx, sy, sz] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0) for sz in (-1.0, 1.0)], dtype=F64
    )
    mixed = _uniform((24, 3), -0.9, 0.9, rng)
    for row in range(24):
        axes = [a for a in range(3) if (row >> a) & 1] or [row % 3]
        for a in axes:
            mixed[row, a] = 1.0 if (row // 8) % 2 else -1.0
    outside = _uniform((8, 3), -0.9, 0.9, rng)
    outside[:4, 0] = 1.05
    outside[4:, 1] = -1.2
    return torch.cat([corners, mixed, outside]).to(device, dtype)


def _signed_permutations(dtype, device):
    """Rotations whose products with ±1 are exact: the rotated point lands exactly on ±1."""
    eye = torch.eye(3, dtype=F64)
    perm = eye[[2, 0, 1]]
    flip = torch.diag(torch.tensor([1.0, -1.0, 1.0], dtype=F64))
    return torch.stack([eye, perm, flip @ eye[[1, 0, 2]]]).to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_border_points_gradients_match_reference(device, rng, tolerances):
    # Finite differences are ill-defined on ±1; compare the analytic gradients with the oracle's
    # autograd (PyTorch's clip semantics: zero coordinate gradient on and outside the border).
    pts = _border_points(rng, F64, device)
    levels = ((3, 5, 7), (2, 4, 4))
    planes = [_uniform((9, c, h, w), 0.1, 0.5, rng).to(device) for c, h, w in levels]
    rotations = _signed_permutations(F64, device)
    g = _randn((pts.shape[0], 15), rng, device)
    _check_against_reference(
        tilted_fn(gates=[0.5, 2.0]), tilted_fn(ref, [0.5, 2.0]), [pts, rotations, *planes], g,
        tolerances, names=_names(2),
    )
    # A general rotation too (rotated coordinates are no longer on ±1, the points still are).
    general = _uniform((3, 3, 3), -1.0, 1.0, rng).to(device)
    _check_against_reference(
        tilted_fn(), tilted_fn(ref), [pts, general, *planes], g, tolerances, names=_names(2)
    )
    # Axis-aligned: a coordinate on or beyond ±1 has an exactly zero gradient.
    axis_planes = [p[:3] for p in planes]
    _, (grad_pts, *_) = _check_against_reference(
        axis_fn(), axis_fn(ref), [pts, *axis_planes], g[:, :5], tolerances,
        names=_names(2, ("pts",)),
    )
    on_or_outside = pts.abs() >= 1
    assert on_or_outside.any()
    assert torch.all(grad_pts[on_or_outside] == 0)
    assert torch.all(grad_pts[~on_or_outside] != 0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_border_points_forward(device, dtype, rng, tolerances):
    pts = _border_points(rng, dtype, device)
    planes = [_uniform((9, 4, 6, 5), 0.1, 0.5, rng).to(device, dtype)]
    rotations = _signed_permutations(dtype, device)
    out = fieldfuse.kplanes_tilted(pts, rotations, planes)
    exact = ref.kplanes_tilted(pts.double(), rotations.double(), [planes[0].double()])
    assert_close(out.double(), exact, **tolerances(dtype).forward)
    # Corners read corner cells exactly: the product of three corner values.
    assert torch.isfinite(out).all()


# --- 2: gradcheck -------------------------------------------------------------------------------

GRADCHECK_CONFIG = Config("gradcheck", 5, 2, ((2, 3, 4), (1, 4, 2)), (0.5, 1.5))


def _gradcheck_inputs(rng, device, h=None, axis_aligned=False):
    config = GRADCHECK_CONFIG
    rotations = _uniform((2, 3, 3), -1.0, 1.0, rng)
    planes = [_uniform((6, c, hh, w), 0.1, 0.5, rng).to(device) for c, hh, w in config.levels]
    if axis_aligned:
        planes = [p[:3].clone() for p in planes]
    pts = _points(
        config.batch, rng, F64, lo=-0.9, hi=0.9, rotations=rotations, levels=config.levels, h=h,
        axis_aligned=axis_aligned,
    )
    return pts.to(device), rotations.to(device), planes


def _gradcheck(fn, tensors):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    assert torch.autograd.gradcheck(fn, leaves)


@pytest.mark.parametrize("gates", [None, (0.5, 1.5)], ids=["no-gates", "gates"])
@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_tilted(device, gates, rng):
    pts, rotations, planes = _gradcheck_inputs(rng, device)
    _gradcheck(tilted_fn(gates=gates), [pts, rotations, *planes])


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_axis_aligned(device, rng):
    pts, _, planes = _gradcheck_inputs(rng, device, axis_aligned=True)
    _gradcheck(axis_fn(), [pts, *planes])


@pytest.mark.parametrize("h", [0.37, 1e-4])
@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_taps(device, h, rng):
    pts, rotations, planes = _gradcheck_inputs(rng, device, h=h)
    _gradcheck(taps_fn(h, gates=(0.5, 1.5)), [pts, rotations, *planes])


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_with_taps(device, rng):
    h = 0.37
    pts, rotations, planes = _gradcheck_inputs(rng, device)
    tap_pts, _, _ = _gradcheck_inputs(rng, device, h=h)
    # Same rotations for both sets of points: redraw tap points kink-free under them.
    tap_pts = _points(
        4, rng, F64, lo=-0.9, hi=0.9, rotations=rotations.cpu(),
        levels=GRADCHECK_CONFIG.levels, h=h,
    ).to(device)

    def fn(p, q, rot, *levels):
        return fieldfuse.kplanes_tilted_with_taps(p, q, rot, list(levels), h, (0.5, 1.5))

    _gradcheck(fn, [pts, tap_pts, rotations, *planes])


@pytest.mark.parametrize("norm", ["mean", "percell"])
@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_plane_tv(device, norm, rng):
    planes = [
        _uniform(shape, -1.0, 1.0, rng).to(device)
        for shape in [(6, 2, 3, 4), (6, 1, 5, 2), (6, 2, 1, 3)]
    ]
    _gradcheck(lambda *levels: fieldfuse.plane_tv(list(levels), 2, norm), planes)
    _gradcheck(lambda p: fieldfuse.plane_tv(p, 1, norm), [planes[0][:3]])


@pytest.mark.parametrize("norm", ["mean", "percell"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_plane_tv_matches_reference(device, dtype, norm, rng, tolerances):
    shapes = [(9, 3, 5, 7), (9, 5, 11, 13), (9, 7, 19, 23), (9, 2, 1, 6)]
    planes = [_uniform(s, 0.1, 0.5, rng).to(device, dtype) for s in shapes]
    planes[1] = planes[1].contiguous(memory_format=torch.channels_last)
    g = _randn((), rng, device, dtype)
    out, grads = _value_and_grads(lambda *p: fieldfuse.plane_tv(list(p), 3, norm), planes, g)
    exact, exact_grads = _value_and_grads(
        lambda *p: ref.plane_tv(list(p), 3, norm), [p.double() for p in planes], g.double()
    )
    assert out.shape == () and out.dtype == dtype
    assert grads[1].is_contiguous(memory_format=torch.channels_last)
    tol = tolerances(dtype)
    assert_close(out.double(), exact, **tol.forward)
    for grad, expected in zip(grads, exact_grads, strict=True):
        assert grad.dtype == dtype
        assert_close(grad.double(), expected, **tol.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_plane_tv_empty_and_size_one_levels_contribute_zero(device, rng, tolerances):
    # An axis without differences (size 0 or 1) contributes 0, as in the reference.
    for norm in ("mean", "percell"):
        levels = [torch.rand(s, generator=rng, dtype=F64).to(device)
                  for s in [(6, 0, 4, 5), (6, 2, 0, 5), (6, 2, 1, 1), (6, 2, 4, 3)]]
        out, grads = _value_and_grads(lambda *p: fieldfuse.plane_tv(list(p), 2, norm), levels,
                                      torch.ones((), dtype=F64, device=device))
        exact, exact_grads = _value_and_grads(lambda *p: ref.plane_tv(list(p), 2, norm), levels,
                                              torch.ones((), dtype=F64, device=device))
        assert_close(out, exact, **tolerances(F64).forward)
        for grad, expected in zip(grads, exact_grads, strict=True):
            assert_close(grad, expected, **tolerances(F64).grad)
        assert torch.equal(grads[2], torch.zeros_like(levels[2]))


# --- 4: layouts ---------------------------------------------------------------------------------


def _all_grads(fn, tensors, upstream):
    out, grads = _value_and_grads(fn, tensors, upstream)
    return [out, *grads]


def _assert_all_equal(first, second, what):
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        assert torch.equal(a, b), f"{what}: output {i} differs"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_channels_last_matches_nchw(device, dtype, rng, tolerances):
    config = Config("layouts", 300, 2, ((4, 9, 11), (5, 6, 7), (8, 16, 16)), (1.0, 0.5, 2.0))
    x = _inputs(config, rng, device, dtype)
    g = _randn((config.batch, config.num_features), rng, device, dtype)
    cl = [p.contiguous(memory_format=torch.channels_last) for p in x.planes]
    mixed = [cl[0], x.planes[1], cl[2]]
    nchw_result = _all_grads(tilted_fn(gates=config.gates), x.tensors(), g)
    for planes in (cl, mixed):
        result = _all_grads(tilted_fn(gates=config.gates), [x.pts, x.rotations, *planes], g)
        for p, grad in zip(planes, result[3:], strict=True):
            same_layout = p.is_contiguous(memory_format=torch.channels_last)
            assert grad.is_contiguous(memory_format=torch.channels_last) == same_layout
            assert grad.is_contiguous() == p.is_contiguous()
        if device == "cpu":
            _assert_all_equal(nchw_result, result, "channels-last vs NCHW")
        else:
            # CUDA: the atomic scatter's order depends on the layout.
            tol = tolerances(dtype).scaled_atol(100)
            for a, b in zip(nchw_result, result, strict=True):
                assert_close(a, b, **tol.grad)
    if device == "cuda":
        det = tilted_fn(gates=config.gates, deterministic=True)
        first = _all_grads(det, [x.pts, x.rotations, *cl], g)
        second = _all_grads(det, [x.pts, x.rotations, *cl], g)
        _assert_all_equal(first, second, "deterministic channels-last twice")


def _strided_views(x: Inputs):
    """(name, pts view, rotations view, planes views) with the values of `x`, read in place."""
    pts, rot, planes = x.pts, x.rotations, x.planes
    wide = torch.zeros(pts.shape[0], 7, dtype=pts.dtype, device=pts.device)
    wide[:, 1::2] = pts
    transposed_pts = pts.t().contiguous().t()
    padded_rot = torch.zeros(2 * rot.shape[0], 3, 6, dtype=rot.dtype, device=rot.device)
    padded_rot[::2, :, ::2] = rot
    transposed_rot = rot.transpose(1, 2).contiguous().transpose(1, 2)
    sliced_planes = []
    for p in planes:
        big = torch.zeros(p.shape[0], p.shape[1] + 1, p.shape[2], 2 * p.shape[3],
                          dtype=p.dtype, device=p.device)
        big[:, 1:, :, ::2] = p
        sliced_planes.append(big[:, 1:, :, ::2])
    return [
        ("transposed", transposed_pts, transposed_rot, planes),
        ("strided-slice", wide[:, 1::2], padded_rot[::2, :, ::2], planes),
        ("sliced-planes", pts, rot, sliced_planes),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs_match_contiguous(device, rng):
    config = Config("views", 200, 2, ((3, 7, 9), (4, 5, 6)), (1.0, 0.5))
    x = _inputs(config, rng, device, F32)
    g = _randn((config.batch, config.num_features), rng, device, F32)
    # CUDA: the deterministic backward, so the plane gradients can be compared bit for bit.
    fn = tilted_fn(gates=config.gates, deterministic=device == "cuda")
    expected = _all_grads(fn, x.tensors(), g)
    for name, pts, rot, planes in _strided_views(x):
        assert not (pts.is_contiguous() and rot.is_contiguous()) or name == "sliced-planes"
        assert torch.equal(pts, x.pts) and torch.equal(rot, x.rotations)
        result = _all_grads(fn, [pts, rot, *planes], g)
        _assert_all_equal(expected, result, name)
    # Taps read their points through strides too.
    name, pts, rot, _ = _strided_views(x)[1]
    taps = taps_fn(0.1, gates=config.gates, deterministic=device == "cuda")
    g4 = _randn((4, config.batch, config.num_features), rng, device, F32)
    expected = _all_grads(taps, x.tensors(), g4)
    _assert_all_equal(expected, _all_grads(taps, [pts, rot, *x.planes], g4), "taps " + name)


# --- 5: determinism -----------------------------------------------------------------------------


def _collision_case(batch, rng, device, dtype=F32):
    """Many points per cell: B points on 16×16 planes, one of the spec's three-level fields."""
    config = Config("collisions", batch, 2, ((8, 16, 16),))
    x = _inputs(config, rng, device, dtype)
    g = _randn((batch, config.num_features), rng, device, dtype)
    return x, g


@contextlib.contextmanager
def _deterministic_algorithms():
    previous = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous, warn_only=previous_warn)


def test_cpu_backward_is_deterministic(rng):
    x, g = _collision_case(20000, rng, "cpu")
    first = _all_grads(tilted_fn(), x.tensors(), g)
    for fn in (tilted_fn(), tilted_fn(deterministic=True)):
        _assert_all_equal(first, _all_grads(fn, x.tensors(), g), "CPU repeat")
    with _deterministic_algorithms():
        _assert_all_equal(first, _all_grads(tilted_fn(), x.tensors(), g), "CPU deterministic algos")


@cuda_only
def test_cuda_deterministic_backward_repeats_bits(rng, tolerances):
    x, g = _collision_case(200_000, rng, "cuda")
    det = tilted_fn(deterministic=True)
    first = _all_grads(det, x.tensors(), g)
    for _ in range(2):
        _assert_all_equal(first, _all_grads(det, x.tensors(), g), "CUDA deterministic repeat")
    # The default (atomic) path agrees to float rounding.
    default = _all_grads(tilted_fn(), x.tensors(), g)
    assert torch.equal(default[0], first[0])  # the forward has no reduction across points
    for a, b in zip(default[1:], first[1:], strict=True):
        scale = b.abs().max().item()
        assert_close(a, b, rtol=1e-4, atol=1e-5 * scale)
    # torch.use_deterministic_algorithms(True) selects the same path.
    with _deterministic_algorithms():
        _assert_all_equal(first, _all_grads(tilted_fn(), x.tensors(), g), "deterministic algos")
    # Channels-last planes, deterministic, repeat too.
    cl = [p.contiguous(memory_format=torch.channels_last) for p in x.planes]
    cl_first = _all_grads(det, [x.pts, x.rotations, *cl], g)
    for _ in range(2):
        _assert_all_equal(cl_first, _all_grads(det, [x.pts, x.rotations, *cl], g), "CL repeat")
    # Taps in the deterministic path.
    taps = taps_fn(0.125, deterministic=True)
    g4 = _randn((4, 50_000, g.shape[1]), rng, "cuda")
    tap_tensors = [x.pts[:50_000], x.rotations, *x.planes]
    tap_first = _all_grads(taps, tap_tensors, g4)
    _assert_all_equal(tap_first, _all_grads(taps, tap_tensors, g4), "taps repeat")


# Shapes that move the deterministic gather's lane plan (Note [deterministic gather]): runs of
# ~0.1 to ~800 entries per cell (slots per cell), channel counts below, at and past one 4-channel
# chunk and not a multiple of 4 (scalar share rows), size-1 axes (coinciding corners), several levels.
DETERMINISTIC_CONFIGS = [
    Config("short-runs", 300, 2, ((8, 40, 40),)),
    Config("long-runs", 20000, 2, ((4, 5, 5),)),
    Config("odd-channels", 3000, 3, ((3, 9, 7), (13, 4, 6))),
    Config("size-one", 500, 2, ((2, 1, 5), (5, 6, 1), (3, 1, 1))),
    Config("wide", 1000, 2, ((48, 10, 12),), (0.5,)),
]


def _assert_near_float64(ours_fn, ref_fn, tensors, upstream, tolerances, ulps):
    """Every output and gradient within the float64 tolerances (float64 inputs), or within `ulps`
    float32 ulps of each tensor's largest exact value (float32 inputs)."""
    out, grads = _value_and_grads(ours_fn, tensors, upstream)
    exact, exact_grads = _value_and_grads(
        ref_fn, [t.double() for t in tensors], upstream.double()
    )
    for name, ours, e in zip(["features", *_names(len(tensors) - 2)], [out, *grads],
                             [exact, *exact_grads], strict=True):
        if ours.dtype == F64:
            tol = tolerances(F64).grad
            assert_close(ours, e, **tol, msg=lambda m, name=name: f"{name}: {m}")
        else:
            bound = ulps * EPS32 * e.abs().max().item()
            assert _max_error(ours, e) <= bound, (name, _max_error(ours, e), bound)


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("config", DETERMINISTIC_CONFIGS, ids=str)
def test_cuda_deterministic_gradients_match_reference(config, dtype, rng, tolerances):
    # float32: the runs sum hundreds of shares per cell in order, so allow 64 ulps of the largest
    # value (PyTorch's own float32 backward is not a usable yardstick at these collision rates).
    x = _inputs(config, rng, "cuda", dtype, kink_free=dtype == F32)
    g = _randn((config.batch, config.num_features), rng, "cuda", dtype)
    _assert_near_float64(
        tilted_fn(gates=config.gates, deterministic=True), tilted_fn(ref, config.gates),
        x.tensors(), g, tolerances, ulps=64,
    )
    h = 0.05
    g4 = _randn((4, config.batch, config.num_features), rng, "cuda", dtype)
    _assert_near_float64(
        taps_fn(h, gates=config.gates, deterministic=True), taps_fn(h, ref, config.gates),
        x.tensors(), g4, tolerances, ulps=64,
    )


# --- 6: taps ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_tap_zero_is_kplanes_tilted(device, dtype, rng, tolerances):
    x = _inputs(MULTISCALE, rng, device, dtype)
    for h in (2.0, 1e-4, 0.3):
        taps = fieldfuse.kplanes_tilted_taps(x.pts, x.rotations, x.planes, h, MULTISCALE.gates)
        assert taps.shape == (4, MULTISCALE.batch, MULTISCALE.num_features) and taps.dtype == dtype
        features = fieldfuse.kplanes_tilted(x.pts, x.rotations, x.planes, MULTISCALE.gates)
        assert torch.equal(taps[0], features)
    # Taps 1..3 are the features at p + h·e_i, up to the rounding of R(p + h e_i) = Rp + hR[:, i].
    h = 0.3
    coords = ref.tv_tap_coords(x.pts, h)
    for i in range(1, 4):
        shifted = fieldfuse.kplanes_tilted(coords[i], x.rotations, x.planes, MULTISCALE.gates)
        assert_close(taps[i], shifted, rtol=1e-4 if dtype == F32 else 1e-9, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_with_taps_is_bit_identical_to_two_calls(device, dtype, rng):
    x = _inputs(MULTISCALE, rng, device, dtype)
    tap_pts = _points(23, rng, dtype).to(device)
    for h in (2.0, 1e-4):
        features, taps = fieldfuse.kplanes_tilted_with_taps(
            x.pts, tap_pts, x.rotations, x.planes, h, MULTISCALE.gates
        )
        assert features.shape == (MULTISCALE.batch, MULTISCALE.num_features)
        assert taps.shape == (4, 23, MULTISCALE.num_features)
        assert torch.equal(
            features, fieldfuse.kplanes_tilted(x.pts, x.rotations, x.planes, MULTISCALE.gates)
        )
        assert torch.equal(
            taps, fieldfuse.kplanes_tilted_taps(tap_pts, x.rotations, x.planes, h, MULTISCALE.gates)
        )


def _decoder(num_features, rng, device, dtype):
    decoder = torch.nn.Linear(num_features, 1).to(device, dtype)
    with torch.no_grad():
        decoder.weight.copy_(_randn(decoder.weight.shape, rng, device, dtype))
        decoder.bias.copy_(_randn(decoder.bias.shape, rng, device, dtype))
    return decoder


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_fused_taps_training_step_matches_two_calls(device, dtype, rng):
    # The spec's volume-TV training path: h = one finest-plane cell, weight w, decoder Linear(F, 1).
    config = MULTISCALE
    x = _inputs(config, rng, device, dtype)
    tap_pts = _points(29, rng, dtype).to(device)
    h, w, a = 2.0 / 19, 0.3, 1.7
    decoder = _decoder(config.num_features, rng, device, dtype)

    def loss_of(features, taps):
        density = decoder(features).squeeze(-1)
        tap_density = decoder(taps).squeeze(-1)
        return density.sum() * a + ref.volume_tv_from_taps(tap_density, h, w)

    def fused(pts, q, rot, *planes):
        return loss_of(*fieldfuse.kplanes_tilted_with_taps(pts, q, rot, list(planes), h,
                                                           config.gates))

    def separate(pts, q, rot, *planes):
        features = fieldfuse.kplanes_tilted(pts, rot, list(planes), config.gates)
        taps = fieldfuse.kplanes_tilted_taps(q, rot, list(planes), h, config.gates)
        return loss_of(features, taps)

    tensors = [x.pts, tap_pts, x.rotations, *x.planes]
    params = list(decoder.parameters())
    results = []
    for fn in (fused, separate):
        leaves = [t.detach().requires_grad_() for t in tensors]
        loss = fn(*leaves)
        grads = torch.autograd.grad(loss, leaves + params)
        results.append((loss.detach(), grads))
    (loss_fused, grads_fused), (loss_separate, grads_separate) = results
    assert torch.equal(loss_fused, loss_separate)  # same features, same arithmetic after them
    rtol = 1e-5 if dtype == F32 else 1e-12
    for i, (a_, b_) in enumerate(zip(grads_fused, grads_separate, strict=True)):
        scale = b_.abs().max().item()
        assert_close(a_, b_, rtol=rtol, atol=rtol * scale, msg=lambda m, i=i: f"grad {i}: {m}")


# --- 7: edge cases ------------------------------------------------------------------------------


def _empty_case(rng, device, dtype):
    x = _inputs(Config("empty", 0, 2, ((3, 4, 5), (2, 3, 3))), rng, device, dtype)
    x.planes[0] = x.planes[0].contiguous(memory_format=torch.channels_last)
    return x, _points(6, rng, dtype).to(device)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch(device, dtype, rng):
    # An empty batch is valid: [0, F] features, zero gradients to planes and rotations.
    x, _ = _empty_case(rng, device, dtype)
    upstream = torch.zeros(0, 10, device=device, dtype=dtype)
    out, grads = _value_and_grads(tilted_fn(), x.tensors(), upstream)
    assert out.shape == (0, 10) and out.dtype == dtype
    assert grads[0].shape == (0, 3)
    for grad, t in zip(grads[1:], x.tensors()[1:], strict=True):
        assert grad.shape == t.shape and torch.equal(grad, torch.zeros_like(t))
    assert grads[2].is_contiguous(memory_format=torch.channels_last)
    # .sum().backward() on an empty batch works too.
    leaves = [t.detach().requires_grad_() for t in x.tensors()]
    fieldfuse.kplanes_tilted(leaves[0], leaves[1], leaves[2:]).sum().backward()
    assert torch.equal(leaves[2].grad, torch.zeros_like(leaves[2]))
    # Axis-aligned.
    out, grads = _value_and_grads(axis_fn(), [x.pts, *(p[:3] for p in x.planes)], upstream[:, :5])
    assert out.shape == (0, 5)
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads[1:])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch_taps(device, dtype, rng):
    x, _ = _empty_case(rng, device, dtype)
    out, grads = _value_and_grads(
        taps_fn(0.1), x.tensors(), torch.zeros(4, 0, 10, device=device, dtype=dtype)
    )
    assert out.shape == (4, 0, 10) and out.dtype == dtype
    assert grads[0].shape == (0, 3)
    for grad, t in zip(grads[1:], x.tensors()[1:], strict=True):
        assert torch.equal(grad, torch.zeros_like(t))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_with_taps_empty_points(device, dtype, rng):
    x, some = _empty_case(rng, device, dtype)
    features, taps = fieldfuse.kplanes_tilted_with_taps(x.pts, some, x.rotations, x.planes, 0.1)
    assert features.shape == (0, 10) and taps.shape == (4, 6, 10)
    assert torch.equal(taps, fieldfuse.kplanes_tilted_taps(some, x.rotations, x.planes, 0.1))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_with_taps_empty_tap_points(device, dtype, rng):
    x, some = _empty_case(rng, device, dtype)
    features, taps = fieldfuse.kplanes_tilted_with_taps(some, x.pts, x.rotations, x.planes, 0.1)
    assert features.shape == (6, 10) and taps.shape == (4, 0, 10)
    assert torch.equal(features, fieldfuse.kplanes_tilted(some, x.rotations, x.planes))
    leaves = [t.detach().requires_grad_() for t in (some, x.pts, x.rotations, *x.planes)]
    f, t = fieldfuse.kplanes_tilted_with_taps(leaves[0], leaves[1], leaves[2], leaves[3:], 0.1)
    grads = torch.autograd.grad(f.sum() + t.sum(), leaves)
    assert grads[1].shape == (0, 3)
    expected = torch.autograd.grad(
        fieldfuse.kplanes_tilted(leaves[0], leaves[2], leaves[3:]).sum(), [leaves[0], *leaves[2:]]
    )
    _assert_all_equal([grads[0], *grads[2:]], list(expected), "empty taps")


SIZE_ONE_LEVELS = [((2, 1, 5),), ((3, 6, 1),), ((2, 1, 1),), ((2, 1, 4), (1, 5, 1), (3, 1, 1))]


@pytest.mark.parametrize("levels", SIZE_ONE_LEVELS, ids=str)
@pytest.mark.parametrize("device", DEVICES)
def test_size_one_plane_axes(device, levels, rng, tolerances):
    config = Config("size1", 40, 2, levels)
    for layout in ("nchw", "channels_last"):
        x = _inputs(config, rng, device, F64, layout=layout)
        g = _randn((config.batch, config.num_features), rng, device)
        _check_against_reference(
            tilted_fn(), tilted_fn(ref), x.tensors(), g, tolerances, names=_names(len(levels))
        )
        _check_against_reference(
            axis_fn(), axis_fn(ref), [x.pts, *(p[:3] for p in x.planes)], g[:, : g.shape[1] // 2],
            tolerances, names=_names(len(levels), ("pts",)),
        )


@pytest.mark.parametrize("channels", [1, 3, 4, 5, 6, 8, 12, 48])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_channel_counts(device, dtype, layout, channels, rng, tolerances):
    # CUDA vectorises dense channels-last planes over channels: multiples of 4 and remainders.
    config = Config("channels", 64, 2, ((channels, 7, 9), (channels + 1, 5, 4)))
    x = _inputs(config, rng, device, dtype, layout=layout, kink_free=dtype == F32)
    g = _randn((config.batch, config.num_features), rng, device, dtype)
    _check_against_reference(
        tilted_fn(), tilted_fn(ref), x.tensors(), g, tolerances, names=_names(2)
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_nan_point_gives_nan_row_only(device, dtype, rng):
    config = Config("nan", 12, 2, ((3, 5, 6), (4, 7, 7)))
    x = _inputs(config, rng, device, dtype)
    g = _randn((config.batch, config.num_features), rng, device, dtype)
    clean = _all_grads(tilted_fn(), x.tensors(), g)
    for column in range(3):
        pts = x.pts.clone()
        pts[4, column] = math.nan
        pts[9] = math.nan
        out, grad_pts, *_ = _all_grads(tilted_fn(), [pts, x.rotations, *x.planes], g)
        nan_rows = torch.tensor([4, 9], device=device)
        assert out[nan_rows].isnan().all()
        others = torch.ones(config.batch, dtype=torch.bool, device=device)
        others[nan_rows] = False
        assert torch.isfinite(out[others]).all()
        assert torch.equal(out[others], clean[0][others])
        # A point's gradient depends on that point only.
        assert torch.equal(grad_pts[others], clean[1][others])
    # Axis-aligned: a NaN in x poisons planes (x, y) and (x, z), hence the product.
    pts = x.pts.clone()
    pts[3, 0] = math.nan
    out = fieldfuse.kplanes(pts, [p[:3] for p in x.planes])
    assert out[3].isnan().all() and torch.isfinite(out[torch.arange(12, device=device) != 3]).all()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_features_dtype_of_pts_is_the_default(device, dtype, rng):
    x = _inputs(MULTISCALE, rng, device, dtype)
    default = fieldfuse.kplanes_tilted(x.pts, x.rotations, x.planes, MULTISCALE.gates)
    same = fieldfuse.kplanes_tilted(
        x.pts, x.rotations, x.planes, MULTISCALE.gates, features_dtype=dtype
    )
    assert same.dtype == dtype and torch.equal(default, same)
    taps = fieldfuse.kplanes_tilted_taps(x.pts, x.rotations, x.planes, 0.1, features_dtype=dtype)
    assert taps.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cpu_16bit_planes_not_implemented(dtype, rng):
    x = _inputs(SMALL_CONFIGS[0], rng, "cpu", F32)
    with pytest.raises(NotImplementedError, match=r"planes\[0\]"):
        fieldfuse.kplanes_tilted(x.pts, x.rotations, [x.planes[0].to(dtype)])
    with pytest.raises(NotImplementedError, match=r"planes\[0\]"):
        fieldfuse.plane_tv([x.planes[0].to(dtype)], 1)


@cuda_only
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("channels", [8, 5])
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_16bit_planes(half, channels, layout, rng, tolerances):
    config = Config("half", 4096, 4, ((channels, 200, 200), (3, 17, 9)), (1.0, 0.5))
    x = _inputs(config, rng, "cuda", F32, layout=layout)
    planes16 = [p.to(half) for p in x.planes]
    upcast = [p.float() for p in planes16]  # exact: what the kernel computes with
    g = _randn((config.batch, config.num_features), rng, "cuda", F32)
    fn = tilted_fn(gates=config.gates, deterministic=True)
    out, *grads = _all_grads(fn, [x.pts, x.rotations, *planes16], g)
    out32, *grads32 = _all_grads(fn, [x.pts, x.rotations, *upcast], g)
    assert out.dtype == F32
    assert_close(out, out32, **tolerances(F32).forward)
    for name, grad, grad32 in zip(_names(2), grads, grads32, strict=True):
        scale = grad32.abs().max().item()
        if name.startswith("planes"):
            # Accumulated in float32, rounded once to the planes' dtype.
            assert grad.dtype == half
            assert grad.is_contiguous(memory_format=torch.channels_last) == (layout != "nchw")
            rtol = tolerances(half).grad["rtol"]
            assert_close(grad.float(), grad32, rtol=rtol, atol=1e-5 * scale, msg=name)
        else:
            assert grad.dtype == F32
            assert_close(grad, grad32, rtol=1e-4, atol=1e-5 * scale, msg=name)
    # 16-bit features on request; their gradient comes back through the 16-bit upstream.
    leaves = [t.detach().requires_grad_() for t in [x.pts, x.rotations, *planes16]]
    features = fieldfuse.kplanes_tilted(leaves[0], leaves[1], leaves[2:], config.gates,
                                        features_dtype=half)
    assert features.dtype == half
    assert_close(features.float(), out32, rtol=tolerances(half).grad["rtol"], atol=1e-3)
    grads16 = torch.autograd.grad(features, leaves, g.to(half))
    assert [t.dtype for t in grads16] == [F32, F32, half, half]
    for grad, grad32 in zip(grads16, grads32, strict=True):
        scale = grad32.abs().max().item()
        assert_close(grad.float(), grad32, rtol=2e-2, atol=2e-2 * scale)
    taps = fieldfuse.kplanes_tilted_taps(x.pts, x.rotations, planes16, 0.01, config.gates,
                                         features_dtype=half)
    assert taps.dtype == half and torch.equal(taps[0], features.detach())
    # plane_tv of 16-bit planes is float32.
    tv = fieldfuse.plane_tv(planes16, 4)
    assert tv.dtype == F32
    assert_close(tv, fieldfuse.plane_tv(upcast, 4), rtol=1e-5, atol=0)


# --- 8: CPU / CUDA parity -----------------------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cpu_cuda_parity(dtype, rng):
    config = Config("parity", 3000, 3, ((5, 40, 33), (8, 17, 23)), (0.75, 1.0))
    x = _inputs(config, rng, "cpu", dtype, kink_free=dtype == F32)
    g = _randn((config.batch, config.num_features), rng, "cpu", dtype)
    tap_pts = _points(500, rng, dtype, rotations=x.rotations, levels=config.levels, h=0.05)
    g4 = _randn((4, 500, config.num_features), rng, "cpu", dtype)

    def fn(pts, q, rot, *planes):
        f, t = fieldfuse.kplanes_tilted_with_taps(pts, q, rot, list(planes), 0.05, config.gates)
        return torch.cat([f.flatten(), t.flatten()])

    upstream = torch.cat([g.flatten(), g4.flatten()])
    tensors = [x.pts, tap_pts, x.rotations, *x.planes]
    cpu = _all_grads(fn, tensors, upstream)
    for layout in ("nchw", "channels_last"):
        cuda_tensors = [t.cuda() for t in tensors]
        cuda_tensors[3:] = [_layout(p, layout) for p in cuda_tensors[3:]]
        cuda = _all_grads(fn, cuda_tensors, upstream.cuda())
        rtol = 1e-4 if dtype == F32 else 1e-12
        for i, (a, b) in enumerate(zip(cuda, cpu, strict=True)):
            scale = b.abs().max().item()
            assert_close(a.cpu(), b, rtol=rtol, atol=rtol * scale,
                         msg=lambda m, i=i, layout=layout: f"{layout} output {i}: {m}")
    planes_cuda = [p.cuda() for p in x.planes]
    for norm in ("mean", "percell"):
        tv_cpu = _all_grads(lambda *p: fieldfuse.plane_tv(list(p), 3, norm), x.planes,
                            torch.ones((), dtype=dtype))
        tv_cuda = _all_grads(lambda *p: fieldfuse.plane_tv(list(p), 3, norm), planes_cuda,
                             torch.ones((), dtype=dtype, device="cuda"))
        rtol = 1e-5 if dtype == F32 else 1e-12
        for a, b in zip(tv_cuda, tv_cpu, strict=True):
            assert_close(a.cpu(), b, rtol=rtol, atol=rtol * b.abs().max().item())


# --- 9: torch.compile and torch.library ---------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device, rng, tolerances):
    # CPU: Dynamo (fullgraph) and AOTAutograd with the ops' fake impls, eager kernels
    # ("aot_eager"): Inductor's first CPU compile alone costs ~30-50 s on the 2-core CI machine.
    # CUDA: the default Inductor backend.
    backend = "aot_eager" if device == "cpu" else "inductor"
    torch._dynamo.reset()
    config = Config("compile", 64, 2, ((3, 5, 7), (2, 9, 6)), (0.5, 1.0))
    x = _inputs(config, rng, device, F32)
    weights = _randn((config.num_features,), rng, device, F32)

    def loss_fn(pts, rot, level0, level1):
        features = fieldfuse.kplanes_tilted(pts, rot, [level0, level1], [0.5, 1.0])
        taps = fieldfuse.kplanes_tilted_taps(pts[:8], rot, [level0, level1], 0.25)
        tv = fieldfuse.plane_tv([level0, level1], 2, "percell")
        return (features * weights).sum() + 0.1 * taps.square().mean() + 0.01 * tv

    g = torch.ones((), device=device)
    compiled = _all_grads(torch.compile(loss_fn, fullgraph=True, backend=backend), x.tensors(), g)
    eager = _all_grads(loss_fn, x.tensors(), g)
    tol = tolerances(F32)
    for a, b in zip(compiled, eager, strict=True):
        assert_close(a, b, rtol=tol.grad["rtol"], atol=1e-6)


def _opcheck_inputs(rng, device):
    pts = _points(7, rng, F64, lo=-0.9, hi=0.9).to(device)
    tap_pts = _points(3, rng, F64, lo=-0.9, hi=0.9).to(device)
    rotations = _uniform((2, 3, 3), -1.0, 1.0, rng).to(device)
    planes = [_uniform((6, 2, 3, 4), 0.1, 0.5, rng).to(device),
              _uniform((6, 3, 5, 2), 0.1, 0.5, rng).to(device)]
    return pts, tap_pts, rotations, planes


def _grad_leaves(*tensors):
    return [
        [t.clone().requires_grad_() for t in x] if isinstance(x, list)
        else x.clone().requires_grad_()
        for x in tensors
    ]


def _opcheck_cases(pts, tap_pts, rotations, planes):
    """(name, geometry, h option, gates) per public function: its ops' leading arguments."""
    axis = [p[:3].clone() for p in planes]
    gates = [0.5, 2.0]
    return [
        ("kplanes_tilted", [pts, rotations], planes, [], None),
        ("kplanes_tilted", [pts, rotations], planes, [], gates),
        ("kplanes", [pts], axis, [], gates),
        ("kplanes_tilted_taps", [tap_pts, rotations], planes, [0.25], gates),
        ("kplanes_tilted_with_taps", [pts, tap_pts, rotations], planes, [0.25], gates),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_forward_ops(device, rng):
    for name, geometry, planes, h, gates in _opcheck_cases(*_opcheck_inputs(rng, device)):
        op = getattr(torch.ops.fieldfuse, f"{name}_forward")
        for deterministic in (False, True):
            args = (*geometry, planes, *h, gates, F64, deterministic)
            torch.library.opcheck(op, args)
        leaves = _grad_leaves(*geometry, planes)
        torch.library.opcheck(op, (*leaves, *h, gates, F64, False))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_backward_ops(device, rng):
    for name, geometry, planes, h, gates in _opcheck_cases(*_opcheck_inputs(rng, device)):
        forward = getattr(torch.ops.fieldfuse, f"{name}_forward")
        backward = getattr(torch.ops.fieldfuse, f"{name}_backward")
        outputs = forward(*geometry, planes, *h, gates, F64, False)
        outputs = (outputs,) if isinstance(outputs, torch.Tensor) else outputs
        grad_outputs = [_randn(tuple(o.shape), rng, device) for o in outputs]
        everything = [True] * (len(geometry) + 1)
        only_planes = [False] * len(geometry) + [True]
        no_planes = [True] * len(geometry) + [False]
        for wants, deterministic in ((everything, False), (only_planes, True), (no_planes, False)):
            args = (*grad_outputs, *geometry, planes, *h, gates, wants, deterministic)
            torch.library.opcheck(backward, args)


@pytest.mark.parametrize("norm", ["mean", "percell"])
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_plane_tv(device, norm, rng):
    planes = [_uniform((6, 2, 3, 4), -1.0, 1.0, rng).to(device),
              _uniform((6, 3, 5, 2), -1.0, 1.0, rng).to(device)]
    torch.library.opcheck(torch.ops.fieldfuse.plane_tv_forward, (planes, 2, norm))
    torch.library.opcheck(torch.ops.fieldfuse.plane_tv_forward, (_grad_leaves(planes)[0], 2, norm))
    grad_out = _randn((2,), rng, device)
    torch.library.opcheck(torch.ops.fieldfuse.plane_tv_backward, (planes, 2, norm, grad_out))


# --- 10: CUDA graphs ----------------------------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("deterministic", [False, True])
def test_cuda_graph_capture_matches_eager(deterministic, rng, tolerances):
    config = Config("graph", 5000, 2, ((8, 32, 32), (5, 9, 11)), (0.5, 1.0))
    x = _inputs(config, rng, "cuda", F32)
    static = [t.detach().clone().requires_grad_() for t in x.tensors()]
    static_g = _randn((config.batch, config.num_features), rng, "cuda", F32)
    fn = tilted_fn(gates=config.gates, deterministic=deterministic)

    def step():
        out = fn(*static)
        return (out, *torch.autograd.grad(out, static, static_g))

    graph, captured = capture_cuda_graph(step)

    fresh = _inputs(config, rng, "cuda", F32)
    with torch.no_grad():
        for s, f in zip(static, fresh.tensors(), strict=True):
            s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    eager = _all_grads(fn, fresh.tensors(), static_g)
    if deterministic:
        _assert_all_equal(list(captured), eager, "graph replay")
    else:
        assert torch.equal(captured[0], eager[0])
        for a, b in zip(captured[1:], eager[1:], strict=True):
            assert_close(a, b, rtol=1e-4, atol=1e-5 * b.abs().max().item())


@pytest.mark.parametrize("name", ["kplanes_tilted", "kplanes", "kplanes_tilted_taps",
                                  "kplanes_tilted_with_taps"])
def test_eager_calls_take_the_fast_path_with_the_library_path_s_results(name, rng):
    from fieldfuse.kplanes_ops import _ops

    pts, tap_pts, rotations, planes = _opcheck_inputs(rng, "cpu")
    case = next(c for c in _opcheck_cases(pts, tap_pts, rotations, planes) if c[0] == name)
    _, geometry, levels, h, gates = case
    op = _ops[f"{name}_forward"]
    results = []
    for call in (op, op.custom_op):  # the eager fast path, then torch.library's dispatch
        leaves = _grad_leaves(*geometry, levels)
        outputs = call(*leaves, *h, gates, F64, False)
        outputs = (outputs,) if isinstance(outputs, torch.Tensor) else outputs
        fast = type(outputs[0].grad_fn).__name__ == "_EagerAutogradBackward"
        assert fast == (call is op)
        flat = [*leaves[:-1], *leaves[-1]]
        loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=F64).view_as(o)).sum()
                   for o in outputs)
        grads = torch.autograd.grad(loss, flat, create_graph=True)
        # Double backward through the backward op on both paths.
        second = torch.autograd.grad(sum(g.square().sum() for g in grads), flat)
        results.append([*outputs, *grads, *second])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
