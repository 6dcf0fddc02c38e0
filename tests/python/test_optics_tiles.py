# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.optics.optimize_tiles on simulated tiles: recovery of focus and tilt with each method,
frozen parameters, per-tile starts, batched = sequential, NaN tiles, early stopping, bad inputs.

Note [simulated tiles]: the loss is −(mid-band power of the Tikhonov phase), and the 2-D inverse
applies its filter unconjugated (waveorder's convention, kept by fieldfuse). For tilted
illumination the transfer functions are complex and M(φ + π) = conj(M(φ)), so a stack simulated
with the forward model at azimuth φ is inverted exactly at φ + π. The tiles are therefore
simulated with the conjugated transfer functions: then the inverse at the true parameters is the
exact least-squares one. With the default λ = 1e−3 the loss then still prefers parameters that
amplify the reconstruction (it has no minimum near the truth: the optimum runs off to the edge of
any range), so these tests use λ = 1, Δz = 1 µm and the band (0.125, 0.5), where the oracle's
minimum lies within 0.08 slices, 0.04 rad of zenith and 0.08 rad of azimuth of the truth (checked
below before anything relies on it).
"""

from __future__ import annotations

import math

import optics_oracle as oracle
import pytest
import torch
from device_params import cuda_only
from optics_support import F32, F64, optics_api, raises_naming

from fieldfuse import optics

MICROSCOPE = dict(
    pixel_size=0.2,
    wavelength=0.532,
    index_medium=1.0,
    na_illumination=0.3,
    na_detection=0.55,
    pupil_steepness=100.0,
)
Z, Y, X, Z_SPACING = 7, 32, 32, 1.0
REGULARIZATION, BAND = 1.0, (0.125, 0.5)
TRUTH = dict(z_offset=[0.6, -0.4, 0.2], zenith=[0.2, 0.25, 0.15], azimuth=[0.8, -1.5, 2.5])
# Where the optimisers start: the truth moved by more than RECOVERED allows.
START_SHIFT = dict(z_offset=0.5, zenith=-0.08, azimuth=0.4)
# How far the oracle's minimum may lie from the truth (measured: 0.029 slices, 0.031 rad, 0.035
# rad), and the recovery tolerances: that distance plus room for an optimiser stopping near it.
ORACLE_MINIMUM_NEAR_TRUTH = dict(z_offset=0.1, zenith=0.04, azimuth=0.1)
RECOVERED = dict(z_offset=0.2, zenith=0.06, azimuth=0.15)
NAMES = ("z_offset", "zenith", "azimuth")

METHODS = {
    # Learning rates (Adam / NAdam: step sizes; Newton: damping floor and step cap).
    "adam": (dict(z_offset=0.05, zenith=0.01, azimuth=0.05), 80),
    "nadam": (dict(z_offset=0.05, zenith=0.01, azimuth=0.05), 80),
    "newton": (dict(z_offset=0.2, zenith=0.04, azimuth=0.2), 40),
}


def _smooth_field(generator, shape, sigma_pixels, amplitude):
    noise = torch.randn(shape, generator=generator, dtype=F64)
    fy = torch.fft.fftfreq(shape[-2], dtype=F64)
    fx = torch.fft.fftfreq(shape[-1], dtype=F64)
    low_pass = torch.exp(-2 * (math.pi * sigma_pixels) ** 2 * (fy[:, None] ** 2 + fx**2))
    field = torch.real(torch.fft.ifft2(torch.fft.fft2(noise) * low_pass))
    field = field - field.mean(dim=(-2, -1), keepdim=True)
    return amplitude * field / field.abs().amax(dim=(-2, -1), keepdim=True)


def _truth(name):
    return torch.tensor(TRUTH[name], dtype=F64)


@pytest.fixture(scope="module")
def scene():
    """Three 32 × 32 tiles (float64), each a random smooth phase object with faint absorption,
    imaged with its own focus offset and tilt, 0.2 % multiplicative noise."""
    generator = torch.Generator().manual_seed(1)
    B = len(TRUTH["z_offset"])
    phase = _smooth_field(generator, (B, Y, X), 2.0, 1.0)
    absorption = _smooth_field(generator, (B, Y, X), 2.0, 0.05)
    microscope = oracle.Microscope(**MICROSCOPE)
    hu, hp = oracle.tile_transfer_functions(
        microscope, (Y, X), Z, Z_SPACING, *(_truth(n) for n in NAMES)
    )
    # Conjugated transfer functions: see Note [simulated tiles].
    tiles = oracle.thin_forward_model(absorption, phase, hu.conj(), hp.conj())
    tiles = tiles * (1 + 0.002 * torch.randn(tiles.shape, generator=generator, dtype=F64))
    return tiles


def _oracle_loss(tiles, z_offset, zenith, azimuth):
    return oracle.tile_loss(
        tiles,
        oracle.Microscope(**MICROSCOPE),
        Z_SPACING,
        z_offset,
        zenith,
        azimuth,
        regularization=REGULARIZATION,
        band=BAND,
    )


def _oracle_minimum(tiles, start):
    """The oracle loss's local minimum from `start` (L-BFGS in float64; tiles are independent)."""
    params = [value.clone().requires_grad_(True) for value in start]
    solver = torch.optim.LBFGS(
        params,
        max_iter=200,
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )

    def closure():
        solver.zero_grad()
        loss = _oracle_loss(tiles, *params).sum()
        loss.backward()
        return loss

    solver.step(closure)
    return [value.detach() for value in params]


def test_oracle_minimum_is_at_the_truth(scene):
    """Both from the truth and from the optimisers' start, the oracle loss settles at one minimum
    within RECOVERED of the truth: the recovery tests below rely on it."""
    truth = [_truth(n) for n in NAMES]
    start = [t + START_SHIFT[n] for t, n in zip(truth, NAMES, strict=True)]
    from_truth = _oracle_minimum(scene, truth)
    from_start = _oracle_minimum(scene, start)
    for name, t, a, b in zip(NAMES, truth, from_truth, from_start, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
        assert float((a - t).abs().max()) < ORACLE_MINIMUM_NEAR_TRUTH[name], name
    assert bool((_oracle_loss(scene, *from_truth) < _oracle_loss(scene, *start)).all())


def _microscope():
    return optics_api("Microscope")(**MICROSCOPE)


def _run(tiles, parameters, **options):
    options = {"regularization": REGULARIZATION, "band": BAND, **options}
    return optics_api("optimize_tiles")(tiles, _microscope(), Z_SPACING, parameters, **options)


def _start(name, B=3, dtype=F64):
    return (_truth(name)[:B] + START_SHIFT[name]).to(dtype)


@pytest.mark.parametrize("method", list(METHODS))
def test_recovers_focus_and_tilt(scene, method):
    rates, iterations = METHODS[method]
    parameters = {name: (_start(name), rates[name]) for name in NAMES}
    result = _run(scene, parameters, method=method, iterations=iterations)
    for name in NAMES:
        value = getattr(result, name)
        assert value.shape == (3,) and value.dtype == F64
        error = (value - _truth(name)).abs()
        assert float(error.max()) < RECOVERED[name], f"{name}: {value.tolist()}"
    assert result.iterations.tolist() == [iterations] * 3
    # The reported loss is the oracle loss at the returned parameters, below the start's.
    expected = _oracle_loss(scene, result.z_offset, result.zenith, result.azimuth)
    torch.testing.assert_close(result.loss, expected, rtol=1e-7, atol=1e-9)
    start_loss = _oracle_loss(scene, *(_start(n) for n in NAMES))
    assert bool((result.loss < start_loss).all())


@pytest.mark.parametrize("method", list(METHODS))
def test_float32_tiles_recover_focus_and_tilt(scene, method):
    rates, iterations = METHODS[method]
    parameters = {name: (_start(name, dtype=F32), rates[name]) for name in NAMES}
    result = _run(scene.to(F32), parameters, method=method, iterations=iterations)
    for name in NAMES:
        value = getattr(result, name)
        assert value.dtype == F32
        assert float((value.double() - _truth(name)).abs().max()) < RECOVERED[name], name


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("frozen", NAMES)
def test_frozen_parameters_keep_their_initial_values(scene, method, frozen):
    rates, _ = METHODS[method]
    parameters = {name: (_start(name), 0.0 if name == frozen else rates[name]) for name in NAMES}
    result = _run(scene, parameters, method=method, iterations=5)
    assert torch.equal(getattr(result, frozen), _start(frozen))
    for name in NAMES:
        if name != frozen:
            assert not torch.equal(getattr(result, name), _start(name)), name


def test_absent_parameters_stay_at_zero(scene):
    result = _run(scene, {"z_offset": (0.3, 0.05)}, iterations=3)
    assert torch.equal(result.zenith, torch.zeros(3, dtype=F64))
    assert torch.equal(result.azimuth, torch.zeros(3, dtype=F64))
    assert not torch.equal(result.z_offset, torch.full((3,), 0.3, dtype=F64))


def test_zero_iterations_report_the_start(scene):
    """Per-tile initial tensors and a scalar start, returned as they are with their loss."""
    parameters = {
        "z_offset": (_start("z_offset"), 0.05),
        "zenith": (0.1, 0.01),
        "azimuth": (_start("azimuth"), 0.05),
    }
    result = _run(scene, parameters, iterations=0)
    assert torch.equal(result.z_offset, _start("z_offset"))
    assert torch.equal(result.zenith, torch.full((3,), 0.1, dtype=F64))
    assert torch.equal(result.azimuth, _start("azimuth"))
    assert result.iterations.tolist() == [0, 0, 0]
    expected = _oracle_loss(
        scene, _start("z_offset"), torch.full((3,), 0.1, dtype=F64), _start("azimuth")
    )
    torch.testing.assert_close(result.loss, expected, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("method", list(METHODS))
def test_batched_equals_sequential(scene, method):
    rates, _ = METHODS[method]
    parameters = {name: (_start(name), rates[name]) for name in NAMES}
    batched = _run(scene, parameters, method=method, iterations=6)
    for b in range(3):
        one = _run(
            scene[b : b + 1],
            {name: (_start(name)[b : b + 1], rates[name]) for name in NAMES},
            method=method,
            iterations=6,
        )
        for field in (*NAMES, "loss"):
            torch.testing.assert_close(
                getattr(batched, field)[b : b + 1], getattr(one, field), rtol=1e-6, atol=1e-9
            )
        assert batched.iterations[b] == one.iterations[0]


@pytest.mark.parametrize("method", list(METHODS))
def test_nan_tile_keeps_its_last_good_values_and_stops(scene, method):
    """A tile whose loss is NaN from the start keeps its initial values and stops; the others run
    exactly as they would without it."""
    rates, _ = METHODS[method]
    tiles = scene.clone()
    tiles[1, 3, 5, 7] = float("nan")
    parameters = {name: (_start(name), rates[name]) for name in NAMES}
    result = _run(tiles, parameters, method=method, iterations=6)
    clean = _run(scene, parameters, method=method, iterations=6)
    for name in NAMES:
        value = getattr(result, name)
        assert torch.equal(value[1], _start(name)[1]), name
        assert torch.isfinite(value).all()
        for b in (0, 2):
            torch.testing.assert_close(value[b], getattr(clean, name)[b], rtol=1e-6, atol=1e-9)
    assert int(result.iterations[1]) < 6
    assert result.iterations[0] == result.iterations[2] == 6


def test_early_stopping(scene):
    rates, _ = METHODS["nadam"]
    parameters = {name: (_start(name), rates[name]) for name in NAMES}
    full = _run(scene, parameters, iterations=40, tolerance=0.0)
    assert full.iterations.tolist() == [40, 40, 40]
    # A 5 % relative improvement per iteration is more than these small steps ever give.
    stopped = _run(scene, parameters, iterations=40, tolerance=0.05, patience=2)
    assert all(2 <= int(n) < 40 for n in stopped.iterations), stopped.iterations.tolist()


def test_result_holds_per_tile_tensors(scene):
    result = _run(scene, {"zenith": (0.2, 0.01)}, iterations=1)
    for name in (*NAMES, "loss", "iterations"):
        assert getattr(result, name).shape == (3,), name
    assert result.iterations.dtype in (torch.int32, torch.int64)


@pytest.mark.parametrize(
    "changes, argument",
    [
        (dict(method="sgd"), "method"),
        (dict(iterations=-1), "iterations"),
        (dict(regularization=0.0), "regularization"),
        (dict(tolerance=-0.1), "tolerance"),
        (dict(patience=0), "patience"),
        (dict(z_spacing=0.0), "z_spacing"),
        (dict(tiles=torch.ones(7, 32, 32, dtype=F64)), "tiles"),
        (dict(parameters={"focus": (0.0, 0.1)}), ("parameters", "focus")),
        (dict(parameters={"zenith": (torch.zeros(2, dtype=F64), 0.1)}), ("zenith", "parameters")),
        (dict(parameters={"zenith": (0.0, -0.1)}), ("zenith", "parameters")),
    ],
)
def test_bad_inputs(scene, changes, argument):
    kwargs = dict(
        tiles=scene, z_spacing=Z_SPACING, parameters={"zenith": (0.1, 0.01)}, iterations=1
    )
    kwargs.update(changes)
    fn = optics_api("optimize_tiles")
    with raises_naming(ValueError, "optimize_tiles", argument):
        fn(
            kwargs.pop("tiles"),
            _microscope(),
            kwargs.pop("z_spacing"),
            kwargs.pop("parameters"),
            **kwargs,
        )


# --- the apertures as optimised parameters ---------------------------------------------------

def _aperture_scene():
    torch.manual_seed(5)
    scope = optics.Microscope(pixel_size=0.25, wavelength=0.532, na_detection=0.5,
                              na_illumination=0.3, pupil_steepness=100.0)
    B, Z, Y, X = 2, 5, 24, 24
    z = optics.z_positions(Z, 1.5, torch.tensor([0.2, -0.3], dtype=F64))
    hu, hp = optics.thin_transfer_functions((Y, X), scope.pixel_size, z, scope.wavelength, 1.0,
                                            scope.na_illumination, scope.na_detection,
                                            pupil_steepness=scope.pupil_steepness, dtype=F64)
    phase = torch.randn(B, Y, X, dtype=F64)
    tiles = optics.thin_forward_model(torch.zeros_like(phase), phase, hu, hp)
    return scope, tiles


def _loss_at(scope, tiles, **apertures):
    frozen = {name: (value, 0.0) for name, value in apertures.items()}
    return optics.optimize_tiles(tiles, scope, 1.5, frozen, iterations=0).loss


def test_apertures_stay_at_the_microscope_unless_optimised():
    scope, tiles = _aperture_scene()
    fit = optics.optimize_tiles(tiles, scope, 1.5, {"z_offset": (0.0, 0.1)}, method="newton",
                                iterations=2)
    assert torch.all(fit.na_illumination == scope.na_illumination)
    assert torch.all(fit.na_detection == scope.na_detection)
    # per-tile starting apertures, frozen, come back unchanged
    start = torch.tensor([0.45, 0.55], dtype=F64)
    fit = optics.optimize_tiles(tiles, scope, 1.5, {"na_detection": (start, 0.0)}, iterations=2)
    assert torch.equal(fit.na_detection, start)


@pytest.mark.parametrize("name, value", [("na_detection", 0.5), ("na_illumination", 0.3)])
def test_aperture_newton_step_matches_finite_differences(name, value):
    """One Newton step along an aperture alone is −g/max(h, lr) capped at ±lr, with g and h the
    loss's exact derivatives: compare with central differences of the loss itself."""
    scope, tiles = _aperture_scene()
    h = 1e-4
    lo, mid, hi = (_loss_at(scope, tiles, **{name: value + d}) for d in (-h, 0.0, h))
    grad = (hi - lo) / (2 * h)
    curvature = (hi - 2 * mid + lo) / (h * h)
    lr = 0.02
    expected = (-grad / torch.clamp(curvature, min=lr)).clamp(-lr, lr)
    fit = optics.optimize_tiles(tiles, scope, 1.5, {name: (value, lr)}, method="newton",
                                iterations=1)
    torch.testing.assert_close(getattr(fit, name) - value, expected, rtol=2e-3, atol=1e-6)
    assert torch.all(fit.iterations == 1)


def test_illumination_at_or_above_detection_is_clamped_per_tile():
    scope, tiles = _aperture_scene()
    clamped = _loss_at(scope, tiles, na_illumination=torch.tensor([0.5, 0.7], dtype=F64))
    reference = _loss_at(scope, tiles, na_illumination=0.9 * scope.na_detection)
    torch.testing.assert_close(clamped, reference, rtol=1e-12, atol=1e-12)


# --- CUDA: parity with the CPU, the apertures, NaN tiles, graph capture ----------------------


def _parity_parameters(method):
    rates, _ = METHODS[method]
    return {name: (_start(name), rates[name]) for name in NAMES}


def _assert_fits_close(got, want, fields, rtol, atol):
    for field in fields:
        torch.testing.assert_close(getattr(got, field).cpu(), getattr(want, field), rtol=rtol,
                                   atol=atol, msg=lambda m, field=field: f"{field}: {m}")
    assert torch.equal(got.iterations.cpu(), want.iterations)


@cuda_only
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("dtype", [F64, F32])
def test_cuda_matches_cpu(scene, method, dtype):
    """The CUDA driver (cuFFT, the device update) against the CPU driver (Eigen FFT) on the same
    tiles and starts; float64 agrees to rounding, float32 to its own precision."""
    parameters = {name: (start.to(dtype), rate)
                  for name, (start, rate) in _parity_parameters(method).items()}
    cpu = _run(scene.to(dtype), parameters, method=method, iterations=6)
    cuda_parameters = {name: (start.cuda(), rate) for name, (start, rate) in parameters.items()}
    gpu = _run(scene.to(dtype).cuda(), cuda_parameters, method=method, iterations=6)
    tol = dict(rtol=1e-7, atol=1e-9) if dtype == F64 else dict(rtol=2e-3, atol=2e-4)
    _assert_fits_close(gpu, cpu, (*NAMES, "loss"), **tol)


@cuda_only
def test_cuda_apertures_match_cpu():
    scope, tiles = _aperture_scene()
    parameters = {"z_offset": (0.0, 0.1), "na_detection": (0.5, 0.02),
                  "na_illumination": (torch.tensor([0.3, 0.6], dtype=F64), 0.02)}
    cpu = optics.optimize_tiles(tiles, scope, 1.5, parameters, method="newton", iterations=3)
    cuda_parameters = {name: (start.cuda() if torch.is_tensor(start) else start, rate)
                       for name, (start, rate) in parameters.items()}
    gpu = optics.optimize_tiles(tiles.cuda(), scope, 1.5, cuda_parameters, method="newton",
                                iterations=3)
    _assert_fits_close(gpu, cpu, ("z_offset", "na_detection", "na_illumination", "loss"),
                       rtol=1e-7, atol=1e-9)


@cuda_only
def test_cuda_nan_tile_keeps_its_last_good_values(scene):
    tiles = scene.clone()
    tiles[1, 3, 5, 7] = float("nan")
    parameters = {name: (start.cuda(), rate)
                  for name, (start, rate) in _parity_parameters("nadam").items()}
    result = _run(tiles.cuda(), parameters, iterations=6)
    for name in NAMES:
        assert torch.equal(getattr(result, name)[1].cpu(), _start(name)[1]), name
    assert int(result.iterations[1]) < 6 and result.iterations[0] == result.iterations[2] == 6


@cuda_only
@pytest.mark.parametrize("method", list(METHODS))
def test_cuda_graph_captures_the_whole_optimisation(scene, method):
    """optimize_tiles enqueues only stream-ordered work (kernels, cached cuFFT plans,
    cudaMallocAsync scratch), so after one warm-up call (it makes the plans) the whole
    optimisation, every iteration, replays from one CUDA graph with the eager call's bits."""
    tiles = scene.to(F32).cuda()
    parameters = {name: (start.to(F32).cuda(), rate)
                  for name, (start, rate) in _parity_parameters(method).items()}
    eager = _run(tiles, parameters, method=method, iterations=5)
    # Plans are cached per stream: warm up on the stream that is then captured.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _run(tiles, parameters, method=method, iterations=5)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        captured = _run(tiles, parameters, method=method, iterations=5)
    for field in (*NAMES, "loss"):
        getattr(captured, field).zero_()
    graph.replay()
    torch.cuda.synchronize()
    for field in (*NAMES, "loss", "iterations"):
        assert torch.equal(getattr(captured, field), getattr(eager, field)), field
