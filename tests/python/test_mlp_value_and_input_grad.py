# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.mlp_value_and_input_grad: (y, ∂(Σ grad_out ⊙ y)/∂x) in one op, whose backward takes a
loss on both outputs in one double-backward sweep (Note [mlp value and input gradient]). Checked
against the two-op form (fieldfuse.mlp + autograd.grad with create_graph, itself tested against
the float64 oracle in test_mlp.py) and against float64 on every CUDA kernel family."""

from __future__ import annotations

import pytest
import torch
from device_params import DEVICES, F32, F64, capture_cuda_graph, cuda_only

import fieldfuse
from fieldfuse.mlp import ACTIVATIONS

OPTIONS = dict(softplus_beta=2.0, sine_omega0=1.5, leaky_slope=0.1)
TOL = {F32: dict(rtol=2e-5, atol=2e-5), F64: dict(rtol=1e-10, atol=1e-10)}


def _network(sizes, dtype=F64, device="cpu", scale=0.6, seed=0):
    g = torch.Generator().manual_seed(seed)
    weights = [(torch.randn(o, i, generator=g, dtype=F64) * scale / i**0.5).to(device, dtype)
               for i, o in zip(sizes[:-1], sizes[1:])]
    biases = [(torch.randn(o, generator=g, dtype=F64) * 0.2).to(device, dtype) for o in sizes[1:]]
    return weights, biases


def _randn(*shape, dtype=F64, device="cpu", seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).to(device, dtype)


def _leaves(tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def _two_op(x, weights, biases, grad_out, **kw):
    """The reference: fieldfuse.mlp, then its input gradient with create_graph."""
    y = fieldfuse.mlp(x, weights, biases, **kw)
    ones = torch.ones_like(y) if grad_out is None else grad_out
    (gx,) = torch.autograd.grad(y, x, ones, create_graph=True)
    return y, gx


def _losses(y, gx, weight_y):
    """A loss on both outputs with rows that differ: an Eikonal term and a surface term."""
    return (gx.norm(dim=1) - 1).square().mean() + (weight_y * y).sin().sum()


def _compare(sizes, device, dtype, kw, *, with_grad_out, batch=9, tol=None):
    weights, biases = _network(sizes, dtype, device)
    x = _randn(batch, sizes[0], dtype=dtype, device=device) * 0.7
    grad_out = _randn(batch, sizes[-1], dtype=dtype, device=device, seed=2)
    weight_y = _randn(batch, sizes[-1], dtype=dtype, device=device, seed=3)
    results = []
    for fn in (fieldfuse.mlp_value_and_input_grad, _two_op):
        leaves = _leaves([x, *weights, *biases] + ([grad_out] if with_grad_out else []))
        n = len(weights)
        xx, w, b = leaves[0], leaves[1 : 1 + n], leaves[1 + n : 1 + 2 * n]
        go = leaves[-1] if with_grad_out else None
        y, gx = fn(xx, w, b, go, **kw)
        results.append([y, gx, *torch.autograd.grad(_losses(y, gx, weight_y), leaves)])
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        torch.testing.assert_close(a, b, **(tol or TOL[dtype]), msg=lambda m, i=i: f"[{i}] {m}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_matches_the_two_op_form_every_activation(device, activation):
    kw = dict(activation=activation, output_activation="sigmoid", **OPTIONS)
    _compare([3, 16, 32, 2], device, F64, kw, with_grad_out=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_sdf_with_default_grad_out(device, dtype):
    # The SDF case: one output, grad_out ones, Softplus β = 100; float32 on CUDA runs the
    # warp-fused kernels (width 64).
    kw = dict(activation="softplus", softplus_beta=100.0)
    _compare([3, 64, 64, 64, 1], device, dtype, kw, with_grad_out=False, batch=257,
             tol=None if dtype == F64 else dict(rtol=1e-4, atol=1e-4))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["softplus", "tanh", "relu"])
def test_gradcheck(device, activation):
    weights, biases = _network([3, 16, 2], F64, device)
    leaves = _leaves([_randn(4, 3, device=device), *weights, *biases,
                      _randn(4, 2, device=device, seed=2)])

    def fn(x, w0, w1, b0, b1, grad_out):
        return fieldfuse.mlp_value_and_input_grad(x, [w0, w1], [b0, b1], grad_out,
                                                  activation=activation, **OPTIONS)

    assert torch.autograd.gradcheck(fn, leaves)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("used", ["y", "grad_x"])
def test_a_loss_on_one_output(device, used):
    # Only y: the backward is the first-order one; only grad_x: the double backward with
    # grad_y absent. Both against the two-op form, to x, the parameters and grad_out.
    weights, biases = _network([5, 32, 3], F64, device)
    x = _randn(6, 5, device=device)
    grad_out = _randn(6, 3, device=device, seed=2)
    results = []
    for fn in (fieldfuse.mlp_value_and_input_grad, _two_op):
        leaves = _leaves([x, *weights, *biases, grad_out])
        y, gx = fn(leaves[0], leaves[1:3], leaves[3:5], leaves[5], activation="silu")
        loss = y.square().sum() if used == "y" else gx.square().sum()
        results.append(torch.autograd.grad(loss, leaves, allow_unused=True))
    for a, b in zip(*results, strict=True):
        if b is None or (used == "y" and not b.abs().sum()):
            assert a is None or not a.abs().sum()
        else:
            torch.testing.assert_close(a, b, **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [0, 1, 97])
def test_batches_and_odd_widths(device, batch):
    kw = dict(activation="tanh")
    _compare([7, 48, 16, 5], device, F64, kw, with_grad_out=True, batch=batch)


@pytest.mark.parametrize("device", DEVICES)
def test_without_biases_and_non_contiguous(device):
    weights, _ = _network([4, 16, 3], F64, device)
    x = _randn(3, 8, device=device)[:, ::2]  # strided columns
    grad_out = _randn(3, 6, device=device, seed=2)[:, 1::2]
    weights_t = [w.t().contiguous().t() for w in weights]  # column-major
    weight_y = _randn(3, 3, device=device, seed=3)
    results = []
    # Strided x and grad_out and column-major weights, then contiguous copies through the two-op
    # form: both outputs, and the gradients of a loss on both to x, the weights and grad_out.
    for fn, tensors in ((fieldfuse.mlp_value_and_input_grad, [x, *weights_t, grad_out]),
                        (_two_op, [x.contiguous(), *weights, grad_out.contiguous()])):
        leaves = [t.detach().requires_grad_() for t in tensors]
        y, gx = fn(leaves[0], leaves[1:3], None, leaves[3], activation="sine", sine_omega0=1.5)
        results.append([y, gx, *torch.autograd.grad(_losses(y, gx, weight_y), leaves)])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, **TOL[F64])


def test_third_order_is_refused():
    weights, biases = _network([3, 16, 1])
    leaves = _leaves([_randn(4, 3), *weights, *biases])
    y, gx = fieldfuse.mlp_value_and_input_grad(leaves[0], leaves[1:3], leaves[3:5],
                                               activation="softplus")
    (g,) = torch.autograd.grad(gx.square().sum() + y.sum(), leaves[1], create_graph=True)
    with pytest.raises(RuntimeError, match="mlp_double_backward.*no autograd formula"):
        torch.autograd.grad(g.sum(), leaves[0])


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    weights, biases = _network([3, 16, 1], F32, device)
    leaves = _leaves([_randn(10, 3, dtype=F32, device=device), *weights, *biases])

    def loss_fn(x, w0, w1, b0, b1):
        y, g = fieldfuse.mlp_value_and_input_grad(x, [w0, w1], [b0, b1], activation="softplus",
                                                  softplus_beta=5.0)
        return (g.norm(dim=1) - 1).square().mean() + y.square().mean()

    ours = torch.autograd.grad(torch.compile(loss_fn, fullgraph=True)(*leaves), leaves)
    eager = torch.autograd.grad(loss_fn(*leaves), leaves)
    for a, b in zip(ours, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_module_method():
    torch.manual_seed(0)
    net = fieldfuse.nn.MLP(3, 1, 16, 2, activation="softplus", softplus_beta=10.0,
                           dtype=torch.float64)
    x = _randn(5, 3).requires_grad_()
    y, gx = net.value_and_input_grad(x)
    torch.testing.assert_close(y, net(x), **TOL[F64])
    (ref,) = torch.autograd.grad(net(x).sum(), x)
    torch.testing.assert_close(gx, ref, **TOL[F64])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(grad_out=torch.ones(4, 3, dtype=F64)), r"grad_out.*\[4, 1\]"),
        (dict(grad_out=torch.ones(4, 1, dtype=F32)), r"grad_out.*float64"),
        (dict(grad_out=[1.0]), r"mlp_value_and_input_grad\(\): expected grad_out to be a"),
        (dict(weights=torch.ones(1, 3, dtype=F64)), r"mlp_value_and_input_grad\(\): expected "
                                                    r"weights to be a sequence"),
        (dict(activation="gelu"), r"activation.*gelu"),
    ],
)
def test_bad_arguments(kwargs, match):
    weights, biases = _network([3, 16, 1])
    args = dict(dict(x=_randn(4, 3), weights=weights, biases=biases), **kwargs)
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        fieldfuse.mlp_value_and_input_grad(**args)


# --- the CUDA kernel families --------------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("compute_dtype", [None, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("sizes", [[3, 64, 64, 64, 64, 1],   # 16-bit: register kernels
                                   [3, 128, 128, 1],          # 16-bit: warp-fused kernels
                                   [300, 32, 2],              # the tile kernels
                                   [5, 1]],                   # float32: the readout kernels
                         ids=["width64", "width128", "wide_input", "one_layer"])
def test_cuda_kernels_against_float64(compute_dtype, sizes):
    # Every double-backward kernel takes grad_y: the fused op's results against float64 (the
    # two-op form in float64 on the CPU), at least as close as the two-op form on the same GPU.
    weights, biases = _network(sizes, F32, "cuda", scale=1.0)
    batch = 1001
    x = (torch.rand(batch, sizes[0], generator=torch.Generator().manual_seed(5)) - 0.5).cuda()
    weight_y = _randn(batch, sizes[-1], dtype=F32, device="cuda", seed=3)
    kw = dict(activation="softplus", softplus_beta=10.0)

    def run(fn, dtype, device, compute):
        leaves = _leaves([t.to(device, dtype) for t in [x, *weights, *biases]])
        n = len(weights)
        y, gx = fn(leaves[0], leaves[1 : 1 + n], leaves[1 + n :], None, compute_dtype=compute,
                   **kw)
        out = [y, gx, *torch.autograd.grad(_losses(y, gx, weight_y.to(device, dtype)), leaves)]
        return [t.double().cpu() for t in out]

    exact = run(_two_op, F64, "cpu", None)
    fused = run(fieldfuse.mlp_value_and_input_grad, F32, "cuda", compute_dtype)
    two_op = run(_two_op, F32, "cuda", compute_dtype)
    for i, (a, b, e) in enumerate(zip(fused, two_op, exact, strict=True)):
        scale = e.norm().clamp_min(1e-30)
        err_fused, err_two = ((a - e).norm() / scale).item(), ((b - e).norm() / scale).item()
        # float32: sums of 1001 rows in float32 (5e-6 measured on an H100 for the one-layer
        # weight gradient, whose two-op form sums its surface term in float64 in the readout).
        assert err_fused < (2e-5 if compute_dtype is None else 3e-2), (i, err_fused, err_two)
        # In 16 bits the one sweep should be no less accurate than the two-op form (float32 sums
        # differ in order only: both are at rounding level there).
        if compute_dtype is not None:
            assert err_fused <= 2 * err_two + 1e-4, (i, err_fused, err_two)


@cuda_only
def test_cpu_cuda_parity():
    kw = dict(activation="silu")
    weights, biases = _network([3, 64, 64, 2])
    x, grad_out = _randn(1000, 3), _randn(1000, 2, seed=2)
    weight_y = _randn(1000, 2, seed=3)
    results = {}
    for device in ("cpu", "cuda"):
        leaves = _leaves([t.to(device) for t in [x, *weights, *biases, grad_out]])
        y, gx = fieldfuse.mlp_value_and_input_grad(leaves[0], leaves[1:4], leaves[4:7],
                                                   leaves[7], **kw)
        loss = _losses(y, gx, weight_y.to(device))
        results[device] = [y, gx, *torch.autograd.grad(loss, leaves)]
    for a, b in zip(results["cpu"], results["cuda"], strict=True):
        torch.testing.assert_close(a, b.cpu(), **TOL[F64])


@cuda_only
def test_cuda_graph_capture():
    weights, biases = _network([3, 64, 64, 1], F32, "cuda")
    params = _leaves([*weights, *biases])
    x = (torch.rand(4096, 3, device="cuda") - 0.5).requires_grad_()

    def step():
        y, g = fieldfuse.mlp_value_and_input_grad(x, params[:3], params[3:], activation="softplus",
                                                  softplus_beta=100.0,
                                                  compute_dtype=torch.float16)
        loss = (g.norm(dim=1) - 1).square().mean() + y.abs().mean()
        return torch.autograd.grad(loss, params)

    expected = step()
    graph, captured = capture_cuda_graph(step)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, expected, strict=True):
        assert torch.equal(a, b)

