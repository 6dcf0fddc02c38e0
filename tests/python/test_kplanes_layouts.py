# SPDX-License-Identifier: Apache-2.0
"""Every plane layout gives the channels-last results (Note [plane staging]).

NCHW, channels-last and sliced/strided planes must give the same features and gradients for every
function that takes planes, with the gradients in the caller's layout. Bit for bit wherever the
path is deterministic (the CPU, every forward, the CUDA deterministic backward); the default CUDA
backward adds with float atomics, whose order (and so rounding) varies, so it is compared within
rounding. Also: the workspace queries report the staging bytes (metadata only), and a staged step
captures in a CUDA graph.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from fieldfuse import _C
from fieldfuse._backend import dl
from device_params import DEVICES, FLOAT_DTYPES, capture_cuda_graph, cuda_only

F32, F64 = torch.float32, torch.float64
TILTS = 2
# C = 8 (vector path), C = 5 (scalar path), C = 1 (a single channel is channels-last in any layout).
LEVELS = ((8, 12, 10), (5, 7, 9), (1, 6, 5))
GATES = (1.0, 0.5, 2.0)
H = 0.05


def _nchw(rng, tilts=TILTS, levels=LEVELS, dtype=F64, device="cpu"):
    return [
        (torch.rand((3 * tilts, c, h, w), generator=rng, dtype=F64) * 0.4 + 0.1).to(device, dtype)
        for c, h, w in levels
    ]


def _sliced(p: torch.Tensor, channels_last: bool, pad: int = 4, step: int = 2) -> torch.Tensor:
    """A view of `p`'s values inside a larger tensor: `pad` channels before them, every `step`-th
    column. Channels-last with pad = 4 keeps every stride a multiple of 4 (read in place); pad = 1
    makes them odd (staged although the channels are adjacent)."""
    big = torch.zeros(p.shape[0], p.shape[1] + pad, p.shape[2], step * p.shape[3], dtype=p.dtype,
                      device=p.device)
    if channels_last:
        big = big.contiguous(memory_format=torch.channels_last)
    view = big[:, pad:, :, ::step]
    view.copy_(p)
    return view


LAYOUTS = {
    "nchw": lambda p: p.contiguous(),
    "channels_last": lambda p: p.contiguous(memory_format=torch.channels_last),
    "sliced_nchw": lambda p: _sliced(p, False),
    "sliced_channels_last": lambda p: _sliced(p, True),
    "odd_channels_last": lambda p: _sliced(p, True, pad=1, step=1),
    # Channels outermost, then W, then H: no standard memory format.
    "permuted": lambda p: p.permute(1, 0, 3, 2).contiguous().permute(1, 0, 3, 2),
}


def _geometry(rng, n, dtype, device):
    pts = (torch.rand((n, 3), generator=rng, dtype=F64) * 2.2 - 1.1).to(device, dtype)
    rot = torch.linalg.qr(torch.randn((TILTS, 3, 3), generator=rng, dtype=F64))[0]
    return pts, rot.to(device, dtype)


def _cases(rng, dtype, device, batch=300, taps=40):
    """(name, fn(*geometry, planes, **options) -> tuple of outputs, geometry, tilts) per function
    (tilts = 1: the axis-aligned kplanes takes 3 planes per level)."""
    pts, rot = _geometry(rng, batch, dtype, device)
    tap_pts, _ = _geometry(rng, taps, dtype, device)
    return [
        ("kplanes_tilted",
         lambda p, r, planes, **kw: (fieldfuse.kplanes_tilted(p, r, planes, GATES, **kw),),
         [pts, rot], TILTS),
        ("kplanes", lambda p, planes, **kw: (fieldfuse.kplanes(p, planes, GATES, **kw),), [pts], 1),
        ("kplanes_tilted_taps",
         lambda p, r, planes, **kw: (fieldfuse.kplanes_tilted_taps(p, r, planes, H, GATES, **kw),),
         [tap_pts, rot], TILTS),
        ("kplanes_tilted_with_taps",
         lambda p, t, r, planes, **kw: fieldfuse.kplanes_tilted_with_taps(p, t, r, planes, H, GATES,
                                                                          **kw),
         [pts, tap_pts, rot], TILTS),
    ]


def _run(fn, geometry, planes, upstream_rng, **kwargs):
    """Outputs and gradients w.r.t. geometry and planes (planes stay the views they are)."""
    geo = [g.detach().requires_grad_() for g in geometry]
    levels = [p.detach().requires_grad_() for p in planes]
    outputs = fn(*geo, levels, **kwargs)
    upstream = [torch.randn(o.shape, generator=upstream_rng, dtype=F64).to(o.device, o.dtype)
                for o in outputs]
    grads = torch.autograd.grad(outputs, geo + levels, upstream)
    return [o.detach() for o in outputs], list(grads)


def _expect_layout(grad: torch.Tensor, plane: torch.Tensor, name: str):
    """A plane gradient in the caller's layout: the strides torch.empty_like gives the plane."""
    assert grad.stride() == torch.empty_like(plane).stride(), name


def _compare(device, deterministic, expected, result, name, dtype):
    (out_a, grads_a), (out_b, grads_b) = expected, result
    for a, b in zip(out_a, out_b, strict=True):
        assert torch.equal(a, b), f"{name}: forward differs"  # every forward is deterministic
    for i, (a, b) in enumerate(zip(grads_a, grads_b, strict=True)):
        if device == "cpu" or deterministic:
            assert torch.equal(a, b), f"{name}: gradient {i} differs"
        else:
            # Float atomics: exact sums in an order that varies, so a few ulps of the largest term.
            eps = torch.finfo(dtype).eps
            assert_close(a, b, rtol=64 * eps, atol=64 * eps * max(1.0, b.abs().max().item()),
                         msg=f"{name}: gradient {i}")


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_every_layout_matches_channels_last(device, dtype, deterministic, rng):
    cases = _cases(rng, dtype, device)
    for name, fn, geometry, tilts in cases:
        base = _nchw(rng, tilts=tilts, dtype=dtype, device=device)
        seed = int(torch.randint(0, 2**31, (1,), generator=rng))
        reference_planes = [LAYOUTS["channels_last"](p) for p in base]
        expected = _run(fn, geometry, reference_planes, torch.Generator().manual_seed(seed),
                        deterministic=deterministic)
        for layout, make in LAYOUTS.items():
            planes = [make(p) for p in base]
            for p, b in zip(planes, base, strict=True):
                assert torch.equal(p, b)
            result = _run(fn, geometry, planes, torch.Generator().manual_seed(seed),
                          deterministic=deterministic)
            _compare(device, deterministic, expected, result, f"{name} {layout}", dtype)
            n_geo = len(geometry)
            for i, (grad, plane) in enumerate(zip(result[1][n_geo:], planes, strict=True)):
                _expect_layout(grad, plane, f"{name} {layout} grad_planes[{i}]")


@cuda_only
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=str)
def test_cuda_16bit_layouts_match_channels_last(half, rng):
    # 16-bit default backward: float32 channels-last accumulators, rounded once while copied into
    # the caller's layout; the deterministic one stages like any dtype.
    cases = _cases(rng, F32, "cuda")
    name, fn, geometry, tilts = cases[0]
    base = [p.to(half) for p in _nchw(rng, tilts=tilts, dtype=F32, device="cuda")]
    for deterministic in (False, True):
        expected = _run(fn, geometry, [LAYOUTS["channels_last"](p) for p in base],
                        torch.Generator().manual_seed(1), deterministic=deterministic)
        for layout in ("nchw", "sliced_nchw", "permuted"):
            planes = [LAYOUTS[layout](p) for p in base]
            result = _run(fn, geometry, planes, torch.Generator().manual_seed(1),
                          deterministic=deterministic)
            for a, b in zip(expected[0], result[0], strict=True):
                assert torch.equal(a, b), layout
            for i, (a, b) in enumerate(zip(expected[1], result[1], strict=True)):
                if deterministic:
                    assert torch.equal(a, b), f"{layout} gradient {i}"
                else:
                    # Rounded once from float32 sums whose order varies: one ulp of the 16-bit value.
                    ulp = 2 * torch.finfo(a.dtype).eps
                    scale = b.float().abs().max().item()
                    assert_close(a.float(), b.float(), rtol=ulp, atol=ulp * scale)
            for grad, plane in zip(result[1][2:], planes, strict=True):
                _expect_layout(grad, plane, f"16-bit {layout}")


@pytest.mark.parametrize("device", DEVICES)
def test_plane_tv_every_layout(device, rng):
    base = _nchw(rng, tilts=TILTS, dtype=F64, device=device)
    expected_value, expected_grads = None, None
    for layout, make in LAYOUTS.items():
        planes = [make(p).detach().requires_grad_() for p in base]
        value = fieldfuse.plane_tv(planes, TILTS, "percell")
        grads = torch.autograd.grad(value, planes)
        for grad, plane in zip(grads, planes, strict=True):
            _expect_layout(grad, plane, f"plane_tv {layout}")
        if expected_value is None:
            expected_value, expected_grads = value, grads
            continue
        # Float64 sums in a fixed order per layout; the order may follow the strides.
        assert_close(value, expected_value, rtol=1e-13, atol=0)
        for a, b in zip(grads, expected_grads, strict=True):
            assert torch.equal(a, b), layout  # each gradient element is one formula, no sum


# --- workspace sizes ------------------------------------------------------------------------------


def _aligned(nbytes: int) -> int:
    return (nbytes + 255) // 256 * 256


def _queries(pts, rot, planes, wants_grad_planes, deterministic):
    """(forward, backward) workspace bytes of kplanes_tilted."""
    forward = _C.kplanes_tilted_forward_workspace_size(dl(pts), dl(rot), [dl(p) for p in planes])
    backward = _C.kplanes_tilted_backward_workspace_size(
        dl(pts), dl(rot), [dl(p) for p in planes], wants_grad_planes, deterministic)
    return forward, backward


def test_cpu_workspace_has_no_staging(rng):
    pts, rot = _geometry(rng, 50, F32, "cpu")
    base = _nchw(rng, dtype=F32)
    sizes = {layout: _queries(pts, rot, [make(p) for p in base], True, False)
             for layout, make in LAYOUTS.items()}
    assert all(forward == 1 for forward, _ in sizes.values())
    assert len({backward for _, backward in sizes.values()}) == 1


@cuda_only
@pytest.mark.parametrize("dtype", [F32, F64, torch.bfloat16], ids=str)
def test_cuda_workspace_reports_the_staging_bytes(dtype, rng):
    pts, rot = _geometry(rng, 50, F32 if dtype == torch.bfloat16 else dtype, "cuda")
    base = [p.to(dtype) for p in _nchw(rng, dtype=F32, device="cuda")]
    cl = [LAYOUTS["channels_last"](p) for p in base]
    nchw = [LAYOUTS["nchw"](p) for p in base]
    # Staged: every level whose channels are not adjacent; C = 1 is channels-last in any layout.
    staged = sum(_aligned(p.numel() * p.element_size()) for p in base if p.shape[1] > 1) + 256
    for wants, deterministic in [(False, False), (True, False), (True, True)]:
        forward_cl, backward_cl = _queries(pts, rot, cl, wants, deterministic)
        forward_nchw, backward_nchw = _queries(pts, rot, nchw, wants, deterministic)
        assert forward_cl == 1
        assert forward_nchw == staged
        # Plus a gradient buffer per staged level, except 16-bit default gradients (their float32
        # accumulators are channels-last already).
        grad_buffers = wants and (deterministic or dtype != torch.bfloat16)
        extra = 2 * staged - 256 if grad_buffers else staged
        assert backward_nchw - backward_cl == extra, (wants, deterministic)
    # Sliced channels-last with strides that are multiples of 4 reads in place; odd strides stage
    # the level whose C % 4 == 0 (the vector loads need them), not the others.
    sliced = [LAYOUTS["sliced_channels_last"](p) for p in base]
    assert _queries(pts, rot, sliced, True, False)[0] == 1
    odd = [LAYOUTS["odd_channels_last"](p) for p in base]
    level0 = _aligned(base[0].numel() * base[0].element_size())
    assert _queries(pts, rot, odd, True, False)[0] == level0 + 256


@cuda_only
def test_cuda_workspace_depends_on_metadata_only(rng):
    pts, rot = _geometry(rng, 50, F32, "cuda")
    a = _nchw(rng, dtype=F32, device="cuda")
    b = [torch.full_like(p, float("nan")) for p in a]
    assert _queries(pts, rot, a, True, True) == _queries(pts, rot, b, True, True)


# --- CUDA graphs --------------------------------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
def test_cuda_graph_capture_of_an_nchw_step(deterministic, rng):
    pts, rot = _geometry(rng, 2000, F32, "cuda")
    tap_pts, _ = _geometry(rng, 300, F32, "cuda")
    planes = _nchw(rng, dtype=F32, device="cuda")
    static = [t.detach().clone().requires_grad_() for t in [pts, tap_pts, rot, *planes]]

    def step():
        p, t, r, *levels = static
        features, taps = fieldfuse.kplanes_tilted_with_taps(p, t, r, levels, H, GATES,
                                                            deterministic=deterministic)
        loss = features.square().sum() + taps.diff(dim=0).square().sum()
        loss = loss + fieldfuse.plane_tv(levels, TILTS)
        return (loss, *torch.autograd.grad(loss, static))

    graph, captured = capture_cuda_graph(step)
    fresh = [pts * 0.9, tap_pts * 0.8, rot, *[p * 1.1 for p in planes]]
    with torch.no_grad():
        for s, f in zip(static, fresh, strict=True):
            s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    eager = step()
    for i, (a, b) in enumerate(zip(captured, eager, strict=True)):
        if deterministic:
            assert torch.equal(a, b), i
        else:
            assert_close(a, b, rtol=1e-5, atol=1e-5 * max(1.0, b.abs().max().item()))
    for grad, plane in zip(captured[4:], static[3:], strict=True):
        _expect_layout(grad, plane, "graph")
