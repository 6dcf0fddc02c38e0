# SPDX-License-Identifier: Apache-2.0
"""Argument validation of fieldfuse.hash_grid and its raw ops: exception types and messages that
start with the exact public name and name the argument."""

from __future__ import annotations

import math

import pytest
import torch

import fieldfuse
from device_params import cuda_only

F32, F64 = torch.float32, torch.float64
# 3-D: res 4 (64 rows, dense), 8 and 16 (hashed into 2^6).
CFG = dict(n_levels=3, n_features_per_level=2, log2_hashmap_size=6, base_resolution=4)
ROWS = 64 * 3
CONFIG = [3, 2, 6, 4, 2.0, "linear"]  # the raw ops' config arguments


def _case(case_id, exc, pattern, call):
    """`pattern` starts with the op's exact public name; the message must start with `name(): `
    (a prefix such as `hash_grid_backward` must not pass for `hash_grid`)."""
    name, rest = pattern.split(".*", 1)
    return pytest.param(exc, rf"(?s)^{name}\(\): .*{rest}", call, id=case_id)


def _grid(x=None, params=None, **overrides):
    x = torch.rand(5, 3) if x is None else x
    params = torch.zeros(ROWS, 2) if params is None else params
    return lambda: fieldfuse.hash_grid(x, params, **{**CFG, **overrides})


def _num_params(*args, **kwargs):
    return lambda: fieldfuse.hash_grid_num_params(*args, **kwargs)


def _backward(grad_out=None, x=None, params=None, wants=(True, True)):
    x = torch.rand(5, 3) if x is None else x
    params = torch.zeros(ROWS, 2) if params is None else params
    grad_out = torch.ones(5, 6) if grad_out is None else grad_out
    return lambda: torch.ops.fieldfuse.hash_grid_backward(grad_out, x, params, *CONFIG, list(wants))


def _double_backward(v=None, u=None, grad_out=None):
    x, params = torch.rand(5, 3), torch.zeros(ROWS, 2)
    grad_out = torch.ones(5, 6) if grad_out is None else grad_out
    return lambda: torch.ops.fieldfuse.hash_grid_double_backward(
        v, u, grad_out, x, params, *CONFIG, [True, True, True])


def _cases():
    # x
    yield _case("x-1d", ValueError, r"hash_grid.*\bx\b.*\[5\]", _grid(x=torch.rand(5)))
    yield _case("x-4d-points", ValueError, r"hash_grid.*\bx\b.*D = 2 or 3.*\[5, 4\]",
                _grid(x=torch.rand(5, 4)))
    yield _case("x-1d-points", ValueError, r"hash_grid.*\bx\b.*\[5, 1\]", _grid(x=torch.rand(5, 1)))
    yield _case("x-int", TypeError, r"hash_grid.*\bx\b.*int64",
                _grid(x=torch.zeros(5, 3, dtype=torch.int64)))
    yield _case("x-half", TypeError, r"hash_grid.*\bx\b.*float16", _grid(x=torch.rand(5, 3).half()))
    yield _case("x-list", TypeError, r"hash_grid.*\bx\b.*list", _grid(x=[[0.0, 0.0, 0.0]]))
    # params
    yield _case("params-rows", ValueError, r"hash_grid.*\bparams\b.*\[192, 2\].*\[100, 2\]",
                _grid(params=torch.zeros(100, 2)))
    yield _case("params-features", ValueError, r"hash_grid.*\bparams\b.*\[192, 2\].*\[192, 4\]",
                _grid(params=torch.zeros(ROWS, 4)))
    yield _case("params-1d", ValueError, r"hash_grid.*\bparams\b", _grid(params=torch.zeros(ROWS)))
    yield _case("params-dtype", TypeError, r"hash_grid.*\bparams\b.*float32.*float64",
                _grid(params=torch.zeros(ROWS, 2, dtype=F64)))
    yield _case("params-half-cpu", NotImplementedError, r"hash_grid.*\bparams\b.*float16",
                _grid(params=torch.zeros(ROWS, 2, dtype=torch.float16)))
    yield _case("params-bfloat16", TypeError, r"hash_grid.*\bparams\b.*bfloat16",
                _grid(params=torch.zeros(ROWS, 2, dtype=torch.bfloat16)))
    yield _case("params-none", TypeError, r"hash_grid.*\bparams\b", _grid(params="table"))
    # options
    for bad in (0, -1, 33):
        yield _case(f"n_levels-{bad}", ValueError, rf"hash_grid.*\bn_levels\b.*\[1, 32\].*{bad}",
                    _grid(n_levels=bad))
    for bad in (0, 3, 16):
        yield _case(f"features-{bad}", ValueError,
                    rf"hash_grid.*\bn_features_per_level\b.*1, 2, 4 or 8.*{bad}",
                    _grid(n_features_per_level=bad))
    for bad in (0, 32):
        yield _case(f"log2-{bad}", ValueError, rf"hash_grid.*\blog2_hashmap_size\b.*{bad}",
                    _grid(log2_hashmap_size=bad))
    yield _case("base-0", ValueError, r"hash_grid.*\bbase_resolution\b.*0", _grid(base_resolution=0))
    for bad in (0.5, math.nan, math.inf):
        yield _case(f"scale-{bad}", ValueError,
                    r"hash_grid.*expected per_level_scale to be finite \(as a float32 number\) "
                    rf"and >= 1, but got {bad}$", _grid(per_level_scale=bad))
    # Finite as a double but inf in float32, where the level scales are computed.
    yield _case("scale-beyond-float32", ValueError,
                r"hash_grid.*expected per_level_scale to be finite \(as a float32 number\) "
                r"and >= 1, but got 1e\+39$",
                _grid(n_levels=1, per_level_scale=1e39))
    yield _case("scale-too-fine", ValueError, r"hash_grid.*\bfinest level's scale\b",
                _grid(n_levels=30, per_level_scale=2.0))
    yield _case("interp-value", ValueError, r'hash_grid.*\binterpolation\b.*"cubic"',
                _grid(interpolation="cubic"))
    yield _case("interp-type", TypeError, r"hash_grid.*\binterpolation\b", _grid(interpolation=1))
    yield _case("n_levels-float", TypeError, r"hash_grid.*\bn_levels\b.*float",
                _grid(n_levels=2.0))
    yield _case("n_levels-bool", TypeError, r"hash_grid.*\bn_levels\b.*bool", _grid(n_levels=True))
    yield _case("scale-string", TypeError, r"hash_grid.*\bper_level_scale\b",
                _grid(per_level_scale="2"))
    # hash_grid_num_params
    for dims in (1, 4):
        yield _case(f"num-params-dims-{dims}", ValueError,
                    rf"hash_grid_num_params.*\bn_input_dims\b.*{dims}", _num_params(dims))
    yield _case("num-params-levels", ValueError, r"hash_grid_num_params.*\bn_levels\b",
                _num_params(3, n_levels=0))
    yield _case("num-params-type", TypeError, r"hash_grid_num_params.*\bn_input_dims\b",
                _num_params(3.0))
    # backward and double backward
    yield _case("backward-grad_out-shape", ValueError,
                r"hash_grid_backward.*\bgrad_out\b.*\[5, 6\].*\[5, 4\]",
                _backward(grad_out=torch.ones(5, 4)))
    yield _case("backward-grad_out-dtype", TypeError, r"hash_grid_backward.*\bgrad_out\b.*float64",
                _backward(grad_out=torch.ones(5, 6, dtype=F64)))
    yield _case("backward-x", ValueError, r"hash_grid_backward.*\bx\b",
                _backward(x=torch.rand(5, 4)))
    yield _case("double-backward-seed-x", ValueError,
                r"hash_grid_double_backward.*\bgrad_grad_x\b.*\[5, 3\]",
                _double_backward(v=torch.ones(5, 2)))
    yield _case("double-backward-seed-params", TypeError,
                r"hash_grid_double_backward.*\bgrad_grad_params\b.*float64",
                _double_backward(u=torch.ones(ROWS, 2, dtype=F64)))
    yield _case("double-backward-grad_out", ValueError,
                r"hash_grid_double_backward.*\bgrad_out\b", _double_backward(grad_out=torch.ones(6)))


@pytest.mark.parametrize(("exc", "pattern", "call"), list(_cases()))
def test_errors(exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call()


@cuda_only
def test_device_mismatch():
    with pytest.raises(ValueError, match=r"^hash_grid\(\): .*\bparams\b.*\bx\b.*cuda"):
        fieldfuse.hash_grid(torch.rand(5, 3), torch.zeros(ROWS, 2, device="cuda"), **CFG)
    with pytest.raises(TypeError, match=r"^hash_grid\(\): .*\bparams\b.*float16"):
        fieldfuse.hash_grid(torch.rand(5, 3, device="cuda", dtype=F64),
                            torch.zeros(ROWS, 2, device="cuda", dtype=torch.float16), **CFG)

