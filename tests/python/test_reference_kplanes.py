# SPDX-License-Identifier: Apache-2.0
"""Checks the pure-PyTorch K-Planes oracles against scalar loops written from specs/kplanes.md."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close


def _load_reference(name: str):
    # The oracles must be testable before the extension is built (and an installed build may
    # predate this module), while importing `fieldfuse` loads the extension: fall back to the
    # source file, which imports no part of fieldfuse.
    try:
        return importlib.import_module(f"fieldfuse.reference.{name}")
    except ImportError:
        root = Path(__file__).resolve().parents[2]
        path = root / "python" / "fieldfuse" / "reference" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"_fieldfuse_reference_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


ref = _load_reference("kplanes")

F64 = torch.float64
# Oracle and loop evaluate the same bilinear formula in float64 with differently ordered
# operations (grid_sample weights its corners as (x1 − ix)·…, the spec as (1 − tx)·…): values
# are products of three samples in [0.1, 0.5], so the difference stays within a few ulps.
TOL = {"rtol": 1e-13, "atol": 1e-15}

# (gx, gy) index pairs into the plane-frame point, per plane p, as the spec lists them.
TILTED_PAIRS = ((0, 1), (2, 0), (1, 2))
AXIS_PAIRS = ((0, 1), (0, 2), (1, 2))

# Spec test shapes (B, T, C, H, W) small enough for a scalar loop, and the multiscale config.
LOOP_SHAPES = [(37, 1, 1, 5, 5), (257, 3, 5, 7, 9)]
MULTISCALE_LEVELS = [(3, 5, 7), (5, 11, 13), (7, 19, 23)]  # (C, H, W)
MULTISCALE_GATES = (0.25, 0.75, 1.0)


def _grad(loss: torch.Tensor, *inputs: torch.Tensor):
    return torch.autograd.grad(loss, inputs)


def _uniform(shape, lo, hi, rng):
    return lo + (hi - lo) * torch.rand(shape, generator=rng, dtype=F64)


def _points(batch, rng):
    return _uniform((batch, 3), -1.1, 1.1, rng)


def _rotations(num_tilts, rng):
    return _uniform((num_tilts, 3, 3), -1.0, 1.0, rng)


def _levels(num_tilts, levels, rng):
    return [_uniform((3 * num_tilts, c, h, w), 0.1, 0.5, rng) for c, h, w in levels]


# --- the spec's pseudo-code, one scalar at a time --------------------------------------------


def _clamp(value, hi):
    return min(max(value, 0.0), hi)


def _sample(plane, gx, gy):
    """The spec's `sample()` on one channel, a nested `[H][W]` list."""
    height, width = len(plane), len(plane[0])
    ix = _clamp((gx + 1) / 2 * (width - 1), width - 1)
    iy = _clamp((gy + 1) / 2 * (height - 1), height - 1)
    x0, y0 = math.floor(ix), math.floor(iy)
    tx, ty = ix - x0, iy - y0
    x1, y1 = min(x0 + 1, width - 1), min(y0 + 1, height - 1)
    return (
        (1 - tx) * (1 - ty) * plane[y0][x0]
        + tx * (1 - ty) * plane[y0][x1]
        + (1 - tx) * ty * plane[y1][x0]
        + tx * ty * plane[y1][x1]
    )


def _loop(pts, rotations, planes, pairs, gates=None):
    """Per point, level, tilt, channel: column offset_l + t·C_l + c, spelled out."""
    points, mats = pts.tolist(), rotations.tolist()
    grids = [level.tolist() for level in planes]
    num_tilts = len(mats)
    widths = [num_tilts * len(level[0]) for level in grids]
    out = torch.zeros(len(points), sum(widths), dtype=F64)
    for b, p in enumerate(points):
        offset = 0
        for level, grid in enumerate(grids):
            gate = 1.0 if gates is None else gates[level]
            channels = len(grid[0])
            for t, mat in enumerate(mats):
                r = [sum(mat[i][j] * p[j] for j in range(3)) for i in range(3)]
                for c in range(channels):
                    f = gate
                    for plane, (u, v) in enumerate(pairs):
                        f *= _sample(grid[3 * t + plane][c], r[u], r[v])
                    out[b, offset + t * channels + c] = f
            offset += widths[level]
    return out


def _eye(num_tilts=1):
    return torch.eye(3, dtype=F64).expand(num_tilts, 3, 3).clone()


# --- sampling --------------------------------------------------------------------------------


def _border_points(rng):
    # Random points inside and outside ±1, plus coordinates exactly on ±1 and at 0.
    exact = torch.tensor(
        [[-1.0, 1.0, 0.0], [1.0, -1.0, 1.0], [-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]],
        dtype=F64,
    )
    return torch.cat([_uniform((40, 3), -1.6, 1.6, rng), exact])


@pytest.mark.parametrize("height,width", [(5, 5), (4, 7), (1, 6), (6, 1), (1, 1)], ids=str)
@pytest.mark.parametrize("live", [0, 1, 2])
@pytest.mark.parametrize("variant", ["tilted", "axis"])
def test_sample_matches_spec_pseudocode(height, width, live, variant, rng):
    # Every plane but `live` is all ones, so each feature is one bilinear sample of `live`.
    planes = torch.ones(3, 2, height, width, dtype=F64)
    planes[live] = _uniform((2, height, width), 0.1, 0.5, rng)
    pts = _border_points(rng)
    if variant == "tilted":
        got, pairs = ref.kplanes_tilted(pts, _eye(), [planes]), TILTED_PAIRS
    else:
        got, pairs = ref.kplanes(pts, [planes]), AXIS_PAIRS
    u, v = pairs[live]
    grid = planes[live].tolist()
    expected = [[_sample(grid[c], p[u], p[v]) for c in range(2)] for p in pts.tolist()]
    assert_close(got, torch.tensor(expected, dtype=F64), **TOL)


# --- features against the spec loop ----------------------------------------------------------


@pytest.mark.parametrize("batch,num_tilts,channels,height,width", LOOP_SHAPES, ids=str)
def test_tilted_matches_spec_loop(batch, num_tilts, channels, height, width, rng):
    pts, rotations = _points(batch, rng), _rotations(num_tilts, rng)
    planes = _levels(num_tilts, [(channels, height, width)], rng)
    got = ref.kplanes_tilted(pts, rotations, planes)
    assert got.shape == (batch, num_tilts * channels) and got.dtype == F64
    assert_close(got, _loop(pts, rotations, planes, TILTED_PAIRS), **TOL)


@pytest.mark.parametrize("gates", [None, MULTISCALE_GATES, torch.tensor(MULTISCALE_GATES)])
def test_multiscale_tilted_matches_spec_loop(gates, rng):
    pts, rotations = _points(37, rng), _rotations(3, rng)
    planes = _levels(3, MULTISCALE_LEVELS, rng)
    got = ref.kplanes_tilted(pts, rotations, planes, gates)
    assert got.shape == (37, 3 * (3 + 5 + 7))
    gate_list = None if gates is None else [float(g) for g in gates]
    assert_close(got, _loop(pts, rotations, planes, TILTED_PAIRS, gate_list), **TOL)


def test_column_order_is_level_then_tilt_then_channel(rng):
    # Constant planes: every sample of plane block (l, t, c) is v(l, t, c), so the feature is
    # gate_l·v³ wherever the point is, and each column says which block it came from.
    num_tilts = 3
    planes = []
    for level, (channels, height, width) in enumerate(MULTISCALE_LEVELS):
        grid = torch.empty(3 * num_tilts, channels, height, width, dtype=F64)
        for t in range(num_tilts):
            for c in range(channels):
                grid[3 * t : 3 * t + 3, c] = 1.0 + 0.1 * level + 0.01 * t + 0.001 * c
        planes.append(grid)
    got = ref.kplanes_tilted(_points(5, rng), _rotations(num_tilts, rng), planes, MULTISCALE_GATES)
    column = 0
    for level, (channels, _, _) in enumerate(MULTISCALE_LEVELS):
        for t in range(num_tilts):
            for c in range(channels):
                value = MULTISCALE_GATES[level] * (1.0 + 0.1 * level + 0.01 * t + 0.001 * c) ** 3
                assert_close(got[:, column], torch.full((5,), value, dtype=F64), **TOL)
                column += 1
    assert column == got.shape[1]


@pytest.mark.parametrize(
    "batch,levels",
    [(37, [(1, 5, 5)]), (257, [(5, 7, 9)]), (37, MULTISCALE_LEVELS)],
    ids=["1x5x5", "5x7x9", "multiscale"],
)
def test_axis_aligned_matches_spec_loop(batch, levels, rng):
    pts, planes = _points(batch, rng), _levels(1, levels, rng)
    got = ref.kplanes(pts, planes)
    assert got.shape == (batch, sum(c for c, _, _ in levels))
    assert_close(got, _loop(pts, _eye(), planes, AXIS_PAIRS), **TOL)


def test_axis_aligned_is_not_identity_tilt(rng):
    pts, planes = _points(37, rng), _levels(1, [(4, 6, 6)], rng)
    axis = ref.kplanes(pts, planes)
    assert not torch.allclose(axis, ref.kplanes_tilted(pts, _eye(), planes))
    # The only difference is plane 1's (x, z) vs (z, x): transposing it makes them agree.
    swapped = planes[0].clone()
    swapped[1] = planes[0][1].transpose(-1, -2)
    assert_close(axis, ref.kplanes_tilted(pts, _eye(), [swapped]), **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_dtype_follows_input(dtype, rng):
    pts, rotations = _points(7, rng).to(dtype), _rotations(2, rng).to(dtype)
    planes = [grid.to(dtype) for grid in _levels(2, [(3, 4, 5)], rng)]
    assert ref.kplanes_tilted(pts, rotations, planes).dtype == dtype
    assert ref.kplanes_tilted_taps(pts, rotations, planes, 0.5).dtype == dtype
    assert ref.kplanes(pts, [grid[:3] for grid in planes]).dtype == dtype


# --- gradients -------------------------------------------------------------------------------


def test_gradients_reach_every_input(rng):
    pts, rotations = _uniform((6, 3), -0.6, 0.6, rng), _rotations(2, rng)
    planes = _levels(2, [(2, 4, 5), (3, 6, 3)], rng)
    gates = torch.tensor([0.5, 1.5], dtype=F64)
    inputs = [x.requires_grad_() for x in (pts, rotations, *planes, gates)]

    def tilted(p, r, g0, g1, gate):
        return ref.kplanes_tilted(p, r, [g0, g1], gate)

    def taps(p, r, g0, g1, gate):
        return ref.kplanes_tilted_taps(p, r, [g0, g1], 0.125, gate)

    assert torch.autograd.gradcheck(tilted, inputs)
    assert torch.autograd.gradcheck(taps, inputs)
    assert torch.autograd.gradcheck(lambda p, g0: ref.kplanes(p, [g0[:3]]), inputs[:3:2])


@pytest.mark.parametrize("coord", [-1.0, 1.0, 1.3, -2.0])
def test_coordinate_gradient_is_zero_on_and_outside_the_border(coord, rng):
    # Axis-aligned: x is gx of planes 0 and 1, so clipping it zeroes ∂f/∂x and nothing else.
    pts = _uniform((8, 3), -0.9, 0.9, rng)
    pts[:, 0] = coord
    pts.requires_grad_()
    planes = _levels(1, [(3, 5, 6)], rng)
    (grad,) = _grad(ref.kplanes(pts, planes).sum(), pts)
    assert torch.equal(grad[:, 0], torch.zeros(8, dtype=F64))
    assert (grad[:, 1:] != 0).all()


@pytest.mark.parametrize("coord", [-1.0, 1.0, 1.3, -2.0])
def test_tilted_gradient_is_zero_for_a_clipped_rotated_coordinate(coord, rng):
    # r = diag(2, 0.5, −1)·p with p_x = coord/2 puts r_x exactly at `coord`: dr_x = 0, so row 0
    # of dL/dR (dr_x·p_j) and dL/dp_x (= R_00·dr_x for a diagonal R) vanish; the rest do not.
    pts = _uniform((8, 3), -0.9, 0.9, rng)
    pts[:, 0] = coord / 2
    rotations = torch.diag(torch.tensor([2.0, 0.5, -1.0], dtype=F64))[None]
    pts.requires_grad_(), rotations.requires_grad_()
    planes = _levels(1, [(3, 5, 6)], rng)
    grad_pts, grad_rot = _grad(ref.kplanes_tilted(pts, rotations, planes).sum(), pts, rotations)
    assert torch.equal(grad_pts[:, 0], torch.zeros(8, dtype=F64))
    assert torch.equal(grad_rot[0, 0], torch.zeros(3, dtype=F64))
    assert (grad_pts[:, 1:] != 0).all() and (grad_rot[0, 1:] != 0).all()


def test_size_one_axis_has_zero_coordinate_gradient(rng):
    # W = 1 on every plane: gx never moves a sample, and x is only ever a gx (planes 0 and 1).
    pts = _uniform((8, 3), -0.9, 0.9, rng).requires_grad_()
    planes = _levels(1, [(2, 5, 1)], rng)
    (grad,) = _grad(ref.kplanes(pts, planes).sum(), pts)
    assert torch.equal(grad[:, 0], torch.zeros(8, dtype=F64))
    assert (grad[:, 1:] != 0).all()


# --- volume-TV taps --------------------------------------------------------------------------


def test_tv_tap_coords_by_hand():
    pts = torch.tensor([[0.5, -0.25, 1.0]], dtype=F64)
    expected = torch.tensor(
        [[[0.5, -0.25, 1.0]], [[2.5, -0.25, 1.0]], [[0.5, 1.75, 1.0]], [[0.5, -0.25, 3.0]]],
        dtype=F64,
    )
    assert torch.equal(ref.tv_tap_coords(pts, 2.0), expected)


@pytest.mark.parametrize("h", [2.0, 1e-4])
@pytest.mark.parametrize("rotation", ["identity", "random"])
def test_taps_are_features_at_shifted_points(h, rotation, rng):
    # Base points at 0.98: the +h taps cross the border for h = 2 and stay inside for 1e-4.
    pts = torch.cat([torch.full((4, 3), 0.98, dtype=F64), _points(29, rng)])
    rotations = _eye(3) if rotation == "identity" else _rotations(3, rng)
    planes = _levels(3, MULTISCALE_LEVELS, rng)
    inputs = [x.requires_grad_() for x in (pts, rotations, *planes)]
    taps = ref.kplanes_tilted_taps(pts, rotations, planes, h, MULTISCALE_GATES)
    assert taps.shape == (4, 33, 3 * 15)
    assert torch.equal(taps[0], ref.kplanes_tilted(pts, rotations, planes, MULTISCALE_GATES))
    shifted = torch.stack(
        [
            ref.kplanes_tilted(p, rotations, planes, MULTISCALE_GATES)
            for p in ref.tv_tap_coords(pts, h)
        ]
    )
    assert_close(taps, shifted, **TOL)
    weights = torch.rand(taps.shape, generator=rng, dtype=F64)
    for got, expected in zip(
        _grad((taps * weights).sum(), *inputs),
        _grad((shifted * weights).sum(), *inputs),
        strict=True,
    ):
        assert_close(got, expected, rtol=1e-12, atol=1e-14)


# --- plane TV --------------------------------------------------------------------------------


def _mean_sq_diffs(plane, d_h, d_w):
    """Mean squared difference over a nested [C][H][W] list, step (d_h, d_w), 0 if none."""
    total, count = 0.0, 0
    for channel in plane:
        for i in range(len(channel) - d_h):
            for j in range(len(channel[0]) - d_w):
                total += (channel[i + d_h][j + d_w] - channel[i][j]) ** 2
                count += 1
    return total / count if count else 0.0


def _loop_plane_tv(planes, num_tilts, norm, axis_aligned):
    cells = [grid.shape[2] * grid.shape[3] for grid in planes]
    loss = 0.0
    for grid, n_cells in zip(planes, cells, strict=True):
        per_plane = [_mean_sq_diffs(k, 1, 0) + _mean_sq_diffs(k, 0, 1) for k in grid.tolist()]
        # Spec: tilted level = (1/T)·Σ_k TV_k; axis-aligned level = Σ_k TV_k.
        level = sum(per_plane) if axis_aligned else sum(per_plane) / num_tilts
        loss += level * (n_cells / max(cells) if norm == "percell" else 1.0)
    return loss


@pytest.mark.parametrize("norm", ["mean", "percell"])
@pytest.mark.parametrize(
    "num_tilts,levels",
    [(3, MULTISCALE_LEVELS), (2, [(4, 6, 5)]), (1, MULTISCALE_LEVELS), (1, [(2, 4, 9)])],
    ids=["tilted-multiscale", "tilted", "axis-multiscale", "axis"],
)
def test_plane_tv_matches_spec_loop(num_tilts, levels, norm, rng):
    planes = _levels(num_tilts, levels, rng)
    got = ref.plane_tv(planes, num_tilts, norm=norm)
    assert got.shape == () and got.dtype == F64
    expected = _loop_plane_tv(planes, num_tilts, norm, axis_aligned=num_tilts == 1)
    assert got.item() == pytest.approx(expected, rel=1e-13)


def test_plane_tv_size_one_axis_contributes_zero(rng):
    planes = _levels(2, [(3, 1, 6), (2, 5, 1), (1, 1, 1)], rng)
    got = ref.plane_tv(planes, 2)
    assert got.item() == pytest.approx(_loop_plane_tv(planes, 2, "mean", False), rel=1e-13)
    assert ref.plane_tv(planes[2:], 2).item() == 0.0


def test_plane_tv_gradient(rng):
    planes = [p.requires_grad_() for p in _levels(2, [(2, 4, 5), (1, 3, 3)], rng)]
    assert torch.autograd.gradcheck(lambda a, b: ref.plane_tv([a, b], 2, norm="percell"), planes)


# --- volume TV from taps ---------------------------------------------------------------------


def _loop_volume_tv(taps, h, weight):
    rho = taps.reshape(4, taps.shape[1], -1).tolist()
    terms = [
        math.sqrt(sum(((rho[i][n][c] - rho[0][n][c]) / h) ** 2 for i in (1, 2, 3)))
        for n in range(len(rho[0]))
        for c in range(len(rho[0][0]))
    ]
    return weight * sum(terms) / len(terms)


@pytest.mark.parametrize("shape", [(4, 50, 3), (4, 50)], ids=str)
@pytest.mark.parametrize("h", [2.0, 1e-4])
def test_volume_tv_from_taps_matches_loop(shape, h, rng):
    taps = torch.rand(shape, generator=rng, dtype=F64)
    got = ref.volume_tv_from_taps(taps, h, 0.3)
    assert got.shape == () and got.dtype == F64
    assert got.item() == pytest.approx(_loop_volume_tv(taps, h, 0.3), rel=1e-13)


def test_volume_tv_on_kplanes_taps_is_differentiable(rng):
    pts, rotations = _points(9, rng), _rotations(2, rng)
    planes = _levels(2, [(2, 4, 5)], rng)
    inputs = [x.requires_grad_() for x in (pts, rotations, *planes)]
    taps = ref.kplanes_tilted_taps(pts, rotations, planes, 0.5)
    grads = _grad(ref.volume_tv_from_taps(taps, 0.5, 1e-2), *inputs)
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


# --- docs and argument checks ----------------------------------------------------------------


def test_module_docstring_examples_run(reference_doctests):
    reference_doctests(ref, "kplanes")


@pytest.mark.parametrize("norm", ["sum", "Mean", None])
def test_plane_tv_rejects_bad_norm(norm):
    with pytest.raises(ValueError, match=r"plane_tv\(\).*norm"):
        ref.plane_tv([torch.zeros(3, 1, 2, 2)], 1, norm=norm)


def test_plane_tv_rejects_plane_count_not_3t():
    with pytest.raises(ValueError, match=r"plane_tv\(\).*planes\[0\].*\[6, 1, 2, 2\]"):
        ref.plane_tv([torch.zeros(6, 1, 2, 2)], 1)


@pytest.mark.parametrize(
    "pts,rotations,planes,gates,match",
    [
        ((5, 2), (1, 3, 3), [(3, 1, 2, 2)], None, r"pts.*\[5, 2\]"),
        ((5, 3), (1, 3, 2), [(3, 1, 2, 2)], None, r"rotations.*\[1, 3, 2\]"),
        ((5, 3), (2, 3, 3), [(3, 1, 2, 2)], None, r"planes\[0\].*\[3, 1, 2, 2\]"),
        ((5, 3), (1, 3, 3), [], None, r"planes"),
        ((5, 3), (1, 3, 3), [(3, 1, 2, 2)], (1.0, 2.0), r"gates.*\(1\).*2"),
    ],
    ids=["pts", "rotations", "planes", "no-levels", "gates"],
)
def test_kplanes_tilted_rejects_bad_shapes(pts, rotations, planes, gates, match):
    args = (torch.zeros(pts), torch.zeros(rotations), [torch.zeros(s) for s in planes])
    with pytest.raises(ValueError, match=rf"kplanes_tilted\(\).*{match}"):
        ref.kplanes_tilted(*args, gates)


def test_volume_tv_from_taps_rejects_bad_input():
    with pytest.raises(ValueError, match=r"volume_tv_from_taps\(\).*tap_densities.*\[3, 5\]"):
        ref.volume_tv_from_taps(torch.zeros(3, 5), 0.1, 1.0)
    with pytest.raises(ValueError, match=r"volume_tv_from_taps\(\).*h"):
        ref.volume_tv_from_taps(torch.zeros(4, 5), 0.0, 1.0)
