# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.optics inverses, mid-band loss and thin forward model against float64 pure-PyTorch
oracles written from specs/optics.md (the SVD filter on complex128, torch.fft for the rest),
gradcheck of every differentiable op, batching, broadcasting, layouts, NaN, argument checks and
CPU/CUDA parity (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch
from device_params import DEVICES, FLOAT_DTYPES, cuda_only

from fieldfuse import optics

F32, F64 = torch.float32, torch.float64
CPLX = {F32: torch.complex64, F64: torch.complex128}

# --- oracles (float64 / complex128, from the spec) -------------------------------------------


def svd_filter(hu, hp, lam):
    """waveorder's filter U·diag(S/(S² + λ))·Vh of M = [Hu; Hp] per frequency: [B, 2, Z, Y, X]."""
    m = torch.stack([hu, hp], dim=1).to(torch.complex128)  # [B, 2, Z, Y, X]
    m = m.permute(0, 3, 4, 1, 2)  # [B, Y, X, 2, Z]
    u, s, vh = torch.linalg.svd(m, full_matrices=False)
    g = u @ torch.diag_embed((s / (s * s + lam)).to(m.dtype)) @ vh
    return g.permute(0, 3, 4, 1, 2)


def normalized(x):
    mean = x.mean(dim=(-2, -1), keepdim=True)
    return x / torch.clamp(mean, min=1e-12) - 1


def inverse_oracle(data, hu, hp, lam, normalize=True):
    x = data.to(F64)
    x = normalized(x) if normalize else x
    xh = torch.fft.fftn(x, dim=(-2, -1))
    g = svd_filter(hu.expand(x.shape[0], *hu.shape[1:]), hp.expand(x.shape[0], *hp.shape[1:]), lam)
    y = torch.einsum("bszyx,bzyx->bsyx", g, xh)  # unconjugated
    out = torch.fft.ifftn(y, dim=(-2, -1)).real
    return out[:, 0], out[:, 1]


def inverse_3d_oracle(data, h, lam):
    dims = (-3, -2, -1)
    h = h.to(torch.complex128)
    xh = torch.fft.fftn(data.to(F64), dim=dims)
    return torch.fft.ifftn(xh * h.conj() / (h.abs() ** 2 + lam), dim=dims).real


def midband_mask(Y, X, pixel_size, wavelength, na, band):
    fy = torch.fft.fftfreq(Y, pixel_size, dtype=F64)
    fx = torch.fft.fftfreq(X, pixel_size, dtype=F64)
    fyy, fxx = torch.meshgrid(fy, fx, indexing="ij")
    fr = torch.sqrt(fyy**2 + fxx**2)
    cutoff = 2 * na / wavelength
    return (fr > band[0] * cutoff) & (fr < band[1] * cutoff)


def midband_oracle(images, pixel_size, wavelength, na, band=(0.125, 0.25)):
    mask = midband_mask(*images.shape[-2:], pixel_size, wavelength, na, band)
    amplitude = torch.fft.fftn(images.to(F64), dim=(-2, -1)).abs()
    n = int(mask.sum())
    if n == 0:
        return torch.zeros(images.shape[:-2], dtype=F64)
    return amplitude[..., mask].sum(-1) / n


def model_oracle(a, p, hu, hp, background):
    fa = torch.fft.fftn(a.to(F64), dim=(-2, -1))[:, None]
    fp = torch.fft.fftn(p.to(F64), dim=(-2, -1))[:, None]
    da = torch.fft.ifftn(fa * hu.to(torch.complex128), dim=(-2, -1)).real
    dp = torch.fft.ifftn(fp * hp.to(torch.complex128), dim=(-2, -1)).real
    return da + dp + background


# --- inputs -------------------------------------------------------------------------------------


def tfs(rng, shape, dtype=F64, rank_deficient=False):
    """Random transfer functions; rank_deficient makes Hp = c·Hu at every z of half the
    frequencies (M of rank 1) and Hp = Hu = 0 at one frequency (rank 0)."""
    c = CPLX[dtype]
    hu = torch.complex(*(torch.randn(*shape, generator=rng, dtype=F64) for _ in range(2)))
    hp = torch.complex(*(torch.randn(*shape, generator=rng, dtype=F64) for _ in range(2)))
    if rank_deficient:
        scale = torch.complex(torch.tensor(0.7, dtype=F64), torch.tensor(-1.3, dtype=F64))
        hp[..., ::2] = scale * hu[..., ::2]
        hu[..., 0, 1] = 0
        hp[..., 0, 1] = 0
    return hu.to(c), hp.to(c)


def stack(rng, shape, dtype=F64):
    return (torch.rand(*shape, generator=rng, dtype=F64) + 0.5).to(dtype)


# --- tikhonov_filter ------------------------------------------------------------------------------


@pytest.mark.parametrize("rank_deficient", [False, True])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_filter_matches_svd(rng, dtype, rank_deficient):
    hu, hp = tfs(rng, (2, 5, 6, 7), dtype, rank_deficient)
    got = optics.tikhonov_filter(hu, hp, 1e-3)
    want = svd_filter(hu, hp, 1e-3)
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == F64 else dict(rtol=2e-3, atol=2e-4)
    torch.testing.assert_close(got.to(torch.complex128), want, **tol)
    assert got.dtype == CPLX[dtype] and got.shape == (2, 2, 5, 6, 7)


def test_filter_unbatched_and_noncontiguous(rng):
    hu, hp = tfs(rng, (4, 5, 3))
    got = optics.tikhonov_filter(hu.transpose(-1, -2).contiguous().transpose(-1, -2), hp, 0.1)
    assert got.shape == (2, 4, 5, 3)
    torch.testing.assert_close(got, svd_filter(hu[None], hp[None], 0.1)[0], rtol=1e-10, atol=1e-12)


# --- tikhonov_inverse -----------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_inverse_matches_oracle(rng, dtype, normalize, shared):
    B, Z, Y, X = 3, 4, 6, 5
    data = stack(rng, (B, Z, Y, X), dtype)
    hu, hp = tfs(rng, (1 if shared else B, Z, Y, X), dtype, rank_deficient=True)
    a, p = optics.tikhonov_inverse(data, hu, hp, 1e-2, normalize=normalize)
    wa, wp = inverse_oracle(data, hu, hp, 1e-2, normalize)
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == F64 else dict(rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(a.to(F64), wa, **tol)
    torch.testing.assert_close(p.to(F64), wp, **tol)
    assert a.dtype == dtype and a.shape == (B, Y, X)


def test_inverse_unbatched_and_shared_3d_tf(rng):
    data = stack(rng, (3, 4, 4))
    hu, hp = tfs(rng, (3, 4, 4))
    a, p = optics.tikhonov_inverse(data, hu, hp)
    wa, wp = inverse_oracle(data[None], hu[None], hp[None], 1e-3)
    assert a.shape == (4, 4)
    torch.testing.assert_close(a, wa[0], rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(p, wp[0], rtol=1e-9, atol=1e-10)
    # [Z, Y, X] transfer functions broadcast over a batch.
    batch = stack(rng, (2, 3, 4, 4))
    a2, _ = optics.tikhonov_inverse(batch, hu, hp)
    torch.testing.assert_close(a2, inverse_oracle(batch, hu[None], hp[None], 1e-3)[0],
                               rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_inverse_batched_equals_per_tile_loop(rng, dtype):
    data = stack(rng, (4, 3, 8, 6), dtype)
    hu, hp = tfs(rng, (4, 3, 8, 6), dtype)
    a, p = optics.tikhonov_inverse(data, hu, hp)
    for b in range(4):
        ab, pb = optics.tikhonov_inverse(data[b], hu[b], hp[b])
        assert torch.equal(a[b], ab) and torch.equal(p[b], pb)  # bit-exact on the CPU


def test_inverse_noncontiguous_and_repeatable(rng):
    data = stack(rng, (2, 3, 5, 6)).transpose(-1, -2)  # [2, 3, 6, 5] strided
    hu, hp = tfs(rng, (2, 3, 5, 6))
    hu, hp = hu.transpose(-1, -2), hp.transpose(-1, -2)
    a, p = optics.tikhonov_inverse(data, hu, hp)
    wa, wp = inverse_oracle(data, hu, hp, 1e-3)
    torch.testing.assert_close(a, wa, rtol=1e-9, atol=1e-10)
    a2, p2 = optics.tikhonov_inverse(data.contiguous(), hu.contiguous(), hp.contiguous())
    assert torch.equal(a, a2) and torch.equal(p, p2)


def test_inverse_nan_stays_in_its_tile(rng):
    data = stack(rng, (2, 3, 4, 4))
    data[1, 0, 2, 2] = float("nan")
    hu, hp = tfs(rng, (1, 3, 4, 4))
    a, p = optics.tikhonov_inverse(data, hu, hp)
    assert torch.isfinite(a[0]).all() and torch.isfinite(p[0]).all()
    assert torch.isnan(a[1]).all() and torch.isnan(p[1]).all()


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
def test_inverse_gradcheck(rng, normalize, shared):
    B, Z, Y, X = 2, 3, 4, 3
    data = stack(rng, (B, Z, Y, X)).requires_grad_()
    hu, hp = tfs(rng, (1 if shared else B, Z, Y, X), rank_deficient=True)
    hu.requires_grad_()
    hp.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda d, u, v: optics.tikhonov_inverse(d, u, v, 0.05, normalize=normalize),
        (data, hu, hp))


def test_inverse_gradient_of_data_only(rng):
    data = stack(rng, (2, 3, 4, 4)).requires_grad_()
    hu, hp = tfs(rng, (2, 3, 4, 4))
    a, p = optics.tikhonov_inverse(data, hu, hp, 0.1)
    (a.sum() + (p * p).sum()).backward()
    ref = data.detach().clone().requires_grad_()
    wa, wp = inverse_oracle(ref, hu, hp, 0.1)
    (wa.sum() + (wp * wp).sum()).backward()
    torch.testing.assert_close(data.grad, ref.grad, rtol=1e-8, atol=1e-10)


# --- tikhonov_inverse_3d --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_inverse_3d_matches_oracle(rng, dtype):
    data = stack(rng, (2, 4, 5, 6), dtype)
    h, _ = tfs(rng, (4, 5, 6), dtype)
    got = optics.tikhonov_inverse_3d(data, h, 1e-2)
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == F64 else dict(rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(got.to(F64), inverse_3d_oracle(data, h, 1e-2), **tol)
    unbatched = optics.tikhonov_inverse_3d(data[1], h, 1e-2)
    assert torch.equal(unbatched, got[1])


def test_inverse_3d_gradcheck(rng):
    data = stack(rng, (2, 3, 4, 3)).requires_grad_()
    h, _ = tfs(rng, (3, 4, 3))
    h.requires_grad_()
    assert torch.autograd.gradcheck(lambda d, t: optics.tikhonov_inverse_3d(d, t, 0.3), (data, h))


# --- midband_power --------------------------------------------------------------------------------

# 2NAd/λ = 1.6, pixel 0.3: the annulus 0.2 < |f| < 0.4 on a 16 × 12 grid (no point on a bound).
OPTICS = dict(pixel_size=0.3, wavelength=0.5, na_detection=0.4)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_midband_matches_oracle(rng, dtype):
    images = torch.randn(3, 2, 16, 12, generator=rng, dtype=F64).to(dtype)
    got = optics.midband_power(images, **OPTICS)
    want = midband_oracle(images, 0.3, 0.5, 0.4)
    assert got.shape == (3, 2) and got.dtype == dtype
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == F64 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.to(F64), want, **tol)
    assert int(midband_mask(16, 12, 0.3, 0.5, 0.4, (0.125, 0.25)).sum()) > 0


def test_midband_gradcheck_and_empty_band(rng):
    images = torch.randn(2, 16, 12, generator=rng, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda i: optics.midband_power(i, **OPTICS), (images,))
    assert torch.autograd.gradcheck(
        lambda i: optics.midband_power(i, **OPTICS, band=(0.05, 0.6)), (images,))
    # A band between two grid frequencies is empty: power 0, gradient 0.
    empty = optics.midband_power(images, 1.0, 0.5, 0.4, band=(0.01, 0.02))
    assert torch.equal(empty, torch.zeros(2, dtype=F64))
    empty.sum().backward()
    assert torch.equal(images.grad, torch.zeros_like(images))


def test_midband_unbatched_noncontiguous(rng):
    image = torch.randn(12, 16, generator=rng, dtype=F64).t()
    got = optics.midband_power(image, **OPTICS)
    assert got.shape == ()
    torch.testing.assert_close(got, midband_oracle(image, 0.3, 0.5, 0.4), rtol=1e-10, atol=1e-10)


# --- thin_forward_model ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_forward_model_matches_oracle(rng, dtype):
    a = torch.randn(2, 6, 5, generator=rng, dtype=F64).to(dtype)
    p = torch.randn(2, 6, 5, generator=rng, dtype=F64).to(dtype)
    hu, hp = tfs(rng, (1, 3, 6, 5), dtype)
    got = optics.thin_forward_model(a, p, hu, hp, background=10.0)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == F64 else dict(rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(got.to(F64), model_oracle(a, p, hu, hp, 10.0), **tol)
    assert got.shape == (2, 3, 6, 5)
    single = optics.thin_forward_model(a[0], p[0], hu[0], hp[0], background=10.0)
    assert torch.equal(single, got[0])


# --- argument checks ----------------------------------------------------------------------------


def test_errors_name_op_and_argument(rng):
    data = stack(rng, (2, 3, 4, 4))
    hu, hp = tfs(rng, (2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"tikhonov_inverse\(\): expected regularization"):
        optics.tikhonov_inverse(data, hu, hp, 0.0)
    with pytest.raises(ValueError, match=r"expected regularization"):
        optics.tikhonov_inverse(data, hu, hp, float("nan"))
    with pytest.raises(TypeError, match=(
            r"tikhonov_inverse\(\): expected"
            r" absorption_tf to be complex128")):
        optics.tikhonov_inverse(data, hu.to(torch.complex64), hp)
    with pytest.raises(TypeError, match=r"expected data to be real float32 or float64"):
        optics.tikhonov_inverse(data.to(torch.int32), hu, hp)
    with pytest.raises(ValueError, match=r"expected phase_tf to have shape \[2 or 1, 3, 4, 4\]"):
        optics.tikhonov_inverse(data, hu, hp[:, :, :3])
    with pytest.raises(ValueError, match=(
            r"expected phase_tf to have the shape of"
            r" absorption_tf \[2, 3, 4, 4\]")):
        optics.tikhonov_inverse(data, hu, hp[:1])
    with pytest.raises(ValueError, match=r"expected data to have 3 or 4 dims"):
        optics.tikhonov_inverse(data[0, 0], hu, hp)
    with pytest.raises(TypeError, match=r"expected normalize to be a bool"):
        optics.tikhonov_inverse(data, hu, hp, normalize=1)
    with pytest.raises(TypeError, match=(
            r"tikhonov_filter\(\): expected"
            r" absorption_tf to be complex64 or")):
        optics.tikhonov_filter(data, data)
    with pytest.raises(ValueError, match=r"tikhonov_filter\(\): expected regularization"):
        optics.tikhonov_filter(hu, hp, -1.0)
    with pytest.raises(ValueError, match=(
            r"tikhonov_inverse_3d\(\): expected"
            r" transfer_function to have shape")):
        optics.tikhonov_inverse_3d(data, hu[0, :2])
    with pytest.raises(TypeError, match=(
            r"tikhonov_inverse_3d\(\): expected"
            r" transfer_function to be complex128")):
        optics.tikhonov_inverse_3d(data, hu[0].real)
    with pytest.raises(ValueError, match=(
            r"midband_power\(\): expected band to"
            r" satisfy 0 <= low < high")):
        optics.midband_power(data, **OPTICS, band=(0.3, 0.2))
    with pytest.raises(ValueError, match=r"midband_power\(\): expected band"):
        optics.midband_power(data, **OPTICS, band=(-0.1, 0.2))
    with pytest.raises(ValueError, match=(
            r"midband_power\(\): expected wavelength"
            r" to be finite and > 0")):
        optics.midband_power(data, 0.3, 0.0, 0.4)
    with pytest.raises(TypeError, match=r"midband_power\(\): expected images to be real"):
        optics.midband_power(hu, **OPTICS)
    with pytest.raises(ValueError, match=(
            r"thin_forward_model\(\): expected"
            r" background to be finite")):
        optics.thin_forward_model(data[0, 0], data[0, 0], hu[0], hp[0], float("inf"))
    with pytest.raises(TypeError, match=(
            r"thin_forward_model\(\): expected phase to"
            r" have absorption's dtype")):
        optics.thin_forward_model(data[0, 0], data[0, 0].float(), hu[0], hp[0])


def test_backward_errors_name_the_backward_op(rng):
    data = stack(rng, (2, 3, 4, 4))
    hu, hp = tfs(rng, (2, 3, 4, 4))
    grad = torch.ones(2, 4, 4, dtype=F64)
    with pytest.raises(ValueError, match=(
            r"tikhonov_inverse_backward\(\): expected"
            r" grad_phase to have shape")):
        torch.ops.fieldfuse.tikhonov_inverse_backward(data, hu, hp, 0.1, True, grad, grad[:1],
                                                      [True, False, False])


# --- CPU / CUDA parity --------------------------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cuda_matches_cpu(rng, dtype):
    data = stack(rng, (3, 5, 12, 10), dtype)
    hu, hp = tfs(rng, (1, 5, 12, 10), dtype, rank_deficient=True)
    # Rank-deficient matrices with λ = 1e-3 amplify float32 rounding by up to ~1/λ, so float32
    # compares against the output's scale (CUDA's FFTs round differently from Eigen's).
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == F64 else dict(rtol=1e-4, atol=1e-3)
    cuda = [t.cuda() for t in (data, hu, hp)]
    for got, want in zip(optics.tikhonov_inverse(*cuda), optics.tikhonov_inverse(data, hu, hp)):
        torch.testing.assert_close(got.cpu(), want, **tol)
    torch.testing.assert_close(optics.tikhonov_filter(cuda[1], cuda[2]).cpu(),
                               optics.tikhonov_filter(hu, hp), **tol)
    torch.testing.assert_close(optics.tikhonov_inverse_3d(cuda[0], cuda[1][0]).cpu(),
                               optics.tikhonov_inverse_3d(data, hu[0]), **tol)
    torch.testing.assert_close(optics.midband_power(cuda[0], **OPTICS).cpu(),
                               optics.midband_power(data, **OPTICS), **tol)
    torch.testing.assert_close(
        optics.thin_forward_model(cuda[0][:, 0], cuda[0][:, 1], cuda[1], cuda[2]).cpu(),
        optics.thin_forward_model(data[:, 0], data[:, 1], hu, hp), **tol)


@cuda_only
def test_cuda_gradients_match_cpu(rng):
    data = stack(rng, (2, 3, 8, 6))
    hu, hp = tfs(rng, (1, 3, 8, 6), rank_deficient=True)

    def grads(device):
        inputs = [t.to(device).requires_grad_() for t in (data, hu, hp)]
        a, p = optics.tikhonov_inverse(*inputs, 0.05)
        loss = optics.midband_power(p, **OPTICS).sum() + (a * a).sum()
        loss = loss + optics.tikhonov_inverse_3d(inputs[0], inputs[1][0]).square().sum()
        return torch.autograd.grad(loss, inputs)

    for got, want in zip(grads("cuda"), grads("cpu")):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-9, atol=1e-10)


@cuda_only
def test_cuda_filter_large_batch(rng):
    """The perf target's shape (N = 115 000 matrices 2 × 21, complex64) against the CPU."""
    hu, hp = tfs(rng, (1, 21, 230, 500), F32)
    got = optics.tikhonov_filter(hu.cuda(), hp.cuda()).cpu()
    torch.testing.assert_close(got, optics.tikhonov_filter(hu, hp), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_library_path_matches_eager(rng, device):
    from fieldfuse import _registry

    data = stack(rng, (2, 3, 4, 4)).to(device).requires_grad_()
    hu, hp = (t.to(device) for t in tfs(rng, (2, 3, 4, 4)))
    eager = optics.tikhonov_inverse(data, hu, hp)
    (g_eager,) = torch.autograd.grad(eager[1].sum(), data)
    with _registry.library_path():
        lib = optics.tikhonov_inverse(data, hu, hp)
        (g_lib,) = torch.autograd.grad(lib[1].sum(), data)
    assert torch.equal(eager[0], lib[0]) and torch.equal(g_eager, g_lib)


def test_opcheck(rng):
    """Schema, fake impls and autograd registration of every op (torch.library.opcheck)."""
    data = stack(rng, (2, 3, 4, 5))
    hu, hp = tfs(rng, (1, 3, 4, 5))
    images = torch.randn(2, 4, 5, generator=rng, dtype=F64)
    ops = torch.ops.fieldfuse
    def grad(t):
        return t.detach().clone().requires_grad_()

    for op, args in [
        (ops.tikhonov_filter, (hu, hp, 0.1)),
        (ops.tikhonov_inverse, (grad(data), grad(hu), hp, 0.1, True)),
        (ops.tikhonov_inverse_3d, (grad(data), grad(hu[0]), 0.1)),
        (ops.midband_power, (grad(images), 0.3, 0.5, 0.4, 0.125, 0.25)),
        (ops.thin_forward_model, (images, images, hu, hp, 1.0)),
    ]:
        torch.library.opcheck(op, args)
