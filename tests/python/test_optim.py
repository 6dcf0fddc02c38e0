# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.optim.FusedAdam against torch.optim.Adam + clip_grad_norm_ + CosineAnnealingLR: the
same trajectory over 20 steps (float64 to 1e-12, float32 to float32 rounding), per-group rates,
the device step counter, the reported norm, state_dict resume, CPU/CUDA parity and CUDA-graph
capture (the CUDA cases skip without a GPU)."""

from __future__ import annotations

import pytest
import torch

from device_params import DEVICES, F32, F64, FLOAT_DTYPES, capture_cuda_graph, cuda_only
from fieldfuse.optim import FusedAdam

STEPS = 20
# Shapes: a tensor spanning three 8192-element chunks of the core (Note [adam chunks]), an empty
# one, a scalar-like one and a small matrix.
SHAPES = [(2, 9000), (0,), (1,), (8, 5), (3,)]

# Float64: the two implementations evaluate the same operations in the same order except the
# norm (torch sums per-tensor norms) and the cosine rate (the scheduler multiplies ratios), both
# a few ulps, which Adam's normalisation does not amplify. Float32: every operation rounds to
# ~6e-8 and the moments carry it forward for 20 steps.
TOL = {F64: {"rtol": 1e-12, "atol": 1e-12}, F32: {"rtol": 2e-5, "atol": 2e-6}}


def _initial(dtype, device):
    gen = torch.Generator().manual_seed(14)
    return [torch.randn(s, generator=gen, dtype=F64).to(dtype=dtype, device=device) for s in SHAPES]


def _coefficients(params, k):
    """Step k's loss coefficients, one tensor per parameter, on its device."""
    gen = torch.Generator().manual_seed(1000 + k)
    return [torch.randn(p.shape, generator=gen, dtype=F64).to(dtype=p.dtype, device=p.device)
            for p in params]


def _loss(params, k, coefficients=None):
    """A smooth loss whose gradients change every step and have a global norm of tens (so
    max_grad_norm = 1 clips each step)."""
    total = 0.0
    for p, a in zip(params, coefficients or _coefficients(params, k)):
        total = total + (torch.sin(p) * a).sum() + 0.5 * (p * p * a.abs()).sum()
    return total


def _groups(params, lrs):
    """Two param groups with their own rates (planes-like and decoder-like)."""
    return [{"params": params[:2], "lr": lrs[0]}, {"params": params[2:], "lr": lrs[1]}]


def _run_torch(init, steps, lrs, max_grad_norm, total_steps, weight_decay):
    params = [p.clone().requires_grad_() for p in init]
    opt = torch.optim.Adam(_groups(params, lrs), weight_decay=weight_decay, foreach=False)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR
    sched = cosine(opt, T_max=total_steps) if total_steps else None
    norms = []
    for k in range(steps):
        opt.zero_grad()
        _loss(params, k).backward()
        if max_grad_norm > 0:
            norms.append(torch.nn.utils.clip_grad_norm_(params, max_grad_norm).detach().clone())
        opt.step()
        if sched is not None:
            sched.step()
    return params, opt, norms


def _run_fused(init, steps, lrs, max_grad_norm, total_steps, weight_decay):
    params = [p.clone().requires_grad_() for p in init]
    opt = FusedAdam(_groups(params, lrs), weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                    total_steps=total_steps)
    norms = []
    for k in range(steps):
        opt.zero_grad()
        _loss(params, k).backward()
        opt.step()
        if max_grad_norm > 0:
            norms.append(opt.grad_norm.clone())
    return params, opt, norms


CONFIGS = [
    pytest.param(0.0, 0, 0.0, id="plain"),
    pytest.param(1.0, 0, 0.0, id="clip"),
    pytest.param(0.0, STEPS, 0.0, id="cosine"),
    pytest.param(0.0, 0, 0.1, id="weight_decay"),
    pytest.param(1.0, 30, 0.05, id="clip+cosine+weight_decay"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("max_grad_norm,total_steps,weight_decay", CONFIGS)
def test_matches_torch_adam(device, dtype, max_grad_norm, total_steps, weight_decay):
    init = _initial(dtype, device)
    lrs = (1e-2, 1e-3)
    args = (init, STEPS, lrs, max_grad_norm, total_steps, weight_decay)
    want, torch_opt, want_norms = _run_torch(*args)
    got, opt, got_norms = _run_fused(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach(), w.detach(), **TOL[dtype])
    for g, w in zip(got, want):
        if g.numel():
            torch.testing.assert_close(opt.state[g]["exp_avg"], torch_opt.state[w]["exp_avg"],
                                       **TOL[dtype])
            torch.testing.assert_close(opt.state[g]["exp_avg_sq"],
                                       torch_opt.state[w]["exp_avg_sq"], **TOL[dtype])
    for g, w in zip(got_norms, want_norms):
        torch.testing.assert_close(g, w.reshape(1), **TOL[dtype])


def test_per_group_learning_rates_are_used():
    # The same run with the groups' rates swapped must end elsewhere (the rates reach the core).
    init = _initial(F64, "cpu")
    a, _, _ = _run_fused(init, 3, (1e-2, 1e-3), 0.0, 0, 0.0)
    b, _, _ = _run_fused(init, 3, (1e-3, 1e-2), 0.0, 0, 0.0)
    assert not torch.equal(a[0], b[0]) and not torch.equal(a[3], b[3])
    want, _, _ = _run_torch(init, 3, (1e-3, 1e-2), 0.0, 0, 0.0)
    torch.testing.assert_close(b[3].detach(), want[3].detach(), **TOL[F64])


@pytest.mark.parametrize("device", DEVICES)
def test_step_counter_is_one_device_tensor(device):
    params = [p.requires_grad_() for p in _initial(F32, device)]
    opt = FusedAdam(params, lr=1e-3)
    for k in range(3):
        opt.zero_grad()
        _loss(params, k).backward()
        opt.step()
    counters = [opt.state[p]["step"] for p in params]
    assert all(c is counters[0] for c in counters)
    assert counters[0].dtype == torch.int64 and counters[0].device.type == device
    assert counters[0].tolist() == [3]


def test_parameters_without_gradients_are_skipped():
    a = torch.randn(4, dtype=F64, requires_grad=True)
    b = torch.randn(4, dtype=F64, requires_grad=True)
    before = b.detach().clone()
    opt = FusedAdam([a, b], lr=1e-2)
    (a * a).sum().backward()
    opt.step()
    assert torch.equal(b.detach(), before) and b not in opt.state
    assert not torch.equal(a.detach(), a.detach() * 0 + before)  # a moved


def test_gradients_are_left_unclipped():
    p = torch.ones(3, dtype=F64, requires_grad=True)
    opt = FusedAdam([p], max_grad_norm=1e-3)
    (10 * p).sum().backward()
    opt.step()
    assert p.grad.tolist() == [10.0, 10.0, 10.0]
    torch.testing.assert_close(opt.grad_norm, torch.tensor([300.0], dtype=F64).sqrt())


def test_state_dict_resumes_the_trajectory():
    init = _initial(F64, "cpu")
    want, _, _ = _run_fused(init, 6, (1e-2, 1e-3), 1.0, 10, 0.0)
    params, opt, _ = _run_fused(init, 3, (1e-2, 1e-3), 1.0, 10, 0.0)
    saved = opt.state_dict()
    resumed = FusedAdam(_groups(params, (1e-2, 1e-3)), max_grad_norm=1.0, total_steps=10)
    resumed.load_state_dict(saved)
    for k in range(3, 6):
        resumed.zero_grad()
        _loss(params, k).backward()
        resumed.step()
    for g, w in zip(params, want):
        assert torch.equal(g.detach(), w.detach())
    assert resumed.state[params[0]]["step"].tolist() == [6]


def test_two_dtypes_are_two_calls():
    a = torch.randn(5, dtype=F32, requires_grad=True)
    b = torch.randn(5, dtype=F64, requires_grad=True)
    ref = [a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()]
    opt, torch_opt = FusedAdam([a, b], lr=1e-2), torch.optim.Adam(ref, lr=1e-2, foreach=False)
    for x, o in (((a, b), opt), (ref, torch_opt)):
        for k in range(3):
            o.zero_grad()
            (torch.sin(x[0]).sum() + torch.cos(x[1]).sum() * (k + 1)).backward()
            o.step()
    torch.testing.assert_close(a.detach(), ref[0].detach(), **TOL[F32])
    torch.testing.assert_close(b.detach(), ref[1].detach(), **TOL[F64])
    assert opt.state[a]["step"] is not opt.state[b]["step"]


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cpu_and_cuda_agree(dtype):
    init = _initial(dtype, "cpu")
    cpu, _, cpu_norms = _run_fused(init, STEPS, (1e-2, 1e-3), 1.0, STEPS, 0.01)
    cuda, _, cuda_norms = _run_fused([p.cuda() for p in init], STEPS, (1e-2, 1e-3), 1.0, STEPS,
                                     0.01)
    for c, g in zip(cpu, cuda):
        torch.testing.assert_close(g.detach().cpu(), c.detach(), **TOL[dtype])
    for c, g in zip(cpu_norms, cuda_norms):
        torch.testing.assert_close(g.cpu(), c, **TOL[dtype])


@cuda_only
def test_cuda_is_deterministic():
    init = _initial(F32, "cuda")
    a, _, na = _run_fused(init, 5, (1e-2, 1e-3), 1.0, 10, 0.0)
    b, _, nb = _run_fused(init, 5, (1e-2, 1e-3), 1.0, 10, 0.0)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert all(torch.equal(x, y) for x, y in zip(na, nb))


@cuda_only
def test_cuda_graph_replay_matches_eager_steps():
    """Forward, backward and the step captured once and replayed: the same parameters as eager
    steps on the same inputs, and the device counter advanced by every replay."""
    init = _initial(F32, "cuda")
    warmup, replays = 3, 5

    def make():
        params = [p.clone().requires_grad_() for p in init]
        return params, FusedAdam(_groups(params, (1e-2, 1e-3)), max_grad_norm=1.0, total_steps=12)

    # The coefficients live on the device before capture (a capture cannot copy from the host).
    coefficients = [_coefficients(init, k) for k in range(warmup + 1)]
    eager, eager_opt = make()
    for k in range(warmup + replays):
        eager_opt.zero_grad(set_to_none=True)
        _loss(eager, k, coefficients[min(k, warmup)]).backward()
        eager_opt.step()

    params, opt = make()
    calls = []

    def step():
        opt.zero_grad(set_to_none=True)
        _loss(params, 0, coefficients[min(len(calls), warmup)]).backward()
        calls.append(None)
        opt.step()
        return opt.grad_norm

    # capture_cuda_graph runs two warm-up steps itself; a third before it makes three real ones.
    step()
    graph, norm = capture_cuda_graph(step)
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    for g, w in zip(params, eager):
        torch.testing.assert_close(g.detach(), w.detach(), rtol=0, atol=0)
    assert opt.state[params[0]]["step"].tolist() == [warmup + replays]
    torch.testing.assert_close(norm, eager_opt.grad_norm, rtol=0, atol=0)
