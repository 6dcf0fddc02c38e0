# SPDX-License-Identifier: Apache-2.0
"""Tests of fieldfuse.hash_grid against the float64 oracle of fieldfuse.reference.hash_grid.

Contract: include/fieldfuse/hash_grid.h and specs/mlp.md ("Hash-grid encoding"). The small
configurations below have dense and hashed levels in both 2-D and 3-D (checked by
test_configs_have_dense_and_hashed_levels). Linear interpolation's x-gradient jumps at cell
borders, so x-gradient comparisons and gradcheck use points kept away from every level's borders;
forward values and params gradients are continuous there and are checked on the borders too.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from fieldfuse import _registry
from fieldfuse.reference import hash_grid as ref
from device_params import DEVICES, FLOAT_DTYPES, capture_cuda_graph, cuda_only

F32, F64 = torch.float32, torch.float64

# Dense and hashed levels in 2-D and 3-D (res 4, 8, 16, 32 against a 2^8-row table).
SMALL = dict(n_levels=4, log2_hashmap_size=8, base_resolution=4, per_level_scale=2.0)
# Distance (in cells) from a cell border below which x-gradients are not compared.
BORDER_MARGIN = 1e-3


def _config(features: int, **overrides) -> dict:
    return {**SMALL, "n_features_per_level": features, **overrides}


def _num_rows(dims: int, cfg: dict) -> int:
    return fieldfuse.hash_grid_num_params(dims, **{k: v for k, v in cfg.items()
                                                   if k != "interpolation"})


def _border_free(x: torch.Tensor, cfg: dict) -> torch.Tensor:
    """Which rows of x have every coordinate BORDER_MARGIN cells away from every level's cell
    borders (clamped coordinates count as inside: their gradient is 0 on both sides)."""
    keep = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    table = ref.levels(x.shape[1], n_levels=cfg["n_levels"],
                       log2_hashmap_size=cfg["log2_hashmap_size"],
                       base_resolution=cfg["base_resolution"],
                       per_level_scale=cfg["per_level_scale"])
    for level in table:
        pos = x.double().clamp(0, 1) * level.scale + 0.5
        frac = pos - pos.floor()
        outside = (x < 0) | (x > 1)
        keep &= ((frac > BORDER_MARGIN) & (frac < 1 - BORDER_MARGIN) | outside).all(1)
    return keep


def _away_from_borders(x: torch.Tensor, cfg: dict) -> torch.Tensor:
    return x[_border_free(x, cfg)]


def _points(rng, batch: int, dims: int, dtype, device, special: bool = True) -> torch.Tensor:
    """Random points in [0, 1]^D, plus (special=True) the ends 0 and 1, exact cell borders of
    every level and points outside [0, 1] (clamped)."""
    x = torch.rand((batch, dims), generator=rng, dtype=F64)
    if special:
        rows = [[0.0] * dims, [1.0] * dims, [-0.3] * dims, [1.4] * dims,
                [0.5 / 3] * dims,  # pos = 1 exactly at level 0 (scale 3): a cell border
                [1.5 / 7] * dims,  # pos = 2 exactly at level 1 (scale 7)
                [-2.0, 0.25, 0.75][:dims], [0.9, 3.0, 0.1][:dims]]
        x = torch.cat([x, torch.tensor(rows, dtype=F64)])
    return x.to(dtype=dtype, device=device)


def _params(rng, rows: int, features: int, dtype, device) -> torch.Tensor:
    return torch.randn((rows, features), generator=rng, dtype=F64).to(dtype=dtype, device=device)


def _tol(dtype, scale: float = 1.0) -> dict:
    # float32: positions carry ~1e-7 relative error times a scale of up to 31 cells, times
    # neighbouring-vertex differences of O(1): ~1e-5 on features; gradients to x are another
    # factor of the scale larger.
    if dtype == F64:
        return {"rtol": 1e-10, "atol": 1e-11 * scale}
    return {"rtol": 1e-4, "atol": 2e-5 * scale}


def test_configs_have_dense_and_hashed_levels():
    for dims in (2, 3):
        table = ref.levels(dims, **{k: SMALL[k] for k in SMALL})
        assert any(level.dense for level in table) and any(not level.dense for level in table)


# --- hash_grid_num_params ------------------------------------------------------------------


@pytest.mark.parametrize(("dims", "cfg", "expected"), [
    # 3-D defaults: res 16·2^l; 16^3, 32^3, 64^3 dense, then 13 levels of 2^19.
    (3, {}, 4096 + 32768 + 262144 + 13 * 2**19),
    # 2-D defaults: 16^2 ... 512^2 dense, then 10 levels of 2^19.
    (2, {}, 256 + 1024 + 4096 + 16384 + 65536 + 262144 + 10 * 2**19),
    # res 3 in 2-D: 9 rows rounded up to 16 (tiny-cuda-nn's multiple of 8).
    (2, dict(n_levels=1, base_resolution=3), 16),
    # 2^T = 4 < the 8-rounded dense size 8: min(8, 4) = 4 rows, still dense (4 = res^2).
    (2, dict(n_levels=1, base_resolution=2, log2_hashmap_size=2), 4),
    (3, SMALL, 64 + 3 * 256),
    (2, SMALL, 16 + 64 + 256 + 256),
])
def test_num_params_hand_computed(dims, cfg, expected):
    assert fieldfuse.hash_grid_num_params(dims, **cfg) == expected
    assert ref.hash_grid_num_params(dims, **cfg) == expected


@pytest.mark.parametrize("per_level_scale", [1.3819, 1.5, 2.0, 1.0])
@pytest.mark.parametrize("dims", [2, 3])
def test_num_params_matches_tcnn_rule(dims, per_level_scale):
    cfg = dict(n_levels=12, log2_hashmap_size=14, base_resolution=8,
               per_level_scale=per_level_scale)
    assert fieldfuse.hash_grid_num_params(dims, **cfg) == ref.hash_grid_num_params(dims, **cfg)


# --- forward and backward against the oracle ------------------------------------------------


@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
@pytest.mark.parametrize("features", [1, 2, 4, 8])
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference(device, dtype, dims, features, interpolation, rng):
    cfg = _config(features, interpolation=interpolation)
    x = _points(rng, 200, dims, dtype, device)
    params = _params(rng, _num_rows(dims, cfg), features, dtype, device)
    x.requires_grad_(True)
    params.requires_grad_(True)
    y = fieldfuse.hash_grid(x, params, **cfg)
    assert y.shape == (x.shape[0], SMALL["n_levels"] * features) and y.dtype == dtype
    xr = x.detach().double().requires_grad_(True)
    pr = params.detach().double().requires_grad_(True)
    yr = ref.hash_grid(xr, pr, **cfg)
    assert_close(y.double(), yr, **_tol(dtype))

    g = torch.randn(y.shape, generator=rng, dtype=F64).to(device)
    grad_x, grad_params = torch.autograd.grad(y, (x, params), g.to(dtype))
    grad_xr, grad_pr = torch.autograd.grad(yr, (xr, pr), g)
    assert_close(grad_params.double(), grad_pr, **_tol(dtype, 10.0))
    # x-gradients: points away from the borders (linear's slope jumps there), and 0 for the
    # clamped coordinates (both sides agree on that by construction of the check points).
    keep = _border_free(x.detach(), cfg)
    assert keep.sum() > 100
    assert_close(grad_x.double()[keep], grad_xr[keep], **_tol(dtype, 100.0))
    outside = (x.detach() < 0) | (x.detach() > 1)
    assert torch.all(grad_x[outside] == 0)


@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_matches_reference(device, dims, interpolation, rng):
    cfg = _config(2, interpolation=interpolation)
    x = _away_from_borders(_points(rng, 100, dims, F64, device, special=False), cfg)
    x = torch.cat([x, torch.tensor([[-0.2] * dims, [1.3] * dims], dtype=F64, device=device)])
    params = _params(rng, _num_rows(dims, cfg), 2, F64, device)
    g = torch.randn((x.shape[0], 8), generator=rng, dtype=F64).to(device)
    v = torch.randn(x.shape, generator=rng, dtype=F64).to(device)
    u = torch.randn(params.shape, generator=rng, dtype=F64).to(device)

    def second(fn):
        xs, ps, gs = (t.clone().requires_grad_(True) for t in (x, params, g))
        gx, gp = torch.autograd.grad(fn(xs, ps, **cfg), (xs, ps), gs, create_graph=True)
        phi = (gx * v).sum() + (gp * u).sum()
        return torch.autograd.grad(phi, (gs, xs, ps))

    for a, b in zip(second(fieldfuse.hash_grid), second(ref.hash_grid), strict=True):
        assert_close(a, b, **_tol(F64, 1e3))


@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_and_gradgradcheck(device, interpolation, rng):
    cfg = _config(2, interpolation=interpolation, n_levels=3)
    x = _away_from_borders(_points(rng, 12, 3, F64, device, special=False), cfg)[:6]
    params = _params(rng, _num_rows(3, cfg), 2, F64, device).requires_grad_(True)
    x.requires_grad_(True)

    def fn(x, params):
        return fieldfuse.hash_grid(x, params, **cfg)

    # gradcheck steps 1e-6: the margin keeps every point inside its cell. On CUDA the table
    # gradient is scattered with float atomics (documented: exact sums, order-dependent rounding),
    # so two identical backward calls may differ in the last bits: nondet_tol allows that rounding
    # and nothing more (float64, a few terms per cell).
    nondet_tol = 1e-12 if device == "cuda" else 0.0
    assert torch.autograd.gradcheck(fn, (x, params), eps=1e-6, atol=1e-6, nondet_tol=nondet_tol)
    assert torch.autograd.gradgradcheck(fn, (x, params), eps=1e-6, atol=1e-5,
                                        nondet_tol=nondet_tol)


# --- edge cases ---------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [0, 1, 100003, 1000003])
def test_batch_sizes(device, batch, rng):
    if batch == 1000003 and device == "cpu":
        pytest.skip("the CPU runs 100003 rows: a million take the float64 oracle about 15 s")
    cfg = _config(2)
    x = _points(rng, batch, 3, F64, device, special=False).requires_grad_(True)
    params = _params(rng, _num_rows(3, cfg), 2, F64, device).requires_grad_(True)
    y = fieldfuse.hash_grid(x, params, **cfg)
    assert y.shape == (batch, 8)
    assert_close(y, ref.hash_grid(x, params, **cfg), **_tol(F64))
    grad_x, grad_params = torch.autograd.grad(y.sum(), (x, params))
    assert grad_x.shape == x.shape
    assert_close(grad_params, torch.autograd.grad(ref.hash_grid(x, params, **cfg).sum(), params)[0],
                 **_tol(F64, 100.0))
    if batch == 0:
        assert torch.all(grad_params == 0)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device, rng):
    cfg = _config(4, interpolation="smoothstep")
    x = _points(rng, 50, 3, F64, device)
    params = _params(rng, _num_rows(3, cfg), 4, F64, device)
    x_strided = torch.zeros((x.shape[0], 6), dtype=F64, device=device)[:, ::2]
    x_strided.copy_(x)
    params_t = params.t().contiguous().t()  # column-major
    assert not x_strided.is_contiguous() and not params_t.is_contiguous()
    xs, ps = x_strided.requires_grad_(True), params_t.requires_grad_(True)
    y = fieldfuse.hash_grid(xs, ps, **cfg)
    assert torch.equal(y, fieldfuse.hash_grid(x, params, **cfg))
    g = torch.randn(y.shape, generator=rng, dtype=F64).to(device).t().contiguous().t()
    gx, gp = torch.autograd.grad(y, (xs, ps), g)
    x2, p2 = x.clone().requires_grad_(True), params.clone().requires_grad_(True)
    gx2, gp2 = torch.autograd.grad(fieldfuse.hash_grid(x2, p2, **cfg), (x2, p2), g.contiguous())
    _assert_same_table_gradient(gx, gx2, device)
    _assert_same_table_gradient(gp, gp2, device)


def _assert_same_table_gradient(a, b, device):
    """Bitwise equal on the CPU; on CUDA the table gradient and the sum of the levels'
    x-gradients use float atomics (order-dependent rounding, as documented), so two calls agree to
    float64 rounding only."""
    if device == "cuda":
        assert_close(a, b, rtol=1e-12, atol=1e-12)
    else:
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_points(device, rng):
    cfg = _config(2)
    x = _points(rng, 10, 3, F64, device, special=False)
    x[3, 1] = float("nan")
    params = _params(rng, _num_rows(3, cfg), 2, F64, device).requires_grad_(True)
    xs = x.clone().requires_grad_(True)
    y = fieldfuse.hash_grid(xs, params, **cfg)
    assert torch.isnan(y[3]).all() and not torch.isnan(y[torch.arange(10) != 3]).any()
    gx, gp = torch.autograd.grad(y, (xs, params), torch.ones_like(y))
    assert torch.isnan(gx[3]).all() and not torch.isnan(gx[torch.arange(10) != 3]).any()
    # The NaN point adds nothing to the params gradient.
    finite = torch.arange(10, device=device) != 3
    expected = torch.autograd.grad(fieldfuse.hash_grid(x[finite], params, **cfg).sum(), params)[0]
    assert_close(gp, expected, **_tol(F64))


def test_cpu_repeatable_and_not_accumulating(rng):
    cfg = _config(2)
    x = _points(rng, 5000, 3, F32, "cpu").requires_grad_(True)
    params = _params(rng, _num_rows(3, cfg), 2, F32, "cpu").requires_grad_(True)
    g = torch.randn((x.shape[0], 8), generator=rng)
    first = torch.autograd.grad(fieldfuse.hash_grid(x, params, **cfg), (x, params), g)
    second = torch.autograd.grad(fieldfuse.hash_grid(x, params, **cfg), (x, params), g)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


_THREADS_SCRIPT = """
import sys, torch, fieldfuse
torch.manual_seed(0)
cfg = dict(n_levels=4, n_features_per_level=2, log2_hashmap_size=8, base_resolution=4)
x = torch.rand(20000, 3, requires_grad=True)
params = torch.randn(fieldfuse.hash_grid_num_params(3, **cfg), 2, requires_grad=True)
y = fieldfuse.hash_grid(x, params, **cfg)
gx, gp = torch.autograd.grad(y.square().sum(), (x, params), create_graph=True)
second = torch.autograd.grad(gx.square().sum(), (x, params))
torch.save([y, gx, gp, *second], sys.argv[1])
"""


def test_cpu_results_independent_of_thread_count(tmp_path):
    # Note [CPU hash-grid determinism]: the same bits with 1 and 2 OpenMP threads (the thread
    # count is fixed when the runtime starts, hence the subprocesses).
    results = []
    for threads in (1, 2):
        path = tmp_path / f"threads{threads}.pt"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, str(path)], env=env, check=True)
        results.append(torch.load(path))
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_library_path_matches_eager_path(device, rng):
    cfg = _config(2, interpolation="smoothstep")
    x = _points(rng, 40, 3, F64, device)
    params = _params(rng, _num_rows(3, cfg), 2, F64, device)

    def all_grads():
        xs, ps = x.clone().requires_grad_(True), params.clone().requires_grad_(True)
        y = fieldfuse.hash_grid(xs, ps, **cfg)
        gx, gp = torch.autograd.grad(y.square().sum(), (xs, ps), create_graph=True)
        return (y, gx, gp, *torch.autograd.grad(gx.square().sum() + gp.sum(), (xs, ps)))

    eager = all_grads()
    with _registry.library_path():
        library = all_grads()
    for a, b in zip(eager, library, strict=True):
        _assert_same_table_gradient(a, b, device)


@pytest.mark.parametrize("device", DEVICES)
def test_input_gradient_alone_skips_the_table_gradient(device, rng, monkeypatch):
    # Note [gradients the pass uses]: torch.autograd.grad(y, x) asks the backward for the x
    # gradient only (no table scatter); the gradient is the one of a pass that also wants the table.
    backward = sys.modules["fieldfuse.hash_grid"]._ops["hash_grid_backward"]
    wanted = []

    def spy(*args):
        wanted.append(list(args[-1]))
        return backward.spec.impl(*args)

    monkeypatch.setattr(backward, "run_eagerly", spy)
    cfg = _config(2)
    x = _away_from_borders(_points(rng, 40, 3, F64, device), cfg).requires_grad_()
    params = _params(rng, _num_rows(3, cfg), 2, F64, device).requires_grad_()
    weights = torch.rand(x.shape[0], 2 * cfg["n_levels"], dtype=F64, device=device)
    (alone,) = torch.autograd.grad((fieldfuse.hash_grid(x, params, **cfg) * weights).sum(), x)
    both = torch.autograd.grad((fieldfuse.hash_grid(x, params, **cfg) * weights).sum(), (x, params))
    assert wanted == [[True, False], [True, True]]
    assert_close(alone, both[0], rtol=0, atol=0)


# --- CUDA: parity, float16, graphs ----------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
@pytest.mark.parametrize("dims", [2, 3])
def test_cpu_cuda_parity(dims, interpolation, rng):
    cfg = _config(4, interpolation=interpolation)
    x = _away_from_borders(_points(rng, 3000, dims, F64, "cpu"), cfg)
    params = _params(rng, _num_rows(dims, cfg), 4, F64, "cpu")
    out = []
    for device in ("cpu", "cuda"):
        xs = x.to(device).requires_grad_(True)
        ps = params.to(device).requires_grad_(True)
        y = fieldfuse.hash_grid(xs, ps, **cfg)
        gx, gp = torch.autograd.grad(y.square().sum(), (xs, ps), create_graph=True)
        second = torch.autograd.grad(gx.square().sum() + gp.square().sum(), (xs, ps))
        out.append([t.cpu() for t in (y, gx, gp, *second)])
    for a, b in zip(*out, strict=True):
        assert_close(a, b, **_tol(F64, 1e3))


@cuda_only
def test_float16_params(rng):
    cfg = _config(2)
    x = _points(rng, 4000, 3, F32, "cuda").requires_grad_(True)
    params16 = (_params(rng, _num_rows(3, cfg), 2, F32, "cuda") * 0.1).half().requires_grad_(True)
    y = fieldfuse.hash_grid(x, params16, **cfg)
    assert y.dtype == F32
    p64 = params16.detach().double().requires_grad_(True)
    yr = ref.hash_grid(x.detach().double(), p64, **cfg)
    assert_close(y.double(), yr, rtol=1e-4, atol=1e-5)  # float16 values are exact in float32
    g = torch.randn(y.shape, generator=rng).cuda()
    gp = torch.autograd.grad(y, params16, g)[0]
    assert gp.dtype == torch.float16
    gp_ref = torch.autograd.grad(yr, p64, g.double())[0]
    # Accumulated in float32, rounded once: half an ulp of float16 (2^-11 relative).
    assert_close(gp.double(), gp_ref, rtol=1e-3, atol=1e-3)


@cuda_only
def test_cuda_graph_capture(rng):
    cfg = _config(2, interpolation="smoothstep")
    x = _points(rng, 1000, 3, F32, "cuda").requires_grad_(True)
    params = _params(rng, _num_rows(3, cfg), 2, F32, "cuda").requires_grad_(True)

    def step():
        y = fieldfuse.hash_grid(x, params, **cfg)
        gx, gp = torch.autograd.grad(y.square().sum(), (x, params), create_graph=True)
        return (y, *torch.autograd.grad(gx.square().sum(), (x, params)))

    graph, captured = capture_cuda_graph(step)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, step(), strict=True):
        # float32 atomics: order-dependent rounding, compounded through the double backward's
        # cancellations, so single elements can differ by 0.3% (H100, 2026-11-24); the whole
        # tensor agrees to float32 rounding in norm.
        assert ((a - b).norm() / b.norm()).item() < 1e-5


# --- torch.compile and torch.library ---------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device, rng):
    # CPU: AOTAutograd with the fake impls and eager kernels (Inductor's CPU compile is slow on
    # the 2-core CI machine); CUDA: Inductor.
    backend = "aot_eager" if device == "cpu" else "inductor"
    torch._dynamo.reset()
    cfg = _config(2, interpolation="smoothstep")
    x = _points(rng, 64, 3, F32, device, special=False)
    params = _params(rng, _num_rows(3, cfg), 2, F32, device)

    config = [cfg[k] for k in ("n_levels", "n_features_per_level", "log2_hashmap_size",
                               "base_resolution", "per_level_scale", "interpolation")]
    g = torch.randn((64, 8), generator=rng).to(device)

    def loss_fn(x, params):
        # Dynamo does not trace torch.autograd.grad: the backward op is called directly, so the
        # compiled graph holds all three ops (the double backward in its backward graph).
        y = fieldfuse.hash_grid(x, params, **cfg)
        gx, gp = torch.ops.fieldfuse.hash_grid_backward(g, x, params, *config, [True, True])
        return y.square().sum() + gx.square().sum() + gp.square().sum()

    def grads(fn):
        xs, ps = x.clone().requires_grad_(True), params.clone().requires_grad_(True)
        return torch.autograd.grad(fn(xs, ps), (xs, ps))

    compiled = grads(torch.compile(loss_fn, fullgraph=True, backend=backend))
    for a, b in zip(compiled, grads(loss_fn), strict=True):
        assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, rng):
    cfg = _config(2)
    config = [cfg[k] for k in ("n_levels", "n_features_per_level", "log2_hashmap_size",
                               "base_resolution", "per_level_scale")] + ["linear"]
    x = _points(rng, 20, 3, F64, device, special=False).requires_grad_(True)
    params = _params(rng, _num_rows(3, cfg), 2, F64, device).requires_grad_(True)
    g = torch.randn((20, 8), generator=rng, dtype=F64).to(device).requires_grad_(True)
    ops = torch.ops.fieldfuse
    torch.library.opcheck(ops.hash_grid_forward, (x, params, *config))
    torch.library.opcheck(ops.hash_grid_backward, (g, x, params, *config, [True, True]))
    # The double backward has no gradient of its own (third order is not offered): its inputs
    # do not require one here.
    v, u = torch.randn_like(x), torch.randn_like(params)
    leaves = [t.detach() for t in (v, u, g, x, params)]
    torch.library.opcheck(ops.hash_grid_double_backward, (*leaves, *config, [True, True, True]))


# --- nn.HashGrid --------------------------------------------------------------------------------


def test_module_init_and_state_dict_round_trip(rng):
    grid = fieldfuse.nn.HashGrid(3, n_levels=4, log2_hashmap_size=8, base_resolution=4,
                                 dtype=F64)
    assert grid.params.shape == (_num_rows(3, _config(2)), 2)
    assert grid.params.abs().max() <= 1e-4 and grid.params.abs().max() > 0
    x = _points(rng, 30, 3, F64, "cpu")
    other = fieldfuse.nn.HashGrid(3, n_levels=4, log2_hashmap_size=8, base_resolution=4,
                                  dtype=F64)
    other.load_state_dict(grid.state_dict())
    assert torch.equal(other(x), grid(x))
    assert grid(x).shape == (x.shape[0], grid.n_output_dims)
    assert_close(grid(x), ref.hash_grid(x, grid.params, **_config(2)), **_tol(F64))


def test_module_checks_its_points_and_interpolation():
    # This config's table has the same rows in 2-D and 3-D, so only the module's D catches a
    # [B, 2] x given to a 3-D encoding.
    cfg = dict(n_levels=8, log2_hashmap_size=14, base_resolution=128)
    assert fieldfuse.hash_grid_num_params(2, **cfg) == fieldfuse.hash_grid_num_params(3, **cfg)
    grid = fieldfuse.nn.HashGrid(3, **cfg)
    with pytest.raises(ValueError, match=r"^HashGrid\(\): expected x to have n_input_dims = 3 "
                       r"columns, but got shape \[4, 2\]$"):
        grid(torch.rand(4, 2))
    with pytest.raises(ValueError, match=r"^HashGrid\(\): expected x to have n_input_dims = 3 "):
        grid.input_grad(torch.rand(4, 2), torch.ones(4, 16))
    with pytest.raises(ValueError, match=r"^HashGrid\(\): expected interpolation to be 'linear' or "
                       r"'smoothstep', but got 'cubic'$"):
        fieldfuse.nn.HashGrid(3, interpolation="cubic")


@pytest.mark.parametrize("device", DEVICES)
def test_module_input_grad_matches_autograd_to_second_order(device, rng):
    # input_grad is the backward op alone: the same input gradient as autograd.grad through the
    # forward, and the same gradients of a loss on it (to x, the table and the upstream weights).
    cfg = _config(2, interpolation="smoothstep")
    grid = fieldfuse.nn.HashGrid(3, **cfg, dtype=F64, device=device)
    with torch.no_grad():
        grid.params.copy_(_params(rng, grid.params.shape[0], 2, F64, device))
    x = _points(rng, 40, 3, F64, device, special=False)
    g = torch.randn((40, grid.n_output_dims), generator=rng, dtype=F64).to(device)
    results = []
    for via_op in (True, False):
        xs, gs = x.clone().requires_grad_(), g.clone().requires_grad_()
        if via_op:
            grad_x = grid.input_grad(xs, gs)
        else:
            (grad_x,) = torch.autograd.grad(grid(xs), xs, gs, create_graph=True)
        loss = (grad_x.square().sum(dim=1) * x[:, 0]).sum()
        results.append([grad_x, *torch.autograd.grad(loss, (xs, gs, grid.params))])
    for a, b in zip(*results, strict=True):
        assert_close(a, b, rtol=1e-10, atol=1e-10)
