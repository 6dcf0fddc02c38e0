# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.mlp against the float64 oracle and torch.nn.Sequential: forward, backward, double
backward (gradcheck / gradgradcheck, Eikonal-loss gradients), shapes, layouts, compile, graphs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from device_params import (CUDA_MARKS, DEVICES, F32, F64, FLOAT_DTYPES, capture_cuda_graph,
                           cuda_only)

import fieldfuse
from fieldfuse import _registry
from fieldfuse.mlp import ACTIVATIONS
from fieldfuse.reference import mlp as ref

# Small ω₀ keeps sine's derivatives O(1), so finite differences in gradcheck stay accurate.
OPTIONS = dict(softplus_beta=2.0, sine_omega0=1.5, leaky_slope=0.1)
TOL = {F32: dict(rtol=2e-5, atol=2e-5), F64: dict(rtol=1e-10, atol=1e-10)}


def _network(sizes, dtype=F64, device="cpu", bias=True, scale=0.6, seed=0):
    g = torch.Generator().manual_seed(seed)
    weights = [(torch.randn(o, i, generator=g, dtype=F64) * scale / i**0.5).to(device, dtype)
               for i, o in zip(sizes[:-1], sizes[1:])]
    biases = [(torch.randn(o, generator=g, dtype=F64) * 0.2).to(device, dtype)
              for o in sizes[1:]] if bias else None
    return weights, biases


def _x(batch, width, dtype=F64, device="cpu", seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, width, generator=g, dtype=F64).to(device, dtype)


def _leaves(*tensors):
    out = []
    for t in tensors:
        if t is None:
            continue
        for u in t if isinstance(t, list) else [t]:
            out.append(u.detach().requires_grad_())
    return out


def _split(leaves, num_layers, bias):
    x, weights = leaves[0], list(leaves[1 : 1 + num_layers])
    biases = list(leaves[1 + num_layers :]) if bias else None
    return x, weights, biases


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("output_activation", ["none", "sigmoid", "softplus"])
def test_gradcheck_and_gradgradcheck(device, activation, output_activation):
    # Rows differ (random x), so a kernel reusing row 0's values for the batch fails here.
    sizes = [3, 16, 32, 2]
    weights, biases = _network(sizes, F64, device)
    leaves = _leaves(_x(5, 3, F64, device), weights, biases)
    kw = dict(activation=activation, output_activation=output_activation, **OPTIONS)

    def fn(*args):
        x, w, b = _split(list(args), len(weights), True)
        return fieldfuse.mlp(x, w, b, **kw)

    assert torch.autograd.gradcheck(fn, leaves)
    assert torch.autograd.gradgradcheck(fn, leaves)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_matches_reference_every_order(device, activation):
    sizes = [7, 48, 16, 5]
    weights, biases = _network(sizes, F64, device)
    x = _x(33, 7, F64, device)
    kw = dict(activation=activation, output_activation="tanh", **OPTIONS)
    ours, theirs = _leaves(x, weights, biases), _leaves(x, weights, biases)
    y = fieldfuse.mlp(*_split(ours, 3, True), **kw)
    y_ref = ref.mlp(*_split(theirs, 3, True), **kw)
    torch.testing.assert_close(y, y_ref, **TOL[F64])
    g = _x(33, 5, F64, device, seed=7)
    first = torch.autograd.grad(y, ours, g, create_graph=True)
    first_ref = torch.autograd.grad(y_ref, theirs, g, create_graph=True)
    for a, b in zip(first, first_ref):
        torch.testing.assert_close(a, b, **TOL[F64])
    v = _x(33, 7, F64, device, seed=9)
    second = torch.autograd.grad((first[0] * v).sum(), ours, allow_unused=True)
    second_ref = torch.autograd.grad((first_ref[0] * v).sum(), theirs, allow_unused=True)
    for a, b in zip(second, second_ref):
        torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
def test_row_zero_is_not_reused(device):
    # Two batches that share row 0 must differ in every other row's input gradient of the
    # Eikonal loss (the known bug: a second-order kernel used row 0's values for every row).
    weights, biases = _network([3, 32, 32, 1], F64, device)
    x = _x(6, 3, F64, device).requires_grad_()
    y = fieldfuse.mlp(x, weights, biases, activation="softplus", softplus_beta=10.0)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (hx,) = torch.autograd.grad(gx.square().sum(), x)
    x_ref = x.detach().requires_grad_()
    y_ref = ref.mlp(x_ref, weights, biases, activation="softplus", softplus_beta=10.0)
    (gr,) = torch.autograd.grad(y_ref.sum(), x_ref, create_graph=True)
    (hr,) = torch.autograd.grad(gr.square().sum(), x_ref)
    torch.testing.assert_close(hx, hr, **TOL[F64])
    assert not torch.allclose(hx[1:], hx[:1].expand_as(hx[1:]))


def _sequential(weights, biases, activation, beta=100.0):
    modules = []
    for k, w in enumerate(weights):
        linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=biases is not None,
                                 dtype=w.dtype, device=w.device)
        with torch.no_grad():
            linear.weight.copy_(w)
            if biases is not None:
                linear.bias.copy_(biases[k])
        modules.append(linear)
        if k < len(weights) - 1:
            modules.append(activation())
    return torch.nn.Sequential(*modules)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_eikonal_gradients_match_torch_sequential(device, dtype):
    # SDF 3 → 64×3 → 1 with Softplus(β = 100): forward, input gradient with create_graph, Eikonal
    # + surface loss, backward to every parameter and x; PyTorch's own double backward is the truth.
    weights, biases = _network([3, 64, 64, 64, 1], dtype, device)
    net = _sequential(weights, biases, lambda: torch.nn.Softplus(beta=100.0))
    x = _x(257, 3, dtype, device).mul(0.5).requires_grad_()
    x_t = x.detach().clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in (*weights, *biases)]

    def loss_of(y, xx):
        (grad,) = torch.autograd.grad(y.sum(), xx, create_graph=True)
        return (grad.norm(dim=1) - 1).square().mean() + y.abs().mean()

    y = fieldfuse.mlp(x, params[:4], params[4:], activation="softplus", softplus_beta=100.0)
    ours = torch.autograd.grad(loss_of(y, x), [x, *params])
    y_t = net(x_t)
    theirs = torch.autograd.grad(loss_of(y_t, x_t), [x_t, *net.parameters()])
    torch.testing.assert_close(y, y_t, **TOL[dtype])
    # net.parameters() is (w0, b0, w1, b1, ...); ours is (w..., b...)
    theirs_params = list(theirs[1:])
    order = theirs_params[0::2] + theirs_params[1::2]
    for a, b in zip(ours, [theirs[0], *order]):
        torch.testing.assert_close(a, b, rtol=1e-4 if dtype == F32 else 1e-9,
                                   atol=1e-4 if dtype == F32 else 1e-9)


@pytest.mark.parametrize("device", DEVICES)
def test_eikonal_step_computes_only_the_gradients_it_uses(device, monkeypatch):
    # Note [gradients the pass uses]: the input gradient with create_graph asks the backward for
    # grad_x alone, and the step's parameter gradients ask neither backward for grad_x; the
    # results are the library path's (which computes every gradient) to the bit.
    mlp_ops = sys.modules["fieldfuse.mlp"]._ops
    calls = []
    for name in ("mlp_backward", "mlp_double_backward"):
        op = mlp_ops[name]

        def spy(*args, op=op, name=name):
            calls.append((name, args[-3:] if name == "mlp_double_backward" else args[-2:]))
            return op.spec.impl(*args)

        monkeypatch.setattr(op, "run_eagerly", spy)
    weights, biases = _network([3, 32, 32, 1], F64, device)
    x = _x(33, 3, F64, device).requires_grad_()

    def step():
        params = [p.detach().requires_grad_() for p in (*weights, *biases)]
        y = fieldfuse.mlp(x, params[:3], params[3:], activation="softplus", softplus_beta=10.0)
        (grad,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        loss = (grad.norm(dim=1) - 1).square().mean() + y.abs().mean()
        return torch.autograd.grad(loss, params)

    ours = step()
    # (want_x, want_params) of the two backwards; (want_grad_out, want_x, want_params) of the
    # double backward. The engine may run the last two in either order (it does on CUDA).
    assert calls[0] == ("mlp_backward", (True, False))
    assert sorted(calls[1:]) == [("mlp_backward", (False, True)),
                                 ("mlp_double_backward", (False, False, True))]
    with _registry.library_path():
        library = step()
    for a, b in zip(ours, library, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", [16, 32, 48, 128, 208, 256])
def test_hidden_widths_every_order(device, width):
    # Widths past one 64-wide product tile (CUDA) and past the CPU's register blocks, all orders.
    weights, biases = _network([5, width, width, 3], F64, device)
    x = _x(70, 5, F64, device)
    kw = dict(activation="silu", output_activation="tanh")
    ours, theirs = _leaves(x, weights, biases), _leaves(x, weights, biases)
    y = fieldfuse.mlp(*_split(ours, 3, True), **kw)
    y_ref = ref.mlp(*_split(theirs, 3, True), **kw)
    torch.testing.assert_close(y, y_ref, **TOL[F64])
    first = torch.autograd.grad(y.square().sum(), ours, create_graph=True)
    first_ref = torch.autograd.grad(y_ref.square().sum(), theirs, create_graph=True)
    for a, b in zip(first, first_ref):
        torch.testing.assert_close(a, b, **TOL[F64])
    second = torch.autograd.grad(first[0].square().sum() + first[1].sum(), ours)
    second_ref = torch.autograd.grad(first_ref[0].square().sum() + first_ref[1].sum(), theirs)
    for a, b in zip(second, second_ref):
        torch.testing.assert_close(a, b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sizes", [[3, 16, 1], [7, 32, 5], [1, 16, 16, 1], [40, 64, 64, 64, 17]])
@pytest.mark.parametrize("batch", [0, 1, 2, 97])
def test_odd_widths_and_batches(device, sizes, batch):
    weights, biases = _network(sizes, F32, device)
    leaves = _leaves(_x(batch, sizes[0], F32, device), weights, biases)
    x, w, b = _split(leaves, len(weights), True)
    y = fieldfuse.mlp(x, w, b, activation="tanh")
    assert y.shape == (batch, sizes[-1])
    grads = torch.autograd.grad(y.sum(), leaves)
    ref_leaves = _leaves(*(t.double() for t in leaves))
    y_ref = ref.mlp(*_split(ref_leaves, len(weights), True), activation="tanh")
    grads_ref = torch.autograd.grad(y_ref.sum(), ref_leaves)
    torch.testing.assert_close(y, y_ref.float(), **TOL[F32])
    for a, r in zip(grads, grads_ref):
        torch.testing.assert_close(a, r.float(), rtol=1e-4, atol=1e-4)  # sums over the batch


@pytest.mark.parametrize("device", DEVICES)
def test_without_biases(device):
    weights, _ = _network([4, 32, 2], F64, device, bias=False)
    leaves = _leaves(_x(9, 4, F64, device), weights)
    y = fieldfuse.mlp(leaves[0], leaves[1:], None, activation="sine", sine_omega0=2.0)
    y_ref = ref.mlp(leaves[0], leaves[1:], None, activation="sine", sine_omega0=2.0)
    torch.testing.assert_close(y, y_ref, **TOL[F64])
    assert torch.autograd.gradgradcheck(
        lambda x, w0, w1: fieldfuse.mlp(x, [w0, w1], activation="sine", sine_omega0=2.0),
        leaves)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device):
    weights, biases = _network([6, 16, 3], F64, device)
    x = _x(12, 12, F64, device)[:, ::2]  # column stride 2
    w_t = [w.t().contiguous().t() for w in weights]  # transposed layouts
    b_strided = [torch.stack([b, b], 1)[:, 0] for b in biases]
    assert not x.is_contiguous() and not w_t[0].is_contiguous()
    leaves = _leaves(x, w_t, b_strided)
    y = fieldfuse.mlp(*_split(leaves, 2, True), activation="silu")
    grads = torch.autograd.grad(y.square().sum(), leaves)
    ref_leaves = _leaves(x.contiguous(), weights, biases)
    y_ref = ref.mlp(*_split(ref_leaves, 2, True), activation="silu")
    grads_ref = torch.autograd.grad(y_ref.square().sum(), ref_leaves)
    torch.testing.assert_close(y, y_ref, **TOL[F64])
    for a, b in zip(grads, grads_ref):
        assert a.is_contiguous() or a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
def test_nan_propagates_to_its_row_only(device):
    weights, biases = _network([3, 16, 2], F64, device)
    x = _x(4, 3, F64, device)
    x[2, 1] = float("nan")
    for activation in ACTIVATIONS:
        y = fieldfuse.mlp(x, weights, biases, activation=activation, **OPTIONS)
        assert torch.isnan(y[2]).all(), activation
        assert torch.isfinite(y[[0, 1, 3]]).all(), activation


def _every_order(fn, leaves, num_layers, upstream, v, **kw):
    """y, the first-order gradients of <upstream, y> (create_graph) and the gradients of a loss on
    all of them (the input gradient weighted by v, squared weight gradients, summed bias
    gradients) with respect to the leaves."""
    x, w, b = _split(leaves, num_layers, True)
    y = fn(x, w, b, **kw)
    first = torch.autograd.grad(y, leaves, upstream, create_graph=True)
    loss = (first[0] * v).sum() + sum(g.square().sum() for g in first[1 : 1 + num_layers]) \
        + sum(g.sum() for g in first[1 + num_layers :])
    # With output_activation "none" the last bias reaches no first-order gradient: a zero.
    return [y, *first, *torch.autograd.grad(loss, leaves, materialize_grads=True)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("output_activation", ACTIVATIONS)
def test_every_output_activation_gradgradcheck(device, output_activation):
    # The output layer's activation over the whole list, behind hidden layers and with two
    # outputs (a one-layer, one-output network takes the readout kernels on CUDA instead).
    weights, biases = _network([3, 16, 16, 2], F64, device)
    leaves = _leaves(_x(4, 3, F64, device), weights, biases)
    kw = dict(activation="tanh", output_activation=output_activation, **OPTIONS)

    def fn(*args):
        return fieldfuse.mlp(*_split(list(args), 3, True), **kw)

    assert torch.autograd.gradcheck(fn, leaves)
    assert torch.autograd.gradgradcheck(fn, leaves)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_double_backward_to_the_upstream_gradient_matches_reference(device, activation):
    # gradgradcheck checks the derivative with respect to the upstream gradient g only against
    # finite differences; here it is compared with PyTorch's own double backward of the oracle,
    # together with every other second-order gradient.
    weights, biases = _network([4, 16, 32, 3], F64, device)
    x, g, v = _x(9, 4, F64, device), _x(9, 3, F64, device, seed=5), _x(9, 4, F64, device, seed=6)
    kw = dict(activation=activation, output_activation="sigmoid", **OPTIONS)
    results = []
    for fn in (fieldfuse.mlp, ref.mlp):
        leaves = _leaves(x, weights, biases)
        upstream = g.detach().requires_grad_()
        x_, w, b = _split(leaves, 3, True)
        first = torch.autograd.grad(fn(x_, w, b, **kw), leaves, upstream, create_graph=True)
        loss = (first[0] * v).sum() + first[2].square().sum() + first[-1].sum()
        results.append(torch.autograd.grad(loss, [upstream, *leaves]))
    assert results[0][0].abs().max() > 0  # the upstream term is not trivially zero
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_nan_row_leaves_the_other_rows_every_order(device, activation):
    # A NaN in one row of x reaches at most that row of y and of both input gradients: every
    # other row is what the same batch without that row gives (parameter gradients sum over the
    # rows and may be NaN).
    weights, biases = _network([3, 16, 16, 2], F64, device)
    x = _x(5, 3, F64, device)
    x[2, 1] = float("nan")
    kw = dict(activation=activation, output_activation="tanh", **OPTIONS)
    keep = [0, 1, 3, 4]

    def rows(xx):
        xx = xx.detach().requires_grad_()
        y = fieldfuse.mlp(xx, weights, biases, **kw)
        (gx,) = torch.autograd.grad(y.square().sum(), xx, create_graph=True)
        (hx,) = torch.autograd.grad(gx.square().sum(), xx)
        return y, gx, hx

    with_nan, without = rows(x), rows(x[keep])
    assert torch.isnan(with_nan[0][2]).all()
    for a, b in zip(with_nan, without, strict=True):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a[keep], b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
def test_nan_weight_reaches_every_row(device):
    weights, biases = _network([3, 16, 2], F64, device)
    weights[1][0, 5] = float("nan")
    x = _x(4, 3, F64, device).requires_grad_()
    y = fieldfuse.mlp(x, weights, biases, activation="softplus")
    assert torch.isnan(y[:, 0]).all() and torch.isfinite(y[:, 1]).all()
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert torch.isnan(gx).all()


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs_every_order(device):
    # Strided x, transposed weights, strided biases and an expanded (stride-0) upstream gradient,
    # through the double backward; against the oracle on contiguous copies.
    weights, biases = _network([6, 32, 16, 3], F64, device)
    x = _x(12, 12, F64, device)[:, ::2]
    w_t = [w.t().contiguous().t() for w in weights]
    b_strided = [torch.stack([b, b], 1)[:, 0] for b in biases]
    upstream = _x(1, 3, F64, device, seed=4).expand(12, 3)
    v = _x(12, 6, F64, device, seed=8)
    kw = dict(activation="softplus", output_activation="sigmoid", **OPTIONS)
    ours = _every_order(fieldfuse.mlp, _leaves(x, w_t, b_strided), 3, upstream, v, **kw)
    theirs = _every_order(ref.mlp, _leaves(x.contiguous(), weights, biases), 3,
                          upstream.contiguous(), v, **kw)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [0, 1])
def test_empty_and_single_row_batches_every_order(device, batch):
    weights, biases = _network([5, 32, 16, 3], F64, device)
    x, g, v = _x(batch, 5, F64, device), _x(batch, 3, F64, device, 2), _x(batch, 5, F64, device, 3)
    kw = dict(activation="silu", output_activation="none")
    ours = _every_order(fieldfuse.mlp, _leaves(x, weights, biases), 3, g, v, **kw)
    theirs = _every_order(ref.mlp, _leaves(x, weights, biases), 3, g, v, **kw)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    # Schema, fake impl, autograd registration and AOT dispatch of the four raw ops.
    weights, biases = _network([3, 16, 2], F64, device)
    x, g = _x(6, 3, F64, device), _x(6, 2, F64, device, seed=2)
    options = ["softplus", "tanh", 2.0, 30.0, 0.01, None]

    def grad(t):
        return t.detach().requires_grad_()

    ops = torch.ops.fieldfuse
    network = [grad(x), [grad(w) for w in weights], [grad(b) for b in biases], *options]
    torch.library.opcheck(ops.mlp_forward, tuple(network))
    torch.library.opcheck(ops.mlp_backward, (*network, grad(g), True, True))
    torch.library.opcheck(ops.mlp_value_and_input_grad, (*network, grad(g)))
    # The double backward has no gradient of its own (third order is not offered).
    plain = [x, weights, biases, *options]
    upstream = ([torch.randn_like(w) for w in weights], [torch.randn_like(b) for b in biases])
    torch.library.opcheck(ops.mlp_double_backward,
                          (*plain, g, torch.randn_like(x), *upstream, torch.randn_like(g),
                           True, True, True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compute_dtype", [None, pytest.param(torch.float16, marks=CUDA_MARKS),
                                           pytest.param(torch.bfloat16, marks=CUDA_MARKS)])
def test_two_calls_give_the_same_bits(device, compute_dtype):
    # Parameter gradients are per-block partials summed in a fixed order: no run-to-run jitter,
    # in the backward and in the double backward. Enough rows for many CUDA blocks.
    if compute_dtype is not None and device == "cpu":
        pytest.skip("16-bit compute is CUDA only")
    weights, biases = _network([8, 64, 64, 4], F32, device)
    leaves = _leaves(_x(30001, 8, F32, device), weights, biases)
    runs = []
    for _ in range(2):
        x, w, b = _split(leaves, 3, True)
        y = fieldfuse.mlp(x, w, b, activation="softplus", compute_dtype=compute_dtype)
        first = torch.autograd.grad(y.square().sum(), leaves, create_graph=True)
        second = torch.autograd.grad(first[0].square().sum() + first[1].sum(), leaves)
        runs.append([y, *first, *second])
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compute_dtype", [None, pytest.param(torch.float16, marks=CUDA_MARKS),
                                           pytest.param(torch.bfloat16, marks=CUDA_MARKS)])
@pytest.mark.parametrize("activation", ["relu", "softplus"])
def test_frozen_parameters_leave_the_others_unchanged(device, compute_dtype, activation):
    # Some parameters not requiring grad (so some layers want no dW or no db, and on CUDA the
    # 16-bit register backward alternates its δ buffers over the other layers only): every
    # gradient still computed is the same bits as with all parameters requiring grad, and the
    # frozen ones get none. Enough rows for many CUDA blocks, with a partial last tile.
    if compute_dtype is not None and device == "cpu":
        pytest.skip("16-bit compute is CUDA only")
    sizes = [32, 64, 64, 64, 64, 16]
    weights, biases = _network(sizes, F32, device)
    x = _x(5003, sizes[0], F32, device)
    upstream = _x(5003, sizes[-1], F32, device, seed=2)
    n = len(weights)

    def grads(frozen):
        leaves = _leaves(x, weights, biases)
        for i in frozen:
            leaves[i].requires_grad_(False)
        y = fieldfuse.mlp(leaves[0], leaves[1 : 1 + n], leaves[1 + n :], activation=activation,
                          compute_dtype=compute_dtype)
        wanted = [t for t in leaves if t.requires_grad]
        return dict(zip([i for i, t in enumerate(leaves) if t.requires_grad],
                        torch.autograd.grad(y, wanted, upstream)))

    every = grads(())
    # x, the weights of layers 1 and 2 (the layers with dW are 4, 3 and 0, so layer 0's δ reuses
    # layer 4's buffer) and the bias of layer 3 (dW without db); then the weight of layer 4 (db
    # without dW) and the bias of layer 0.
    for frozen in ((0, 1 + 1, 1 + 2, 1 + n + 3), (1 + 4, 1 + n + 0)):
        some = grads(frozen)
        assert sorted(some) == [i for i in range(1 + 2 * n) if i not in frozen]
        for i, g in some.items():
            assert torch.equal(g, every[i]), (frozen, i)


def test_library_path_matches_eager_path():
    weights, biases = _network([3, 16, 1])
    leaves = _leaves(_x(11, 3), weights, biases)

    def eikonal_grads():
        x, w, b = _split(leaves, 2, True)
        y = fieldfuse.mlp(x, w, b, activation="softplus", softplus_beta=4.0)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        return torch.autograd.grad(g.square().sum(), leaves)

    eager = eikonal_grads()
    with fieldfuse._registry.library_path():
        library = eikonal_grads()
    for a, b in zip(eager, library):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_penalty_on_weight_gradients_matches_reference(device):
    # Second order through grad_weights / grad_biases (the V and c terms of the double backward).
    weights, biases = _network([3, 16, 2], F64, device)
    x = _x(7, 3, F64, device)
    ours, theirs = _leaves(x, weights, biases), _leaves(x, weights, biases)
    results = []
    for leaves, fn in ((ours, fieldfuse.mlp), (theirs, ref.mlp)):
        x, w, b = _split(leaves, 2, True)
        y = fn(x, w, b, activation="tanh")
        gw = torch.autograd.grad(y.square().sum(), [w[0], b[1]], create_graph=True)
        results.append(torch.autograd.grad(gw[0].square().sum() + gw[1].sum(), leaves))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_first_and_second_order(device):
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        # torch 2.4 (our oldest) cannot trace torch.autograd.grad inside a compiled graph at all.
        pytest.skip("this torch's Dynamo has no trace_autograd_ops (autograd.grad in a graph)")
    weights, biases = _network([3, 16, 1], F32, device)
    leaves = _leaves(_x(10, 3, F32, device), weights, biases)

    def loss_fn(x, w0, w1, b0, b1):
        y = fieldfuse.mlp(x, [w0, w1], [b0, b1], activation="softplus", softplus_beta=5.0)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        return (g.norm(dim=1) - 1).square().mean() + y.square().mean()

    # Dynamo traces torch.autograd.grad inside the graph only with trace_autograd_ops.
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(loss_fn, fullgraph=True)
        ours = torch.autograd.grad(compiled(*leaves), leaves)
    eager = torch.autograd.grad(loss_fn(*leaves), leaves)
    for a, b in zip(ours, eager):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
def test_frozen_network_on_the_library_path(device, bias):
    # Only x requires a gradient (a frozen network): the gradients of the Tensor[] arguments are
    # lists of None, the structure torch.library's autograd checks (a bare None was an error on
    # the library path, so under torch.compile), through both ops and both orders.
    weights, biases = _network([3, 16, 2], F64, device, bias=bias)
    x = _x(5, 3, F64, device).requires_grad_()
    kw = dict(activation="softplus")

    def grads():
        y = fieldfuse.mlp(x, weights, biases, **kw)
        (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        (hx,) = torch.autograd.grad(gx.square().sum(), x)
        y2, g2 = fieldfuse.mlp_value_and_input_grad(x, weights, biases, **kw)
        (h2,) = torch.autograd.grad(g2.square().sum() + y2.sum(), x)
        return gx, hx, h2

    eager = grads()
    with _registry.library_path():
        library = grads()
    for a, b in zip(eager, library, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    compiled = torch.compile(lambda xx: fieldfuse.mlp(xx, weights, biases, **kw).square().sum(),
                             backend="aot_eager", fullgraph=True)
    (gc,) = torch.autograd.grad(compiled(x), x)
    (ge,) = torch.autograd.grad(fieldfuse.mlp(x, weights, biases, **kw).square().sum(), x)
    torch.testing.assert_close(gc, ge, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_forward_backward(device):
    weights, biases = _network([5, 32, 2], F32, device)
    leaves = _leaves(_x(17, 5, F32, device), weights, biases)

    def loss_fn(x, w0, w1, b0, b1):
        return fieldfuse.mlp(x, [w0, w1], [b0, b1], activation="relu").square().sum()

    ours = torch.autograd.grad(torch.compile(loss_fn, fullgraph=True)(*leaves), leaves)
    eager = torch.autograd.grad(loss_fn(*leaves), leaves)
    for a, b in zip(ours, eager):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@cuda_only
@pytest.mark.parametrize("activation", ["relu", "softplus"])
@pytest.mark.parametrize("sizes", [[7, 32, 5], [32, 64, 64, 64, 64, 16], [3, 64, 64, 64, 64, 1],
                                   [5, 128, 128, 3], [6, 256, 256, 9]])
def test_cuda_float32_warp_fused_plans_every_order_and_bits(activation, sizes):
    # float32 on CUDA runs the warp-fused kernels with the FMA engine (Note [mlp warp-fused
    # kernel]); these widths select its plans (4 warps with the dW accumulator in shared memory,
    # fewer warps, weights read from the workspace) in every order. Every upstream term of the
    # double backward is non-zero (v, V_k, c_k). Against float64, and the same bits on every call.
    weights, biases = _network(sizes, F32, "cuda")
    x = _x(3001, sizes[0], F32, "cuda")
    n = len(weights)

    def grads(dtype):
        leaves = _leaves(*(t.to(dtype) for t in [x, *weights, *biases]))
        y = fieldfuse.mlp(*_split(leaves, n, True), activation=activation, softplus_beta=5.0)
        first = torch.autograd.grad(y.square().sum(), leaves, create_graph=True)
        loss = (first[0].norm(dim=1) - 1).square().mean() + sum(g.square().sum() for g in first[1:])
        return [y, *first, *torch.autograd.grad(loss, leaves)]

    ours, f64 = grads(F32), grads(F64)
    for i, (a, b) in enumerate(zip(ours, f64)):
        err = ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()
        assert err < 1e-5, (i, err)  # float32 products, relative to the float64 result
    for a, b in zip(ours, grads(F32)):
        assert torch.equal(a, b)


@cuda_only
def test_cuda_float32_tile_kernels_every_order():
    # An input wider than the warp-fused kernels take (padded width > 256) keeps float32 on the
    # tile kernels (Note [mlp tile kernel]): every order against the float64 reference.
    test_cuda_float32_warp_fused_plans_every_order_and_bits("softplus", [300, 32, 2])


@cuda_only
def test_cpu_cuda_parity_every_order():
    weights, biases = _network([3, 64, 64, 1])
    x = _x(1000, 3)
    results = {}
    for device in ("cpu", "cuda"):
        leaves = _leaves(*(t.to(device) for t in [x, *weights, *biases]))
        xx, w, b = _split(leaves, 3, True)
        y = fieldfuse.mlp(xx, w, b, activation="silu")
        (g,) = torch.autograd.grad(y.sum(), xx, create_graph=True)
        results[device] = [y, g, *torch.autograd.grad(g.square().sum(), leaves)]
    for a, b in zip(results["cpu"], results["cuda"]):
        torch.testing.assert_close(a, b.cpu(), **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
def test_large_batch_every_order(device):
    # A million rows and a partial last tile (1000003 = 2^20 − 45573): y, the input gradient, the
    # parameter gradients summed over every row, and the double backward, in float32 against
    # the float64 oracle. The CPU runs a narrower network so the oracle's graph stays small.
    sizes = [3, 64, 64, 2] if device == "cuda" else [3, 16, 16, 2]
    weights, biases = _network(sizes, F32, device)
    x = _x(1000003, 3, F32, device)
    kw = dict(activation="softplus", softplus_beta=3.0)

    def every_order(dtype):
        leaves = _leaves(*(t.to(dtype) for t in [x, *weights, *biases]))
        xx, w, b = _split(leaves, 3, True)
        y = fieldfuse.mlp(xx, w, b, **kw) if dtype == F32 else ref.mlp(xx, w, b, **kw)
        first = torch.autograd.grad(y.sum(), leaves, create_graph=True)
        # The last bias reaches no first-order gradient (output activation "none"): a zero.
        second = torch.autograd.grad(first[0].square().sum() + first[1].square().sum(), leaves,
                                     materialize_grads=True)
        return [y.detach(), *(g.detach() for g in first), *second]

    # Sums over 10^6 rows in float32: the CPU measured at most 1.9e-6 from float64.
    for i, (a, b) in enumerate(zip(every_order(F32), every_order(F64), strict=True)):
        err = ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()
        assert err < 5e-5, (i, err)


@cuda_only
def test_cuda_graph_capture():
    weights, biases = _network([3, 32, 1], F32, "cuda")
    leaves = _leaves(_x(300, 3, F32, "cuda"), weights, biases)

    def step():
        x, w, b = _split(leaves, 2, True)
        y = fieldfuse.mlp(x, w, b, activation="softplus", softplus_beta=8.0)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        return torch.autograd.grad(g.square().sum() + y.sum(), leaves)

    expected = step()
    graph, captured = capture_cuda_graph(step)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, expected):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_cpu_builds_below_the_machine_agree(isa):
    """The CPU products run in the best of three builds the CPU supports (Note [mlp CPU clones]),
    each with its own register blocks (Note [mlp CPU blocks]); FIELDFUSE_MLP_CPU_ISA caps the
    choice. Each build, in a fresh process, against the float64 oracle: widths that take every
    block width (64, 32, 16) and a ragged one, and a batch with leftover rows."""
    script = textwrap.dedent("""
        import torch, fieldfuse
        from fieldfuse.reference import mlp as ref
        g = torch.Generator().manual_seed(0)
        sizes = [32, 64, 48, 32, 16, 5]
        ws = [torch.randn(o, i, generator=g) / i**0.5 for i, o in zip(sizes[:-1], sizes[1:])]
        bs = [torch.randn(o, generator=g) * 0.1 for o in sizes[1:]]
        x = torch.randn(203, 32, generator=g)
        gy = torch.randn(203, 5, generator=g)
        def grads(fn, dtype):
            leaves = [t.to(dtype).requires_grad_() for t in [x, *ws, *bs]]
            y = fn(leaves[0], leaves[1:6], leaves[6:], activation="tanh")
            return [y.detach()] + list(torch.autograd.grad(y, leaves, gy.to(dtype)))
        for a, b in zip(grads(fieldfuse.mlp, torch.float32), grads(ref.mlp, torch.float64)):
            torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)
        print("ok")
    """)
    env = dict(os.environ, FIELDFUSE_MLP_CPU_ISA=isa)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
