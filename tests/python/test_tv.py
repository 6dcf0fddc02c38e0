# SPDX-License-Identifier: Apache-2.0
"""Tests of the fieldfuse TV ops against the float64 reference: an op table × device × dtype."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from device_params import capture_cuda_graph
from fieldfuse.reference import tv as ref

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _device_dtype(device: str, dtype: torch.dtype):
    marks = [requires_cuda] if device == "cuda" else []
    return pytest.param(
        device, dtype, id=f"{device}-{str(dtype).removeprefix('torch.')}", marks=marks
    )


# float16/bfloat16 are CUDA-only: on the CPU they are an error (see test_tv_errors.py).
FLOAT_DEVICE_DTYPES = [
    _device_dtype(device, dtype)
    for device in ("cpu", "cuda")
    for dtype in (torch.float32, torch.float64)
]
HALF_DEVICE_DTYPES = [_device_dtype("cuda", torch.bfloat16), _device_dtype("cuda", torch.float16)]
ALL_DEVICE_DTYPES = FLOAT_DEVICE_DTYPES + HALF_DEVICE_DTYPES
FLOAT64_DEVICES = [_device_dtype(device, torch.float64) for device in ("cpu", "cuda")]
FLOAT32_DEVICES = [_device_dtype(device, torch.float32) for device in ("cpu", "cuda")]

# The shapes of specs/tv.md's reference tests: odd sizes, one and two leading dims.
SPEC_SHAPES = [(33, 57, 18), (3, 32, 32, 32), (2, 3, 16, 16, 16)]
SMALL_SHAPE = (2, 3, 4, 5)


# --- the op table -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """One public TV function with its options, as both fieldfuse and the reference spell it."""

    # The same in `fieldfuse`, `fieldfuse.reference.tv` and `torch.ops.fieldfuse.<name>_*`.
    name: str
    label: str  # the test id
    options: tuple = ()  # raw-op arguments between the input and grad_out
    grad_options: tuple | None = None  # options for gradient checks, where they differ
    keywords: tuple = ()  # names under which the public API takes `options` (empty: positional)
    out_shape: tuple = ()
    # Multiplies the dtype's atol (tolerances() in conftest); each value > 1 says why below.
    atol_factor: float = 1.0
    # (shape, options or None) cases with size-1 or empty dims that the op accepts.
    degenerate: tuple = ()

    def __str__(self) -> str:
        return self.label

    def fn(self, impl=fieldfuse, *, grad: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
        """`x -> op(x, options)` from `impl` (fieldfuse or the reference module)."""
        return self.with_options(self.options_for(grad), impl)

    def options_for(self, grad: bool) -> tuple:
        return self.grad_options if grad and self.grad_options is not None else self.options

    def with_options(
        self, options: tuple, impl=fieldfuse
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        function = getattr(impl, self.name)
        if self.keywords:
            kwargs = dict(zip(self.keywords, options, strict=True))
            return lambda x: function(x, **kwargs)
        return lambda x: function(x, *options)

    def raw(self, stage: str):
        return getattr(torch.ops.fieldfuse, f"{self.name}_{stage}")


VOLUME_DEGENERATE = tuple(
    (shape, None)
    for shape in [(1, 5, 6), (4, 1, 6), (4, 5, 1), (1, 1, 1), (1, 4, 5, 6), (0, 4, 5, 6), (4, 0, 6)]
)

OPS = [
    OpInfo(
        "tv_sq_3d",
        "sq",
        # Unnormalised: gradient elements are O(1) sums of six differences, so fp32 cancellation
        # near zero leaves ~1e-6 absolute error (specs/tv.md uses atol 1e-6 for sq).
        atol_factor=10.0,
        degenerate=VOLUME_DEGENERATE,
    ),
    OpInfo(
        "tv_iso_3d",
        "iso",
        # Spec: forward checked at eps 1e-8, gradients at eps 1e-6.
        options=(1e-8,),
        grad_options=(1e-6,),
        keywords=("eps",),
        degenerate=VOLUME_DEGENERATE,
    ),
    OpInfo("tv_l1_3d", "l1", out_shape=(3,), degenerate=VOLUME_DEGENERATE),
    OpInfo(
        "tv_weighted_l1",
        "weighted3",
        options=([0.5, 0.2, 0.7],),
        degenerate=(
            ((1, 24, 20), ([0.0, 0.3, 0.3],)),  # size-1 slice axis with weight 0 (spec case)
            ((1, 2, 6, 7), None),
            ((6, 7, 1), ([0.5, 0.2, 0.0],)),
        ),
    ),
    OpInfo(
        "tv_weighted_l1",
        "weighted2",
        options=([0.3, 0.6],),
        degenerate=(((1, 6, 7), None), ((5, 1), ([0.4, 0.0],)), ((1, 7), ([0.0, 0.4],))),
    ),
]
# One entry per function for the slow checks (torch.compile).
OPS_ONE_PER_NAME = [info for info in OPS if info.label != "weighted2"]


# --- helpers ------------------------------------------------------------------------------------


def _randn(shape, rng, device="cpu", dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=rng, dtype=torch.float64).to(device=device, dtype=dtype)


def _untied(shape, rng, device="cpu", dtype=torch.float64) -> torch.Tensor:
    """Values 0.1 apart in random order: no difference is within a gradcheck step of 0."""
    n = math.prod(shape)
    values = (torch.randperm(n, generator=rng, dtype=torch.float64) - n / 2) * 0.1
    return values.reshape(shape).to(device=device, dtype=dtype)


def _out_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _upstream(info: OpInfo, rng, device, dtype) -> torch.Tensor:
    return _randn(info.out_shape, rng, device, _out_dtype(dtype))


def _value_and_grad(fn, x: torch.Tensor, grad_out: torch.Tensor):
    x = x.detach().requires_grad_()
    out = fn(x)
    (grad,) = torch.autograd.grad(out, x, grad_out)
    return out.detach(), grad


def _check_against_reference(info, x, grad_out, tol, *, options=None, view=None):
    """Forward and gradient of fieldfuse vs the float64 reference on the same input values."""
    view = view or (lambda t: t)
    if options is None:
        fwd, ref_fwd = info.fn(), info.fn(ref)
        bwd, ref_bwd = info.fn(grad=True), info.fn(ref, grad=True)
    else:
        fwd = bwd = info.with_options(options)
        ref_fwd = ref_bwd = info.with_options(options, ref)

    out = fwd(view(x))
    expected = ref_fwd(view(x.detach().double()))
    assert out.shape == expected.shape == info.out_shape
    assert out.dtype == _out_dtype(x.dtype) and out.device == x.device
    assert_close(out.double(), expected, **tol.forward)

    _, grad = _value_and_grad(lambda t: bwd(view(t)), x, grad_out)
    _, ref_grad = _value_and_grad(lambda t: ref_bwd(view(t)), x.double(), grad_out.double())
    assert grad.dtype == x.dtype and grad.shape == x.shape
    assert_close(grad.double(), ref_grad, **tol.grad)


# --- value and gradient against the reference ---------------------------------------------------


@pytest.mark.parametrize("device,dtype", ALL_DEVICE_DTYPES)
@pytest.mark.parametrize("shape", SPEC_SHAPES, ids=str)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_matches_reference(info, shape, device, dtype, rng, tolerances):
    x = _randn(shape, rng, device, dtype)
    tol = tolerances(dtype).scaled_atol(info.atol_factor)
    _check_against_reference(info, x, _upstream(info, rng, device, dtype), tol)


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_degenerate_dims(info, device, dtype, rng, tolerances):
    tol = tolerances(dtype).scaled_atol(info.atol_factor)
    for shape, options in info.degenerate:
        x = _randn(shape, rng, device, dtype)
        _check_against_reference(info, x, _upstream(info, rng, device, dtype), tol, options=options)


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("shape", [(1, 5, 6), (4, 1, 6), (4, 5, 1), (2, 1, 1, 1), (0, 4, 5, 6)])
def test_iso_without_corners_is_zero_with_zero_gradient(shape, device, dtype):
    x = torch.rand(shape, device=device, dtype=dtype)
    out, grad = _value_and_grad(fieldfuse.tv_iso_3d, x, torch.ones((), device=device, dtype=dtype))
    assert out.item() == 0.0
    assert torch.equal(grad, torch.zeros_like(x))


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("shape", [(0, 4, 5, 6), (4, 0, 6), (2, 3, 4, 0)], ids=str)
def test_empty_volume_gives_zero(shape, device, dtype):
    x = torch.empty(shape, device=device, dtype=dtype)
    assert fieldfuse.tv_sq_3d(x).item() == 0.0
    assert fieldfuse.tv_iso_3d(x).item() == 0.0
    assert fieldfuse.tv_l1_3d(x).tolist() == [0.0, 0.0, 0.0]


def _views():
    """(name, base shape, view of the base): layouts a caller can pass without a copy."""
    return [
        ("transposed", (6, 7, 8), lambda t: t.transpose(-1, -3)),
        ("sliced", (2, 7, 9, 10), lambda t: t[:, 1:, ::2, 1:-1]),
        ("expanded", (1, 5, 6, 7), lambda t: t.expand(3, 5, 6, 7)),
        ("permuted", (5, 6, 2, 7), lambda t: t.permute(2, 0, 1, 3)),
    ]


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("name,shape,view", _views(), ids=[v[0] for v in _views()])
@pytest.mark.parametrize("info", OPS, ids=str)
def test_non_contiguous_matches_contiguous(info, name, shape, view, device, dtype, rng, tolerances):
    base = _randn(shape, rng, device, dtype)
    assert not view(base).is_contiguous()
    g = _upstream(info, rng, device, dtype)
    out, grad = _value_and_grad(lambda t: info.fn()(view(t)), base, g)
    out_c, grad_c = _value_and_grad(lambda t: info.fn()(view(t).contiguous()), base, g)
    tol = tolerances(dtype).scaled_atol(info.atol_factor)
    assert_close(out, out_c, **tol.forward)
    assert_close(grad, grad_c, **tol.grad)
    _check_against_reference(info, base, g, tol, view=view)


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_upstream_gradient_scales_result(info, device, dtype, rng, tolerances):
    x = _randn(SMALL_SHAPE, rng, device, dtype)
    ones = torch.ones(info.out_shape, device=device, dtype=dtype)
    _, unit = _value_and_grad(info.fn(grad=True), x, ones)
    for scale in (-2.5, 0.0, 1e3):
        _, grad = _value_and_grad(info.fn(grad=True), x, ones * scale)
        assert_close(grad, unit * scale, **tolerances(dtype).scaled_atol(info.atol_factor).grad)
    if info.out_shape == (3,):
        # Per-axis upstream gradients are independent.
        for axis in range(3):
            g = torch.zeros(3, device=device, dtype=dtype)
            g[axis] = 1.0
            _check_against_reference(info, x, g, tolerances(dtype))


# --- gradcheck ----------------------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", FLOAT64_DEVICES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_gradcheck(info, device, dtype, rng):
    cases = [(SMALL_SHAPE, None), ((4, 3, 2), None)]
    cases += [(shape, options) for shape, options in info.degenerate if math.prod(shape) > 0]
    for shape, options in cases:
        fn = info.with_options(options or info.options_for(grad=True))
        # L1 ops are not differentiable at ties: use well-separated values everywhere.
        x = _untied(shape, rng, device, dtype).requires_grad_()
        assert torch.autograd.gradcheck(fn, (x,)), shape


# --- conventions: sign(0), NaN, ties ------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_constant_volume_has_exactly_zero_gradient(info, device, dtype, rng):
    x = torch.full((3, 4, 5, 6), 0.37, device=device, dtype=dtype)
    out, grad = _value_and_grad(info.fn(grad=True), x, _upstream(info, rng, device, dtype))
    assert torch.equal(grad, torch.zeros_like(x))  # sign(0) = 0 for the L1 ops
    if info.name != "tv_iso_3d":  # iso is sqrt(eps) per corner even on a constant volume
        assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_ties_follow_sign_zero_convention(info, device, dtype, rng, tolerances):
    # Small integers: a large share of the differences are exactly zero.
    x = torch.randint(0, 3, (2, 6, 7, 8), generator=rng).to(device=device, dtype=dtype)
    tol = tolerances(dtype).scaled_atol(info.atol_factor)
    _check_against_reference(info, x, _upstream(info, rng, device, dtype), tol)


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_nan_propagates_to_forward(info, device, dtype, rng):
    x = _randn((2, 5, 6, 7), rng, device, dtype)
    x[1, 2, 3, 4] = math.nan
    out = info.fn()(x)
    expected = info.fn(ref)(x.double())
    assert expected.isnan().all()  # the NaN voxel enters a difference along every axis
    assert_close(out.double(), expected, equal_nan=True)


# --- weighted L1 against the spec's ptychography loop -------------------------------------------

PARITY_WEIGHTS = [(5.0, 0.1), (5.0, 0.0), (0.0, 0.3), (0.0, 0.0)]


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize(
    "shape,w_z,w_xy",
    [(shape, w_z, w_xy) for shape in [(8, 24, 20), (24, 20)] for w_z, w_xy in PARITY_WEIGHTS]
    + [((1, 24, 20), 0.0, 0.3)],
    ids=str,
)
def test_weighted_l1_matches_ptychography_loop(
    shape, w_z, w_xy, device, dtype, rng, tolerances, ptychography_loop
):
    weights = (w_z, w_xy, w_xy) if len(shape) == 3 else (w_xy, w_xy)
    x = _randn(shape, rng, device, dtype)
    g = _randn((), rng, device, dtype)
    out, grad = _value_and_grad(lambda t: fieldfuse.tv_weighted_l1(t, weights), x, g)
    x64 = x.double().requires_grad_()
    expected = ptychography_loop(x64, w_z, w_xy)
    assert out.shape == () and out.dtype == dtype
    assert_close(out.double(), expected.detach(), **tolerances(dtype).forward)
    if expected.requires_grad:
        (expected_grad,) = torch.autograd.grad(expected, x64, g.double())
    else:  # every weight is 0: the loop returns a constant
        expected_grad = torch.zeros_like(x64)
    assert_close(grad.double(), expected_grad, **tolerances(dtype).grad)


# --- repeatability ------------------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_deterministic(info, device, dtype, rng):
    x = _randn((3, 32, 32, 32), rng, device, dtype)
    g = _upstream(info, rng, device, dtype)
    first = _value_and_grad(info.fn(grad=True), x, g)
    second = _value_and_grad(info.fn(grad=True), x, g)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


@pytest.mark.parametrize("device,dtype", FLOAT_DEVICE_DTYPES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_raw_ops_twice_do_not_accumulate(info, device, dtype, rng):
    # Freeing the first result lets the allocator hand the same block to the second call, so an
    # output that is accumulated into (rather than written) would show up as a doubled value.
    x = _randn((2, 7, 8, 9), rng, device, dtype)
    g = _upstream(info, rng, device, dtype)
    options = info.options_for(grad=True)
    results = []
    for _ in range(2):
        out = info.raw("forward")(x, *options)
        grad = info.raw("backward")(x, *options, g)
        results.append((out.clone(), grad.clone()))
        del out, grad
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
    _, expected = _value_and_grad(info.fn(grad=True), x, g)
    assert torch.equal(results[0][1], expected)


# --- torch.library integration ------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", FLOAT64_DEVICES)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_opcheck(info, device, dtype, rng):
    x = _untied(SMALL_SHAPE, rng, device, dtype)
    options = info.options_for(grad=True)
    torch.library.opcheck(info.raw("forward"), (x.clone().requires_grad_(), *options))
    torch.library.opcheck(info.raw("forward"), (x, *options))
    g = _upstream(info, rng, device, dtype)
    torch.library.opcheck(info.raw("backward"), (x, *options, g))


@pytest.mark.parametrize("device,dtype", FLOAT32_DEVICES)
@pytest.mark.parametrize("info", OPS_ONE_PER_NAME, ids=str)
def test_torch_compile_fullgraph(info, device, dtype, rng, tolerances):
    # Inductor compiles are slow on the CPU: one small loss per op, forward and backward.
    torch._dynamo.reset()
    op = info.fn(grad=True)

    def loss_fn(t):
        return (op(t * 2.0) * 1.5).sum() + t.square().mean()

    x = _randn((2, 5, 6, 7), rng, device, dtype)
    g = torch.ones((), device=device, dtype=dtype)
    out, grad = _value_and_grad(torch.compile(loss_fn, fullgraph=True), x, g)
    expected, expected_grad = _value_and_grad(loss_fn, x, g)
    tol = tolerances(dtype).scaled_atol(info.atol_factor)
    assert_close(out, expected, **tol.forward)
    assert_close(grad, expected_grad, **tol.grad)


def test_build_info_reports_cuda():
    info = fieldfuse.build_info()
    assert isinstance(info, dict) and isinstance(info["cuda"], bool)


# --- CUDA only ----------------------------------------------------------------------------------


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("info", OPS, ids=str)
def test_cpu_cuda_parity(info, dtype, rng, tolerances):
    x = _randn((3, 32, 32, 32), rng, "cpu", dtype)
    g = _upstream(info, rng, "cpu", dtype)
    out_cpu, grad_cpu = _value_and_grad(info.fn(grad=True), x, g)
    out_cuda, grad_cuda = _value_and_grad(info.fn(grad=True), x.cuda(), g.cuda())
    tol = tolerances(dtype).scaled_atol(info.atol_factor)
    assert_close(out_cuda.cpu(), out_cpu, **tol.forward)
    assert_close(grad_cuda.cpu(), grad_cpu, **tol.grad)


@requires_cuda
@pytest.mark.parametrize("info", OPS, ids=str)
def test_cuda_graph_capture_matches_eager(info, rng):
    static_x = _randn((2, 9, 10, 11), rng, "cuda", torch.float32).requires_grad_()
    static_g = _upstream(info, rng, "cuda", torch.float32)
    op = info.fn(grad=True)

    def step():
        out = op(static_x)
        (grad,) = torch.autograd.grad(out, static_x, static_g)
        return out, grad

    graph, (static_out, static_grad) = capture_cuda_graph(step)

    fresh = _randn(static_x.shape, rng, "cuda", torch.float32)
    with torch.no_grad():
        static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    out, grad = _value_and_grad(op, fresh, static_g)
    assert torch.equal(static_out, out) and torch.equal(static_grad, grad)
