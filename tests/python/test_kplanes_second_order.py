# SPDX-License-Identifier: Apache-2.0
"""K-Planes: double backward, tensor gates, frozen planes and compile with changing arguments."""

from __future__ import annotations

import pytest
import torch

import fieldfuse

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _inputs(device, generator, levels=((3, 5, 7), (2, 4, 4)), tilts=2, points=13):
    def rand(*shape, lo=0.0, hi=1.0):
        x = torch.rand(*shape, generator=generator, dtype=torch.float64) * (hi - lo) + lo
        return x.to(device).requires_grad_()

    # Interior points: finite differences of second derivatives need smooth neighbourhoods.
    pts = rand(points, 3, lo=-0.9, hi=0.9)
    rotations = rand(tilts, 3, 3, lo=-1.0, hi=1.0)
    planes = [rand(3 * tilts, c, h, w, lo=0.1, hi=0.5) for c, h, w in levels]
    return pts, rotations, planes


@pytest.mark.parametrize("device", DEVICES)
def test_gradgradcheck_tilted_with_gates(device, rng):
    pts, rotations, planes = _inputs(device, rng)
    fn = lambda p, r, a, b: fieldfuse.kplanes_tilted(p, r, [a, b], [0.5, 1.5])  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (pts, rotations, *planes))


@pytest.mark.parametrize("device", DEVICES)
def test_gradgradcheck_with_taps(device, rng):
    pts, rotations, planes = _inputs(device, rng, levels=((2, 5, 6),))
    taps = (torch.rand(4, 3, generator=rng, dtype=torch.float64) * 1.6 - 0.8).to(device)
    taps.requires_grad_()

    def fn(p, t, r, a):
        features, tap_features = fieldfuse.kplanes_tilted_with_taps(p, t, r, [a], 0.1)
        return features.sum(1), tap_features.sum(2)

    assert torch.autograd.gradgradcheck(fn, (pts, taps, rotations, *planes))


@pytest.mark.parametrize("device", DEVICES)
def test_gradgradcheck_axis_aligned(device, rng):
    pts, _, planes = _inputs(device, rng, levels=((2, 5, 6),), tilts=1)
    assert torch.autograd.gradgradcheck(lambda p, a: fieldfuse.kplanes(p, [a]), (pts, *planes))


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_penalty_matches_finite_difference(device, rng):
    # A typical second-order use: a penalty on |∂f/∂p|, differentiated with respect to the planes.
    pts, rotations, planes = _inputs(device, rng, levels=((2, 5, 6),))

    def penalty(plane):
        p = pts.detach().requires_grad_()
        f = fieldfuse.kplanes_tilted(p, rotations.detach(), [plane])
        (g,) = torch.autograd.grad(f.sum(), p, create_graph=True)
        return g.square().sum()

    assert torch.autograd.gradcheck(penalty, (planes[0],))


@pytest.mark.parametrize("device", DEVICES)
def test_frozen_planes_give_point_and_rotation_gradients(device, rng):
    pts, rotations, planes = _inputs(device, rng)
    frozen = [p.detach() for p in planes]
    f = fieldfuse.kplanes_tilted(pts, rotations, frozen)
    g_pts, g_rot = torch.autograd.grad(f.square().sum(), [pts, rotations])
    f_all = fieldfuse.kplanes_tilted(pts, rotations, planes)
    h_pts, h_rot, *_ = torch.autograd.grad(f_all.square().sum(), [pts, rotations, *planes])
    torch.testing.assert_close(g_pts, h_pts)
    torch.testing.assert_close(g_rot, h_rot)


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_gates_equal_float_gates_and_are_differentiable(device, rng):
    pts, rotations, planes = _inputs(device, rng)
    gates = torch.tensor([0.5, 2.0], dtype=torch.float64, device=device, requires_grad=True)
    torch.testing.assert_close(fieldfuse.kplanes_tilted(pts, rotations, planes, gates),
                               fieldfuse.kplanes_tilted(pts, rotations, planes, [0.5, 2.0]))
    assert torch.autograd.gradcheck(
        lambda p, g: fieldfuse.kplanes_tilted(p, rotations, planes, g), (pts, gates))


def test_parameter_list_planes(rng):
    pts, rotations, planes = _inputs("cpu", rng)
    as_list = torch.nn.ParameterList([torch.nn.Parameter(p.detach()) for p in planes])
    torch.testing.assert_close(fieldfuse.kplanes_tilted(pts, rotations, as_list),
                               fieldfuse.kplanes_tilted(pts, rotations, planes))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_with_changing_gates_and_h(device, rng):
    pts, rotations, planes = _inputs(device, rng)
    frozen = [p.detach() for p in planes]

    @torch.compile(fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    def step(p, h, gates):
        return fieldfuse.kplanes_tilted_taps(p, rotations.detach(), frozen, h, gates)

    # Tensor gates change every step without recompiling (a coarse-to-fine schedule: more steps
    # than the recompile limit of 8); h, a Python float, is specialised, so a few values only.
    for i in range(12):
        h = 0.05 + 0.01 * (i % 3)
        gates = torch.tensor([1.0 - 0.05 * i, 1.0], dtype=torch.float64, device=device)
        torch.testing.assert_close(
            step(pts.detach(), h, gates),
            fieldfuse.kplanes_tilted_taps(pts.detach(), rotations.detach(), frozen, h, gates))


def test_h_must_be_a_number():
    pts = torch.zeros(2, 3)
    with pytest.raises(TypeError, match=r"kplanes_tilted_taps\(\).*\bh\b"):
        fieldfuse.kplanes_tilted_taps(pts, torch.eye(3)[None], [torch.ones(3, 1, 2, 2)], "a")
    with pytest.raises(TypeError, match=r"kplanes_tilted_taps\(\).*\bh\b"):
        fieldfuse.kplanes_tilted_taps(pts, torch.eye(3)[None], [torch.ones(3, 1, 2, 2)], True)


def test_core_errors_name_the_function_called():
    pts, planes = torch.zeros(2, 3), [torch.ones(3, 1, 2, 2)]
    with pytest.raises(TypeError, match=r"^kplanes_tilted_taps\(\): .*\brotations\b"):
        fieldfuse.kplanes_tilted_taps(pts, torch.eye(3, dtype=torch.float64)[None], planes, 0.1)
    with pytest.raises(ValueError, match=r"^kplanes_tilted_with_taps\(\): .*\bplanes\[0\]"):
        fieldfuse.kplanes_tilted_with_taps(pts, torch.zeros(1, 3), torch.eye(3)[None],
                                           [torch.ones(4, 1, 2, 2)], 0.1)
