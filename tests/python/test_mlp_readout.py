# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.mlp on a readout (one layer, one output: the tomography decoder), which CUDA runs on
its own streaming kernels (Note [mlp readout]): against the float64 oracle, every activation,
widths around the block size, batches across the persistent grid, layouts, bits, NaN."""

from __future__ import annotations

import pytest
import torch
from device_params import DEVICES, F32, F64, FLOAT_DTYPES, cuda_only

import fieldfuse
from fieldfuse.mlp import ACTIVATIONS
from fieldfuse.reference import mlp as ref

OPTIONS = dict(softplus_beta=2.0, sine_omega0=1.5, leaky_slope=0.1)


def _readout(width, dtype, device, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(1, width, generator=g, dtype=F64) / width**0.5).to(device, dtype)
    b = (torch.randn(1, generator=g, dtype=F64) * 0.3).to(device, dtype) if bias else None
    return w, b


def _x(batch, width, dtype, device, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, width, generator=g, dtype=F64).to(device, dtype)


def _grads(x, w, b, g_out, fn, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
    y = fn(leaves[0], [leaves[1]], [leaves[2]] if b is not None else None, **kw)
    grads = torch.autograd.grad(y, leaves, g_out)
    return y.detach(), grads


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("output_activation", ACTIVATIONS)
def test_gradcheck_every_activation(device, output_activation):
    w, b = _readout(5, F64, device)
    x = _x(7, 5, F64, device)
    kw = dict(output_activation=output_activation, **OPTIONS)
    leaves = [t.requires_grad_() for t in (x, w, b)]
    assert torch.autograd.gradcheck(lambda x, w, b: fieldfuse.mlp(x, [w], [b], **kw), leaves)
    assert torch.autograd.gradgradcheck(lambda x, w, b: fieldfuse.mlp(x, [w], [b], **kw), leaves)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("width", [1, 3, 32, 48, 255, 256, 257])
@pytest.mark.parametrize("batch", [0, 1, 255, 256, 257, 5000])
def test_matches_reference(device, dtype, width, batch):
    # 257 inputs is past the readout kernels' widest (the general path runs it): the same answer.
    w, b = _readout(width, dtype, device)
    x = _x(batch, width, dtype, device)
    g_out = _x(batch, 1, dtype, device, seed=3)
    y, grads = _grads(x, w, b, g_out, fieldfuse.mlp, output_activation="softplus")
    y_ref, grads_ref = _grads(x.double(), w.double(), b.double(), g_out.double(), ref.mlp,
                              output_activation="softplus")
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == F64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(y, y_ref.to(dtype), **tol)
    sum_tol = tol if dtype == F64 else dict(rtol=1e-4, atol=1e-4 * max(1.0, batch**0.5))
    for name, a, r in zip(("x", "w", "b"), grads, grads_ref):
        torch.testing.assert_close(a, r.to(dtype), **(tol if name == "x" else sum_tol), msg=name)


@cuda_only
def test_many_rows_cross_the_persistent_grid():
    # 1024 blocks of 256 rows cover 262 144 rows a pass; 600 000 rows take three passes.
    w, b = _readout(32, F32, "cuda")
    x = _x(600_000, 32, F32, "cuda")
    g_out = _x(600_000, 1, F32, "cuda", seed=3)
    y, grads = _grads(x, w, b, g_out, fieldfuse.mlp)
    y_ref, grads_ref = _grads(x.double(), w.double(), b.double(), g_out.double(), ref.mlp)
    torch.testing.assert_close(y, y_ref.float(), rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(grads[0], grads_ref[0].float(), rtol=2e-5, atol=2e-5)
    for a, r in zip(grads[1:], grads_ref[1:]):
        torch.testing.assert_close(a.double(), r, rtol=1e-4, atol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_without_bias_and_strided_layouts(device):
    x = _x(40, 24, F64, device)[:, ::2]  # column stride 2
    w, _ = _readout(12, F64, device, bias=False)
    w_strided = torch.stack([w, w], 2)[:, :, 0]
    assert not x.is_contiguous() and not w_strided.is_contiguous()
    g_out = _x(40, 1, F64, device, seed=5)
    y, grads = _grads(x, w_strided, None, g_out, fieldfuse.mlp, output_activation="tanh")
    y_ref, grads_ref = _grads(x.contiguous(), w, None, g_out, ref.mlp, output_activation="tanh")
    torch.testing.assert_close(y, y_ref)
    for a, r in zip(grads, grads_ref):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("device", DEVICES)
def test_two_calls_give_the_same_bits(device):
    w, b = _readout(32, F32, device)
    x = _x(70_000, 32, F32, device)
    g_out = _x(70_000, 1, F32, device, seed=3)
    first = _grads(x, w, b, g_out, fieldfuse.mlp)[1]
    second = _grads(x, w, b, g_out, fieldfuse.mlp)[1]
    for a, c in zip(first, second):
        assert torch.equal(a, c)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_row_stays_in_its_row(device):
    w, b = _readout(8, F64, device)
    x = _x(6, 8, F64, device)
    x[4, 3] = float("nan")
    g_out = torch.ones(6, 1, dtype=F64, device=device)
    y, grads = _grads(x, w, b, g_out, fieldfuse.mlp)
    assert torch.isnan(y[4]).all() and torch.isfinite(y[[0, 1, 2, 3, 5]]).all()
    assert torch.isfinite(grads[0][[0, 1, 2, 3, 5]]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_row_layouts_agree(device, dtype):
    # CUDA reads contiguous, 16-byte aligned rows a vector at a time and everything else a column
    # at a time (Note [mlp readout]): aligned, padded-row, misaligned and odd-pitch views of the
    # same values all give the oracle's answer.
    w, b = _readout(32, dtype, device)
    wide = _x(3001, 40, dtype, device)
    views = {
        "contiguous": wide[:, :32].contiguous(),
        "row pitch 40": wide[:, 4:36],
        "misaligned base": wide[:, 1:33],
        "row pitch 33": torch.cat([wide[:, :32], wide[:, :1]], 1)[:, :32],
    }
    g_out = _x(3001, 1, dtype, device, seed=3)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == F64 else dict(rtol=2e-5, atol=2e-5)
    for name, x in views.items():
        leaves = [x.requires_grad_(), w.detach().requires_grad_(), b.detach().requires_grad_()]
        y = fieldfuse.mlp(leaves[0], [leaves[1]], [leaves[2]])
        grads = torch.autograd.grad(y, leaves, g_out)
        x = x.detach()
        y_ref, grads_ref = _grads(x.double(), w.double(), b.double(), g_out.double(), ref.mlp)
        torch.testing.assert_close(y, y_ref.to(dtype), **tol, msg=name)
        torch.testing.assert_close(grads[0], grads_ref[0].to(dtype), **tol, msg=name)
        sum_tol = tol if dtype == F64 else dict(rtol=1e-4, atol=1e-2)
        for a, r in zip(grads[1:], grads_ref[1:]):
            torch.testing.assert_close(a, r.to(dtype), **sum_tol, msg=name)
