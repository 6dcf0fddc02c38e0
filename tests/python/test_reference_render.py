# SPDX-License-Identifier: Apache-2.0
"""Checks the pure-PyTorch render oracles against scalar loops and hand cases (specs/render.md)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close


def _load_reference(name: str):
    # The oracles must be testable before the extension is built (and an installed build may
    # predate this module), while importing `fieldfuse` loads the extension: fall back to the
    # source file, which imports no part of fieldfuse.
    try:
        return importlib.import_module(f"fieldfuse.reference.{name}")
    except ImportError:
        root = Path(__file__).resolve().parents[2]
        path = root / "python" / "fieldfuse" / "reference" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"_fieldfuse_reference_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


ref = _load_reference("render")

F64 = torch.float64
# The oracle and the scalar loops evaluate the same float64 products in the same order, except
# that the oracle forms 1 − exp(−σδ) with expm1: a few ulps apart.
TOL = {"rtol": 1e-12, "atol": 1e-14}
# Outputs of the volume renderers that carry gradients (total_samples is an int64 count).
FLOAT_FIELDS = ("rgb", "opacity", "depth", "weights", "transmittance")


def _uniform(shape, lo, hi, rng):
    return lo + (hi - lo) * torch.rand(shape, generator=rng, dtype=F64)


def _offsets(lengths):
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    return torch.tensor(bounds, dtype=torch.int64)


def _rays(lengths, channels, rng, sigma_max=8.0):
    """Random packed rays: (sigmas, rgbs, delta_ts, ts, offsets), ts increasing along each ray."""
    n = sum(lengths)
    sigmas = _uniform(n, 0.0, sigma_max, rng)
    rgbs = _uniform((n, channels), 0.0, 1.0, rng)
    deltas = _uniform(n, 0.05, 0.15, rng)
    offsets = _offsets(lengths)
    bounds = offsets.tolist()
    ts = torch.cat(
        [deltas[bounds[r] : bounds[r + 1]].cumsum(0) for r in range(len(lengths))]
        or [deltas.new_zeros(0)]
    )
    return sigmas, rgbs, deltas, ts, offsets


# --- the spec's compositing loop, one scalar at a time ----------------------------------------


def _loop(alphas, rgbs, ts, offsets, thresh, background=None, prefix=None):
    """specs/render.md's loop on per-sample opacities, plus the documented pre-check on T0."""
    a, c, t = alphas.tolist(), rgbs.tolist(), ts.tolist()
    bounds = offsets.tolist()
    channels = rgbs.shape[1]
    out = {"rgb": [], "opacity": [], "depth": [], "weights": [0.0] * len(a), "counts": []}
    out["transmittance"], out["margin"] = [], math.inf
    for r in range(len(bounds) - 1):
        trans = 1.0 if prefix is None else prefix[r].item()
        color, depth, opacity, n = [0.0] * channels, 0.0, 0.0, 0
        if trans > thresh:
            for s in range(bounds[r], bounds[r + 1]):
                w = a[s] * trans
                color = [color[k] + w * c[s][k] for k in range(channels)]
                depth += w * t[s]
                opacity += w
                out["weights"][s] = w
                trans *= 1.0 - a[s]
                n += 1
                out["margin"] = min(out["margin"], abs(trans - thresh))
                if trans <= thresh:
                    break
        if background is not None:
            bg = (background if background.dim() == 1 else background[r]).tolist()
            color = [color[k] + trans * bg[k] for k in range(channels)]
        out["rgb"].append(color)
        out["depth"].append(depth)
        out["opacity"].append(opacity)
        out["transmittance"].append(trans)
        out["counts"].append(n)
    return out


def _spec_alphas(sigmas, deltas):
    pairs = zip(sigmas.tolist(), deltas.tolist())
    return torch.tensor([1.0 - math.exp(-s * d) for s, d in pairs], dtype=F64)


def _assert_matches_loop(got, expected, channels):
    assert_close(got.rgb, torch.tensor(expected["rgb"], dtype=F64).reshape(-1, channels), **TOL)
    for name in ("opacity", "depth", "weights", "transmittance"):
        assert_close(getattr(got, name), torch.tensor(expected[name], dtype=F64), **TOL)
    assert got.total_samples.dtype == torch.int64
    assert got.total_samples.tolist() == expected["counts"]


def _float_outputs(out):
    return tuple(getattr(out, name) for name in FLOAT_FIELDS)


# --- volume rendering: forward ----------------------------------------------------------------

LENGTHS = [7, 0, 12, 1, 20, 0, 5]


@pytest.mark.parametrize("channels", [1, 3, 5])
@pytest.mark.parametrize("thresh", [0.0, 0.01, 0.3])
def test_volume_render_matches_spec_loop(channels, thresh, rng):
    sigmas, rgbs, deltas, ts, offsets = _rays(LENGTHS, channels, rng)
    got = ref.volume_render(sigmas, rgbs, deltas, ts, offsets, transmittance_thresh=thresh)
    assert got.rgb.shape == (len(LENGTHS), channels) and got.weights.shape == (sum(LENGTHS),)
    expected = _loop(_spec_alphas(sigmas, deltas), rgbs, ts, offsets, thresh)
    _assert_matches_loop(got, expected, channels)


def test_terminating_sample_is_composited_and_counted(rng):
    # The example: per ray σ = 20, 0.1, 0, 20 with δ = 0.1, so T per sample falls by
    # e^-2 (T after 3 samples: e^-6 ≈ 0.0025 <= 0.01, after 2: e^-4 ≈ 0.018) or e^-0.01.
    lengths, per_ray_sigma = [10, 4, 0, 6], [20.0, 0.1, 0.0, 20.0]
    sigmas = torch.cat([torch.full((n,), s, dtype=F64) for n, s in zip(lengths, per_ray_sigma)])
    n = sum(lengths)
    rgbs, deltas = _uniform((n, 3), 0, 1, rng), torch.full((n,), 0.1, dtype=F64)
    ts = torch.arange(n, dtype=F64)
    inputs = [x.requires_grad_() for x in (sigmas, rgbs, deltas, ts)]
    out = ref.volume_render(*inputs, _offsets(lengths), transmittance_thresh=0.01)
    assert out.total_samples.tolist() == [3, 4, 0, 3]
    composited = torch.zeros(n, dtype=torch.bool)
    composited[[0, 1, 2, 10, 11, 12, 13, 14, 15, 16]] = True
    assert (out.weights[composited] > 0).all()
    assert torch.equal(out.weights[~composited], torch.zeros(10, dtype=F64))
    # The third sample's weight is in: opacity = 1 − e^-6, not 1 − e^-4.
    assert_close(out.opacity[0], torch.tensor(-math.expm1(-6.0), dtype=F64), **TOL)
    assert_close(out.transmittance[3], torch.tensor(math.exp(-6.0), dtype=F64), **TOL)
    loss = sum((x * _uniform(x.shape, -1, 1, rng)).sum() for x in _float_outputs(out))
    for grad in torch.autograd.grad(loss, inputs):
        assert torch.equal(grad[~composited], torch.zeros_like(grad[~composited]))
        assert (grad[composited] != 0).any()


def test_four_channels_equal_two_two_channel_runs(rng):
    sigmas, rgbs, deltas, ts, offsets = _rays(LENGTHS, 4, rng)
    background = _uniform(4, 0, 1, rng)
    kw = {"transmittance_thresh": 0.05}
    full = ref.volume_render(sigmas, rgbs, deltas, ts, offsets, background=background, **kw)
    halves = [
        ref.volume_render(sigmas, rgbs[:, k], deltas, ts, offsets, background=background[k], **kw)
        for k in (slice(0, 2), slice(2, 4))
    ]
    assert torch.equal(full.rgb, torch.cat([h.rgb for h in halves], dim=1))
    for name in ("opacity", "depth", "weights", "total_samples", "transmittance"):
        assert torch.equal(getattr(full, name), getattr(halves[0], name))
        assert torch.equal(getattr(full, name), getattr(halves[1], name))


@pytest.mark.parametrize("thresh", [0.0, 0.02])
def test_alpha_variant_matches_sigma_variant(thresh, rng):
    sigmas, rgbs, deltas, ts, offsets = _rays(LENGTHS, 2, rng)
    alphas = -torch.expm1(-sigmas * deltas)
    by_sigma = ref.volume_render(sigmas, rgbs, deltas, ts, offsets, thresh)
    by_alpha = ref.volume_render_alpha(alphas, rgbs, ts, offsets, thresh)
    for got, expected in zip(by_alpha, by_sigma, strict=True):
        assert_close(got, expected, **TOL)
    _assert_matches_loop(by_alpha, _loop(alphas, rgbs, ts, offsets, thresh), 2)


def test_empty_rays_and_no_rays():
    rgbs, empty = torch.zeros(0, 3, dtype=F64), torch.zeros(0, dtype=F64)
    offsets = torch.zeros(4, dtype=torch.int64)  # three empty rays
    background = torch.tensor([0.2, 0.4, 0.6], dtype=F64)
    prefix = torch.tensor([1.0, 0.5, 0.0], dtype=F64)
    out = ref.volume_render(empty, rgbs, empty, empty, offsets)
    assert torch.equal(out.rgb, torch.zeros(3, 3, dtype=F64))
    for name in ("opacity", "depth"):
        assert torch.equal(getattr(out, name), torch.zeros(3, dtype=F64))
    assert out.weights.shape == (0,) and out.total_samples.tolist() == [0, 0, 0]
    assert torch.equal(out.transmittance, torch.ones(3, dtype=F64))
    out = ref.volume_render(
        empty, rgbs, empty, empty, offsets, background=background, prefix_transmittance=prefix
    )
    assert torch.equal(out.rgb, prefix[:, None] * background)
    assert torch.equal(out.transmittance, prefix)
    assert torch.equal(out.opacity, torch.zeros(3, dtype=F64))
    # R = 0.
    none = ref.volume_render_alpha(empty, rgbs, empty, torch.zeros(1, dtype=torch.int64))
    assert none.rgb.shape == (0, 3) and none.weights.shape == (0,)
    assert none.total_samples.shape == (0,) and none.transmittance.shape == (0,)


@pytest.mark.parametrize("per_ray", [False, True], ids=["shared", "per-ray"])
def test_background_adds_final_transmittance_times_colour(per_ray, rng):
    sigmas, rgbs, deltas, ts, offsets = _rays(LENGTHS, 3, rng, sigma_max=3.0)
    shape = (len(LENGTHS), 3) if per_ray else (3,)
    background = _uniform(shape, 0, 1, rng).requires_grad_()
    plain = ref.volume_render(sigmas, rgbs, deltas, ts, offsets, 0.01)
    out = ref.volume_render(sigmas, rgbs, deltas, ts, offsets, 0.01, background=background)
    assert_close(out.rgb, plain.rgb + plain.transmittance[:, None] * background, **TOL)
    for name in ("opacity", "depth", "weights", "total_samples", "transmittance"):
        assert torch.equal(getattr(out, name), getattr(plain, name))
    (grad,) = torch.autograd.grad(out.rgb.sum(), background)
    expected = plain.transmittance[:, None].expand(len(LENGTHS), 3)
    assert_close(grad, expected if per_ray else expected.sum(0), **TOL)
    _assert_matches_loop(
        out, _loop(_spec_alphas(sigmas, deltas), rgbs, ts, offsets, 0.01, background), 3
    )


def test_prefix_transmittance_scales_the_ray(rng):
    sigmas, rgbs, deltas, ts, offsets = _rays(LENGTHS, 2, rng, sigma_max=3.0)
    prefix = _uniform(len(LENGTHS), 0.2, 1.0, rng)
    out = ref.volume_render(sigmas, rgbs, deltas, ts, offsets, prefix_transmittance=prefix)
    plain = ref.volume_render(sigmas, rgbs, deltas, ts, offsets)
    # With thresh = 0 no ray terminates, so the prefix only scales everything.
    assert_close(out.rgb, prefix[:, None] * plain.rgb, **TOL)
    assert_close(out.transmittance, prefix * plain.transmittance, **TOL)
    # opacity is Σw = T0 − T_final, not 1 − T_final.
    assert_close(out.opacity, prefix - out.transmittance, **TOL)
    _assert_matches_loop(
        out, _loop(_spec_alphas(sigmas, deltas), rgbs, ts, offsets, 0.0, prefix=prefix), 2
    )


def _take(tensors, index):
    return [x[index] for x in tensors]


def test_chunked_marching_equals_one_pass(rng):
    lengths, thresh = [30, 18, 25, 9, 0, 22], 0.05
    sigmas, rgbs, deltas, ts, offsets = _rays(lengths, 3, rng, sigma_max=3.0)
    background = _uniform(3, 0, 1, rng)
    bounds = offsets.tolist()
    splits = [0, 9, 5, 9, 0, 11]  # samples of each ray in the first chunk
    first = torch.cat([torch.arange(bounds[r], bounds[r] + k) for r, k in enumerate(splits)])
    second = torch.cat(
        [torch.arange(bounds[r] + k, bounds[r + 1]) for r, k in enumerate(splits)]
    )
    rest = [n - k for n, k in zip(lengths, splits)]
    data = (sigmas, rgbs, deltas, ts)
    whole = ref.volume_render(*data, offsets, thresh, background=background)
    one = ref.volume_render(*_take(data, first), _offsets(splits), thresh)
    two = ref.volume_render(
        *_take(data, second), _offsets(rest), thresh, background, one.transmittance
    )
    # The split lands before, inside and after each ray's termination point.
    stops = whole.total_samples.tolist()
    assert any(0 < s <= k for s, k in zip(stops, splits))  # ends in the first chunk
    assert any(s > k for s, k in zip(stops, splits))  # ends in the second
    assert any(s == n and n > 0 for s, n in zip(stops, lengths))  # never terminates
    assert_close(whole.rgb, one.rgb + two.rgb, **TOL)
    assert_close(whole.opacity, one.opacity + two.opacity, **TOL)
    assert_close(whole.depth, one.depth + two.depth, **TOL)
    assert_close(whole.transmittance, two.transmittance, **TOL)
    assert whole.total_samples.tolist() == (one.total_samples + two.total_samples).tolist()
    weights = torch.zeros_like(whole.weights)
    weights[first], weights[second] = one.weights, two.weights
    assert_close(whole.weights, weights, **TOL)


def test_prefix_at_or_below_threshold_composites_nothing():
    alphas = torch.tensor([0.5, 0.5, 0.5], dtype=F64)
    rgbs, ts = torch.ones(3, 1, dtype=F64), torch.arange(3, dtype=F64)
    prefix = torch.tensor([0.1], dtype=F64)
    background = torch.tensor([2.0], dtype=F64)
    offsets = torch.tensor([0, 3])
    out = ref.volume_render_alpha(alphas, rgbs, ts, offsets, 0.1, background, prefix)
    assert out.total_samples.tolist() == [0]
    assert torch.equal(out.weights, torch.zeros(3, dtype=F64))
    assert torch.equal(out.rgb, torch.tensor([[0.2]], dtype=F64))  # T0·background
    assert torch.equal(out.transmittance, prefix)
    # Just above the threshold, the first sample is composited and terminates the ray.
    out = ref.volume_render_alpha(alphas, rgbs, ts, offsets, 0.099, background, prefix)
    assert out.total_samples.tolist() == [1]


# --- volume rendering: α = 1 and σ = ∞ --------------------------------------------------------


@pytest.mark.parametrize("thresh", [0.0, 0.01])
def test_alpha_one_gradient_matches_hand_derivation(thresh):
    # One ray, α = (α0, 1, α2), colours c0, c1, c2, background b. The ray terminates at sample 1:
    #   w = (α0, 1 − α0, 0),  rgb = α0·c0 + (1 − α0)·α1·c1 + (1 − α0)(1 − α1)·b,
    #   D = α0·t0 + (1 − α0)·α1·t1,  O = α0 + (1 − α0)·α1,  T = (1 − α0)(1 − α1).
    # At α1 = 1:  ∂rgb/∂α0 = c0 − c1,  ∂rgb/∂α1 = (1 − α0)(c1 − b),  ∂D/∂α0 = t0 − t1,
    #   ∂D/∂α1 = (1 − α0)·t1,  ∂O/∂α0 = 0,  ∂O/∂α1 = 1 − α0,  ∂w1/∂α0 = −1,  ∂w1/∂α1 = 1 − α0,
    #   ∂T/∂α0 = 0,  ∂T/∂α1 = −(1 − α0);  nothing reaches sample 2.
    a0 = 0.3
    alphas = torch.tensor([a0, 1.0, 0.6], dtype=F64, requires_grad=True)
    rgbs = torch.tensor([[0.2, 0.9], [0.7, 0.1], [0.5, 0.5]], dtype=F64)
    background = torch.tensor([0.4, 0.8], dtype=F64)
    ts = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    out = ref.volume_render_alpha(alphas, rgbs, ts, torch.tensor([0, 3]), thresh, background)
    assert out.total_samples.tolist() == [2]
    assert_close(out.weights, torch.tensor([a0, 1 - a0, 0.0], dtype=F64), **TOL)
    g_rgb, g_o, g_d, g_t = torch.tensor([1.5, -0.5], dtype=F64), 0.7, -0.3, 1.1
    g_w = torch.tensor([0.2, -0.9, 0.4], dtype=F64)
    loss = (
        (g_rgb * out.rgb).sum()
        + g_o * out.opacity.sum()
        + g_d * out.depth.sum()
        + g_t * out.transmittance.sum()
        + (g_w * out.weights).sum()
    )
    (grad,) = torch.autograd.grad(loss, alphas)
    c0, c1 = rgbs[0], rgbs[1]
    expected = torch.stack(
        [
            (g_rgb * (c0 - c1)).sum() + g_d * (1.0 - 2.0) + g_w[0] - g_w[1],
            (1 - a0) * ((g_rgb * (c1 - background)).sum() + g_o + g_d * 2.0 + g_w[1] - g_t),
            torch.tensor(0.0, dtype=F64),
        ]
    )
    assert torch.isfinite(grad).all()
    assert_close(grad, expected, **TOL)


def test_infinite_sigma_is_an_opaque_sample(rng):
    sigmas = torch.tensor([0.5, math.inf, 0.7, 2.0], dtype=F64)
    deltas = torch.tensor([0.2, 0.3, 0.1, 0.2], dtype=F64)
    rgbs = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]], dtype=F64)
    ts = torch.tensor([0.2, 0.5, 0.6, 0.8], dtype=F64)
    background = torch.tensor([0.9, 0.1], dtype=F64)
    offsets = torch.tensor([0, 3, 4])
    inputs = [x.requires_grad_() for x in (sigmas, rgbs, deltas, ts, background)]
    out = ref.volume_render(*inputs[:4], offsets, 0.0, inputs[4])
    assert out.total_samples.tolist() == [2, 1]
    for value in _float_outputs(out):
        assert torch.isfinite(value).all()
    alphas = torch.tensor([-math.expm1(-0.1), 1.0, 0.0, -math.expm1(-0.4)], dtype=F64)
    by_alpha = ref.volume_render_alpha(alphas, rgbs, ts, offsets, 0.0, background)
    for got, expected in zip(out, by_alpha, strict=True):
        assert_close(got, expected, **TOL)
    loss = sum((x * _uniform(x.shape, -1, 1, rng)).sum() for x in _float_outputs(out))
    g_sigma, g_rgb, g_delta, g_t, g_bg = torch.autograd.grad(loss, inputs)
    for grad in (g_sigma, g_rgb, g_delta, g_t, g_bg):
        assert torch.isfinite(grad).all()
    # The limits: an opaque sample's σ and δ get no gradient; nor does the sample behind it.
    assert g_sigma[1].item() == 0.0 and g_delta[1].item() == 0.0
    assert g_sigma[2].item() == 0.0 and g_delta[2].item() == 0.0
    assert g_sigma[0].item() != 0.0 and g_rgb[1].abs().sum() > 0


# --- volume rendering: gradients -------------------------------------------------------------


def _gradcheck_rays(rng, thresh, alpha_one=False):
    lengths = [4, 0, 5, 3]
    sigmas, rgbs, deltas, ts, offsets = _rays(lengths, 2, rng, sigma_max=6.0)
    background = _uniform((len(lengths), 2), 0, 1, rng)
    prefix = _uniform(len(lengths), 0.5, 1.0, rng)
    alphas = -torch.expm1(-sigmas * deltas)
    if alpha_one:
        # Ray 0 reaches its third sample (T >= 0.49·0.5) and terminates there at any threshold.
        alphas[:3] = torch.tensor([0.3, 0.3, 1.0], dtype=F64)
    # Keep every composited T well clear of the threshold: finite differences must not move the
    # termination point.
    margin = _loop(alphas, rgbs, ts, offsets, thresh, prefix=prefix)["margin"]
    assert margin > 1e-4, "test data too close to the threshold"
    return sigmas, rgbs, deltas, ts, offsets, background, prefix, alphas


@pytest.mark.parametrize("thresh", [0.0, 0.3])
def test_volume_render_gradcheck(thresh, rng):
    sigmas, rgbs, deltas, ts, offsets, background, prefix, _ = _gradcheck_rays(rng, thresh)
    inputs = [x.requires_grad_() for x in (sigmas, rgbs, deltas, ts, background, prefix)]

    def render(s, c, d, t, bg, p):
        return _float_outputs(ref.volume_render(s, c, d, t, offsets, thresh, bg, p))

    assert torch.autograd.gradcheck(render, inputs)


@pytest.mark.parametrize("alpha_one", [False, True], ids=["alpha<1", "alpha=1"])
def test_volume_render_alpha_gradcheck(alpha_one, rng):
    # thresh > 0 keeps the path stable around α = 1 (at thresh = 0 it is one-sided).
    thresh = 0.01
    *_, offsets, background, prefix, alphas = _gradcheck_rays(rng, thresh, alpha_one)
    rgbs, ts = _uniform((alphas.shape[0], 2), 0, 1, rng), _uniform(alphas.shape[0], 0, 2, rng)
    inputs = [x.requires_grad_() for x in (alphas, rgbs, ts, background, prefix)]

    def render(a, c, t, bg, p):
        return _float_outputs(ref.volume_render_alpha(a, c, t, offsets, thresh, bg, p))

    assert torch.autograd.gradcheck(render, inputs)


@pytest.mark.parametrize("thresh", [0.0, 0.05])
def test_gradients_match_spec_backward(thresh, rng):
    # specs/render.md: dL/dσ_i = δ_i·F_i with
    #   F_i = Σ_c gC_c(rgb_ic·T_{i+1} − (C_c − C_≤i,c)) + gO(1 − O) + gD(t_i·T_{i+1} − (D − D_≤i))
    #         + T_{i+1}·gW_i − Σ_{j>i} gW_j·w_j,
    # and, as the extension, dL/dδ_i = σ_i·F_i, dL/drgb_i = gC·w_i, dL/dt_i = gD·w_i.
    lengths = [9, 0, 14, 6]
    sigmas, rgbs, deltas, ts, offsets = _rays(lengths, 3, rng, sigma_max=6.0)
    inputs = [x.requires_grad_() for x in (sigmas, rgbs, deltas, ts)]
    out = ref.volume_render(*inputs, offsets, thresh)
    g_c, g_o = _uniform((len(lengths), 3), -1, 1, rng), _uniform(len(lengths), -1, 1, rng)
    g_d, g_w = _uniform(len(lengths), -1, 1, rng), _uniform(sum(lengths), -1, 1, rng)
    loss = (
        (g_c * out.rgb).sum()
        + (g_o * out.opacity).sum()
        + (g_d * out.depth).sum()
        + (g_w * out.weights).sum()
    )
    g_sigma, g_rgb, g_delta, g_t = torch.autograd.grad(loss, inputs)

    s, c, d, t = sigmas.tolist(), rgbs.tolist(), deltas.tolist(), ts.tolist()
    w, gw = out.weights.tolist(), g_w.tolist()
    expected = [0.0] * len(s)
    bounds = offsets.tolist()
    for r in range(len(lengths)):
        gc, go, gd = g_c[r].tolist(), g_o[r].item(), g_d[r].item()
        big_c, big_o, big_d = out.rgb[r].tolist(), out.opacity[r].item(), out.depth[r].item()
        prefix_c, prefix_d, trans = [0.0] * 3, 0.0, 1.0
        stop = bounds[r] + out.total_samples[r].item()
        for i in range(bounds[r], stop):
            trans *= math.exp(-s[i] * d[i])  # T_{i+1}
            prefix_c = [prefix_c[k] + w[i] * c[i][k] for k in range(3)]
            prefix_d += w[i] * t[i]
            f = sum(gc[k] * (c[i][k] * trans - (big_c[k] - prefix_c[k])) for k in range(3))
            f += go * (1.0 - big_o) + gd * (t[i] * trans - (big_d - prefix_d))
            f += trans * gw[i] - sum(gw[j] * w[j] for j in range(i + 1, stop))
            expected[i] = f
    factor = torch.tensor(expected, dtype=F64)
    # Suffix sums formed as "final − prefix" lose a few digits on opaque rays.
    loose = {"rtol": 1e-9, "atol": 1e-11}
    assert_close(g_sigma, deltas.detach() * factor, **loose)
    assert_close(g_delta, sigmas.detach() * factor, **loose)
    per_ray = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    assert_close(g_rgb, g_c[per_ray] * out.weights[:, None].detach(), **TOL)
    assert_close(g_t, g_d[per_ray] * out.weights.detach(), **TOL)


# --- line integral ---------------------------------------------------------------------------


@pytest.mark.parametrize("channels", [None, 1, 4], ids=["1d", "C=1", "C=4"])
def test_line_integral_matches_loop(channels, rng):
    lengths = [3, 0, 8, 1, 0]
    n = sum(lengths)
    shape = (n,) if channels is None else (n, channels)
    values, deltas = _uniform(shape, -1, 1, rng), _uniform(n, 0.05, 0.2, rng)
    offsets = _offsets(lengths)
    got = ref.line_integral(values, deltas, offsets)
    assert got.shape == (len(lengths),) + shape[1:]
    v, dl, bounds = values.reshape(n, -1).tolist(), deltas.tolist(), offsets.tolist()
    expected = [
        [sum(v[s][k] * dl[s] for s in range(bounds[r], bounds[r + 1])) for k in range(len(v[0]))]
        for r in range(len(lengths))
    ]
    assert_close(got, torch.tensor(expected, dtype=F64).reshape(got.shape), **TOL)


def test_line_integral_gradcheck_and_empty(rng):
    lengths = [3, 0, 4]
    values, deltas = _uniform((7, 2), -1, 1, rng), _uniform(7, 0.05, 0.2, rng)
    offsets = _offsets(lengths)
    inputs = [values.requires_grad_(), deltas.requires_grad_()]
    assert torch.autograd.gradcheck(lambda v, d: ref.line_integral(v, d, offsets), inputs)
    assert torch.autograd.gradcheck(lambda v, d: ref.line_integral(v[:, 0], d, offsets), inputs)
    none = ref.line_integral(torch.zeros(0, 2, dtype=F64), torch.zeros(0, dtype=F64), _offsets([]))
    assert none.shape == (0, 2)


# --- argument checks -------------------------------------------------------------------------


def _render_args(n=5, channels=2, lengths=(2, 3)):
    return {
        "sigmas": torch.ones(n, dtype=F64),
        "rgbs": torch.ones(n, channels, dtype=F64),
        "delta_ts": torch.ones(n, dtype=F64),
        "ts": torch.ones(n, dtype=F64),
        "offsets": _offsets(list(lengths)),
    }


BAD_OFFSETS = [
    (torch.tensor([0, 3, 2, 5]), ValueError, r"offsets.*non-decreasing"),
    (torch.tensor([0, 2, 4]), ValueError, r"offsets\[-1\].*N = 5.*4"),
    (torch.tensor([1, 2, 5]), ValueError, r"offsets\[0\]"),
    (torch.tensor([0, 2, 5], dtype=torch.int32), TypeError, r"offsets.*int64.*int32"),
    (torch.tensor([0.0, 2.0, 5.0]), TypeError, r"offsets.*int64"),
    (torch.tensor([[0, 2, 5]]), ValueError, r"offsets.*\[R\+1\]"),
    (torch.zeros(0, dtype=torch.int64), ValueError, r"offsets.*\[R\+1\]"),
    ([0, 2, 5], TypeError, r"offsets.*torch.Tensor"),
]
BAD_OFFSET_IDS = ["decreasing", "last", "first", "int32", "float", "2d", "empty", "list"]


@pytest.mark.parametrize("offsets,error,match", BAD_OFFSETS, ids=BAD_OFFSET_IDS)
def test_bad_offsets_are_rejected(offsets, error, match):
    args = _render_args()
    args["offsets"] = offsets
    with pytest.raises(error, match=rf"volume_render\(\).*{match}"):
        ref.volume_render(**args)
    alpha_args = {k: v for k, v in args.items() if k != "delta_ts"}
    alpha_args["alphas"] = alpha_args.pop("sigmas")
    with pytest.raises(error, match=rf"volume_render_alpha\(\).*{match}"):
        ref.volume_render_alpha(**alpha_args)
    with pytest.raises(error, match=rf"line_integral\(\).*{match}"):
        ref.line_integral(args["sigmas"], args["delta_ts"], offsets)


@pytest.mark.parametrize(
    "name,value,kwargs,error,match",
    [
        ("rgbs", torch.ones(4, 2, dtype=F64), {}, ValueError, r"rgbs.*\[N, C\].*\[4, 2\]"),
        ("rgbs", torch.ones(5, dtype=F64), {}, ValueError, r"rgbs.*\[N, C\].*\[5\]"),
        ("rgbs", torch.ones(5, 0, dtype=F64), {}, ValueError, r"rgbs.*C >= 1.*\[5, 0\]"),
        ("rgbs", torch.ones(5, 2), {}, TypeError, r"rgbs.*float64.*sigmas.*float32"),
        ("sigmas", torch.ones(5, 1, dtype=F64), {}, ValueError, r"sigmas.*\[N\]"),
        ("sigmas", torch.ones(5, dtype=torch.int64), {}, TypeError, r"sigmas.*floating"),
        ("delta_ts", torch.ones(4, dtype=F64), {}, ValueError, r"delta_ts.*\[N\] = \[5\]"),
        ("ts", torch.ones(6, dtype=F64), {}, ValueError, r"ts.*\[N\] = \[5\]"),
        ("ts", 1.0, {}, TypeError, r"ts.*torch.Tensor.*float"),
        (None, None, {"background": torch.ones(3, dtype=F64)}, ValueError, r"background.*\[3\]"),
        (None, None, {"background": torch.ones(3, 2, dtype=F64)}, ValueError, r"background"),
        (
            None, None, {"prefix_transmittance": torch.ones(3, dtype=F64)}, ValueError,
            r"prefix_transmittance.*\[R\] = \[2\].*\[3\]",
        ),
        (None, None, {"transmittance_thresh": -0.1}, ValueError, r"transmittance_thresh"),
        (None, None, {"transmittance_thresh": 1.0}, ValueError, r"transmittance_thresh"),
        (None, None, {"transmittance_thresh": math.nan}, ValueError, r"transmittance_thresh"),
    ],
    ids=[
        "rgbs-rows", "rgbs-1d", "rgbs-C0", "rgbs-dtype", "sigmas-2d", "sigmas-int",
        "delta_ts", "ts", "ts-float", "bg-C", "bg-R", "prefix", "thresh<0", "thresh=1",
        "thresh-nan",
    ],
)
def test_volume_render_rejects_bad_arguments(name, value, kwargs, error, match):
    args = _render_args()
    if name is not None:
        args[name] = value
    with pytest.raises(error, match=rf"volume_render\(\).*{match}"):
        ref.volume_render(**args, **kwargs)


def test_line_integral_rejects_bad_arguments():
    offsets = _offsets([2, 3])
    with pytest.raises(ValueError, match=r"line_integral\(\).*values.*C >= 1"):
        ref.line_integral(torch.ones(5, 0, dtype=F64), torch.ones(5, dtype=F64), offsets)
    with pytest.raises(ValueError, match=r"line_integral\(\).*values.*\[N\] or \[N, C\]"):
        ref.line_integral(torch.ones(5, 1, 1, dtype=F64), torch.ones(5, dtype=F64), offsets)
    with pytest.raises(ValueError, match=r"line_integral\(\).*delta_ts.*\[N\] = \[5\]"):
        ref.line_integral(torch.ones(5, dtype=F64), torch.ones(4, dtype=F64), offsets)
    with pytest.raises(TypeError, match=r"line_integral\(\).*delta_ts.*float64.*float32"):
        ref.line_integral(torch.ones(5, dtype=F64), torch.ones(5), offsets)


# --- ray-box sampling ------------------------------------------------------------------------


def _ray(origin, direction):
    return torch.tensor([origin], dtype=F64), torch.tensor([direction], dtype=F64)


def _length(origin, direction, ds=0.5):
    """(len, n) of one ray from its samples, or (0, 0) on a miss."""
    points, deltas, offsets = ref.ray_box_samples(*_ray(origin, direction), ds)
    n = offsets[1].item()
    return (deltas[0].item() * (n - 1), n) if n else (0.0, 0)


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_axis_aligned_ray_through_centre(axis, sign):
    direction = [0.0, 0.0, 0.0]
    direction[axis] = sign
    points, deltas, offsets = ref.ray_box_samples(*_ray([0.0, 0.0, 0.0], direction), 0.5)
    assert offsets.tolist() == [0, 5]
    assert torch.equal(deltas, torch.full((5,), 0.5, dtype=F64))
    expected = torch.zeros(5, 3, dtype=F64)
    # t runs from −1 to 1 whichever way the ray points: front to back along the direction.
    expected[:, axis] = sign * torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0], dtype=F64)
    assert torch.equal(points, expected)


def test_rays_are_lines_not_half_lines():
    # The origin lies outside the box, behind it: the samples are at t ∈ [−6, −4].
    points, deltas, offsets = ref.ray_box_samples(*_ray([0.3, -0.2, 5.0], [0.0, 0.0, 1.0]), 0.4)
    assert offsets.tolist() == [0, 6]  # ceil(2/0.4) + 1
    assert_close(points[:, 2], torch.linspace(-1, 1, 6, dtype=F64), **TOL)
    assert torch.equal(points[:, :2], torch.tensor([[0.3, -0.2]] * 6, dtype=F64))


@pytest.mark.parametrize(
    "origin,direction,length",
    [
        # Along a face (|o_y| = 1 exactly, d_y = 0): the closed slab keeps it, length 2.
        ([0.0, 1.0, 0.0], [1.0, 0.0, 0.0], 2.0),
        ([0.0, -1.0, 0.3], [1.0, 0.0, 0.0], 2.0),
        # Along an edge: two parallel axes on their faces.
        ([0.0, 1.0, 1.0], [1.0, 0.0, 0.0], 2.0),
        ([1.0, -1.0, 0.0], [0.0, 0.0, -1.0], 2.0),
        # Just outside a face: a miss.
        ([0.0, 1.0 + 1e-12, 0.0], [1.0, 0.0, 0.0], 0.0),
        ([2.0, 0.0, 0.0], [0.0, 0.0, 1.0], 0.0),
        # |d_y| <= 1e-8 counts as parallel: the ray on the face keeps its full length.
        ([0.0, 1.0, 0.0], [1.0, 1e-9, 0.0], 2.0),
        # |d_y| above 1e-8 is intersected: leaving the face at t = 0 halves the length.
        ([0.0, 1.0, 0.0], [1.0, 1e-6, 0.0], 1.0),
        ([0.0, 1.0, 0.0], [1.0, -1e-6, 0.0], 1.0),
        # A diagonal line touching only the edge x = 1, y = 1 (x + y = 2): length 0, a miss.
        ([1.5, 0.5, 0.0], [-1.0, 1.0, 0.0], 0.0),
        # ... and just inside it: a short chord, still >= 2 samples.
        ([1.5, 0.5 - 1e-3, 0.0], [-1.0, 1.0, 0.0], 1e-3),
        # Through the corner (1, 1, 1) only: x > 1 for t > 0 and y > 1 for t < 0. A miss.
        ([1.0, 1.0, 1.0], [1.0, -1.0, 1.0], 0.0),
        # The main diagonal: length 2√3 (three tied slabs).
        ([0.0, 0.0, 0.0], [3**-0.5] * 3, 2.0 * math.sqrt(3.0)),
        # Zero direction: no line.
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 0.0),
    ],
    ids=[
        "face", "face-2", "edge", "edge-2", "outside-face", "outside", "tilt-1e-9", "tilt+1e-6",
        "tilt-1e-6", "touch-edge", "near-edge", "touch-corner", "diagonal", "zero-direction",
    ],
)
def test_grazing_and_missing_rays(origin, direction, length):
    got, n = _length(origin, direction)
    if length == 0.0:
        assert n == 0
    else:
        # ds is a distance: n counts steps along the chord, |d|·len (len in t). The tilted rays'
        # |d| = 1 + 5e-13 puts their chord just past 2 steps: n = 4.
        chord = length * math.sqrt(sum(x * x for x in direction))
        assert n == max(math.ceil(chord / 0.5), 1) + 1
        assert got == pytest.approx(length, rel=1e-9)


def test_random_rays_against_brute_force(rng):
    count, ds = 60, 0.3
    origins = _uniform((count, 3), -1.6, 1.6, rng)
    directions = torch.randn(count, 3, generator=rng, dtype=F64)
    directions = directions / directions.norm(dim=1, keepdim=True)
    points, deltas, offsets = ref.ray_box_samples(origins, directions, ds)
    bounds = offsets.tolist()
    # Independent check: march each line finely over t ∈ [−6, 6] and see where it is inside.
    t = torch.linspace(-6.0, 6.0, 120001, dtype=F64)
    hits = 0
    for r in range(count):
        inside = (origins[r] + t[:, None] * directions[r]).abs().amax(dim=1) <= 1.0
        n = bounds[r + 1] - bounds[r]
        if n == 0:
            assert not inside.any(), f"ray {r} crosses the box but got no samples"
            continue
        hits += 1
        ray = slice(bounds[r], bounds[r + 1])
        ray_points, ray_deltas = points[ray], deltas[ray]
        length = ray_deltas[0].item() * (n - 1)
        assert n == math.ceil(length / ds) + 1 and n >= 2
        assert torch.equal(ray_deltas, ray_deltas[:1].expand(n))
        # Endpoints on the surface, every sample inside, uniform spacing δ·|d| = δ.
        ends = ray_points[[0, -1]].abs().amax(dim=1)
        assert_close(ends, torch.ones(2, dtype=F64), rtol=0, atol=1e-12)
        assert (ray_points.abs() <= 1.0 + 1e-12).all()
        steps = (ray_points[1:] - ray_points[:-1]).norm(dim=1)
        assert_close(steps, ray_deltas[1:], rtol=1e-10, atol=1e-12)
        # The fine march agrees on the chord length to its resolution (1e-4 in t).
        assert abs(inside.sum().item() * 1e-4 - length) <= 3e-4
    assert 10 < hits < count


def _smooth_rays(rng, count, ds):
    """Rays far from grazing and from count changes, for finite differences."""
    origins = _uniform((count * 4, 3), -0.5, 0.5, rng)
    directions = torch.randn(count * 4, 3, generator=rng, dtype=F64)
    directions = directions / directions.norm(dim=1, keepdim=True)
    keep = []
    for r in range(count * 4):
        o, d = origins[r].tolist(), directions[r].tolist()
        if min(abs(x) for x in d) < 0.2:
            continue
        lo = sorted(min((-1 - o[k]) / d[k], (1 - o[k]) / d[k]) for k in range(3))
        hi = sorted(max((-1 - o[k]) / d[k], (1 - o[k]) / d[k]) for k in range(3))
        frac = ((hi[0] - lo[2]) / ds) % 1.0
        if lo[2] - lo[1] > 1e-3 and hi[1] - hi[0] > 1e-3 and 1e-3 < frac < 1 - 1e-3:
            keep.append(r)
    assert len(keep) >= count
    return origins[keep[:count]], directions[keep[:count]]


def test_ray_box_points_gradcheck(rng):
    ds = 0.35
    origins, directions = _smooth_rays(rng, 4, ds)
    inputs = [origins.requires_grad_(), directions.requires_grad_()]

    def samples(o, d):
        points, deltas, _ = ref.ray_box_samples(o, d, ds)
        return points, deltas

    assert torch.autograd.gradcheck(samples, inputs)


def test_padded_variant_equals_packed(rng):
    ds = 0.45
    origins = _uniform((12, 3), -1.4, 1.4, rng)
    origins[0] = 0.0  # the main diagonal needs the full capacity
    directions = torch.randn(12, 3, generator=rng, dtype=F64)
    directions[0] = 1.0
    origins[1], directions[1] = torch.tensor([1.2, 1.2, 0.0]), torch.tensor([0.0, 0.0, 1.0])
    directions = directions / directions.norm(dim=1, keepdim=True)
    inputs = [origins.requires_grad_(), directions.requires_grad_()]
    points, deltas, offsets = ref.ray_box_samples(*inputs, ds)
    padded, padded_deltas, valid = ref.ray_box_samples_padded(*inputs, ds)
    capacity = ref.padded_capacity(ds)
    assert capacity == math.ceil(2 * math.sqrt(3) / ds) + 1
    assert padded.shape == (12, capacity, 3) and valid.dtype == torch.bool
    counts = offsets.diff()
    assert valid.sum(dim=1).tolist() == counts.tolist() and counts[0] == capacity
    assert (counts == 0).any()  # some rays miss
    assert torch.equal(valid, torch.arange(capacity)[None] < counts[:, None])
    assert torch.equal(padded[valid], points) and torch.equal(padded_deltas[valid], deltas)
    assert torch.equal(padded[~valid], torch.zeros_like(padded[~valid]))
    assert torch.equal(padded_deltas[~valid], torch.zeros_like(padded_deltas[~valid]))
    weights = torch.rand(points.shape, generator=rng, dtype=F64)
    padded_weights = torch.zeros_like(padded)
    padded_weights[valid] = weights
    packed_grads = torch.autograd.grad((points * weights).sum() + deltas.sum(), inputs)
    padded_grads = torch.autograd.grad(
        (padded * padded_weights).sum() + padded_deltas.sum(), inputs
    )
    for got, expected in zip(padded_grads, packed_grads, strict=True):
        assert_close(got, expected, **TOL)


def test_ray_box_rejects_bad_arguments():
    origins, directions = torch.zeros(2, 3, dtype=F64), torch.ones(2, 3, dtype=F64) / 3**0.5
    with pytest.raises(ValueError, match=r"ray_box_samples\(\).*origins.*\[R, 3\].*\[2, 2\]"):
        ref.ray_box_samples(origins[:, :2], directions, 0.1)
    with pytest.raises(ValueError, match=r"ray_box_samples\(\).*directions.*\[3, 3\]"):
        ref.ray_box_samples(origins, torch.zeros(3, 3, dtype=F64), 0.1)
    with pytest.raises(TypeError, match=r"ray_box_samples\(\).*directions.*float64"):
        ref.ray_box_samples(origins, directions.float(), 0.1)
    for ds in (0.0, -0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"ray_box_samples_padded\(\).*ds"):
            ref.ray_box_samples_padded(origins, directions, ds)
    # A direction shorter than unit stretches t, not the chord: the capacity holds every sample.
    packed = ref.ray_box_samples(origins, directions / 2, 0.1)
    padded = ref.ray_box_samples_padded(origins, directions / 2, 0.1)
    assert torch.equal(padded[2].sum(1), packed[2].diff())
    empty = ref.ray_box_samples(origins[:0], directions[:0], 0.1)
    assert [x.shape for x in empty] == [(0, 3), (0,), (1,)]
    padded = ref.ray_box_samples_padded(origins[:0], directions[:0], 0.5)
    assert [tuple(x.shape) for x in padded] == [(0, 8, 3), (0, 8), (0, 8)]


# --- parallel-beam geometry ------------------------------------------------------------------


def test_parallel_beam_rays_match_loop(rng):
    rotations = _uniform((2, 3, 3), -1, 1, rng)
    shifts = _uniform((2, 3), -0.2, 0.2, rng)
    n = 3
    origins, directions = ref.parallel_beam_rays(rotations, shifts, n)
    assert origins.shape == directions.shape == (2 * n * n, 3)
    row = 0
    for m in range(2):
        for i in range(n):
            for j in range(n):
                pixel = torch.tensor([2 * j / (n - 1) - 1, 2 * i / (n - 1) - 1, 0.0], dtype=F64)
                assert_close(origins[row], rotations[m] @ pixel + shifts[m], **TOL)
                assert torch.equal(directions[row], rotations[m, :, 2])
                row += 1
    # Identity, no shift: a grid on z = 0, x fastest, beams along +z.
    origins, directions = ref.parallel_beam_rays(torch.eye(3, dtype=F64)[None], None, 3)
    assert origins[:3].tolist() == [[-1.0, -1.0, 0.0], [0.0, -1.0, 0.0], [1.0, -1.0, 0.0]]
    assert origins[3:6, 1].tolist() == [0.0] * 3
    assert torch.equal(directions, torch.tensor([[0.0, 0.0, 1.0]] * 9, dtype=F64))


def test_parallel_beam_rays_gradcheck(rng):
    rotations = _uniform((2, 3, 3), -1, 1, rng).requires_grad_()
    shifts = _uniform((2, 3), -0.2, 0.2, rng).requires_grad_()
    inputs = [rotations, shifts]
    assert torch.autograd.gradcheck(lambda r, s: ref.parallel_beam_rays(r, s, 3), inputs)


def _rodrigues(angle, axis):
    k = torch.zeros(3, 3, dtype=F64)
    x, y, z = axis
    k[0, 1], k[0, 2], k[1, 0], k[1, 2], k[2, 0], k[2, 1] = -z, y, z, -x, -y, x
    return torch.eye(3, dtype=F64) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)


@pytest.mark.parametrize("axis,unit", [("x", (1, 0, 0)), ("y", (0, 1, 0)), ("z", (0, 0, 1))])
def test_tilt_rotations(axis, unit):
    angles = [-1.2, 0.0, 0.4, math.pi / 2]
    got = ref.tilt_rotations(angles, axis=axis)
    assert got.shape == (4, 3, 3) and got.dtype == F64
    expected = torch.stack([_rodrigues(a, unit) for a in angles])
    assert_close(got, expected, **TOL)
    if axis == "y":  # a quarter turn about y sends the beam e_z to e_x
        assert_close(got[3][:, 2], torch.tensor([1.0, 0.0, 0.0], dtype=F64), rtol=0, atol=1e-15)
    tensor_angles = torch.tensor(angles, dtype=torch.float32, requires_grad=True)
    assert ref.tilt_rotations(tensor_angles, axis).dtype == torch.float32
    with pytest.raises(ValueError, match=r"tilt_rotations\(\).*axis"):
        ref.tilt_rotations(angles, axis="w")


def test_geometry_rejects_bad_arguments():
    eye = torch.eye(3, dtype=F64)[None]
    with pytest.raises(ValueError, match=r"parallel_beam_rays\(\).*detector_size.*1"):
        ref.parallel_beam_rays(eye, None, 1)
    with pytest.raises(ValueError, match=r"parallel_beam_rays\(\).*rotations.*\[M, 3, 3\]"):
        ref.parallel_beam_rays(eye[0], None, 4)
    with pytest.raises(ValueError, match=r"parallel_beam_rays\(\).*shifts.*\[1, 3\]"):
        ref.parallel_beam_rays(eye, torch.zeros(2, 3, dtype=F64), 4)


def test_projection_of_a_tilt_series(rng):
    # Unit density in the box, a tilt series about y: identity rays (tilt 0) all run the full
    # length 2 (the border ones along faces and edges), so every projection is Σδ = n·2/(n−1).
    ds = 0.3
    rotations = ref.tilt_rotations(torch.tensor([0.0, 0.5], dtype=F64), "y")
    origins, directions = ref.parallel_beam_rays(rotations, None, 5)
    points, deltas, offsets = ref.ray_box_samples(origins, directions, ds)
    proj = ref.line_integral(torch.ones(points.shape[0], dtype=F64), deltas, offsets)
    n = math.ceil(2 / ds) + 1
    assert_close(proj[:25], torch.full((25,), n * 2 / (n - 1), dtype=F64), **TOL)
    # Tilted by 0.5 rad about y: the central column (x = 0) crosses the box in 2/cos(0.5).
    centre = proj[25:].reshape(5, 5)[:, 2]
    length = 2 / math.cos(0.5)
    m = math.ceil(length / ds) + 1
    assert_close(centre, torch.full((5,), m * length / (m - 1), dtype=F64), **TOL)


# --- docs and dtypes -------------------------------------------------------------------------


def test_module_docstring_examples_run(reference_doctests):
    reference_doctests(ref, "render")


def test_float32_inputs_give_float32_outputs(rng):
    sigmas, rgbs, deltas, ts, offsets = (
        x.float() if x.is_floating_point() else x for x in _rays([3, 2], 2, rng)
    )
    out = ref.volume_render(sigmas, rgbs, deltas, ts, offsets)
    assert all(x.dtype == torch.float32 for x in _float_outputs(out))
    assert ref.line_integral(sigmas, deltas, offsets).dtype == torch.float32
    origins = torch.zeros(1, 3)
    points, deltas, _ = ref.ray_box_samples(origins, torch.tensor([[0.0, 0.0, 1.0]]), 0.5)
    assert points.dtype == deltas.dtype == torch.float32
