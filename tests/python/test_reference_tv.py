# SPDX-License-Identifier: Apache-2.0
"""Checks the pure-PyTorch TV oracles against hand-computed cases, naive loops and the spec loop."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close


def _load_reference_tv():
    # The oracles must be testable before the extension is built, and importing the
    # `fieldfuse` package loads the extension: fall back to the source file, which imports no
    # part of fieldfuse.
    try:
        from fieldfuse.reference import tv
    except ImportError:
        root = Path(__file__).resolve().parents[2]
        path = root / "python" / "fieldfuse" / "reference" / "tv.py"
        spec = importlib.util.spec_from_file_location("_fieldfuse_reference_tv", path)
        tv = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tv)
    return tv


ref = _load_reference_tv()

F64 = torch.float64


def _ramp() -> torch.Tensor:
    """A 2x2x2 block with v[i, j, k] = 4i + 2j + k: Δd = 4, Δh = 2, Δw = 1 everywhere."""
    i, j, k = torch.meshgrid(*(torch.arange(2, dtype=F64),) * 3, indexing="ij")
    return 4 * i + 2 * j + k


def _grad(loss: torch.Tensor, x: torch.Tensor, grad_out=None) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, x, grad_out)
    return g


# --- naive per-voxel loops over a [B, D, H, W] volume, straight from the spec's formulas --------


def _as_nested(vol: torch.Tensor):
    vol = vol.detach().to(F64)
    return vol.reshape(-1, *vol.shape[-3:]).tolist(), vol.reshape(-1, *vol.shape[-3:]).shape


def _at(v, n, idx):
    return v[n][idx[0]][idx[1]][idx[2]]


def _shift(idx, axis, step):
    out = list(idx)
    out[axis] += step
    return tuple(out)


def _exists(idx, shape):
    return all(0 <= a < s for a, s in zip(idx, shape, strict=True))


def _voxels(shape):
    return itertools.product(range(shape[0]), itertools.product(*map(range, shape[1:])))


def _pair_sums(vol, f):
    """Per-axis sums of f(Δ) over every forward difference (next − v)."""
    v, shape = _as_nested(vol)
    sums = [0.0, 0.0, 0.0]
    for n, idx in _voxels(shape):
        for axis in range(3):
            nxt = _shift(idx, axis, 1)
            if _exists(nxt, shape[1:]):
                sums[axis] += f(_at(v, n, nxt) - _at(v, n, idx))
    return sums


def _pair_grad(vol, df):
    """Per voxel: Σ_axes df(axis, v − prev)·[prev exists] − df(axis, next − v)·[next exists]."""
    v, shape = _as_nested(vol)
    grad = torch.zeros(shape, dtype=F64)
    for n, idx in _voxels(shape):
        acc = 0.0
        for axis in range(3):
            prev, nxt = _shift(idx, axis, -1), _shift(idx, axis, 1)
            if _exists(prev, shape[1:]):
                acc += df(axis, _at(v, n, idx) - _at(v, n, prev))
            if _exists(nxt, shape[1:]):
                acc -= df(axis, _at(v, n, nxt) - _at(v, n, idx))
        grad[(n, *idx)] = acc
    return grad.reshape(vol.shape)


def _naive_sq(vol):
    return sum(_pair_sums(vol, lambda d: d * d))


def _naive_sq_grad(vol):
    # Spec: ∂S/∂v = 2·Σ_axes [(v − prev)·[prev exists] − (next − v)·[next exists]]
    return _pair_grad(vol, lambda axis, d: 2 * d)


def _sign(x):
    return (x > 0) - (x < 0)


def _naive_l1(vol):
    return torch.tensor(_pair_sums(vol, abs), dtype=F64)


def _naive_l1_grad(vol, grad_out):
    # sign(0) = 0.
    return _pair_grad(vol, lambda axis, d: grad_out[axis] * _sign(d))


def _corner_terms(v, n, idx):
    # (Δd, Δh, Δw) anchored at idx.
    return [_at(v, n, _shift(idx, axis, 1)) - _at(v, n, idx) for axis in range(3)]


def _is_corner(idx, shape):
    return all(a <= s - 2 for a, s in zip(idx, shape, strict=True))


def _naive_iso(vol, eps):
    v, shape = _as_nested(vol)
    total, count = 0.0, 0
    for n, idx in _voxels(shape):
        if _is_corner(idx, shape[1:]):
            total += math.sqrt(sum(d * d for d in _corner_terms(v, n, idx)) + eps)
            count += 1
    return total / count if count else 0.0


def _naive_iso_grad(vol, eps):
    # 4-corner gather, times 1/N: −(Δd+Δh+Δw)/s from (a,b,c); +Δ_axis/s from (a,b,c) − e_axis.
    v, shape = _as_nested(vol)
    count = shape[0] * math.prod(max(s - 1, 0) for s in shape[1:])
    grad = torch.zeros(shape, dtype=F64)
    for n, idx in _voxels(shape):
        acc = 0.0
        if _is_corner(idx, shape[1:]):
            deltas = _corner_terms(v, n, idx)
            acc -= sum(deltas) / math.sqrt(sum(d * d for d in deltas) + eps)
        for axis in range(3):
            corner = _shift(idx, axis, -1)
            if _exists(corner, shape[1:]) and _is_corner(corner, shape[1:]):
                deltas = _corner_terms(v, n, corner)
                acc += deltas[axis] / math.sqrt(sum(d * d for d in deltas) + eps)
        grad[(n, *idx)] = acc / count if count else 0.0
    return grad.reshape(vol.shape)


# --- hand-computed cases ------------------------------------------------------------------------


def test_module_docstring_examples_run(reference_doctests):
    reference_doctests(ref, "tv")


def test_ramp_forward_by_hand():
    vol = _ramp()
    # 4 pairs per axis in a 2x2x2 block.
    assert ref.tv_sq_3d(vol).item() == 4 * 16 + 4 * 4 + 4 * 1
    assert ref.tv_l1_3d(vol).tolist() == [16.0, 8.0, 4.0]
    # One corner: sqrt(16 + 4 + 1 + eps), N = 1.
    assert ref.tv_iso_3d(vol, eps=0.5).item() == pytest.approx(math.sqrt(21.5), rel=1e-15)


def test_ramp_gradients_by_hand():
    vol = _ramp().requires_grad_()
    # Each voxel has exactly one neighbour per axis: +Δ if it is the "next" voxel, −Δ otherwise.
    i, j, k = torch.meshgrid(*(torch.arange(2, dtype=F64),) * 3, indexing="ij")
    sign_d, sign_h, sign_w = 2 * i - 1, 2 * j - 1, 2 * k - 1
    sign = sign_d * 4 + sign_h * 2 + sign_w * 1
    assert torch.equal(_grad(ref.tv_sq_3d(vol), vol), 2 * sign)
    assert torch.equal(_grad(ref.tv_l1_3d(vol).sum(), vol), sign_d + sign_h + sign_w)

    s = math.sqrt(21.0 + 1e-6)
    expected = torch.zeros(2, 2, 2, dtype=F64)
    expected[0, 0, 0] = -7 / s
    expected[1, 0, 0], expected[0, 1, 0], expected[0, 0, 1] = 4 / s, 2 / s, 1 / s
    assert_close(_grad(ref.tv_iso_3d(vol, eps=1e-6), vol), expected, rtol=1e-14, atol=0)


def test_l1_per_axis_upstream_gradient():
    vol = _ramp().requires_grad_()
    g = torch.tensor([2.0, -3.0, 0.5], dtype=F64)
    got = _grad(ref.tv_l1_3d(vol), vol, g)
    assert_close(got, _naive_l1_grad(vol, g.tolist()), rtol=0, atol=0)


def test_weighted_l1_by_hand():
    array = torch.tensor([[0.0, 1.0], [2.0, 4.0]], dtype=F64, requires_grad=True)
    # axis 0 differences [2, 3] (mean 2.5); axis 1 differences [1, 2] (mean 1.5).
    assert ref.tv_weighted_l1(array, (1.0, 2.0)).item() == (1.0 * 2.5 + 2.0 * 1.5) / 2
    assert ref.tv_weighted_l1(array, (0.0, 2.0)).item() == 2.0 * 1.5
    # Gradient of 2·mean|Δw|: every difference is positive, each of the 2 has weight 2/2.
    expected = torch.tensor([[-1.0, 1.0], [-1.0, 1.0]], dtype=F64)
    assert torch.equal(_grad(ref.tv_weighted_l1(array, (0.0, 2.0)), array), expected)


def test_weighted_l1_all_zero_weights_gives_zero_and_zero_gradient():
    array = torch.rand(3, 4, 5, dtype=F64, requires_grad=True)
    loss = ref.tv_weighted_l1(array, (0.0, 0.0, 0.0))
    assert loss.shape == () and loss.dtype == F64 and loss.item() == 0.0
    assert torch.equal(_grad(loss, array), torch.zeros_like(array))


def test_constant_volume_has_exactly_zero_l1_gradient():
    vol = torch.full((3, 4, 5), 0.7, dtype=F64, requires_grad=True)
    assert torch.equal(_grad(ref.tv_l1_3d(vol).sum(), vol), torch.zeros_like(vol))
    loss = ref.tv_weighted_l1(vol, (1.0, 2.0, 3.0))
    assert loss.item() == 0.0
    assert torch.equal(_grad(loss, vol), torch.zeros_like(vol))


# --- naive loops on random volumes --------------------------------------------------------------

LOOP_SHAPES = [(3, 4, 5), (2, 3, 4, 5), (2, 1, 3, 4, 2), (1, 4, 5), (3, 1, 5), (3, 4, 1)]


@pytest.mark.parametrize("shape", LOOP_SHAPES, ids=str)
def test_sq_matches_naive_loop(shape, rng):
    vol = torch.randn(shape, generator=rng, dtype=F64, requires_grad=True)
    loss = ref.tv_sq_3d(vol)
    assert loss.shape == ()
    assert loss.item() == pytest.approx(_naive_sq(vol), rel=1e-13)
    assert_close(_grad(loss, vol), _naive_sq_grad(vol), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape", LOOP_SHAPES, ids=str)
@pytest.mark.parametrize("eps", [1e-8, 1e-6, 0.3])
def test_iso_matches_naive_loop(shape, eps, rng):
    vol = torch.randn(shape, generator=rng, dtype=F64, requires_grad=True)
    loss = ref.tv_iso_3d(vol, eps=eps)
    assert loss.shape == ()
    assert loss.item() == pytest.approx(_naive_iso(vol, eps), rel=1e-13, abs=0)
    assert_close(_grad(loss, vol), _naive_iso_grad(vol, eps), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape", LOOP_SHAPES, ids=str)
def test_l1_matches_naive_loop(shape, rng):
    vol = torch.randn(shape, generator=rng, dtype=F64, requires_grad=True)
    loss = ref.tv_l1_3d(vol)
    assert loss.shape == (3,)
    assert_close(loss, _naive_l1(vol), rtol=1e-13, atol=0)
    g = torch.randn(3, generator=rng, dtype=F64)
    assert_close(_grad(loss, vol, g), _naive_l1_grad(vol, g.tolist()), rtol=1e-13, atol=1e-15)


# --- degenerate and empty inputs ----------------------------------------------------------------

DEGENERATE_SHAPES = [(1, 4, 5), (4, 1, 5), (4, 5, 1), (1, 1, 1), (0, 4, 5), (0, 3, 4, 5), (3, 0, 5)]


@pytest.mark.parametrize("shape", DEGENERATE_SHAPES, ids=str)
def test_iso_without_corners_is_zero_with_zero_gradient(shape):
    vol = torch.rand(shape, dtype=F64, requires_grad=True)
    loss = ref.tv_iso_3d(vol)
    assert loss.item() == 0.0
    assert torch.equal(_grad(loss, vol), torch.zeros_like(vol))


@pytest.mark.parametrize("shape", [(0, 4, 5), (0, 3, 4, 5), (3, 0, 5), (2, 3, 0)], ids=str)
def test_empty_volume_gives_zero(shape):
    vol = torch.rand(shape, dtype=F64)
    assert ref.tv_sq_3d(vol).item() == 0.0
    assert ref.tv_l1_3d(vol).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_output_dtype_follows_input(dtype):
    vol = torch.rand(3, 4, 5, dtype=dtype)
    for out in (ref.tv_sq_3d(vol), ref.tv_iso_3d(vol), ref.tv_l1_3d(vol)):
        assert out.dtype == dtype
    assert ref.tv_weighted_l1(vol, (0.1, 0.2, 0.3)).dtype == dtype


def test_leading_dims_sum_or_average_over_slices(rng):
    vol = torch.randn(2, 3, 4, 5, 6, generator=rng, dtype=F64)
    slices = vol.reshape(-1, 4, 5, 6)
    assert_close(ref.tv_sq_3d(vol), sum(ref.tv_sq_3d(s) for s in slices), rtol=1e-14, atol=0)
    assert_close(ref.tv_l1_3d(vol), sum(ref.tv_l1_3d(s) for s in slices), rtol=1e-14, atol=0)
    # Equal-size slices: the mean over all corners is the mean of the per-slice means.
    per_slice = torch.stack([ref.tv_iso_3d(s) for s in slices])
    assert_close(ref.tv_iso_3d(vol), per_slice.mean(), rtol=1e-14, atol=0)


# --- weighted L1 against the spec's ptychography loop -------------------------------------------

PARITY_WEIGHTS = [(5.0, 0.1), (5.0, 0.0), (0.0, 0.3), (0.0, 0.0)]


def _spec_weights(shape, w_z, w_xy):
    return (w_z, w_xy, w_xy) if len(shape) == 3 else (w_xy, w_xy)


@pytest.mark.parametrize("shape", [(8, 24, 20), (24, 20)], ids=str)
@pytest.mark.parametrize("w_z,w_xy", PARITY_WEIGHTS)
def test_weighted_l1_matches_spec_loop(shape, w_z, w_xy, rng, ptychography_loop):
    array = torch.randn(shape, generator=rng, dtype=F64, requires_grad=True)
    loss = ref.tv_weighted_l1(array, _spec_weights(shape, w_z, w_xy))
    expected = ptychography_loop(array, w_z, w_xy)
    assert_close(loss, expected, rtol=1e-14, atol=0)
    if expected.requires_grad:
        assert_close(_grad(loss, array), _grad(expected, array), rtol=1e-14, atol=0)
    else:
        assert torch.equal(_grad(loss, array), torch.zeros_like(array))


def test_weighted_l1_skips_size_one_axis_with_zero_weight(rng, ptychography_loop):
    array = torch.randn(1, 24, 20, generator=rng, dtype=F64)
    loss = ref.tv_weighted_l1(array, (0.0, 0.3, 0.3))
    assert_close(loss, ptychography_loop(array, 0.0, 0.3), rtol=1e-14, atol=0)


def test_weighted_l1_leading_dims_join_the_mean(rng):
    # Leading dims are folded into each axis's mean: a 3-D array with w_z = 0 equals the same
    # array read as a batch of 2-D slices with two weights.
    array = torch.randn(4, 6, 7, generator=rng, dtype=F64)
    assert_close(
        ref.tv_weighted_l1(array, (0.0, 0.2, 0.7)),
        ref.tv_weighted_l1(array, (0.2, 0.7)),
        rtol=1e-14,
        atol=0,
    )


def test_weighted_l1_accepts_tensor_weights(rng):
    array = torch.randn(4, 6, 7, generator=rng, dtype=F64)
    assert_close(
        ref.tv_weighted_l1(array, torch.tensor([0.5, 0.2, 0.7], dtype=F64)),
        ref.tv_weighted_l1(array, (0.5, 0.2, 0.7)),
        rtol=0,
        atol=0,
    )


# --- argument checks ----------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [ref.tv_sq_3d, ref.tv_iso_3d, ref.tv_l1_3d])
def test_volume_ops_reject_too_few_dims(fn):
    with pytest.raises(ValueError, match=rf"{fn.__name__}\(\).*vol.*\[2, 5\]"):
        fn(torch.zeros(2, 5))


@pytest.mark.parametrize("fn", [ref.tv_sq_3d, ref.tv_iso_3d, ref.tv_l1_3d])
def test_volume_ops_reject_non_tensor(fn):
    with pytest.raises(TypeError, match=rf"{fn.__name__}\(\).*vol"):
        fn([[[0.0, 1.0]]])


@pytest.mark.parametrize("eps", [-1e-8, math.nan, math.inf])
def test_iso_rejects_bad_eps(eps):
    with pytest.raises(ValueError, match=r"tv_iso_3d\(\).*eps"):
        ref.tv_iso_3d(torch.zeros(2, 2, 2), eps=eps)


@pytest.mark.parametrize(
    "weights", [(1.0,), (1.0, 1.0, 1.0, 1.0), (-0.1, 1.0), (math.nan, 1.0), (1.0, math.inf)]
)
def test_weighted_l1_rejects_bad_weights(weights):
    with pytest.raises(ValueError, match=r"tv_weighted_l1\(\).*weights"):
        ref.tv_weighted_l1(torch.zeros(3, 4, 5), weights)


def test_weighted_l1_rejects_too_few_dims():
    with pytest.raises(ValueError, match=r"tv_weighted_l1\(\).*array.*\[5\]"):
        ref.tv_weighted_l1(torch.zeros(5), (1.0, 1.0))


@pytest.mark.parametrize(
    "shape,weights,axis,weight",
    [
        ((1, 24, 20), (0.5, 0.3, 0.3), 0, 0.5),
        ((24, 1), (0.3, 0.2), 1, 0.2),
        ((3, 0, 4), (0, 1, 1), 1, 1.0),
    ],
    ids=["size1-z", "size1-x", "size0-y"],
)
def test_weighted_l1_rejects_axis_without_differences(shape, weights, axis, weight):
    with pytest.raises(ValueError, match=rf"tv_weighted_l1\(\).*axis {axis}\b.*weight {weight}"):
        ref.tv_weighted_l1(torch.zeros(shape), weights)


def test_weighted_l1_rejects_empty_leading_dim():
    with pytest.raises(ValueError, match=r"tv_weighted_l1\(\).*array"):
        ref.tv_weighted_l1(torch.zeros(0, 4, 5), (1.0, 1.0))
