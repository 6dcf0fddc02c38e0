# SPDX-License-Identifier: Apache-2.0
"""Tests of the `fieldfuse.nn` K-Planes modules and the volume-TV loss against float64 oracles."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

from fieldfuse.nn import (
    EXP_INPUT_MAX,
    KPlanes,
    KPlanesTilted,
    default_rotations,
    nearest_rotation,
    quaternion_to_rotation,
    volume_tv_from_taps,
)
from fieldfuse.reference import kplanes as ref

F64 = torch.float64
requires_cuda = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
ROTATION_PARAMS = ["svd", "quaternion"]
VARIANTS = ["tilted", "axis"]

# Small multiscale field: odd, non-square sizes and per-level channels exercise the layout.
RESOLUTIONS = [5, (7, 9)]
CHANNELS = [3, 2]
GATES = (0.75, 1.0)
# Matrix products of float64 values of order 1 over a few dozen terms: rounding ~1e-15 relative.
TOL64 = {"rtol": 1e-10, "atol": 1e-12}
# float32 paths that batch the decoder's matrix products differently: a few ulps of fp32.
TOL32 = {"rtol": 1e-5, "atol": 1e-6}


def _module(variant: str, **kwargs):
    kwargs.setdefault("dtype", F64)
    if variant == "tilted":
        kwargs.setdefault("num_tilts", 3)
        return KPlanesTilted(channels=CHANNELS, resolutions=RESOLUTIONS, **kwargs)
    return KPlanes(channels=CHANNELS, resolutions=RESOLUTIONS, **kwargs)


def _points(batch, rng, dtype=F64, device="cpu", bound=1.1):
    """Uniform in ±`bound`: past ±1 the planes are read at the border."""
    pts = (torch.rand((batch, 3), generator=rng, dtype=F64) * 2 - 1) * bound
    return pts.to(device=device, dtype=dtype)


def _activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "softplus":
        return torch.log1p(torch.exp(x - 1))
    if name == "exp":
        return torch.exp(torch.minimum(x, torch.full_like(x, EXP_INPUT_MAX)))
    return x


def _reference_features(module, pts, gates=None):
    """The module's features from the float64 oracles, on the module's own parameters."""
    planes = list(module.planes)
    if isinstance(module, KPlanesTilted):
        return ref.kplanes_tilted(pts, module.rotations(), planes, gates)
    features = ref.kplanes(pts, planes)
    if gates is None:
        return features
    scale = torch.cat([torch.full((c,), g, dtype=pts.dtype)
                       for c, g in zip(module.channels, gates)])
    return features * scale


def _reference_forward(module, pts, gates=None):
    return _activation(module.activation, module.decoder(_reference_features(module, pts, gates)))


def _reference_tap_densities(module, tap_pts, gates=None):
    h = module.tap_step
    if isinstance(module, KPlanesTilted):
        features = ref.kplanes_tilted_taps(tap_pts, module.rotations(), list(module.planes), h,
                                           gates)
    else:
        coords = ref.tv_tap_coords(tap_pts, h)
        features = torch.stack([_reference_features(module, c, gates) for c in coords])
    return _activation(module.activation, module.decoder(features))


def _grads(loss, module):
    return torch.autograd.grad(loss, list(module.parameters()))


def _assert_grads_close(got, expected, **tol):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert torch.isfinite(g).all()
        assert_close(g, e, **tol)


class _CountOps(TorchDispatchMode):
    """Counts calls of the fieldfuse K-Planes raw ops."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("fieldfuse."):
            self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


# --- construction and parameters ----------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(
    "options",
    [
        {"decoder": "linear", "activation": "softplus"},
        {"decoder": "mlp", "hidden": 16, "layers": 2, "activation": "exp", "out_features": 2},
        {"decoder": "linear", "activation": "identity", "channels_last": False},
    ],
    ids=["linear-softplus", "mlp-exp", "linear-identity-nchw"],
)
def test_constructs_and_runs(variant, options, device, rng):
    module = _module(variant, dtype=torch.float32, device=device, **options)
    out_features = options.get("out_features", 1)
    pts = _points(33, rng, torch.float32, device)
    out = module(pts)
    assert out.shape == (33, out_features) and out.dtype == torch.float32
    assert out.device.type == device and torch.isfinite(out).all()
    if options["activation"] != "identity":
        assert (out > 0).all()
    features = module.features(pts, GATES)
    assert features.shape == (33, module.num_features)
    assert module.num_features == (3 if variant == "tilted" else 1) * sum(CHANNELS)
    out.sum().backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    empty = module(pts[:0])
    assert empty.shape == (0, out_features)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("channels_last", [True, False])
def test_planes_init(variant, channels_last):
    num_tilts = 2 if variant == "tilted" else 1
    module = _module(variant, channels_last=channels_last, dtype=torch.float32,
                     **({"num_tilts": 2} if variant == "tilted" else {}))
    assert len(module.planes) == len(RESOLUTIONS)
    for grid, c, res in zip(module.planes, CHANNELS, RESOLUTIONS):
        h, w = (res, res) if isinstance(res, int) else res
        assert isinstance(grid, torch.nn.Parameter)
        assert grid.shape == (3 * num_tilts, c, h, w)
        assert grid.min() >= 0.1 and grid.max() <= 0.5
        assert grid.max() - grid.min() > 0.2  # actually spread over the range
        assert grid.is_contiguous(memory_format=torch.channels_last) == channels_last
    # A generator makes the planes reproducible.
    a = _module(variant, generator=torch.Generator().manual_seed(3))
    b = _module(variant, generator=torch.Generator().manual_seed(3))
    for pa, pb in zip(a.planes, b.planes):
        assert torch.equal(pa, pb)


def test_mlp_decoder_layout():
    module = _module("tilted", decoder="mlp", hidden=7, layers=3, out_features=2)
    linears = [m for m in module.decoder if isinstance(m, torch.nn.Linear)]
    relus = [m for m in module.decoder if isinstance(m, torch.nn.ReLU)]
    assert [(m.in_features, m.out_features) for m in linears] == [
        (module.num_features, 7), (7, 7), (7, 7), (7, 2)]
    assert len(relus) == 3


def test_tap_step_is_one_finest_cell():
    assert _module("tilted").tap_step == 2 / 7  # levels 5² and 7×9: finest smaller side 7
    assert KPlanes(2, [200]).tap_step == 2 / 200
    assert KPlanes(2, [(50, 33), 8]).tap_step == 2 / 33


# --- rotations ----------------------------------------------------------------------------------


def _assert_rotations(r: torch.Tensor, tol=1e-12):
    eye = torch.eye(3, dtype=r.dtype).expand_as(r)
    assert_close(r @ r.mT, eye, rtol=0, atol=tol)
    assert_close(torch.linalg.det(r), torch.ones(r.shape[0], dtype=r.dtype), rtol=0, atol=tol)


def _random_matrices(count, rng, negative_det=False):
    m = torch.randn((count, 3, 3), generator=rng, dtype=F64)
    if negative_det:
        m = m * torch.where(torch.linalg.det(m) > 0, -1.0, 1.0)[:, None, None]
    return m


@pytest.mark.parametrize("rotation_param", ROTATION_PARAMS)
def test_rotations_are_proper_and_receive_gradients(rotation_param, rng):
    module = _module("tilted", num_tilts=4, rotation_param=rotation_param)
    r = module.rotations()
    assert r.shape == (4, 3, 3) and r.dtype == F64
    _assert_rotations(r.detach())
    assert_close(r.detach(), default_rotations(4), rtol=0, atol=1e-12)
    # At the init (exact rotations: repeated singular values for "svd") gradients are finite.
    pts = _points(64, rng)
    (grad,) = torch.autograd.grad(module(pts).square().sum(), [module.rotation_params])
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    # Off the manifold the map still returns rotations.
    with torch.no_grad():
        module.rotation_params.add_(0.3 * torch.randn(module.rotation_params.shape, generator=rng,
                                                      dtype=F64))
    _assert_rotations(module.rotations().detach())
    (grad,) = torch.autograd.grad(module(pts).sum(), [module.rotation_params])
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_default_rotations_distinct():
    r = default_rotations(8)
    _assert_rotations(r)
    assert torch.equal(r[0], torch.eye(3, dtype=F64))
    # Pairwise relative angles are nonzero (no two tilts coincide).
    rel = torch.einsum("aij,bik->abjk", r, r)
    cos = ((rel.diagonal(dim1=-2, dim2=-1).sum(-1) - 1) / 2).clamp(-1, 1)
    off = ~torch.eye(8, dtype=torch.bool)
    assert (torch.arccos(cos)[off] > 0.1).all()


@pytest.mark.parametrize("rotation_param", ROTATION_PARAMS)
def test_init_rotations_round_trip(rotation_param, rng):
    # Half turns about x, y and z make each quaternion component the largest once.
    half_turns = [torch.diag(torch.tensor(d, dtype=F64)) for d in
                  ([1, -1, -1], [-1, 1, -1], [-1, -1, 1])]
    init = torch.cat([torch.stack(half_turns),
                      nearest_rotation(_random_matrices(3, rng, negative_det=True))])
    module = _module("tilted", num_tilts=6, rotation_param=rotation_param, init_rotations=init)
    assert_close(module.rotations().detach(), init, rtol=0, atol=1e-12)
    # A non-orthogonal init is projected to its nearest rotation.
    raw = _random_matrices(6, rng)
    module = _module("tilted", num_tilts=6, rotation_param=rotation_param, init_rotations=raw)
    assert_close(module.rotations().detach(), nearest_rotation(raw), rtol=0, atol=1e-12)


@pytest.mark.parametrize("negative_det", [False, True])
def test_nearest_rotation_is_special_procrustes(negative_det, rng):
    m = _random_matrices(5, rng, negative_det)
    r = nearest_rotation(m)
    _assert_rotations(r)
    u, _, vh = torch.linalg.svd(m)
    d = torch.linalg.det(u @ vh)
    ones = torch.ones_like(d)
    expected = u @ torch.diag_embed(torch.stack([ones, ones, d], -1)) @ vh
    assert_close(r, expected, **TOL64)
    # No rotation is nearer than R (here: than small perturbations of R).
    for _ in range(5):
        w = 0.05 * torch.randn((5, 3), generator=rng, dtype=F64)
        other = r @ torch.linalg.matrix_exp(torch.cross(
            torch.eye(3, dtype=F64)[None].expand(5, 3, 3), w[:, None, :].expand(5, 3, 3), dim=-1))
        assert ((other - m).square().sum((1, 2)) >= (r - m).square().sum((1, 2))).all()


@pytest.mark.parametrize("negative_det", [False, True])
def test_nearest_rotation_gradcheck(negative_det, rng):
    m = _random_matrices(3, rng, negative_det).requires_grad_()
    assert torch.autograd.gradcheck(nearest_rotation, (m,))
    # At an exact rotation (all singular values 1) the derivative is the projection onto the
    # tangent space: R·skew(Rᵀ G) for an upstream gradient G.
    r0 = default_rotations(3).requires_grad_()
    g = torch.randn((3, 3, 3), generator=rng, dtype=F64)
    (grad,) = torch.autograd.grad(nearest_rotation(r0), r0, g)
    k = r0.detach().mT @ g
    assert_close(grad, r0.detach() @ (k - k.mT) / 2, **TOL64)


def test_quaternion_to_rotation_gradcheck(rng):
    q = torch.randn((4, 4), generator=rng, dtype=F64)
    _assert_rotations(quaternion_to_rotation(q))
    assert_close(quaternion_to_rotation(3 * q), quaternion_to_rotation(q), **TOL64)
    assert torch.autograd.gradcheck(quaternion_to_rotation, (q.requires_grad_(),))


# --- forward against the oracles ----------------------------------------------------------------


@pytest.mark.parametrize("variant,rotation_param",
                         [("tilted", "svd"), ("tilted", "quaternion"), ("axis", None)])
@pytest.mark.parametrize(
    "options",
    [{"decoder": "linear", "activation": "softplus"},
     {"decoder": "mlp", "hidden": 8, "layers": 2, "activation": "exp", "out_features": 2},
     {"decoder": "linear", "activation": "identity", "channels_last": False}],
    ids=["linear-softplus", "mlp-exp", "linear-identity-nchw"],
)
def test_forward_matches_reference(variant, rotation_param, options, rng):
    extra = {"rotation_param": rotation_param} if rotation_param else {}
    module = _module(variant, **extra, **options)
    if rotation_param:  # move off the default rotations so every entry matters
        with torch.no_grad():
            module.rotation_params.add_(0.2 * torch.randn(module.rotation_params.shape,
                                                          generator=rng, dtype=F64))
    pts = _points(41, rng)
    for gates in (None, GATES):
        out = module(pts, gates)
        expected = _reference_forward(module, pts, gates)
        assert out.shape == expected.shape
        assert_close(out, expected, **TOL64)
        weight = torch.randn(out.shape, generator=rng, dtype=F64)
        _assert_grads_close(_grads((out * weight).sum(), module),
                            _grads((expected * weight).sum(), module), **TOL64)
    # Gradient with respect to the points too (they carry pose gradients in tomography).
    p1 = pts.clone().requires_grad_()
    p2 = pts.clone().requires_grad_()
    (g1,) = torch.autograd.grad(module(p1).sum(), p1)
    (g2,) = torch.autograd.grad(_reference_forward(module, p2).sum(), p2)
    assert_close(g1, g2, **TOL64)


@pytest.mark.parametrize("variant", VARIANTS)
def test_single_channel_and_single_cell_planes(variant, rng):
    # C = 1 makes channels-last and NCHW strides coincide; a size-1 axis reads one row.
    kwargs = {"num_tilts": 2} if variant == "tilted" else {}
    cls = KPlanesTilted if variant == "tilted" else KPlanes
    module = cls(channels=1, resolutions=[(1, 4), 3], dtype=F64, **kwargs)
    pts = _points(17, rng)
    out = module(pts)
    assert_close(out, _reference_forward(module, pts), **TOL64)
    _assert_grads_close(_grads(out.sum(), module),
                        _grads(_reference_forward(module, pts).sum(), module), **TOL64)


def test_exp_activation_clamps():
    module = _module("axis", activation="exp")
    with torch.no_grad():
        module.decoder.bias.fill_(1e3)
    out = module(torch.zeros((2, 3), dtype=F64))
    assert_close(out, torch.full_like(out, math.exp(EXP_INPUT_MAX)), rtol=0, atol=0)


# --- volume TV ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["float64", "float32"])
def test_forward_with_tv_taps_matches_separate_calls(variant, dtype, rng):
    module = _module(variant, dtype=dtype, decoder="mlp", hidden=8, layers=1, out_features=2)
    pts = _points(50, rng, dtype)
    tap_pts = module.tv_tap_coords(pts, n_max=20, generator=rng)
    target = torch.rand((50, 2), generator=rng, dtype=F64).to(dtype)

    counter = _CountOps()
    with counter:
        rho, tap_rho = module.forward_with_tv_taps(pts, tap_pts, GATES)
        fused_loss = F.mse_loss(rho, target) + module.volume_tv(tap_rho, 0.5)
        fused_grads = _grads(fused_loss, module)
    # One fused feature call and one backward into the planes.
    name = "kplanes_tilted_with_taps" if variant == "tilted" else "kplanes"
    assert counter.counts == {f"fieldfuse.{name}_forward.default": 1,
                              f"fieldfuse.{name}_backward.default": 1}
    assert rho.shape == (50, 2) and tap_rho.shape == (4, 20, 2)

    rho_sep = module(pts, GATES)
    tap_sep = module.tv_tap_densities(tap_pts, GATES)
    sep_loss = F.mse_loss(rho_sep, target) + module.volume_tv(tap_sep, 0.5)
    tol = TOL64 if dtype == F64 else TOL32
    assert_close(rho, rho_sep, **tol)
    assert_close(tap_rho, tap_sep, **tol)
    assert_close(fused_loss, sep_loss, **tol)
    _assert_grads_close(fused_grads, _grads(sep_loss, module), **tol)

    if dtype == F64:  # and both equal the oracles
        assert_close(tap_rho, _reference_tap_densities(module, tap_pts, GATES), **TOL64)
        assert_close(tap_rho[0], _reference_forward(module, tap_pts, GATES), **TOL64)


@pytest.mark.parametrize("shape", [(4, 300, 3), (4, 300)], ids=["4xNxC", "4xN"])
@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("h", [2 / 200, 2.0, 1e-4])
def test_volume_tv_from_taps_matches_reference(shape, dtype, h, rng, tolerances):
    taps = torch.rand(shape, generator=rng, dtype=F64)
    t = taps.to(dtype).requires_grad_()
    t64 = t.detach().double().requires_grad_()
    loss = volume_tv_from_taps(t, h, 0.7)
    expected = ref.volume_tv_from_taps(t64, h, 0.7)
    assert loss.shape == () and loss.dtype == dtype
    tol = tolerances(dtype)
    assert_close(loss.double(), expected, **tol.forward)
    (grad,) = torch.autograd.grad(loss, t)
    (ref_grad,) = torch.autograd.grad(expected, t64)
    assert_close(grad.double(), ref_grad, **tol.grad)


def test_volume_tv_from_taps_formula_and_flat_points():
    # One point with differences (3, 4, 0)·h → |grad| = 5; one flat point → 0.
    h = 0.5
    taps = torch.tensor([[1.0, 2.0], [1.0 + 3 * h, 2.0], [1.0 + 4 * h, 2.0], [1.0, 2.0]],
                        dtype=F64, requires_grad=True)
    loss = volume_tv_from_taps(taps, h, 2.0)
    assert loss.item() == 2.0 * (5.0 + 0.0) / 2
    assert loss.item() == ref.volume_tv_from_taps(taps.detach(), h, 2.0).item()
    (grad,) = torch.autograd.grad(loss, taps)
    # The flat point gets the subgradient 0 (the literal sqrt derivative would be NaN).
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[:, 1], torch.zeros(4, dtype=F64))
    # The other point: d/dρ_i of |(ρ_i − ρ_0)/h| = (grad_i / |grad|) / h, times weight / N.
    expected = torch.tensor([-(3 + 4) / 5, 3 / 5, 4 / 5, 0.0], dtype=F64) / h * 2.0 / 2
    assert_close(grad[:, 0], expected, **TOL64)


@pytest.mark.parametrize(
    "exc,pattern,args",
    [
        (ValueError, "tap_densities", (torch.zeros(3, 5), 0.1, 1.0)),
        (ValueError, "tap_densities", (torch.zeros(4, 5, 2, 1), 0.1, 1.0)),
        (ValueError, "tap_densities", (torch.zeros(4), 0.1, 1.0)),
        (TypeError, "tap_densities", ([[0.0]] * 4, 0.1, 1.0)),
        (ValueError, "h", (torch.zeros(4, 5), 0.0, 1.0)),
        (ValueError, "h", (torch.zeros(4, 5), math.inf, 1.0)),
        (ValueError, "h", (torch.zeros(4, 5), math.nan, 1.0)),
        (TypeError, "h", (torch.zeros(4, 5), "0.1", 1.0)),
        (TypeError, "weight", (torch.zeros(4, 5), 0.1, "1")),
    ],
)
def test_volume_tv_from_taps_errors(exc, pattern, args):
    with pytest.raises(exc, match=rf"volume_tv_from_taps\(\): expected {pattern} "):
        volume_tv_from_taps(*args)


@pytest.mark.parametrize("variant", VARIANTS)
def test_tv_tap_coords(variant, rng):
    module = _module(variant)
    pts = _points(100, rng).requires_grad_()
    taps = module.tv_tap_coords(pts, n_max=30, generator=rng)
    assert taps.shape == (30, 3) and not taps.requires_grad
    # Every row is one of the input rows, and no row is drawn twice.
    matches = (taps[:, None, :] == pts.detach()[None]).all(-1)
    assert (matches.sum(1) == 1).all()
    assert matches.any(0).sum() == 30
    # Reproducible with a seeded generator; all points (in order) when there are few.
    again = module.tv_tap_coords(pts, 30, torch.Generator().manual_seed(5))
    assert torch.equal(again, module.tv_tap_coords(pts, 30, torch.Generator().manual_seed(5)))
    assert torch.equal(module.tv_tap_coords(pts), pts.detach())  # default n_max = 10 000
    assert module.tv_tap_coords(pts, n_max=0).shape == (0, 3)
    with pytest.raises(ValueError, match="expected pts to have shape"):
        module.tv_tap_coords(pts[:, :2])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("norm", ["mean", "percell"])
def test_plane_tv_matches_reference(variant, norm):
    module = _module(variant)
    loss = module.plane_tv(norm)
    expected = ref.plane_tv(list(module.planes), 3 if variant == "tilted" else 1, norm)
    assert_close(loss, expected, **TOL64)
    planes = list(module.planes)
    _assert_grads_close(torch.autograd.grad(loss, planes), torch.autograd.grad(expected, planes),
                        **TOL64)


# --- training, errors, compile, devices --------------------------------------------------------


@pytest.mark.parametrize("variant,rotation_param",
                         [("tilted", "svd"), ("tilted", "quaternion"), ("axis", None)])
def test_adam_steps_reduce_a_loss(variant, rotation_param, rng):
    extra = {"rotation_param": rotation_param} if rotation_param else {}
    with torch.random.fork_rng():  # the decoder's default init draws from the global generator
        torch.manual_seed(0)
        module = _module(variant, dtype=torch.float32, generator=rng, **extra)
    pts = _points(256, rng, torch.float32, bound=1.0)
    target = 0.5 + 0.3 * pts[:, :1] * pts[:, 1:2] - 0.2 * pts[:, 2:]
    optimizer = torch.optim.Adam(module.parameters(), lr=3e-2)
    losses = []
    for _ in range(25):
        optimizer.zero_grad()
        tap_pts = module.tv_tap_coords(pts, 64, generator=rng)
        rho, tap_rho = module.forward_with_tv_taps(pts, tap_pts)
        data = F.mse_loss(rho, target)
        loss = data + module.volume_tv(tap_rho, 1e-4) + 1e-4 * module.plane_tv()
        loss.backward()
        optimizer.step()
        losses.append(data.item())
    # Over seeds the data term falls to 3-13 % of its start in 25 steps; 40 % leaves a margin.
    assert losses[-1] < 0.4 * losses[0]
    if rotation_param:
        _assert_rotations(module.rotations().detach().double(), tol=1e-5)


@pytest.mark.parametrize(
    "exc,pattern,kwargs",
    [
        (ValueError, "decoder", {"decoder": "siren"}),
        (ValueError, "activation", {"activation": "relu"}),
        (ValueError, "rotation_param", {"rotation_param": "euler"}),
        (ValueError, "resolutions", {"resolutions": []}),
        (ValueError, r"resolutions\[1\]", {"resolutions": [4, 0]}),
        (ValueError, r"resolutions\[0\]", {"resolutions": [(4, 5, 6)]}),
        (TypeError, "resolutions", {"resolutions": 16}),
        (ValueError, "num_tilts", {"num_tilts": 0}),
        (TypeError, "num_tilts", {"num_tilts": 2.0}),
        (ValueError, "channels", {"channels": 0}),
        (ValueError, "channels", {"channels": [2, 2, 2]}),
        (ValueError, "out_features", {"out_features": 0}),
        (ValueError, "layers", {"decoder": "mlp", "layers": 0}),
        (ValueError, "hidden", {"decoder": "mlp", "hidden": 0}),
        (ValueError, "init_rotations", {"init_rotations": torch.eye(3)[None]}),
        (TypeError, "init_rotations", {"init_rotations": [[1.0]]}),
    ],
)
def test_invalid_arguments_raise(exc, pattern, kwargs):
    args = {"num_tilts": 2, "channels": 2, "resolutions": [4, 6], **kwargs}
    with pytest.raises(exc, match=rf"KPlanesTilted\(\): expected {pattern} "):
        KPlanesTilted(**args)
    if "num_tilts" not in kwargs and "rotation" not in pattern:
        args.pop("num_tilts")
        with pytest.raises(exc, match=rf"KPlanes\(\): expected {pattern} "):
            KPlanes(**args)


@pytest.mark.parametrize("variant", VARIANTS)
def test_invalid_points_raise(variant):
    module = _module(variant)
    name = "KPlanesTilted" if variant == "tilted" else "KPlanes"
    good = torch.zeros((5, 3), dtype=F64)
    cases = [
        (TypeError, "features", "pts to have dtype torch.float64",
         lambda: module(good.float())),
        (ValueError, "features", "pts to have shape", lambda: module.features(good[:, :2])),
        (TypeError, "features", "pts to be a torch.Tensor", lambda: module([[0.0, 0.0, 0.0]])),
        (ValueError, "forward_with_tv_taps", "tap_pts to have shape",
         lambda: module.forward_with_tv_taps(good, good[None])),
        (TypeError, "tv_tap_densities", "tap_pts to have dtype",
         lambda: module.tv_tap_densities(good.float())),
        (ValueError, "tv_tap_coords", "n_max to be >= 0", lambda: module.tv_tap_coords(good, -1)),
    ]
    for exc, method, message, call in cases:
        with pytest.raises(exc, match=rf"{name}\.{method}\(\): expected {message}"):
            call()


def test_state_dict_round_trip(rng):
    module = _module("tilted", rotation_param="quaternion", decoder="mlp", hidden=4, layers=1)
    clone = _module("tilted", rotation_param="quaternion", decoder="mlp", hidden=4, layers=1,
                    channels_last=False)
    clone.load_state_dict(module.state_dict())
    pts = _points(9, rng)
    assert_close(clone(pts), module(pts), **TOL64)


def test_torch_compile_fullgraph(rng):
    # Inductor compiles are slow on the CPU: one module, forward and backward.
    torch._dynamo.reset()
    module = _module("tilted", dtype=torch.float32, decoder="mlp", hidden=8, layers=1)
    pts = _points(40, rng, torch.float32)
    compiled = torch.compile(module, fullgraph=True)
    out = compiled(pts)
    expected = module(pts)
    assert_close(out, expected, **TOL32)
    _assert_grads_close(_grads(out.square().sum(), module), _grads(expected.square().sum(), module),
                        **TOL32)


def test_torch_compile_fullgraph_taps(rng):
    # The fused tap path and the quaternion map trace without graph breaks too (AOT autograd with
    # fake impls, no code generation, to keep the test fast).
    torch._dynamo.reset()
    module = _module("tilted", rotation_param="quaternion")
    pts = _points(30, rng)
    step = torch.compile(module.forward_with_tv_taps, fullgraph=True, backend="aot_eager")
    rho, tap_rho = step(pts, pts[:7])
    expected_rho, expected_taps = module.forward_with_tv_taps(pts, pts[:7])
    assert_close(rho, expected_rho, **TOL64)
    assert_close(tap_rho, expected_taps, **TOL64)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("device", [pytest.param("cuda", marks=requires_cuda)])
def test_cpu_cuda_parity(variant, device, rng):
    cpu = _module(variant, dtype=torch.float32, decoder="mlp", hidden=8, layers=1)
    gpu = copy.deepcopy(cpu).to(device)
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in gpu.planes)
    pts = _points(500, rng, torch.float32)
    results = []
    for module, p in ((cpu, pts), (gpu, pts.to(device))):
        taps = module.tv_tap_coords(p, 100, torch.Generator().manual_seed(1))
        rho, tap_rho = module.forward_with_tv_taps(p, taps)
        loss = rho.square().mean() + module.volume_tv(tap_rho, 0.1)
        results.append((loss.detach().cpu(), [g.cpu() for g in _grads(loss, module)]))
    assert_close(results[1][0], results[0][0], **TOL32)
    _assert_grads_close(results[1][1], results[0][1], rtol=1e-4, atol=1e-6)
