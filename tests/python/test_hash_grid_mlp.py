# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.nn.HashGridMLP against the pure-PyTorch composition (reference hash grid followed by
an nn.Sequential) in float64, to first and second order; state_dict; errors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from fieldfuse.reference import hash_grid as ref
from device_params import DEVICES

F32, F64 = torch.float32, torch.float64

# Dense and hashed levels (res 4, 8, 16, 32 against a 2^8-row table), 2 features each: 8 inputs.
GRID = dict(n_levels=4, n_features_per_level=2, log2_hashmap_size=8, base_resolution=4,
            per_level_scale=2.0)


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(1234)


def _model(rng, interpolation: str, device: str, dtype) -> tuple:
    """A HashGridMLP with a random table and the pure-PyTorch twin holding the same parameters:
    (model, reference forward, the twin's parameters in the model's parameter order)."""
    seq = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Softplus(beta=10.0),
                              torch.nn.Linear(32, 32), torch.nn.Softplus(beta=10.0),
                              torch.nn.Linear(32, 1)).to(device=device, dtype=F64)
    encoding = fieldfuse.nn.HashGrid(3, **GRID, interpolation=interpolation, dtype=dtype,
                                     device=device)
    with torch.no_grad():  # O(1) features, so the table's gradients are not negligible
        table = torch.randn(encoding.params.shape, generator=rng, dtype=F64)
        encoding.params.copy_(table.to(device=device, dtype=dtype))
    model = fieldfuse.nn.HashGridMLP(encoding, fieldfuse.nn.MLP.from_torch(seq).to(dtype))
    ref_table = table.to(device).requires_grad_()

    def reference(x: torch.Tensor) -> torch.Tensor:
        return seq(ref.hash_grid(x, ref_table, **GRID, interpolation=interpolation))

    linears = [m for m in seq if isinstance(m, torch.nn.Linear)]
    ref_params = [ref_table] + [m.weight for m in linears] + [m.bias for m in linears]
    return model, reference, ref_params


def _model_params(model) -> list[torch.Tensor]:
    return [model.encoding.params, *model.network.weights, *model.network.biases]


def _eikonal_grads(forward, x: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of surface + Eikonal loss to x and every parameter (a double backward)."""
    x = x.detach().requires_grad_()
    y = forward(x)
    (grad_x,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    loss = (grad_x.norm(dim=1) - 1).square().mean() + y.abs().mean()
    return list(torch.autograd.grad(loss, [x, *params]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["linear", "smoothstep"])
def test_matches_pure_pytorch_to_second_order(device, interpolation, rng):
    model, reference, ref_params = _model(rng, interpolation, device, F64)
    x = torch.rand((300, 3), generator=rng, dtype=F64).to(device)
    assert_close(model(x), reference(x), rtol=1e-10, atol=1e-11)

    # first order, to x and every parameter
    xg = x.clone().requires_grad_()
    ours = torch.autograd.grad(model(xg).square().sum(), [xg, *_model_params(model)])
    xr = x.clone().requires_grad_()
    theirs = torch.autograd.grad(reference(xr).square().sum(), [xr, *ref_params])
    for a, b in zip(ours, theirs):
        assert_close(a, b, rtol=1e-9, atol=1e-10)

    # second order: the Eikonal loss's gradients through both fused double backwards
    ours = _eikonal_grads(model, x, _model_params(model))
    theirs = _eikonal_grads(reference, x, ref_params)
    assert len(ours) == 1 + 1 + 3 + 3  # x, table, 3 weights, 3 biases
    for a, b in zip(ours, theirs):
        assert a.abs().max() > 0
        assert_close(a, b, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_requires_grad", [False, True])
def test_value_and_input_grad_matches_autograd(device, x_requires_grad, rng):
    # (y, ∇ₓy) from value_and_input_grad, and the surface + Eikonal loss's gradients through it
    # (the MLP's one-sweep backward, the encoding's double backward), against the two-op form.
    model, _, _ = _model(rng, "linear", device, F64)
    x = torch.rand((300, 3), generator=rng, dtype=F64).to(device)
    params = _model_params(model)
    points = x.clone().requires_grad_(x_requires_grad)
    y, grad_x = model.value_and_input_grad(points)
    loss = (grad_x.norm(dim=1) - 1).square().mean() + y.abs().mean()
    wrt = [points, *params] if x_requires_grad else params
    ours = [y, grad_x, *torch.autograd.grad(loss, wrt)]
    theirs = _eikonal_grads(model, x, params)
    xr = x.clone().requires_grad_()
    y_ref = model(xr)
    (grad_ref,) = torch.autograd.grad(y_ref.sum(), xr)
    expected = [y_ref, grad_ref, *(theirs if x_requires_grad else theirs[1:])]
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected, strict=True):
        assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_value_and_input_grad_without_grad_mode(device, mode, rng):
    # Evaluation loops: the same (y, ∇ₓy), and nothing recorded (it used to force grad mode and
    # return a graph under no_grad, and fail under inference_mode).
    model, _, _ = _model(rng, "linear", device, F64)
    x = torch.rand((50, 3), generator=rng, dtype=F64).to(device)
    expected = [t.detach() for t in model.value_and_input_grad(x)]
    with getattr(torch, mode)():
        y, grad_x = model.value_and_input_grad(x)
    for a, b in zip((y, grad_x), expected, strict=True):
        assert not a.requires_grad and a.grad_fn is None
        assert torch.equal(a, b)


def test_gradgradcheck_smoothstep(rng):
    # Smoothstep keeps the x-derivatives continuous across cell borders, so finite differences
    # apply; every row differs, so a second order that reused one row would fail.
    model, _, _ = _model(rng, "smoothstep", "cpu", F64)
    x = torch.rand((6, 3), generator=rng, dtype=F64, requires_grad=True)
    params = _model_params(model)

    def fn(x, table, *rest):
        return fieldfuse.mlp(fieldfuse.hash_grid(x, table, **GRID, interpolation="smoothstep"),
                             list(rest[:3]), list(rest[3:]), activation="softplus",
                             softplus_beta=10.0)

    inputs = (x, *(p.detach().requires_grad_() for p in params))
    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)


def test_state_dict_round_trip(rng):
    model, _, _ = _model(rng, "linear", "cpu", F64)
    assert set(model.state_dict()) == {"encoding.params"} | {
        f"network.{kind}.{k}" for kind in ("weights", "biases") for k in range(3)}
    other = fieldfuse.nn.HashGridMLP(
        fieldfuse.nn.HashGrid(3, **GRID, dtype=F64),
        fieldfuse.nn.MLP(8, 1, 32, 2, activation="softplus", softplus_beta=10.0, dtype=F64))
    x = torch.rand((20, 3), generator=rng, dtype=F64)
    assert not torch.equal(other(x), model(x))
    other.load_state_dict(model.state_dict())
    assert torch.equal(other(x), model(x))
    assert (model.n_input_dims, model.out_features) == (3, 1)


def test_trains_float32():
    torch.manual_seed(0)
    model = fieldfuse.nn.HashGridMLP(fieldfuse.nn.HashGrid(2, **GRID),
                                     fieldfuse.nn.MLP(8, 1, 16, 1, activation="softplus"))
    x = torch.rand(64, 2, requires_grad=True)
    (grad_x,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    (grad_x.norm(dim=1) - 1).square().mean().backward()
    assert all(p.grad is not None and p.grad.dtype == F32 for p in model.parameters())


def test_network_width_must_match_encoding():
    encoding = fieldfuse.nn.HashGrid(3, **GRID)
    with pytest.raises(ValueError, match=r"^HashGridMLP\(\): expected network.in_features to "
                       r"equal encoding.n_output_dims \(n_levels·n_features_per_level = 4·2 = 8\), "
                       r"got network.in_features = 16$"):
        fieldfuse.nn.HashGridMLP(encoding, fieldfuse.nn.MLP(16, 1, 16, 1))


@pytest.mark.parametrize(("argument", "build"), [
    ("encoding", lambda grid, net: fieldfuse.nn.HashGridMLP(torch.nn.Identity(), net)),
    ("network", lambda grid, net: fieldfuse.nn.HashGridMLP(grid, torch.nn.Linear(8, 1))),
])
def test_module_types_are_checked(argument, build):
    grid, net = fieldfuse.nn.HashGrid(3, **GRID), fieldfuse.nn.MLP(8, 1, 16, 1)
    with pytest.raises(TypeError, match=rf"^HashGridMLP\(\): expected {argument} to be a "
                       rf"fieldfuse.nn.\w+, got (Identity|Linear)$"):
        build(grid, net)
