# SPDX-License-Identifier: Apache-2.0
"""Tests of the fieldfuse render family against the float64 oracles of fieldfuse.reference.render.

Contract: specs/render.md, include/fieldfuse/render.h and python/fieldfuse/render.py. The kernels
march every ray in float64 and round each output once to the inputs' dtype, so results are
compared with the oracle evaluated in float64 on the very same (already rounded) input values:
float32 and float64 at the tolerances of conftest, float16 and bfloat16 (CUDA only) at a couple of
ulps of their own precision (see `_tolerance`). Termination decisions are taken on the float64
transmittance in both, so they agree exactly.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from fieldfuse.reference import render as ref
from device_params import CUDA_MARKS, DEVICES, FLOAT_DTYPES, cuda_only

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I64 = torch.int64


def _device_dtypes(sixteen_bit: bool = True):
    """float32/float64 on both devices; float16/bfloat16 inputs on CUDA too."""
    params = []
    for device in ("cpu", "cuda"):
        marks = CUDA_MARKS if device == "cuda" else ()
        dtypes = [F32, F64] + ([F16, BF16] if device == "cuda" and sixteen_bit else [])
        for dtype in dtypes:
            name = str(dtype).removeprefix("torch.")
            params.append(pytest.param(device, dtype, id=f"{device}-{name}", marks=marks))
    return params


DEVICE_DTYPES = _device_dtypes()

# Differentiable outputs of the volume renderers (total_samples is an int64 count).
FLOAT_FIELDS = ("rgb", "opacity", "depth", "weights", "transmittance")
ALL_FIELDS = ("rgb", "opacity", "depth", "weights", "total_samples", "transmittance")
ALL_OUTPUTS = {"depth": True, "weights": True, "total_samples": True, "transmittance": True}

LENGTHS = [7, 0, 12, 1, 25, 3, 0, 16]  # empty rays, single samples, rays that terminate


def _tolerance(dtype, tolerances):
    """`(forward, grad)` keyword sets for comparing `dtype` results with the float64 oracle.

    float32/float64: conftest's. 16-bit: every output and gradient is one float64 value rounded
    to the 16-bit dtype (a half-ulp: 2^-11 for float16, 2^-8 for bfloat16, relative), so allow
    one ulp relative; the atol covers float16's subnormals (spaced 2^-24 ≈ 6e-8) and values that
    are near zero by cancellation.
    """
    if dtype in (F16, BF16):
        tol = {"rtol": torch.finfo(dtype).eps, "atol": 1e-6}
        return tol, tol
    tol = tolerances(dtype)
    return tol.forward, tol.grad


# --- inputs ---------------------------------------------------------------------------------------


def _uniform(shape, lo, hi, rng) -> torch.Tensor:
    """Uniform float64 values drawn on the CPU generator (reproducible on every device)."""
    return lo + (hi - lo) * torch.rand(shape, generator=rng, dtype=F64)


def _offsets(lengths, device="cpu") -> torch.Tensor:
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    return torch.tensor(bounds, dtype=I64, device=device)


def _rays(lengths, channels, rng, *, sigma_max=8.0) -> dict:
    """Random packed rays (float64, CPU): densities, colours, steps and increasing depths."""
    n = sum(lengths)
    deltas = _uniform(n, 0.05, 0.15, rng)
    bounds = _offsets(lengths).tolist()
    ts = torch.cat(
        [deltas.new_zeros(0)]
        + [deltas[bounds[r]: bounds[r + 1]].cumsum(0) for r in range(len(lengths))]
    )
    return {
        "sigmas": _uniform(n, 0.0, sigma_max, rng),
        "rgbs": _uniform((n, channels), 0.0, 1.0, rng),
        "delta_ts": deltas,
        "ts": ts,
    }


def _cast(tensors: dict, device, dtype) -> dict:
    return {k: v.to(device=device, dtype=dtype) for k, v in tensors.items()}


def _render(impl, tensors: dict, offsets, thresh, *, alpha=False, flags=None):
    """`impl.volume_render` (or `_alpha`) on the named tensors; fieldfuse gets every output."""
    bg, prefix = tensors.get("background"), tensors.get("prefix")
    kwargs = (ALL_OUTPUTS if flags is None else flags) if impl is fieldfuse else {}
    if alpha:
        return impl.volume_render_alpha(tensors["alphas"], tensors["rgbs"], tensors.get("ts"),
                                        offsets, thresh, bg, prefix, **kwargs)
    return impl.volume_render(tensors["sigmas"], tensors["rgbs"], tensors["delta_ts"],
                              tensors.get("ts"), offsets, thresh, bg, prefix, **kwargs)


def _grads(outputs, inputs, upstream):
    """Gradients of Σ upstream·outputs; an input the outputs do not reach gets zeros."""
    pairs = [(o, g) for o, g in zip(outputs, upstream, strict=True) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(x) for x in inputs]
    grads = torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs],
                                allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs, strict=True)]


def _upstream(out, rng, device, dtype, fields=FLOAT_FIELDS) -> dict:
    return {f: _uniform(getattr(out, f).shape, -1.0, 1.0, rng).to(device, dtype) for f in fields}


def _evaluate(impl, tensors, offsets, thresh, upstream=None, *, alpha=False, flags=None):
    """Outputs and, when `upstream` is given, the gradients to every tensor of `tensors`."""
    leaves = {k: v.detach().clone().requires_grad_() for k, v in tensors.items()}
    out = _render(impl, leaves, offsets, thresh, alpha=alpha, flags=flags)
    grads = None
    if upstream is not None:
        fields = list(upstream)
        values = _grads([getattr(out, f) for f in fields], list(leaves.values()),
                        [upstream[f] for f in fields])
        grads = dict(zip(leaves, values, strict=True))
    detached = type(out)(*(None if o is None else o.detach() for o in out))
    return detached, grads


def _exact(tensors, offsets, thresh, upstream=None, *, alpha=False):
    """The float64 oracle on the same values (on the CPU: the oracle loops over samples)."""
    exact_tensors = {k: v.detach().cpu().double() for k, v in tensors.items()}
    exact_up = None if upstream is None else {k: v.cpu().double() for k, v in upstream.items()}
    return _evaluate(ref, exact_tensors, offsets.cpu(), thresh, exact_up, alpha=alpha)


def _assert_outputs_match(out, exact, dtype, device, forward_tol, fields=ALL_FIELDS):
    for name in fields:
        got, want = getattr(out, name), getattr(exact, name)
        assert got is not None, name
        assert got.device.type == torch.device(device).type, name
        assert got.shape == want.shape, name
        if name == "total_samples":
            assert got.dtype == I64
            assert torch.equal(got.cpu(), want), name
            continue
        assert got.dtype == dtype, name
        assert_close(got.cpu().double(), want, **forward_tol,
                     msg=lambda m, name=name: f"output {name}: {m}")


def _assert_grads_match(grads, exact, tensors, grad_tol):
    for name, g in grads.items():
        assert g.dtype == tensors[name].dtype and g.shape == tensors[name].shape, name
        assert torch.isfinite(g).all(), name
        assert_close(g.cpu().double(), exact[name], **grad_tol,
                     msg=lambda m, name=name: f"gradient to {name}: {m}")


def _check_against_reference(tensors, offsets, thresh, rng, dtype, device, tolerances, *,
                             alpha=False, flags=None):
    """Every output and every gradient (random upstream on all outputs) against the oracle."""
    forward_tol, grad_tol = _tolerance(dtype, tolerances)
    flags = ALL_OUTPUTS if flags is None else flags
    fields = [f for f in FLOAT_FIELDS if f in ("rgb", "opacity") or flags.get(f)]
    out, _ = _evaluate(fieldfuse, tensors, offsets, thresh, alpha=alpha, flags=flags)
    upstream = _upstream(out, rng, device, dtype, fields)
    out, grads = _evaluate(fieldfuse, tensors, offsets, thresh, upstream, alpha=alpha,
                           flags=flags)
    exact, exact_grads = _exact(tensors, offsets, thresh, upstream, alpha=alpha)
    checked = [f for f in ALL_FIELDS if f in ("rgb", "opacity") or flags.get(f)]
    _assert_outputs_match(out, exact, dtype, device, forward_tol, checked)
    _assert_grads_match(grads, exact_grads, tensors, grad_tol)
    return out, grads, exact, exact_grads


def _extras(kind, num_rays, channels, rng) -> dict:
    """Background and prefix transmittance variants (float64, CPU)."""
    extras = {}
    if kind in ("bg_shared", "bg_shared+prefix"):
        extras["background"] = _uniform(channels, 0.0, 1.0, rng)
    if kind in ("bg_per_ray", "bg_per_ray+prefix"):
        extras["background"] = _uniform((num_rays, channels), 0.0, 1.0, rng)
    if kind.endswith("prefix"):
        prefix = _uniform(num_rays, 0.2, 1.0, rng)
        prefix[0] = 0.005  # at or below a 0.01 threshold: composites nothing then
        prefix[-1] = 0.0  # opaque before the chunk: composites nothing for any threshold
        extras["prefix"] = prefix
    return extras


# --- exact float64 reference: every output, every gradient ----------------------------------------


EXTRAS = ["none", "bg_shared", "bg_per_ray", "prefix", "bg_shared+prefix", "bg_per_ray+prefix"]


@pytest.mark.parametrize("extras", EXTRAS)
@pytest.mark.parametrize("thresh", [0.0, 0.01])
@pytest.mark.parametrize("channels", [1, 3, 5])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_volume_render_matches_reference(device, dtype, channels, thresh, extras, rng,
                                         tolerances):
    x = _rays(LENGTHS, channels, rng)
    x.update(_extras(extras, len(LENGTHS), channels, rng))
    tensors = _cast(x, device, dtype)
    offsets = _offsets(LENGTHS, device)
    out, grads, exact, _ = _check_against_reference(tensors, offsets, thresh, rng, dtype, device,
                                                    tolerances)
    assert out.rgb.shape == (len(LENGTHS), channels)
    if "bg_shared" in extras:
        assert grads["background"].shape == (channels,)
    if thresh > 0:  # the data really exercises early termination
        assert (exact.total_samples < torch.tensor(LENGTHS)).any()


@pytest.mark.parametrize("extras", ["none", "bg_per_ray+prefix"])
@pytest.mark.parametrize("thresh", [0.0, 0.01])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_volume_render_alpha_matches_reference(device, dtype, channels, thresh, extras, rng,
                                               tolerances):
    x = _rays(LENGTHS, channels, rng)
    x["alphas"] = _uniform(sum(LENGTHS), 0.0, 0.7, rng)
    del x["sigmas"], x["delta_ts"]
    x.update(_extras(extras, len(LENGTHS), channels, rng))
    _check_against_reference(_cast(x, device, dtype), _offsets(LENGTHS, device), thresh, rng,
                             dtype, device, tolerances, alpha=True)


@pytest.mark.parametrize("device", DEVICES)
def test_alpha_variant_equals_density_variant(device, rng, tolerances):
    # α = 1 − exp(−σδ) given directly renders the same (up to the rounding of α to the dtype).
    x = _cast(_rays(LENGTHS, 3, rng), device, F64)
    offsets = _offsets(LENGTHS, device)
    by_sigma = fieldfuse.volume_render(*(x[k] for k in ("sigmas", "rgbs", "delta_ts", "ts")),
                                       offsets, 0.0, weights=True)
    alphas = -torch.expm1(-x["sigmas"] * x["delta_ts"])
    by_alpha = fieldfuse.volume_render_alpha(alphas, x["rgbs"], x["ts"], offsets, 0.0,
                                             weights=True)
    tol = tolerances(F64).forward
    for name in ("rgb", "opacity", "depth", "weights"):
        assert_close(getattr(by_alpha, name), getattr(by_sigma, name), **tol)


# --- gradcheck (float64) --------------------------------------------------------------------------


def _termination_margin(x: dict, offsets, thresh, *, alpha=False) -> float:
    """Smallest |T − thresh| the march meets (float64): gradcheck's steps must not cross it."""
    a = x["alphas"] if alpha else -torch.expm1(-x["sigmas"] * x["delta_ts"])
    bounds = offsets.tolist()
    prefix = x.get("prefix")
    margin = math.inf
    for r in range(len(bounds) - 1):
        trans = 1.0 if prefix is None else prefix[r].item()
        margin = min(margin, abs(trans - thresh))
        if trans <= thresh:
            continue
        for s in range(bounds[r], bounds[r + 1]):
            trans *= 1.0 - a[s].item()
            margin = min(margin, abs(trans - thresh))
            if trans <= thresh:
                break
    return margin


def _gradcheck_rays(lengths, channels, rng, thresh, extras, *, alpha=False):
    """Random rays whose termination is at least 1e-3 away from the threshold."""
    offsets = _offsets(lengths)
    for _ in range(50):
        x = _rays(lengths, channels, rng, sigma_max=4.0)
        if alpha:
            x["alphas"] = _uniform(sum(lengths), 0.05, 0.6, rng)
            del x["sigmas"], x["delta_ts"]
        x.update(_extras(extras, len(lengths), channels, rng))
        if "prefix" in x:
            x["prefix"][0] = 0.5 * thresh if thresh > 0 else 0.5  # keep clear of the boundary
            x["prefix"][-1] = 0.7
        if _termination_margin(x, offsets, thresh, alpha=alpha) > 1e-3:
            return x, offsets
    raise AssertionError("could not draw rays with a termination margin")


def _render_fn(names, offsets, thresh, *, alpha=False):
    def fn(*tensors):
        out = _render(fieldfuse, dict(zip(names, tensors, strict=True)), offsets, thresh,
                      alpha=alpha)
        return tuple(getattr(out, f) for f in FLOAT_FIELDS)

    return fn


GRADCHECK_LENGTHS = [5, 0, 9, 1, 6]


@pytest.mark.parametrize("extras", ["none", "bg_shared+prefix", "bg_per_ray+prefix"])
@pytest.mark.parametrize("thresh", [0.0, 0.05])
@pytest.mark.parametrize("device", DEVICES)
def test_volume_render_gradcheck(device, thresh, extras, rng):
    x, offsets = _gradcheck_rays(GRADCHECK_LENGTHS, 2, rng, thresh, extras)
    names = list(x)
    inputs = [x[k].to(device).requires_grad_() for k in names]
    fn = _render_fn(names, offsets.to(device), thresh)
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("extras", ["none", "bg_per_ray+prefix"])
@pytest.mark.parametrize("thresh", [0.0, 0.05])
@pytest.mark.parametrize("device", DEVICES)
def test_volume_render_alpha_gradcheck(device, thresh, extras, rng):
    x, offsets = _gradcheck_rays(GRADCHECK_LENGTHS, 2, rng, thresh, extras, alpha=True)
    names = list(x)
    inputs = [x[k].to(device).requires_grad_() for k in names]
    fn = _render_fn(names, offsets.to(device), thresh, alpha=True)
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("channels", [None, 1, 3])
@pytest.mark.parametrize("device", DEVICES)
def test_line_integral_gradcheck(device, channels, rng):
    lengths = [4, 0, 7, 1]
    n = sum(lengths)
    shape = (n,) if channels is None else (n, channels)
    values = _uniform(shape, -1.0, 1.0, rng).to(device).requires_grad_()
    deltas = _uniform(n, 0.05, 0.2, rng).to(device).requires_grad_()
    offsets = _offsets(lengths, device)
    fn = lambda v, d: fieldfuse.line_integral(v, d, offsets)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (values, deltas), eps=1e-6, atol=1e-8, rtol=1e-6)


# --- line_integral against the reference ----------------------------------------------------------


@pytest.mark.parametrize("channels", [None, 1, 3, 5])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_line_integral_matches_reference(device, dtype, channels, rng, tolerances):
    n = sum(LENGTHS)
    shape = (n,) if channels is None else (n, channels)
    values = _uniform(shape, -2.0, 2.0, rng).to(device, dtype)
    deltas = _uniform(n, 0.01, 0.2, rng).to(device, dtype)
    offsets = _offsets(LENGTHS, device)
    forward_tol, grad_tol = _tolerance(dtype, tolerances)
    leaves = [values.clone().requires_grad_(), deltas.clone().requires_grad_()]
    out = fieldfuse.line_integral(*leaves, offsets)
    assert out.dtype == dtype and out.device == values.device
    assert out.shape == ((len(LENGTHS),) if channels is None else (len(LENGTHS), channels))
    upstream = _uniform(out.shape, -1.0, 1.0, rng).to(device, dtype)
    grads = torch.autograd.grad(out, leaves, upstream)
    exact_leaves = [t.detach().cpu().double().requires_grad_() for t in (values, deltas)]
    exact = ref.line_integral(*exact_leaves, offsets.cpu())
    exact_grads = torch.autograd.grad(exact, exact_leaves, upstream.cpu().double())
    assert_close(out.detach().cpu().double(), exact, **forward_tol)
    for g, e in zip(grads, exact_grads, strict=True):
        assert_close(g.cpu().double(), e, **grad_tol)
    # Empty rays project to exactly 0.
    assert torch.equal(out.detach()[1], torch.zeros_like(out.detach()[1]))


# --- the terminating-sample rule ------------------------------------------------------------------


def _termination_case(device, dtype, rng):
    # Per ray σ = 20, 0.1, 0, 20 with δ = 0.1: T falls by e^-2 per sample on rays 0 and 3
    # (T = e^-4 ≈ 0.018 after two samples, e^-6 ≈ 0.0025 <= 0.01 after three), so they stop
    # after their third sample, which is composited and counted.
    lengths, per_ray = [10, 4, 0, 6], [20.0, 0.1, 0.0, 20.0]
    n = sum(lengths)
    x = {
        "sigmas": torch.cat([torch.full((k,), s, dtype=F64) for k, s in zip(lengths, per_ray)]),
        "rgbs": _uniform((n, 3), 0.1, 1.0, rng),
        "delta_ts": torch.full((n,), 0.1, dtype=F64),
        "ts": torch.arange(1, n + 1, dtype=F64) / 8,
    }
    composited = torch.zeros(n, dtype=torch.bool)
    composited[[0, 1, 2, 10, 11, 12, 13, 14, 15, 16]] = True
    return _cast(x, device, dtype), _offsets(lengths, device), composited


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_terminating_sample_rule(device, dtype, rng, tolerances):
    tensors, offsets, composited = _termination_case(device, dtype, rng)
    out, _ = _evaluate(fieldfuse, tensors, offsets, 0.01)
    assert out.total_samples.tolist() == [3, 4, 0, 3]
    weights = out.weights.cpu()
    assert (weights[composited] > 0).all()
    assert torch.equal(weights[~composited], torch.zeros(10, dtype=dtype))
    forward_tol, _ = _tolerance(dtype, tolerances)
    # The terminating sample's weight is in: opacity = 1 − e^-6, not 1 − e^-4.
    delta = tensors["delta_ts"][0].double().item()
    assert_close(out.opacity[0].cpu().double(), torch.tensor(-math.expm1(-20 * delta * 3),
                                                            dtype=F64), **forward_tol)
    # Gradients past termination are exactly zero, whatever reaches those samples from upstream
    # (weights' upstream included), and match the oracle elsewhere.
    upstream = _upstream(out, rng, device, dtype)
    _, grads = _evaluate(fieldfuse, tensors, offsets, 0.01, upstream)
    for name in ("sigmas", "rgbs", "delta_ts", "ts"):
        g = grads[name].cpu()
        assert torch.equal(g[~composited], torch.zeros_like(g[~composited])), name
        assert (g[composited] != 0).any(), name
    _check_against_reference(tensors, offsets, 0.01, rng, dtype, device, tolerances)


@pytest.mark.parametrize("device", DEVICES)
def test_prefix_at_or_below_threshold_composites_nothing(device, rng):
    x = _cast(_rays([4, 5, 3], 2, rng), device, F64)
    x["prefix"] = torch.tensor([0.01, 0.004, 0.5], dtype=F64, device=device)
    x["background"] = torch.tensor([0.25, 0.75], dtype=F64, device=device)
    offsets = _offsets([4, 5, 3], device)
    out, _ = _evaluate(fieldfuse, x, offsets, 0.01)
    assert out.total_samples.tolist()[:2] == [0, 0] and out.total_samples[2] > 0
    assert torch.equal(out.weights[:9], torch.zeros(9, dtype=F64, device=device))
    assert torch.equal(out.transmittance[:2], x["prefix"][:2])
    assert torch.equal(out.rgb[:2], x["prefix"][:2, None] * x["background"])
    upstream = _upstream(out, rng, device, F64)
    _, grads = _evaluate(fieldfuse, x, offsets, 0.01, upstream)
    for name in ("sigmas", "rgbs", "delta_ts", "ts"):
        assert torch.equal(grads[name][:9], torch.zeros_like(grads[name][:9])), name


@pytest.mark.parametrize("device", DEVICES)
def test_chunked_marching_equals_one_pass(device, rng, tolerances):
    # Splitting every ray in two chunks, the second starting from the first's transmittance,
    # renders (and differentiates) like one pass: what the prefix transmittance is for.
    lengths = [9, 14, 0, 6, 20]
    x = _cast(_rays(lengths, 3, rng), device, F64)
    bounds = _offsets(lengths).tolist()
    first = [min(n, 5) for n in lengths]
    second = [n - f for n, f in zip(lengths, first, strict=True)]
    index1 = [s for r, f in enumerate(first) for s in range(bounds[r], bounds[r] + f)]
    index2 = [s for r, f in enumerate(first) for s in range(bounds[r] + f, bounds[r + 1])]
    upstream_rgb = _uniform((len(lengths), 3), -1.0, 1.0, rng).to(device)
    names = ("sigmas", "rgbs", "delta_ts", "ts")

    def one_pass(*tensors):
        out = _render(fieldfuse, dict(zip(names, tensors, strict=True)), _offsets(lengths, device),
                      0.01)
        return out.rgb, out.weights, out.total_samples

    def chunked(*tensors):
        t = dict(zip(names, tensors, strict=True))
        part1 = _render(fieldfuse, {k: v[index1] for k, v in t.items()}, _offsets(first, device),
                        0.01)
        part2 = _render(fieldfuse, {**{k: v[index2] for k, v in t.items()},
                                    "prefix": part1.transmittance},
                        _offsets(second, device), 0.01)
        weights = torch.zeros_like(t["sigmas"]).index_put((torch.tensor(index1, device=device),),
                                                         part1.weights)
        weights = weights.index_put((torch.tensor(index2, device=device),), part2.weights)
        return part1.rgb + part2.rgb, weights, part1.total_samples + part2.total_samples

    results = []
    for fn in (one_pass, chunked):
        leaves = [x[k].clone().requires_grad_() for k in names]
        rgb, weights, counts = fn(*leaves)
        grads = torch.autograd.grad((rgb * upstream_rgb).sum(), leaves)
        results.append((rgb.detach(), weights.detach(), counts, grads))
    tol = tolerances(F64)
    (rgb1, w1, n1, g1), (rgb2, w2, n2, g2) = results
    assert torch.equal(n1, n2)
    assert (n1.cpu() < torch.tensor(lengths)).any()
    assert_close(rgb2, rgb1, **tol.forward)
    assert_close(w2, w1, **tol.forward)
    for a, b in zip(g2, g1, strict=True):
        assert_close(a, b, **tol.grad)


# --- losses on some outputs only ------------------------------------------------------------------


@pytest.mark.parametrize(
    "used",
    [("rgb",), ("opacity",), ("depth",), ("weights",), ("transmittance",), ("rgb", "depth"),
     ("opacity", "transmittance", "weights")],
    ids=lambda used: "+".join(used),
)
@pytest.mark.parametrize("device", DEVICES)
def test_loss_on_some_outputs(device, used, rng, tolerances):
    # Unused outputs reach the backward with no gradient (None); that must equal passing zeros.
    x = _rays(LENGTHS, 3, rng)
    x.update(_extras("bg_per_ray+prefix", len(LENGTHS), 3, rng))
    tensors = _cast(x, device, F64)
    offsets = _offsets(LENGTHS, device)
    out, _ = _evaluate(fieldfuse, tensors, offsets, 0.01)
    upstream = _upstream(out, rng, device, F64)
    partial = {f: upstream[f] for f in used}
    zeros = {f: upstream[f] if f in used else torch.zeros_like(upstream[f]) for f in FLOAT_FIELDS}
    _, got = _evaluate(fieldfuse, tensors, offsets, 0.01, partial)
    _, want = _evaluate(fieldfuse, tensors, offsets, 0.01, zeros)
    tol = tolerances(F64).grad
    for name in tensors:
        assert_close(got[name], want[name], **tol, msg=lambda m, name=name: f"{name}: {m}")
    # Also when only the outputs in use are requested at all.
    flags = {"depth": "depth" in used, "weights": "weights" in used,
             "transmittance": "transmittance" in used, "total_samples": False}
    _, requested = _evaluate(fieldfuse, tensors, offsets, 0.01, partial, flags=flags)
    for name in tensors:
        assert_close(requested[name], want[name], **tol, msg=lambda m, name=name: f"{name}: {m}")
    _, exact = _exact(tensors, offsets, 0.01, partial)
    for name in tensors:
        assert_close(got[name].cpu(), exact[name], **tol)


# --- channel independence -------------------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", _device_dtypes(sixteen_bit=False))
def test_four_channels_equal_two_two_channel_runs(device, dtype, rng, tolerances):
    x = _rays(LENGTHS, 4, rng)
    x.update(_extras("bg_per_ray+prefix", len(LENGTHS), 4, rng))
    x = _cast(x, device, dtype)
    offsets = _offsets(LENGTHS, device)
    up = _uniform((len(LENGTHS), 4), -1.0, 1.0, rng).to(device, dtype)
    halves = (slice(0, 2), slice(2, 4))
    full, g_full = _evaluate(fieldfuse, x, offsets, 0.01, {"rgb": up})
    parts = [
        _evaluate(fieldfuse, {**x, "rgbs": x["rgbs"][:, k].contiguous(),
                              "background": x["background"][:, k].contiguous()},
                  offsets, 0.01, {"rgb": up[:, k].contiguous()})
        for k in halves
    ]
    tol = _tolerance(dtype, tolerances)
    assert_close(full.rgb, torch.cat([p.rgb for p, _ in parts], dim=1), **tol[0])
    for name in ("opacity", "depth", "weights", "total_samples", "transmittance"):
        for part, _ in parts:
            assert_close(getattr(full, name), getattr(part, name), **tol[0])
    for name in ("rgbs", "background"):
        assert_close(g_full[name], torch.cat([g[name] for _, g in parts], dim=1), **tol[1])
    eps = torch.finfo(dtype).eps
    for name in ("sigmas", "delta_ts", "ts", "prefix"):
        # The loss is additive over channels: the two halves' gradients add up (each rounded
        # once, so allow a couple of ulps of the larger part where they cancel).
        a, b = parts[0][1][name].double(), parts[1][1][name].double()
        assert_close(g_full[name].double(), a + b, rtol=tol[1]["rtol"],
                     atol=tol[1]["atol"] + 2 * eps * (a.abs() + b.abs()).max().item())


# --- α = 1 and σ = ∞ ------------------------------------------------------------------------------


def _opaque_case(rng, *, alpha):
    lengths = [6, 5, 4, 7, 3]
    x = _rays(lengths, 3, rng, sigma_max=3.0)
    bounds = _offsets(lengths).tolist()
    # Opaque samples: mid-ray, first sample, last sample, two in a row, and after a prefix.
    opaque = [bounds[0] + 2, bounds[1], bounds[3] - 1, bounds[3] + 3, bounds[3] + 4, bounds[4] + 1]
    if alpha:
        x["alphas"] = _uniform(sum(lengths), 0.0, 0.8, rng)
        x["alphas"][opaque] = 1.0
        del x["sigmas"], x["delta_ts"]
    else:
        x["sigmas"][opaque] = math.inf
    x["background"] = _uniform((len(lengths), 3), 0.0, 1.0, rng)
    x["prefix"] = _uniform(len(lengths), 0.3, 1.0, rng)
    return x, _offsets(lengths)


@pytest.mark.parametrize("thresh", [0.0, 0.01])
@pytest.mark.parametrize("alpha", [True, False], ids=["alpha_one", "sigma_inf"])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_opaque_samples(device, dtype, alpha, thresh, rng, tolerances):
    x, offsets = _opaque_case(rng, alpha=alpha)
    tensors = _cast(x, device, dtype)
    out, grads, exact, _ = _check_against_reference(tensors, offsets.to(device), thresh, rng,
                                                    dtype, device, tolerances, alpha=alpha)
    for name in FLOAT_FIELDS:
        assert torch.isfinite(getattr(out, name)).all(), name
    # Every ray with an opaque sample stops there: T = 0.
    assert torch.equal(out.transmittance.cpu(), torch.zeros(5, dtype=dtype))
    assert exact.total_samples.tolist()[:2] == [3, 1]
    if not alpha:
        opaque = torch.isinf(x["sigmas"])
        assert torch.equal(grads["sigmas"][opaque.to(device)].cpu(),
                           torch.zeros(int(opaque.sum()), dtype=dtype))


# --- empty rays, R = 0, N = 0 ---------------------------------------------------------------------


@pytest.mark.parametrize("depth", [False, True], ids=["no_depth", "depth"])
@pytest.mark.parametrize("lengths", [[], [0, 0, 0], [0, 4, 0]], ids=["R0", "N0", "some_empty"])
@pytest.mark.parametrize("device,dtype", _device_dtypes(sixteen_bit=False))
def test_volume_render_empty_cases(device, dtype, lengths, depth, rng, tolerances):
    # Zero-element tensors (N = 0, R = 0) are valid inputs: ts of N = 0 samples is still ts.
    channels = 3
    flags = {**ALL_OUTPUTS, "depth": depth}
    num_rays = len(lengths)
    x = _rays(lengths, channels, rng)
    x["background"] = _uniform((num_rays, channels), 0.0, 1.0, rng)
    x["prefix"] = _uniform(num_rays, 0.2, 1.0, rng)
    tensors = _cast(x, device, dtype)
    offsets = _offsets(lengths, device)
    out, grads, _, _ = _check_against_reference(tensors, offsets, 0.01, rng, dtype, device,
                                                tolerances, flags=flags)
    assert out.rgb.shape == (num_rays, channels)
    assert out.weights.shape == (sum(lengths),)
    empty = torch.tensor([n == 0 for n in lengths], dtype=torch.bool, device=device)
    # An empty ray: rgb = T0·background, zero opacity and depth, T = T0.
    assert_close(out.rgb[empty],
                 tensors["prefix"][empty][:, None] * tensors["background"][empty])
    assert torch.equal(out.transmittance[empty], tensors["prefix"][empty])
    assert torch.equal(out.opacity[empty], torch.zeros_like(out.opacity[empty]))
    if depth:
        assert torch.equal(out.depth[empty], torch.zeros_like(out.depth[empty]))
    assert torch.equal(out.total_samples[empty], torch.zeros_like(out.total_samples[empty]))
    if lengths:
        return
    # No rays, without a prefix; a shared background gets a zero gradient.
    x = _cast(_rays([], 2, rng), device, dtype)
    bg = torch.ones(2, dtype=dtype, device=device, requires_grad=True)
    out = fieldfuse.volume_render(x["sigmas"], x["rgbs"], x["delta_ts"], x["ts"],
                                  _offsets([], device), 0.0, bg, **flags)
    assert out.rgb.shape == (0, 2) and out.weights.shape == (0,)
    (g_bg,) = torch.autograd.grad(out.rgb.sum(), bg)
    assert torch.equal(g_bg, torch.zeros_like(g_bg))


@pytest.mark.parametrize("channels", [None, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_line_integral_empty_cases(device, channels, rng):
    for lengths in ([], [0, 0, 0], [0, 3, 0]):
        n = sum(lengths)
        shape = (n,) if channels is None else (n, channels)
        values = _uniform(shape, -1.0, 1.0, rng).to(device).requires_grad_()
        deltas = _uniform(n, 0.1, 0.2, rng).to(device).requires_grad_()
        out = fieldfuse.line_integral(values, deltas, _offsets(lengths, device))
        expected = ref.line_integral(values.detach().cpu(), deltas.detach().cpu(),
                                     _offsets(lengths))
        assert out.shape == expected.shape
        assert_close(out.detach().cpu(), expected)
        gv, gd = torch.autograd.grad(out, (values, deltas), torch.ones_like(out),
                                     allow_unused=True)
        assert gv.shape == values.shape and gd.shape == deltas.shape


# --- long rays: cancellation ----------------------------------------------------------------------

LONG_N = 100_000


def _long_ray(rng):
    """One ray of 10^5 samples (float64): thin medium (τ ≈ 10 in all), a dense slab of τ ≈ 30 at
    30% of the way, then the thin medium goes on: behind the slab T falls from e^-33 to e^-40."""
    delta = torch.full((LONG_N,), 1e-4, dtype=F64)
    sigmas = _uniform(LONG_N, 0.5, 1.5, rng)
    sigmas[30_000:30_500] = _uniform(500, 500.0, 700.0, rng)
    rgbs = _uniform((LONG_N, 3), 0.0, 1.0, rng)
    return sigmas, rgbs, delta


def _stable_oracle(sigmas, rgbs, delta, g_rgb):
    """Float64 rgb, weights and ∂(g·rgb)/∂σ of one ray (threshold 0, no background), formed as
    δ_i·(q_i·T_{i+1} − Σ_{j>i} q_j·w_j): suffix sums of positive terms built from the back, so
    no large prefix ever cancels (independent of the kernel's back-to-front recursion)."""
    tau = sigmas * delta
    through = torch.cumsum(tau, 0)
    before = torch.cat([through.new_zeros(1), through[:-1]])
    weights = -torch.expm1(-tau) * torch.exp(-before)
    q = rgbs @ g_rgb
    suffix = torch.flip(torch.cumsum(torch.flip(q * weights, [0]), 0), [0])
    behind = torch.cat([suffix[1:], suffix.new_zeros(1)])
    grad = delta * (q * torch.exp(-through) - behind)
    return (weights[:, None] * rgbs).sum(0), weights, grad


def _naive_float32_gradient(sigmas, rgbs, delta, g_rgb):
    """The spec's 'C − C_≤i' suffix form in float32 (what the reference systems compute)."""
    tau = sigmas * delta
    through = torch.cumsum(tau, 0)
    trans_after = torch.exp(-through)
    weights = -torch.expm1(-tau) * torch.exp(-(through - tau))
    prefix = torch.cumsum(weights[:, None] * rgbs, 0)
    final = prefix[-1]
    per_channel = rgbs * trans_after[:, None] - (final - prefix)
    return delta * (per_channel @ g_rgb)


def test_stable_oracle_matches_reference(rng):
    # The vectorised oracle of the long-ray test against the per-sample reference, on a short ray
    # with the same structure (thin, dense, thin).
    n = 300
    delta = torch.full((n,), 0.01, dtype=F64)
    sigmas = _uniform(n, 0.5, 1.5, rng)
    sigmas[90:110] = _uniform(20, 100.0, 150.0, rng)
    rgbs = _uniform((n, 3), 0.0, 1.0, rng)
    g_rgb = _uniform(3, 0.5, 1.0, rng)
    leaf = sigmas.clone().requires_grad_()
    out = ref.volume_render(leaf, rgbs, delta, delta.cumsum(0), torch.tensor([0, n]))
    (exact,) = torch.autograd.grad(out.rgb[0] @ g_rgb, leaf)
    rgb, weights, grad = _stable_oracle(sigmas, rgbs, delta, g_rgb)
    assert_close(rgb, out.rgb[0].detach(), rtol=1e-12, atol=0)
    assert_close(weights, out.weights.detach(), rtol=1e-10, atol=0)
    scale = delta * torch.exp(-torch.cumsum(sigmas * delta, 0)) * g_rgb.sum()
    assert ((grad - exact).abs() / scale).max() < 1e-9


@pytest.mark.parametrize("device,dtype", _device_dtypes(sixteen_bit=False))
def test_long_ray_gradients_are_relatively_accurate(device, dtype, rng):
    sigmas, rgbs, delta = _long_ray(rng)
    g_rgb = _uniform(3, 0.5, 1.0, rng)
    # The oracle on the values as rounded to the dtype.
    sigmas, rgbs, delta, g_rgb = (t.to(dtype).double() for t in (sigmas, rgbs, delta, g_rgb))
    exact_rgb, exact_weights, exact_grad = _stable_oracle(sigmas, rgbs, delta, g_rgb)

    leaf = sigmas.to(device, dtype).requires_grad_()
    rgb_leaf = rgbs.to(device, dtype).requires_grad_()
    out = fieldfuse.volume_render(leaf, rgb_leaf, delta.to(device, dtype), None,
                                  torch.tensor([0, LONG_N], device=device), weights=True)
    grad, grad_rgbs = torch.autograd.grad(out.rgb, (leaf, rgb_leaf),
                                          g_rgb.to(device, dtype)[None])
    grad, grad_rgbs = grad.cpu().double(), grad_rgbs.cpu().double()
    weights = out.weights.detach().cpu().double()

    # float32: one rounding of each result; float64: T_i is rebuilt from optical depths summed
    # over 10^5 samples (by the kernel and by the oracle), ~1e-11 relative.
    eps = max(torch.finfo(dtype).eps, 1e-10)
    assert_close(out.rgb.detach().cpu().double()[0], exact_rgb, rtol=4 * eps, atol=0)
    # Per sample, relative to the gradient's natural size there (δ·T_{i+1}·Σg): a tiny number
    # behind the slab (T ≈ e^-33..e^-40), which "final − prefix" would bury under float32
    # rounding of the O(1) colour.
    through = torch.cumsum(sigmas * delta, 0)
    scale = delta * torch.exp(-through) * g_rgb.sum()
    behind = slice(30_500, LONG_N)
    assert exact_grad[behind].abs().max() < 1e-16  # the region really is far behind
    assert (scale[behind] > 1e-30).all()  # and representable in float32
    error = (grad - exact_grad).abs() / scale
    assert error.max() < 8 * eps, f"max scaled error {error.max():.3e}"
    significant = exact_grad.abs() > 1e-3 * scale
    relative = (grad - exact_grad).abs()[significant] / exact_grad.abs()[significant]
    assert relative.max() < 1e3 * eps, f"max relative error {relative.max():.3e}"
    # Weights and their colour gradients (g·w) stay relatively exact behind the slab too.
    assert_close(weights, exact_weights, rtol=4 * eps, atol=0)
    assert_close(grad_rgbs, exact_weights[:, None] * g_rgb, rtol=4 * eps, atol=0)
    if dtype == F32:
        naive = _naive_float32_gradient(*(t.float() for t in (sigmas, rgbs, delta, g_rgb)))
        naive_error = (naive.double() - exact_grad).abs() / scale
        assert naive_error[behind].median() > 1e3 * error[behind].max(), (
            f"naive median {naive_error[behind].median():.3e} vs fused {error.max():.3e}"
        )


# --- inference fast path --------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [False, True], ids=["sigma", "alpha"])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_inference_equals_training_path(device, dtype, alpha, rng):
    x = _rays(LENGTHS, 3, rng)
    if alpha:
        x["alphas"] = _uniform(sum(LENGTHS), 0.0, 0.6, rng)
        del x["sigmas"], x["delta_ts"]
    x.update(_extras("bg_shared+prefix", len(LENGTHS), 3, rng))
    tensors = _cast(x, device, dtype)
    offsets = _offsets(LENGTHS, device)
    for flags in (ALL_OUTPUTS, {"depth": True, "total_samples": True},
                  {"depth": False, "weights": True}):
        training, _ = _evaluate(fieldfuse, tensors, offsets, 0.01, alpha=alpha, flags=flags)
        with torch.no_grad():
            inference = _render(fieldfuse, tensors, offsets, 0.01, alpha=alpha, flags=flags)
        with torch.inference_mode():
            inference_mode = _render(fieldfuse, tensors, offsets, 0.01, alpha=alpha, flags=flags)
        for name in ALL_FIELDS:
            wanted = name in ("rgb", "opacity") or flags.get(name, name == "depth")
            for result in (training, inference, inference_mode):
                value = getattr(result, name)
                assert (value is not None) == wanted, name
            if wanted:
                # Requested outputs are computed in full under no_grad (never 0-sized).
                assert getattr(inference, name).shape == getattr(training, name).shape, name
                assert torch.equal(getattr(inference, name), getattr(training, name)), name
                assert torch.equal(getattr(inference_mode, name), getattr(training, name)), name


@pytest.mark.parametrize("where", ["sigmas", "delta_ts", "rgbs", "ts", "alphas"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_sample_poisons_only_what_depends_on_it(device, where, rng):
    """Issue 11, Note [NaN samples]: with a NaN in one sample, values and gradients match autograd
    through the float64 oracle, NaN exactly where it has NaN: the colours and depths in front of
    the NaN keep finite gradients (the backward used to rebuild their transmittance from a sum
    through the NaN). Rays of 6 and 45 samples put the NaN in one CUDA chunk or past the first."""
    lengths = [6, 45, 5]
    x = _rays(lengths, 3, rng)
    x["alphas"] = _uniform(sum(lengths), 0.0, 0.6, rng)
    x["background"] = _uniform(3, 0.0, 1.0, rng)
    for s in (3, 6 + 37):  # one sample in each of the first two rays
        if where == "rgbs":
            x["rgbs"][s, 1] = math.nan
        else:
            x[where][s] = math.nan
    alpha = where == "alphas"
    offsets = _offsets(lengths)
    names = ["alphas" if alpha else "sigmas", "rgbs"] + ([] if alpha else ["delta_ts"])
    names += ["ts", "background"]
    results = []
    for impl, dev in ((ref, "cpu"), (fieldfuse, device)):
        leaves = {k: v.to(dev).requires_grad_(k in names) for k, v in x.items()}
        out = _render(impl, leaves, offsets.to(dev), 0.0, alpha=alpha)
        upstream = [torch.ones_like(out.rgb), torch.ones_like(out.depth)]
        grads = _grads([out.rgb, out.depth], [leaves[k] for k in names], upstream)
        results.append([out.rgb, out.depth] + grads)
    for name, got, want in zip(["rgb", "depth"] + names, results[1], results[0], strict=True):
        got = got.cpu()
        if name == "alphas":
            # The one exception (Note [NaN samples]): L is linear in each α, so the oracle's
            # gradient to the NaN α itself is finite; ours, V/(1 − α) with 1 − α = NaN, is NaN.
            assert got[[3, 6 + 37]].isnan().all()
            got, want = got.clone(), want.clone()
            got[[3, 6 + 37]] = want[[3, 6 + 37]] = 0.0
        assert_close(got, want, equal_nan=True, msg=lambda m, name=name: f"{name}: {m}")
    # The point of the contract: the colours in front of the NaN keep finite gradients.
    grad_rgbs = results[1][2 + names.index("rgbs")].cpu()
    assert torch.isfinite(grad_rgbs[:3]).all() and torch.isfinite(grad_rgbs[6:6 + 37]).all()
    assert torch.isfinite(grad_rgbs[-5:]).all()  # the third ray has no NaN at all


@pytest.mark.parametrize("device", DEVICES)
def test_depth_needs_ts(device, rng):
    x = _cast(_rays(LENGTHS, 2, rng), device, F32)
    offsets = _offsets(LENGTHS, device)
    out = fieldfuse.volume_render(x["sigmas"], x["rgbs"], x["delta_ts"], None, offsets)
    assert out.depth is None and out.weights is None and out.total_samples is None
    with_ts = fieldfuse.volume_render(x["sigmas"], x["rgbs"], x["delta_ts"], x["ts"], offsets)
    assert torch.equal(out.rgb, with_ts.rgb) and with_ts.depth is not None


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs(device, rng, tolerances):
    # Every tensor is read through its strides: views give what their contiguous copies give.
    x = _rays(LENGTHS, 3, rng)
    x.update(_extras("bg_per_ray+prefix", len(LENGTHS), 3, rng))
    x = _cast(x, device, F64)
    strided = {
        "sigmas": torch.stack([x["sigmas"], x["ts"]], 1)[:, 0],
        "rgbs": x["rgbs"].t().contiguous().t(),
        "delta_ts": torch.stack([x["ts"], x["delta_ts"]], 1)[:, 1],
        "ts": torch.stack([x["sigmas"], x["ts"]], 1)[:, 1],
        "background": x["background"].t().contiguous().t(),
        "prefix": torch.stack([x["prefix"]] * 3, 1)[:, 2],
    }
    offsets = _offsets(LENGTHS, device)
    strided_offsets = torch.stack([offsets, offsets], 1)[:, 1]
    upstream = _upstream(_evaluate(fieldfuse, x, offsets, 0.01)[0], rng, device, F64)
    want, want_grads = _evaluate(fieldfuse, x, offsets, 0.01, upstream)
    got = _render(fieldfuse, strided, strided_offsets, 0.01)
    for name in ALL_FIELDS:
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    _, got_grads = _evaluate(fieldfuse, strided, strided_offsets, 0.01, upstream)
    for name in want_grads:
        assert_close(got_grads[name], want_grads[name], **tolerances(F64).grad)
    values = torch.stack([x["sigmas"], x["ts"]], 1)
    assert_close(fieldfuse.line_integral(values, x["delta_ts"], strided_offsets),
                 ref.line_integral(values.cpu(), x["delta_ts"].cpu(), offsets.cpu()).to(device))


# --- ray-box sampling -----------------------------------------------------------------------------

S3 = 1 / math.sqrt(3.0)
S2 = 1 / math.sqrt(2.0)
# (origin, direction, label): the special cases of specs/render.md and the slab rule.
SPECIAL_RAYS = [
    ((0.0, 0.0, 0.0), (0.0, 0.0, 1.0), "centre"),
    ((0.3, -0.2, 0.0), (0.0, 0.0, -1.0), "axis"),
    ((0.2, 0.4, 0.7), (1.0, 0.0, 0.0), "axis-x"),
    ((1.0, 0.3, 0.0), (0.0, 0.0, 1.0), "along-face"),
    ((-0.4, -1.0, 0.0), (0.0, 0.0, 1.0), "along-face-y"),
    ((0.5, 0.2, 1.0), (1.0, 0.0, 0.0), "along-face-z"),
    ((1.0, 1.0, 0.0), (0.0, 0.0, 1.0), "along-edge"),
    ((-1.0, 0.5, 1.0), (0.0, 1.0, 0.0), "along-edge-y"),
    ((1.5, 0.0, 0.0), (0.0, 0.0, 1.0), "miss-parallel"),
    ((0.0, 1.0 + 1e-7, 0.0), (0.0, 0.0, 1.0), "miss-just-outside-face"),
    ((3.0, 0.0, 0.0), (S2, S2, 0.0), "miss-diagonal"),
    ((1.0, 1.0, 0.0), (S2, -S2, 0.0), "touch-edge"),
    ((1.0, 1.0, 1.0), (S3, -S3, -S3), "touch-corner"),
    ((0.0, 0.0, 0.0), (S3, S3, S3), "diagonal"),
    ((0.0, 1.0, 0.0), (0.0, 1e-6, 1.0), "grazing-face"),
    ((0.0, 0.999999, 0.3), (0.0, 2e-6, 1.0), "grazing-inside"),
    ((0.5, 0.5, 0.0), (1e-9, 0.0, 1.0), "parallel-within-eps"),
    ((1.0, 0.5, 0.0), (-5e-9, 0.0, 1.0), "parallel-within-eps-on-face"),
    ((0.5, -0.3, 0.0), (2e-8, 0.0, 1.0), "just-above-eps"),
    ((0.2, 0.1, 0.0), (0.0, 0.0, 2.0), "long-direction"),
    ((0.99, 0.99, 0.0), (0.01, 0.01, 0.99990), "near-edge"),
    ((0.3, 0.2, -5.0), (0.1, -0.2, 0.97468), "far-origin"),
    ((0.0, 0.0, 0.0), (-0.6, 0.0, -0.8), "negative"),
]


def _special_rays():
    origins = torch.tensor([o for o, _, _ in SPECIAL_RAYS], dtype=F64)
    directions = torch.tensor([d for _, d, _ in SPECIAL_RAYS], dtype=F64)
    return origins, directions


def _tilt_series_rays(rng):
    """A parallel-beam tilt series: 0° (rays along faces and edges), ±40°, 90° (cos = 6e-17, which
    the slab eps takes as parallel) and a random tilt about x, with random shifts."""
    rotations = torch.cat([
        ref.tilt_rotations(torch.tensor([0.0, 0.7, -0.7, math.pi / 2], dtype=F64), "y"),
        ref.tilt_rotations(_uniform(1, -1.0, 1.0, rng), "x"),
    ])
    shifts = _uniform((5, 3), -0.3, 0.3, rng)
    shifts[0] = 0.0
    return ref.parallel_beam_rays(rotations, shifts, 5)


def _is_tie(origins, directions, tol=1e-9):
    """[R] bool: the entering or the leaving slab is not unique (the span's kink)."""
    ties = []
    for o, d in zip(origins.tolist(), directions.tolist(), strict=True):
        nears, fars = [], []
        for k in range(3):
            if abs(d[k]) <= ref.SLAB_EPS:
                continue
            a, b = (-1 - o[k]) / d[k], (1 - o[k]) / d[k]
            nears.append(min(a, b))
            fars.append(max(a, b))
        nears.sort(reverse=True)
        fars.sort()
        ties.append((len(nears) > 1 and nears[0] - nears[1] <= tol * (1 + abs(nears[0])))
                    or (len(fars) > 1 and fars[1] - fars[0] <= tol * (1 + abs(fars[0]))))
    return torch.tensor(ties, dtype=torch.bool)


def _all_rays(rng):
    o1, d1 = _special_rays()
    o2, d2 = _tilt_series_rays(rng)
    return torch.cat([o1, o2]), torch.cat([d1, d2])


@pytest.mark.parametrize("ds", [0.1, 0.37])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_ray_box_samples_match_reference(device, dtype, ds, rng, tolerances):
    origins, directions = (t.to(dtype) for t in _all_rays(rng))
    exact_points, exact_deltas, exact_offsets = ref.ray_box_samples(origins.double(),
                                                                    directions.double(), ds)
    points, deltas, offsets = fieldfuse.ray_box_samples(origins.to(device),
                                                        directions.to(device), ds)
    assert offsets.dtype == I64 and offsets.device == points.device
    assert points.dtype == dtype and deltas.dtype == dtype
    assert torch.equal(offsets.cpu(), exact_offsets)
    forward_tol, _ = _tolerance(dtype, tolerances)
    assert_close(points.cpu().double(), exact_points, **forward_tol)
    assert_close(deltas.cpu().double(), exact_deltas, **forward_tol)
    if dtype in (F16, BF16):
        return  # the special rays' offsets of 1e-7 and 1e-9 round away in 16 bits
    counts = dict(zip([label for _, _, label in SPECIAL_RAYS],
                      torch.diff(exact_offsets).tolist()[:len(SPECIAL_RAYS)], strict=True))
    for label in ("miss-parallel", "miss-just-outside-face", "miss-diagonal", "touch-edge",
                  "touch-corner"):
        assert counts[label] == 0, label
    for label in ("along-face", "along-face-y", "along-face-z", "along-edge", "along-edge-y",
                  "parallel-within-eps", "parallel-within-eps-on-face", "diagonal"):
        assert counts[label] >= 2, label


@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_degenerate_direction_is_a_miss(device):
    # A direction with every |d_k| <= 1e-8 is no line: the slab rule puts no bound on t, and the
    # ray must miss (no samples), as in the reference, not get an infinite span.
    origins = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.2, 0.1], [0.0, 0.0, 0.0]], dtype=F64)
    directions = torch.tensor([[0.0, 0.0, 0.0], [1e-9, -1e-9, 5e-9], [0.0, 0.0, 1.0]], dtype=F64)
    exact_points, exact_deltas, exact_offsets = ref.ray_box_samples(origins, directions, 0.5)
    assert exact_offsets.tolist() == [0, 0, 0, 5]
    counts = torch.ops.fieldfuse.ray_box_samples_counts(origins.to(device), directions.to(device), 0.5)
    assert counts.tolist() == [0, 0, 5]
    points, deltas, offsets = fieldfuse.ray_box_samples(origins.to(device),
                                                        directions.to(device), 0.5)
    assert offsets.tolist() == [0, 0, 0, 5]
    assert_close(points.cpu(), exact_points)
    assert_close(deltas.cpu(), exact_deltas)
    _, _, valid = fieldfuse.ray_box_samples_padded(origins.to(device), directions.to(device), 0.5)
    assert valid.sum(1).tolist() == [0, 0, 5]


@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_counts_of_short_directions(device):
    # Directions are not normalised, and ds is a distance (Note [ray-box sample count]): |d| = 1/2
    # doubles the span in t but not the chord, so n = ceil(2/0.5) + 1 = 5 whatever |d| is. The
    # counts must equal what the packed forward writes.
    origins = torch.zeros(3, 3, dtype=F64)
    directions = torch.tensor([[0.0, 0.0, 0.5], [0.0, 0.0, 1.0], [0.3, 0.0, 0.0]], dtype=F64)
    exact_points, exact_deltas, exact_offsets = ref.ray_box_samples(origins, directions, 0.5)
    assert exact_offsets.tolist() == [0, 5, 10, 15]
    counts = torch.ops.fieldfuse.ray_box_samples_counts(origins.to(device), directions.to(device),
                                                        0.5)
    # Checked before the packed call: a count below what the forward writes overruns its buffers.
    assert counts.tolist() == [5, 5, 5]
    points, deltas, offsets = fieldfuse.ray_box_samples(origins.to(device),
                                                        directions.to(device), 0.5)
    assert torch.equal(offsets.cpu(), exact_offsets)
    assert_close(points.cpu(), exact_points)
    assert_close(deltas.cpu(), exact_deltas)


@pytest.mark.parametrize("scale", [0.5, 1e-3, 7.0])
@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_padded_holds_every_sample_of_any_direction_length(device, scale, rng):
    # Issue 11: with directions 0.5·d the padded rows kept 3252 of the 3744 packed samples. The
    # capacity ceil(2√3/ds) + 1 bounds every chord's count, whatever |d| (diagonals included).
    origins, directions = _all_rays(rng)
    diagonal = torch.tensor([[-1.0, -1.0, -1.0]], dtype=F64), torch.tensor([[1.0, 1.0, 1.0]],
                                                                           dtype=F64)
    origins = torch.cat([origins, diagonal[0], diagonal[0] * 0.999]).to(device)
    directions = (torch.cat([directions, diagonal[1], diagonal[1]]) * scale).to(device)
    for ds in (0.1, 2 * math.sqrt(3) / 7, 0.37):
        points, deltas, offsets = fieldfuse.ray_box_samples(origins, directions, ds)
        padded_points, padded_deltas, valid = fieldfuse.ray_box_samples_padded(origins,
                                                                               directions, ds)
        assert torch.equal(valid.sum(1), torch.diff(offsets))
        assert torch.equal(padded_points[valid], points)
        assert torch.equal(padded_deltas[valid], deltas)
        exact = ref.ray_box_samples(origins.cpu(), directions.cpu(), ds)
        assert torch.equal(offsets.cpu(), exact[2])


@pytest.mark.parametrize("ds", [0.1, 0.37])
@pytest.mark.parametrize("device,dtype", _device_dtypes(sixteen_bit=False))
def test_ray_box_gradients_match_reference(device, dtype, ds, rng, tolerances):
    origins, directions = (t.to(dtype) for t in _all_rays(rng))
    keep = ~_is_tie(origins.double(), directions.double())  # the kinks: no derivative there
    origins, directions = origins[keep], directions[keep]
    leaves = [origins.to(device).requires_grad_(), directions.to(device).requires_grad_()]
    points, deltas, _ = fieldfuse.ray_box_samples(*leaves, ds)
    g_points = _uniform(points.shape, -1.0, 1.0, rng).to(device, dtype)
    g_deltas = _uniform(deltas.shape, -1.0, 1.0, rng).to(device, dtype)
    grads = _grads([points, deltas], leaves, [g_points, g_deltas])
    exact_leaves = [t.double().requires_grad_() for t in (origins, directions)]
    exact_points, exact_deltas, _ = ref.ray_box_samples(*exact_leaves, ds)
    exact_grads = _grads([exact_points, exact_deltas], exact_leaves,
                         [g_points.cpu().double(), g_deltas.cpu().double()])
    _, grad_tol = _tolerance(dtype, tolerances)
    for g, e, name in zip(grads, exact_grads, ("origins", "directions"), strict=True):
        assert g.dtype == dtype and g.shape == (origins.shape[0], 3)
        assert_close(g.cpu().double(), e, **grad_tol, msg=lambda m, name=name: f"{name}: {m}")
    # Only one of the two: the other gradient is not needed.
    (g_origins,) = torch.autograd.grad(fieldfuse.ray_box_samples(leaves[0], directions.to(device),
                                                                 ds)[0], leaves[0], g_points)
    exact_leaves = [t.double().requires_grad_() for t in (origins, directions)]
    e_origins, _ = _grads([ref.ray_box_samples(*exact_leaves, ds)[0]], exact_leaves,
                          [g_points.cpu().double()])
    assert_close(g_origins.cpu().double(), e_origins, **grad_tol)


@pytest.mark.parametrize("ds", [0.1, 0.37])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_ray_box_padded_equals_packed(device, dtype, ds, rng, tolerances):
    origins, directions = (t.to(device, dtype) for t in _all_rays(rng))
    points, deltas, offsets = fieldfuse.ray_box_samples(origins, directions, ds)
    padded_points, padded_deltas, valid = fieldfuse.ray_box_samples_padded(origins, directions,
                                                                           ds)
    capacity = ref.padded_capacity(ds)
    num_rays = origins.shape[0]
    assert padded_points.shape == (num_rays, capacity, 3) and valid.dtype == torch.bool
    assert padded_deltas.shape == (num_rays, capacity)
    assert torch.equal(valid.sum(1), torch.diff(offsets))
    # Each ray's samples fill its first slots, bit for bit those of the packed layout.
    counts = torch.diff(offsets).cpu()
    prefix_mask = torch.arange(capacity)[None, :] < counts[:, None]
    assert torch.equal(valid.cpu(), prefix_mask)
    assert torch.equal(padded_points[valid], points)
    assert torch.equal(padded_deltas[valid], deltas)
    assert torch.equal(padded_points[~valid], torch.zeros_like(padded_points[~valid]))
    assert torch.equal(padded_deltas[~valid], torch.zeros_like(padded_deltas[~valid]))
    exact = ref.ray_box_samples_padded(origins.cpu().double(), directions.cpu().double(), ds)
    assert torch.equal(valid.cpu(), exact[2])
    forward_tol, _ = _tolerance(dtype, tolerances)
    assert_close(padded_points.cpu().double(), exact[0], **forward_tol)
    assert_close(padded_deltas.cpu().double(), exact[1], **forward_tol)


@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_padded_gradients_equal_packed(device, rng, tolerances):
    origins, directions = _all_rays(rng)
    keep = ~_is_tie(origins, directions)
    origins, directions = origins[keep].to(device), directions[keep].to(device)
    ds = 0.23
    packed_leaves = [origins.clone().requires_grad_(), directions.clone().requires_grad_()]
    points, deltas, offsets = fieldfuse.ray_box_samples(*packed_leaves, ds)
    padded_leaves = [origins.clone().requires_grad_(), directions.clone().requires_grad_()]
    padded_points, padded_deltas, valid = fieldfuse.ray_box_samples_padded(*padded_leaves, ds)
    g_points = _uniform(points.shape, -1.0, 1.0, rng).to(device)
    g_deltas = _uniform(deltas.shape, -1.0, 1.0, rng).to(device)
    # Padding slots get random upstream values too: they must not reach the rays.
    g_padded_points = _uniform(padded_points.shape, -1.0, 1.0, rng).to(device)
    g_padded_deltas = _uniform(padded_deltas.shape, -1.0, 1.0, rng).to(device)
    g_padded_points[valid] = g_points
    g_padded_deltas[valid] = g_deltas
    packed = _grads([points, deltas], packed_leaves, [g_points, g_deltas])
    padded = _grads([padded_points, padded_deltas], padded_leaves,
                    [g_padded_points, g_padded_deltas])
    for a, b in zip(padded, packed, strict=True):
        assert_close(a, b, **tolerances(F64).grad)


def _gradcheck_box_rays(rng, ds, count=6):
    """Rays well inside the box's span rules: no |d_k| small, no tie, n far from a jump."""
    origins, directions = [], []
    while len(origins) < count:
        d = _uniform(3, -1.0, 1.0, rng)
        if d.abs().min() < 0.15:
            continue
        d = d / d.norm()
        o = _uniform(3, -0.5, 0.5, rng)
        o = o - (o @ d) * d  # on the plane through the centre, like parallel-beam origins
        span = ref._slab_interval(o, d)
        if span is None or _is_tie(o[None], d[None], tol=1e-3).item():
            continue
        steps = ((span[1] - span[0]) / ds).item()
        if abs(steps - round(steps)) < 0.02:
            continue
        origins.append(o)
        directions.append(d)
    origins.append(torch.tensor([5.0, 5.0, 0.0], dtype=F64))  # a miss: no samples, zero gradient
    directions.append(torch.tensor([0.0, S2, S2], dtype=F64))
    return torch.stack(origins), torch.stack(directions)


@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_gradcheck(device, rng):
    ds = 0.45
    origins, directions = _gradcheck_box_rays(rng, ds)
    inputs = [origins.to(device).requires_grad_(), directions.to(device).requires_grad_()]
    packed = lambda o, d: fieldfuse.ray_box_samples(o, d, ds)[:2]  # noqa: E731
    padded = lambda o, d: fieldfuse.ray_box_samples_padded(o, d, ds)[:2]  # noqa: E731
    assert torch.autograd.gradcheck(packed, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradcheck(padded, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_padded_single_ray(device):
    # One ray: DLPack may report any stride for the size-1 ray dim (torch 2.4 reports 1), so the
    # padded layout's stride check must not read it.
    origins = torch.tensor([[0.1, -0.2, -3.0]], dtype=F64, device=device)
    directions = torch.tensor([[0.0, 0.0, 1.0]], dtype=F64, device=device)
    points_p, deltas_p, valid = fieldfuse.ray_box_samples_padded(origins, directions, 0.1)
    points, deltas, offsets = fieldfuse.ray_box_samples(origins, directions, 0.1)
    n = int(offsets[-1])
    assert n > 0 and valid[0, :n].all() and not valid[0, n:].any()
    torch.testing.assert_close(points_p[0, :n], points, rtol=0, atol=0)
    torch.testing.assert_close(deltas_p[0, :n], deltas, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_no_rays(device):
    empty = torch.zeros(0, 3, dtype=F64, device=device, requires_grad=True)
    points, deltas, offsets = fieldfuse.ray_box_samples(empty, empty, 0.1)
    assert points.shape == (0, 3) and deltas.shape == (0,) and offsets.tolist() == [0]
    padded = fieldfuse.ray_box_samples_padded(empty, empty, 0.1)
    s = ref.padded_capacity(0.1)
    assert [tuple(t.shape) for t in padded] == [(0, s, 3), (0, s), (0, s)]
    # Every ray misses: N = 0.
    origins = torch.full((3, 3), 2.0, dtype=F64, device=device, requires_grad=True)
    directions = torch.tensor([[0.0, 0.0, 1.0]] * 3, dtype=F64, device=device)
    points, deltas, offsets = fieldfuse.ray_box_samples(origins, directions, 0.1)
    assert points.shape == (0, 3) and offsets.tolist() == [0, 0, 0, 0]
    (grad,) = torch.autograd.grad((points.sum() + deltas.sum()), origins, allow_unused=True,
                                  materialize_grads=True)
    assert torch.equal(grad, torch.zeros_like(grad))


# --- ray-box sampling: strided inputs; CUDA (a warp per ray) against the CPU (a thread per ray) -


def _parity_box_rays(rng):
    """Every kind of ray the warp routines split differently: misses (n = 0), chords shorter than
    any ds (n = 2: a corner clipped), the special and tilt-series rays, and random rays long
    enough at small ds for several chunks of 32 samples (the diagonal reaches the capacity)."""
    origins, directions = _all_rays(rng)
    clipped_o = torch.tensor([[0.999, 0.999, 0.3], [-0.9995, 0.2, 0.9995]], dtype=F64)
    clipped_d = torch.tensor([[S2, -S2, 0.0], [S2, 0.0, S2]], dtype=F64)
    random_d = _uniform((24, 3), -1.0, 1.0, rng)
    random_o = _uniform((24, 3), -0.8, 0.8, rng)
    return (torch.cat([origins, clipped_o, random_o]),
            torch.cat([directions, clipped_d, random_d]))


def _strided(t: torch.Tensor) -> torch.Tensor:
    """`t` (rows of 3) as a non-contiguous view with the same values: every other column of a
    buffer twice as wide (row stride 6, column stride 2)."""
    wide = torch.zeros(*t.shape[:-1], 6, dtype=t.dtype, device=t.device)
    wide[..., ::2] = t
    return wide[..., ::2]


def _box_gradient_tolerance(dtype, tolerances, expected):
    """The gradient tolerance of `_tolerance`, its atol scaled by the largest gradient: the warp's
    lanes only reorder float64 terms as large as that (a grazing slab's 1/d_a reaches 1e6)."""
    _, grad = _tolerance(dtype, tolerances)
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    return {"rtol": grad["rtol"], "atol": grad["atol"] * scale}


_BOX_OPS = {"packed": "ray_box_samples", "padded": "ray_box_samples_padded"}


def _box_call(layout, origins, directions, ds):
    if layout == "packed":
        return fieldfuse.ray_box_samples(origins, directions, ds)
    return fieldfuse.ray_box_samples_padded(origins, directions, ds)


def _box_backward(layout, origins, directions, ds, offsets, grad_points, grad_delta_ts,
                  want_origins, want_directions):
    """The backward op called directly, so that grad_delta_ts and either ray gradient can be
    absent (autograd always passes both upstream gradients)."""
    layout_args = (offsets,) if layout == "packed" else ()
    op = getattr(torch.ops.fieldfuse, f"{_BOX_OPS[layout]}_backward")
    return op(origins, directions, ds, *layout_args, grad_points, grad_delta_ts, want_origins,
              want_directions)


@pytest.mark.parametrize("layout", ["packed", "padded"])
@pytest.mark.parametrize("ds", [0.011, 0.37])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_ray_box_strided_matches_contiguous_cpu(device, dtype, layout, ds, rng, tolerances):
    # On CUDA: the warp routines (Note [ray-box warp]) against the serial CPU routine; on the CPU:
    # strided against contiguous. Inputs and upstream gradients are strided views on `device`.
    # 16-bit inputs (CUDA only) are compared with the CPU on their float64 values, rounded to 16
    # bits as the CUDA kernel rounds its float64 results.
    origins, directions = (t.to(dtype) for t in _parity_box_rays(rng))
    cpu_dtype = F64 if dtype in (F16, BF16) else dtype
    cpu_origins, cpu_directions = origins.to(cpu_dtype), directions.to(cpu_dtype)
    strided_origins, strided_directions = (_strided(t.to(device)) for t in (origins, directions))
    assert not strided_origins.is_contiguous() and not strided_directions.is_contiguous()

    expected = _box_call(layout, cpu_origins, cpu_directions, ds)
    actual = _box_call(layout, strided_origins, strided_directions, ds)
    forward_tol, _ = _tolerance(dtype, tolerances)
    if layout == "packed":
        assert torch.equal(actual[2].cpu(), expected[2])  # offsets
        counts = torch.diff(expected[2])
    else:
        assert torch.equal(actual[2].cpu(), expected[2])  # valid
        counts = expected[2].sum(1)
        # Padding slots are exact zeros on both.
        assert not actual[0][~actual[2]].any() and not actual[1][~actual[2]].any()
    # The ray set has misses and corner-clipping rays of 2 samples; rounded to bfloat16 the
    # clipping rays can move off their corners, so only the misses are required there.
    assert (counts == 0).any() and (dtype == BF16 or (counts == 2).any())
    if ds < 0.1:
        assert counts.max() > 3 * 32  # several chunks of a warp's lanes
    for got, want in zip(actual[:2], expected[:2], strict=True):
        assert got.dtype == dtype
        assert_close(got.cpu().double(), want.to(dtype).double(), **forward_tol)

    # Upstream gradients, padding slots included (the rays must not read them).
    g_points = _uniform(expected[0].shape, -1.0, 1.0, rng).to(dtype)
    g_deltas = _uniform(expected[1].shape, -1.0, 1.0, rng).to(dtype)
    offsets = expected[2] if layout == "packed" else None
    device_offsets = actual[2] if layout == "packed" else None
    strided_g_points = _strided(g_points.to(device))
    strided_g_deltas = torch.stack([g_deltas, g_deltas], -1).to(device)[..., 0]  # strided
    for want_origins, want_directions, with_deltas in [(True, True, True), (True, True, False),
                                                       (True, False, True), (False, True, False)]:
        cpu_g_deltas = g_deltas.to(cpu_dtype) if with_deltas else None
        want = _box_backward(layout, cpu_origins, cpu_directions, ds, offsets,
                             g_points.to(cpu_dtype), cpu_g_deltas, want_origins, want_directions)
        strided_args = (layout, strided_origins, strided_directions, ds, device_offsets,
                        strided_g_points, strided_g_deltas if with_deltas else None, want_origins,
                        want_directions)
        got, again = _box_backward(*strided_args), _box_backward(*strided_args)
        for g, e, g2, wanted, name in zip(got, want, again, (want_origins, want_directions),
                                          ("origins", "directions"), strict=True):
            if not wanted:
                continue
            assert g.dtype == dtype and g.shape == (origins.shape[0], 3)
            assert torch.equal(g, g2), f"{name}: not deterministic"  # a fixed butterfly
            e = e.to(dtype).double()
            assert_close(g.cpu().double(), e, **_box_gradient_tolerance(dtype, tolerances, e),
                         msg=lambda m, name=name: f"{name} ({with_deltas=}): {m}")
            assert torch.equal(g.cpu()[counts == 0], torch.zeros_like(g.cpu()[counts == 0]))


@pytest.mark.parametrize("device", DEVICES)
def test_ray_box_gradcheck_many_samples(device, rng):
    # ds = 0.04: every hit has more samples than a warp has lanes (checked below), so the CUDA lanes
    # take several each; padded rows have 88 slots.
    ds = 0.04
    origins, directions = _gradcheck_box_rays(rng, ds, count=3)
    inputs = [origins.to(device).requires_grad_(), directions.to(device).requires_grad_()]
    packed = lambda o, d: fieldfuse.ray_box_samples(o, d, ds)[:2]  # noqa: E731
    padded = lambda o, d: fieldfuse.ray_box_samples_padded(o, d, ds)[:2]  # noqa: E731
    counts = torch.diff(fieldfuse.ray_box_samples(*inputs, ds)[2])
    assert counts[:-1].min() > 32 and counts[-1] == 0
    assert torch.autograd.gradcheck(packed, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradcheck(padded, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("detector_size", [2, 5])
@pytest.mark.parametrize("device", DEVICES)
def test_tilt_series_geometry_matches_reference(device, detector_size, rng, tolerances):
    angles = _uniform(4, -1.2, 1.2, rng)
    for axis in ("x", "y", "z"):
        rotations = fieldfuse.tilt_rotations(angles.to(device), axis)
        assert_close(rotations.cpu(), ref.tilt_rotations(angles, axis), **tolerances(F64).forward)
    rotations = ref.tilt_rotations(angles, "y")
    shifts = _uniform((4, 3), -0.2, 0.2, rng)
    for s in (shifts, None):
        got = fieldfuse.parallel_beam_rays(rotations.to(device),
                                           None if s is None else s.to(device), detector_size)
        want = ref.parallel_beam_rays(rotations, s, detector_size)
        for g, w in zip(got, want, strict=True):
            assert g.shape == (4 * detector_size**2, 3)
            assert_close(g.cpu(), w, **tolerances(F64).forward)


@pytest.mark.parametrize("device", DEVICES)
def test_projection_pipeline_padded_equals_packed(device, rng, tolerances):
    # The tomography use: samples → per-sample values → line integral, packed or padded (masked
    # sum, or line_integral with offsets from the static capacity).
    origins, directions = (t.to(device) for t in _tilt_series_rays(rng))
    ds = 0.2
    coeffs = _uniform(3, -1.0, 1.0, rng).to(device)

    def field(points):
        return torch.exp(-(points * points).sum(-1)) * (1 + points @ coeffs)

    points, deltas, offsets = fieldfuse.ray_box_samples(origins, directions, ds)
    packed = fieldfuse.line_integral(field(points), deltas, offsets)
    padded_points, padded_deltas, valid = fieldfuse.ray_box_samples_padded(origins, directions,
                                                                           ds)
    num_rays, capacity = padded_deltas.shape
    static = torch.arange(num_rays + 1, device=device) * capacity
    padded = fieldfuse.line_integral(field(padded_points).reshape(-1), padded_deltas.reshape(-1),
                                     static)
    masked = (field(padded_points) * padded_deltas * valid).sum(1)
    tol = tolerances(F64).forward
    assert_close(padded, packed, **tol)
    assert_close(masked, packed, **tol)


# --- torch.compile, torch.library.opcheck ---------------------------------------------------------


def _compile_pipeline(ds):
    def pipeline(origins, directions, weights):
        points, deltas, valid = fieldfuse.ray_box_samples_padded(origins, directions, ds)
        num_rays, capacity = deltas.shape
        offsets = torch.arange(num_rays + 1, device=origins.device) * capacity
        flat = points.reshape(-1, 3)
        sigmas = torch.nn.functional.softplus(flat @ weights[:, 0]) * valid.reshape(-1)
        rgbs = torch.sigmoid(flat @ weights[:, 1:])
        steps = deltas.reshape(-1)
        ts = torch.cumsum(deltas, 1).reshape(-1)
        projection = fieldfuse.line_integral(sigmas, steps, offsets)
        masked = (sigmas.reshape(num_rays, capacity) * deltas).sum(1)
        # Threshold 0: no termination decision that a last-bit difference could flip.
        out = fieldfuse.volume_render(sigmas, rgbs, steps, ts, offsets, 0.0,
                                      weights[0, 1:], total_samples=True)
        loss = (projection.square().sum() + masked.sum() + out.rgb.square().sum()
                + (out.depth * out.opacity).sum())
        return loss, projection, masked, out.rgb, out.depth, out.total_samples

    return pipeline


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_padded_pipeline(device, rng):
    # CPU: Dynamo (fullgraph) and AOTAutograd with the ops' fake impls, eager kernels
    # ("aot_eager"), to keep the 2-core CI fast; CUDA: the default Inductor backend.
    backend = "aot_eager" if device == "cpu" else "inductor"
    torch._dynamo.reset()
    origins, directions = (t.to(device, F32) for t in _tilt_series_rays(rng))
    weights = _uniform((3, 4), -1.0, 1.0, rng).to(device, F32)
    pipeline = _compile_pipeline(0.25)
    compiled = torch.compile(pipeline, fullgraph=True, backend=backend)
    results = []
    for fn in (pipeline, compiled):
        leaves = [t.clone().requires_grad_() for t in (origins, directions, weights)]
        loss, *outputs = fn(*leaves)
        grads = torch.autograd.grad(loss, leaves)
        results.append(([loss.detach()] + [o.detach() for o in outputs], grads))
    (eager_out, eager_grads), (compiled_out, compiled_grads) = results
    assert torch.equal(compiled_out[-1], eager_out[-1])  # total_samples
    # Inductor may fuse the elementwise float32 ops differently from eager: a few ulps.
    for a, b in zip(compiled_out[:-1], eager_out[:-1], strict=True):
        assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())
    assert_close(compiled_out[2], compiled_out[1], rtol=1e-5, atol=1e-6)  # masked = line integral
    for a, b in zip(compiled_grads, eager_grads, strict=True):
        assert_close(a, b, rtol=1e-4, atol=1e-5 * b.abs().max().item())


def _opcheck_render_inputs(rng, device):
    lengths = [3, 0, 4]
    x = _cast(_rays(lengths, 2, rng), device, F64)
    x["background"] = _uniform((3, 2), 0.0, 1.0, rng).to(device)
    x["prefix"] = _uniform(3, 0.5, 1.0, rng).to(device)
    x["alphas"] = _uniform(7, 0.0, 0.6, rng).to(device)
    return x, _offsets(lengths, device)


def _leaf(t):
    return t.clone().requires_grad_()


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_volume_render(device, rng):
    x, offsets = _opcheck_render_inputs(rng, device)
    forward = torch.ops.fieldfuse.volume_render_forward
    backward = torch.ops.fieldfuse.volume_render_backward
    alpha_forward = torch.ops.fieldfuse.volume_render_alpha_forward
    alpha_backward = torch.ops.fieldfuse.volume_render_alpha_backward
    # Forward flags: depth, weights, total_samples, transmittance, ray_state.
    all_outputs = [True] * 5
    torch.library.opcheck(forward, (
        _leaf(x["sigmas"]), _leaf(x["rgbs"]), _leaf(x["delta_ts"]), _leaf(x["ts"]), offsets, 0.01,
        _leaf(x["background"]), _leaf(x["prefix"]), *all_outputs))
    torch.library.opcheck(alpha_forward, (
        _leaf(x["alphas"]), x["rgbs"], None, offsets, 0.0, x["background"][0], None,
        False, False, True, False, False))
    r, n = 3, 7
    grad_rgb = _uniform((r, 2), -1.0, 1.0, rng).to(device)
    grad_r = _uniform(r, -1.0, 1.0, rng).to(device)
    grad_n = _uniform(n, -1.0, 1.0, rng).to(device)
    state = forward(x["sigmas"], x["rgbs"], x["delta_ts"], x["ts"], offsets, 0.01,
                    x["background"], x["prefix"], *all_outputs)[6]
    for ray_state in (None, state):
        torch.library.opcheck(backward, (
            x["sigmas"], x["rgbs"], x["delta_ts"], x["ts"], offsets, 0.01, x["background"],
            x["prefix"], grad_rgb, grad_r, grad_r, grad_n, grad_r, ray_state, *[True] * 6))
    torch.library.opcheck(alpha_backward, (
        x["alphas"], x["rgbs"], None, offsets, 0.0, None, None, grad_rgb, None, None, None, None,
        None, True, False, False, False, False))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("alpha_input", [False, True])
def test_ray_state_spares_the_backward_a_march_and_changes_nothing(device, alpha_input, rng):
    """The backward given the training forward's ray state (what autograd does) returns the same
    bits as the backward that re-marches the rays itself; early termination included."""
    lengths = [40, 0, 1, 70, 33]
    x = _cast(_rays(lengths, 3, rng, sigma_max=40.0), device, F32)
    offsets = _offsets(lengths, device)
    first = (_uniform(sum(lengths), 0.0, 0.9, rng).to(device, F32) if alpha_input
             else x["sigmas"])
    ops = torch.ops.fieldfuse
    name = "volume_render_alpha" if alpha_input else "volume_render"
    forward, backward = getattr(ops, f"{name}_forward"), getattr(ops, f"{name}_backward")
    inputs = [first, x["rgbs"]] + ([] if alpha_input else [x["delta_ts"]])
    inputs += [x["ts"], offsets, 0.01, None, None]
    outs = forward(*inputs, True, True, True, True, True)
    state = outs[6]
    assert state.shape == (len(lengths), 4) and state.dtype == torch.float64
    assert_close(state[:, 0].long(), outs[4], rtol=0, atol=0)  # samples composited
    assert_close(state[:, 1].to(outs[5].dtype), outs[5], rtol=0, atol=0)  # final T
    g = [_uniform(shape, -1.0, 1.0, rng).to(device, F32) for shape in
         ((len(lengths), 3), len(lengths), len(lengths), sum(lengths))]
    # grad of the first input, rgbs, (delta_ts,) ts, background, prefix_transmittance
    grad_wants = [True, True] + ([] if alpha_input else [True]) + [True, False, False]
    with_state, without = (
        backward(*inputs, g[0], g[1], g[2], g[3], None, ray_state, *grad_wants)
        for ray_state in (state, None))
    for a, b, want in zip(with_state, without, grad_wants, strict=True):
        if want:
            assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_line_integral(device, rng):
    lengths = [3, 0, 4]
    offsets = _offsets(lengths, device)
    values = _uniform((7, 2), -1.0, 1.0, rng).to(device)
    deltas = _uniform(7, 0.1, 0.2, rng).to(device)
    torch.library.opcheck(torch.ops.fieldfuse.line_integral_forward,
                          (_leaf(values), _leaf(deltas), offsets))
    torch.library.opcheck(torch.ops.fieldfuse.line_integral_forward,
                          (values[:, 0].contiguous(), deltas, offsets))
    grad = _uniform((3, 2), -1.0, 1.0, rng).to(device)
    torch.library.opcheck(torch.ops.fieldfuse.line_integral_backward,
                          (values, deltas, offsets, grad, True, False))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_ray_box(device, rng):
    origins, directions = (t.to(device) for t in _gradcheck_box_rays(rng, 0.45, count=3))
    ds = 0.45
    ops = torch.ops.fieldfuse
    torch.library.opcheck(ops.ray_box_samples_counts, (origins, directions, ds))
    counts = ops.ray_box_samples_counts(origins, directions, ds)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    n = int(offsets[-1])
    torch.library.opcheck(ops.ray_box_samples_forward,
                          (_leaf(origins), _leaf(directions), ds, offsets, n))
    torch.library.opcheck(ops.ray_box_samples_padded_forward,
                          (_leaf(origins), _leaf(directions), ds))
    grad_points = _uniform((n, 3), -1.0, 1.0, rng).to(device)
    grad_deltas = _uniform(n, -1.0, 1.0, rng).to(device)
    torch.library.opcheck(ops.ray_box_samples_backward,
                          (origins, directions, ds, offsets, grad_points, grad_deltas, True, True))
    s = ref.padded_capacity(ds)
    torch.library.opcheck(ops.ray_box_samples_padded_backward,
                          (origins, directions, ds, _uniform((4, s, 3), -1.0, 1.0, rng).to(device),
                           _uniform((4, s), -1.0, 1.0, rng).to(device), False, True))


# --- determinism and CPU/CUDA parity --------------------------------------------------------------


def _large_rays(rng, device, dtype=F32, num_rays=2048, samples=48):
    lengths = torch.randint(0, samples, (num_rays,), generator=rng).tolist()
    x = _rays(lengths, 3, rng)
    x.update(_extras("bg_per_ray+prefix", num_rays, 3, rng))
    return _cast(x, device, dtype), _offsets(lengths, device)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_is_deterministic(device, rng):
    x, offsets = _large_rays(rng, device)
    out, _ = _evaluate(fieldfuse, x, offsets, 0.01)
    upstream = _upstream(out, rng, device, F32)
    runs = [_evaluate(fieldfuse, x, offsets, 0.01, upstream) for _ in range(3)]
    for out, grads in runs[1:]:
        for name in ALL_FIELDS:
            assert torch.equal(getattr(out, name), getattr(runs[0][0], name)), name
        for name in grads:
            assert torch.equal(grads[name], runs[0][1][name]), name
    values = x["rgbs"]
    leaves = [_leaf(values), _leaf(x["delta_ts"])]
    line = [torch.autograd.grad(fieldfuse.line_integral(*leaves, offsets), leaves,
                                upstream["rgb"]) for _ in range(3)]
    for grads in line[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads, line[0], strict=True))


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cpu_cuda_parity(dtype, rng, tolerances):
    x, offsets = _large_rays(rng, "cuda", dtype)
    out, _ = _evaluate(fieldfuse, x, offsets, 0.01)
    upstream = _upstream(out, rng, "cuda", dtype)
    out, grads = _evaluate(fieldfuse, x, offsets, 0.01, upstream)
    cpu = {k: v.cpu() for k, v in x.items()}
    cpu_out, cpu_grads = _evaluate(fieldfuse, cpu, offsets.cpu(), 0.01,
                                   {k: v.cpu() for k, v in upstream.items()})
    tol = tolerances(dtype)
    for name in ALL_FIELDS:
        assert_close(getattr(out, name).cpu(), getattr(cpu_out, name), **tol.forward)
    for name in grads:
        assert_close(grads[name].cpu(), cpu_grads[name], **tol.grad)
    origins, directions = (t.to(dtype) for t in _all_rays(rng))
    cuda_box = fieldfuse.ray_box_samples(origins.cuda(), directions.cuda(), 0.1)
    cpu_box = fieldfuse.ray_box_samples(origins, directions, 0.1)
    assert torch.equal(cuda_box[2].cpu(), cpu_box[2])
    for a, b in zip(cuda_box[:2], cpu_box[:2], strict=True):
        assert_close(a.cpu(), b, **tol.forward)
    values = x["rgbs"]
    assert_close(fieldfuse.line_integral(values, x["delta_ts"], offsets).cpu(),
                 fieldfuse.line_integral(values.cpu(), cpu["delta_ts"], offsets.cpu()),
                 **tol.forward)


@cuda_only
def test_cuda_backward_is_bitwise_repeatable_on_a_large_batch(rng):
    x, offsets = _large_rays(rng, "cuda", F32, num_rays=65_536, samples=96)
    out, _ = _evaluate(fieldfuse, x, offsets, 0.0)
    upstream = _upstream(out, rng, "cuda", F32)
    first = _evaluate(fieldfuse, x, offsets, 0.0, upstream)[1]
    for _ in range(2):
        again = _evaluate(fieldfuse, x, offsets, 0.0, upstream)[1]
        for name in first:
            assert torch.equal(again[name], first[name]), name
    origins, directions = (t.cuda() for t in _tilt_series_rays(rng))
    leaves = [_leaf(origins), _leaf(directions)]
    box = [torch.autograd.grad(fieldfuse.ray_box_samples_padded(*leaves, 0.05)[0].sum(), leaves)
           for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(box[0], box[1], strict=True))


@pytest.mark.parametrize("device", DEVICES)
def test_eager_calls_equal_the_registered_ops(device, rng):
    """Eager calls run an autograd.Function over the functions the custom ops register (less host
    time per call); both routes give the same bits, forward and backward."""
    lengths = [5, 0, 9]
    x = _cast(_rays(lengths, 3, rng, sigma_max=20.0), device, F64)
    offsets = _offsets(lengths, device)
    names = ("sigmas", "rgbs", "delta_ts")
    eager = [_leaf(x[k]) for k in names]
    out = fieldfuse.volume_render(*eager, x["ts"], offsets, 0.01, weights=True)
    eager_grads = torch.autograd.grad(out.rgb.sum() + 2 * out.weights.sum(), eager)
    library = [_leaf(x[k]) for k in names]
    outs = torch.ops.fieldfuse.volume_render_forward(*library, x["ts"], offsets, 0.01, None, None,
                                                     True, True, False, False, True)
    library_grads = torch.autograd.grad(outs[0].sum() + 2 * outs[3].sum(), library)
    assert torch.equal(out.rgb, outs[0]) and torch.equal(out.weights, outs[3])
    for a, b in zip(eager_grads, library_grads, strict=True):
        assert torch.equal(a, b)

    values = _leaf(x["rgbs"])
    projection = fieldfuse.line_integral(values, x["delta_ts"], offsets)
    (grad,) = torch.autograd.grad(projection.sum(), values)
    values_op = _leaf(x["rgbs"])
    projection_op = torch.ops.fieldfuse.line_integral_forward(values_op, x["delta_ts"], offsets)
    (grad_op,) = torch.autograd.grad(projection_op.sum(), values_op)
    assert torch.equal(projection, projection_op) and torch.equal(grad, grad_op)


def test_fake_tensors_take_the_registered_ops(rng):
    """Tensor subclasses (here the fake tensors that export and shape propagation trace with)
    go through the custom ops and their fake impls, not the eager autograd.Function."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    lengths = [3, 0, 4]
    x = _rays(lengths, 2, rng)
    with FakeTensorMode() as mode:
        fake = {k: mode.from_tensor(v) for k, v in x.items()}
        offsets = mode.from_tensor(_offsets(lengths))
        out = fieldfuse.volume_render(fake["sigmas"].requires_grad_(), fake["rgbs"],
                                      fake["delta_ts"], fake["ts"], offsets, 0.01, validate=False)
        projection = fieldfuse.line_integral(fake["rgbs"], fake["delta_ts"], offsets,
                                             validate=False)
        assert out.rgb.shape == (3, 2) and out.depth.shape == (3,)
        assert projection.shape == (3, 2)
        (grad,) = torch.autograd.grad(out.rgb.sum(), fake["sigmas"])
        assert grad.shape == (7,)
