# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.optics transfer functions (thin, thick, shared 3-D optics) against the float64 oracle:
values, physical identities, batching, gradients, edge cases and bad inputs."""

from __future__ import annotations

import math

import optics_oracle as oracle
import pytest
import torch
from device_params import cuda_only
from optics_support import F32, F64, assert_close_scaled, complex_of, optics_api, raises_naming

# Relative to the largest coefficient: float64 kernels differ from the oracle by rounding only;
# float32 ones carry FFT and phase (2πz·ob up to ~20 rad) rounding, see test_optics_oracle.py.
REL = {F64: 1e-10, F32: 2e-5}
DTYPES = [pytest.param(F64, id="float64"), pytest.param(F32, id="float32")]

BASE = dict(
    pixel_size=0.2, wavelength=0.532, index_medium=1.0, na_illumination=0.4, na_detection=0.55
)

# Each case: yx_shape, z list and keyword overrides of BASE (the factor f noted for the reader).
THIN_CASES = {
    "f1": ((12, 10), [1.0, 0.5, 0.0, -0.5, -1.0], {}),
    "f1-tilt-steep100": ((12, 10), [0.8, 0.0, -0.8], dict(zenith=0.3, azimuth=-2.0, s=100.0)),
    "f2-odd-invert": (
        (9, 10),
        [0.9, 0.3, -0.3],
        dict(
            pixel_size=0.4,
            index_medium=1.33,
            na_illumination=0.3,
            na_detection=0.6,
            zenith=0.25,
            azimuth=0.9,
            s=200.0,
            invert=True,
        ),
    ),
    "f2-even": ((8, 6), [0.5, -0.5], dict(pixel_size=0.4, zenith=0.1, azimuth=0.4)),
    "f3-odd": ((7, 9), [0.5, 0.0, -0.5], dict(pixel_size=0.7, zenith=0.15, azimuth=-0.4)),
    "na-clamped": ((10, 10), [0.5, -0.5], dict(na_illumination=0.7)),
    "na-equal": ((10, 10), [0.5, -0.5], dict(na_illumination=0.55)),
    "y1": ((1, 6), [0.4, -0.4], dict(zenith=0.2, azimuth=0.3)),
    "x1": ((5, 1), [0.4, -0.4], {}),
    "z1": ((6, 5), [0.3], {}),
}


def _settings(overrides):
    base = {**BASE, **{k: v for k, v in overrides.items() if k in BASE}}
    options = dict(
        zenith=overrides.get("zenith", 0.0),
        azimuth=overrides.get("azimuth", 0.0),
        pupil_steepness=overrides.get("s", 1e4),
        invert_phase_contrast=overrides.get("invert", False),
    )
    return base, options


def _thin(fn, yx_shape, z, base, options, **extra):
    return fn(
        yx_shape,
        base["pixel_size"],
        z,
        base["wavelength"],
        base["index_medium"],
        base["na_illumination"],
        base["na_detection"],
        **options,
        **extra,
    )


def thin_api(yx_shape, z, overrides=None, dtype=F64, device=None, **options_override):
    base, options = _settings(overrides or {})
    options.update(options_override)
    z = torch.as_tensor(z, dtype=dtype, device=device) if not isinstance(z, torch.Tensor) else z
    fn = optics_api("thin_transfer_functions")
    return _thin(fn, yx_shape, z, base, options, dtype=dtype, device=device)


def thin_oracle(yx_shape, z, overrides=None, **options_override):
    base, options = _settings(overrides or {})
    options.update(options_override)
    return _thin(oracle.thin_transfer_functions, yx_shape, z, base, options)


def _mirror(tf, dims=(-2, -1)):
    """tf(−k) on the unshifted grid."""
    return torch.roll(torch.flip(tf, dims=dims), shifts=(1,) * len(dims), dims=dims)


# --- thin transfer functions ----------------------------------------------------------------------


def test_upsampling_factors_of_the_cases():
    """The cases cover f = 1, 2 and 3 (ceil(pixel / (λ / (2·(NAd + NAi)))), NAi unclamped)."""
    factors = {}
    for name, (_, _, overrides) in THIN_CASES.items():
        base, _ = _settings(overrides)
        factors[name] = oracle.thin_upsampling_factor(
            base["pixel_size"], base["wavelength"], base["na_illumination"], base["na_detection"]
        )
    assert factors["f1"] == 1 and factors["f2-odd-invert"] == 2 and factors["f2-even"] == 2
    assert factors["f3-odd"] == 3 and factors["na-clamped"] == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(THIN_CASES))
def test_thin_matches_oracle(case, dtype):
    yx_shape, z, overrides = THIN_CASES[case]
    hu, hp = thin_api(yx_shape, z, overrides, dtype=dtype)
    assert hu.dtype == hp.dtype == complex_of(dtype)
    assert hu.shape == hp.shape == (len(z), *yx_shape)
    ref_hu, ref_hp = thin_oracle(yx_shape, z, overrides)
    assert_close_scaled(hu, ref_hu, rel=REL[dtype], what="absorption_tf")
    assert_close_scaled(hp, ref_hp, rel=REL[dtype], what="phase_tf")


def test_absorption_tf_is_two_at_dc_in_focus():
    """Hu(0) = 2 and Hp(0) = 0 at z = 0, θ = 0 with f = 1: the direct light normalises I0."""
    for fn in (thin_oracle, thin_api):
        hu, hp = fn((12, 10), [0.0, 0.7])
        torch.testing.assert_close(hu[0, 0, 0], torch.tensor(2.0 + 0j, dtype=torch.complex128))
        assert abs(complex(hp[0, 0, 0])) < 1e-12


@pytest.mark.parametrize("case", ["f1", "f1-tilt-steep100", "f3-odd", "z1"])
def test_hermitian_symmetry(case):
    """Hu(−k) = conj(Hu(k)) and likewise Hp (real absorption and phase make real intensities).
    It holds on the cropped grid when the crop keeps DC at [0, 0] and the whole band: f = 1, or
    odd f on odd sizes."""
    yx_shape, z, overrides = THIN_CASES[case]
    for tf in thin_api(yx_shape, z, overrides):
        torch.testing.assert_close(_mirror(tf), torch.conj(tf), rtol=0, atol=1e-12)


@pytest.mark.parametrize("azimuth, mirrored_dim", [(0.0, -2), (math.pi / 2, -1)])
def test_tilt_along_an_axis_keeps_the_mirror_symmetry_across_it(azimuth, mirrored_dim):
    """A tilt in the x–z plane (φ = 0) leaves the pupils even in fy, so the transfer functions are
    even in ky; φ = π/2 likewise in kx. The tilt itself changes them."""
    z = [0.6, 0.0, -0.6]
    tilted = thin_api((12, 12), z, zenith=0.3, azimuth=azimuth, pupil_steepness=100.0)
    straight = thin_api((12, 12), z, pupil_steepness=100.0)
    for tf, flat in zip(tilted, straight, strict=True):
        mirrored = torch.roll(torch.flip(tf, dims=(mirrored_dim,)), 1, dims=mirrored_dim)
        torch.testing.assert_close(mirrored, tf, rtol=0, atol=1e-12)
        assert float((tf - flat).abs().max()) > 1e-2


def test_invert_phase_contrast_negates_z():
    z = torch.tensor([0.9, 0.2, -0.4], dtype=F64)
    overrides = dict(zenith=0.2, azimuth=0.5)
    inverted = thin_api((10, 8), z, overrides, invert_phase_contrast=True)
    negated = thin_api((10, 8), -z, overrides)
    for a, b in zip(inverted, negated, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


def test_na_illumination_at_or_above_na_detection_is_clamped():
    """NAi >= NAd behaves as NAi = 0.9·NAd (both give upsampling factor 1 here)."""
    z = [0.5, -0.5]
    clamped = thin_api((10, 10), z, dict(na_illumination=0.55))
    above = thin_api((10, 10), z, dict(na_illumination=0.7))
    explicit = thin_api((10, 10), z, dict(na_illumination=0.9 * 0.55))
    for a, b, c in zip(clamped, above, explicit, strict=True):
        torch.testing.assert_close(a, c, rtol=0, atol=1e-13)
        torch.testing.assert_close(b, c, rtol=0, atol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batched", ["zenith", "azimuth", "z_positions", "all"])
def test_batched_equals_per_tile_calls(batched, dtype):
    """A [B] zenith / azimuth or [B, Z] z_positions gives [B, Z, Y, X], tile b bit-identical to a
    call with tile b's values alone (CPU)."""
    B, yx_shape = 3, (9, 10)
    zenith = torch.tensor([0.1, 0.25, 0.0], dtype=dtype)
    azimuth = torch.tensor([0.4, -1.0, 2.0], dtype=dtype)
    z = torch.tensor([[0.6, 0.0, -0.6], [1.0, 0.4, -0.2], [0.3, -0.3, -0.9]], dtype=dtype)
    args = dict(
        zenith=zenith if batched in ("zenith", "all") else 0.2,
        azimuth=azimuth if batched in ("azimuth", "all") else 0.7,
        z=z if batched in ("z_positions", "all") else z[0],
    )
    overrides = dict(pixel_size=0.4, s=100.0)  # f = 2
    hu, hp = thin_api(
        yx_shape, args["z"], overrides, dtype=dtype, zenith=args["zenith"], azimuth=args["azimuth"]
    )
    assert hu.shape == hp.shape == (B, 3, *yx_shape)
    for b in range(B):

        def pick(value):
            if not isinstance(value, torch.Tensor):
                return value
            return value[b] if value.ndim == 2 else float(value[b])

        one = thin_api(
            yx_shape,
            pick(args["z"]) if args["z"].ndim == 2 else args["z"],
            overrides,
            dtype=dtype,
            zenith=pick(args["zenith"]),
            azimuth=pick(args["azimuth"]),
        )
        assert one[0].shape == (3, *yx_shape)
        assert torch.equal(hu[b], one[0]) and torch.equal(hp[b], one[1])


def test_batched_matches_oracle():
    zenith = torch.tensor([0.1, 0.3], dtype=F64)
    azimuth = torch.tensor([0.5, -1.2], dtype=F64)
    z = oracle.z_positions(4, 0.5, torch.tensor([0.0, 0.7], dtype=F64))
    got = thin_api((8, 10), z, zenith=zenith, azimuth=azimuth)
    want = thin_oracle((8, 10), z, zenith=zenith, azimuth=azimuth)
    for a, b in zip(got, want, strict=True):
        assert_close_scaled(a, b, rel=REL[F64])


def test_empty_dims():
    hu, hp = thin_api((6, 5), torch.zeros(0, dtype=F64))
    assert hu.shape == hp.shape == (0, 6, 5)
    hu, _ = thin_api((6, 5), [0.5, -0.5], zenith=torch.zeros(0, dtype=F64))
    assert hu.shape == (0, 2, 6, 5)
    hu, _ = thin_api((6, 5), torch.zeros(0, 2, dtype=F64))
    assert hu.shape == (0, 2, 6, 5)


def test_gradcheck_per_tile_inputs_and_numerical_apertures():
    """Smooth pupils (s = 100) on a 12 × 10 grid: z_positions [B, Z], zenith and azimuth [B] and
    both NAs (0-d tensors)."""
    fn = optics_api("thin_transfer_functions")

    def tfs(z, zenith, azimuth, na_i, na_d):
        return fn(
            (12, 10),
            0.2,
            z,
            0.532,
            1.0,
            na_i,
            na_d,
            zenith=zenith,
            azimuth=azimuth,
            pupil_steepness=100.0,
            dtype=F64,
        )

    def leaf(values):
        return torch.tensor(values, dtype=F64, requires_grad=True)

    inputs = (
        leaf([[0.7, 0.1, -0.5], [0.4, -0.2, -0.8]]),
        leaf([0.2, 0.35]),
        leaf([0.6, -1.1]),
        leaf(0.4),
        leaf(0.55),
    )
    assert torch.autograd.gradcheck(tfs, inputs, eps=1e-6, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("na_i", [0.3, 0.7], ids=["below", "clamped"])
def test_gradcheck_shared_z_and_numerical_apertures(na_i):
    """[Z] z_positions, scalar tilt; above NAd the gradient reaches NAd through 0.9·NAd."""
    fn = optics_api("thin_transfer_functions")

    def tfs(z, na_illumination, na_detection):
        return fn(
            (10, 12),
            0.2,
            z,
            0.532,
            1.33,
            na_illumination,
            na_detection,
            zenith=0.15,
            azimuth=0.3,
            pupil_steepness=50.0,
            dtype=F64,
        )

    inputs = tuple(
        torch.tensor(v, dtype=F64, requires_grad=True) for v in ([0.6, 0.0, -0.6], na_i, 0.55)
    )
    assert torch.autograd.gradcheck(tfs, inputs, eps=1e-6, atol=1e-6, rtol=1e-4)
    if na_i > 0.55:
        hu, _ = tfs(*inputs)
        (grad,) = torch.autograd.grad(hu.real.sum(), inputs[1])
        assert float(grad) == 0.0


@cuda_only
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["f1", "f2-odd-invert", "f3-odd"])
def test_thin_cuda_matches_cpu(case, dtype):
    yx_shape, z, overrides = THIN_CASES[case]
    cpu = thin_api(yx_shape, z, overrides, dtype=dtype)
    cuda = thin_api(yx_shape, z, overrides, dtype=dtype, device="cuda")
    for a, b in zip(cuda, cpu, strict=True):
        assert a.device.type == "cuda"
        assert_close_scaled(a.cpu(), b, rel=REL[dtype])


# --- shared 3-D optics and the thick transfer function --------------------------------------------

SHARED_CASES = {
    "pad1": ((6, 16, 12), 0.2, 0.3, 0.532, 1.33, 0.55, dict(z_padding=1)),
    "odd-invert-s100": (
        (5, 9, 10),
        0.25,
        0.4,
        0.532,
        1.0,
        0.7,
        dict(invert_phase_contrast=True, pupil_steepness=100.0),
    ),
    "z1": ((1, 4, 1), 0.2, 0.3, 0.532, 1.0, 0.5, {}),
}

THICK_CASES = {
    "f1-pad-tilt": (
        (6, 16, 12),
        0.2,
        0.5,
        0.532,
        1.33,
        0.4,
        0.55,
        dict(z_padding=1, zenith=0.2, azimuth=0.6),
    ),
    # Nyquist factors 2 in z and in y, x; the padding is not upsampled (waveorder).
    "f2-z2-pad-invert": (
        (5, 12, 10),
        0.3,
        0.6,
        0.532,
        1.0,
        0.5,
        0.9,
        dict(z_padding=1, invert_phase_contrast=True),
    ),
    "odd-s100": (
        (3, 7, 9),
        0.25,
        1.0,
        0.532,
        1.0,
        0.3,
        0.5,
        dict(zenith=0.1, azimuth=-2.5, pupil_steepness=100.0),
    ),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SHARED_CASES))
def test_shared_optics_matches_oracle(case, dtype):
    *args, options = SHARED_CASES[case]
    got = optics_api("shared_optics_3d")(*args, **options, dtype=dtype)
    want = oracle.shared_optics_3d(*args, **options)
    Z, Y, X = args[0]
    Zt = Z + 2 * options.get("z_padding", 0)
    assert got[0].shape == (Y, X) and got[0].dtype == dtype
    for name, a, b in zip(("pupil", "kernel", "greens"), got, want, strict=True):
        if name != "pupil":
            assert a.shape == (Zt, Y, X) and a.dtype == complex_of(dtype)
        assert_close_scaled(a, b, rel=REL[dtype], what=name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(THICK_CASES))
def test_thick_matches_oracle(case, dtype):
    *args, options = THICK_CASES[case]
    got = optics_api("thick_transfer_function")(*args, **options, dtype=dtype)
    want = oracle.thick_transfer_function(*args, **options)
    Z, Y, X = args[0]
    for a, b in zip(got, want, strict=True):
        assert a.shape == (Z + 2 * options.get("z_padding", 0), Y, X)
        assert a.dtype == complex_of(dtype)
        assert_close_scaled(a, b, rel=REL[dtype])


@cuda_only
@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_and_thick_cuda_match_cpu(dtype):
    for fn, cases in (("shared_optics_3d", SHARED_CASES), ("thick_transfer_function", THICK_CASES)):
        for *args, options in cases.values():
            cpu = optics_api(fn)(*args, **options, dtype=dtype)
            cuda = optics_api(fn)(*args, **options, dtype=dtype, device="cuda")
            for a, b in zip(cuda, cpu, strict=True):
                assert_close_scaled(a.cpu(), b, rel=REL[dtype])


# --- bad inputs -----------------------------------------------------------------------------------

THIN_OK = dict(
    yx_shape=(8, 6),
    pixel_size=0.2,
    z_positions=[0.5, -0.5],
    wavelength=0.532,
    index_medium=1.0,
    na_illumination=0.4,
    na_detection=0.55,
)


def _thin_call(**changes):
    kwargs = {**THIN_OK, **changes}
    z = kwargs.pop("z_positions")
    z = torch.as_tensor(z, dtype=F64) if isinstance(z, list) else z
    fn = optics_api("thin_transfer_functions")
    positional = [kwargs.pop(k) for k in ("yx_shape", "pixel_size")]
    return lambda: fn(*positional, z, **kwargs)


THIN_BAD = {
    "pixel_size": ValueError,
    "wavelength": ValueError,
    "index_medium": ValueError,
    "na_detection": ValueError,
    "na_illumination": ValueError,
}


@pytest.mark.parametrize(
    "argument, value",
    [
        ("pixel_size", 0.0),
        ("wavelength", -0.5),
        ("index_medium", 0.0),
        ("na_detection", 0.0),
        ("na_detection", 1.2),
        ("na_illumination", -0.1),
    ],
)
def test_thin_rejects_bad_values(argument, value):
    with raises_naming(THIN_BAD[argument], "thin_transfer_functions", argument):
        _thin_call(**{argument: value})()


@pytest.mark.parametrize(
    "changes, argument",
    [
        (dict(yx_shape=(8, -6)), "yx_shape"),
        (dict(yx_shape=(8, 6, 2)), "yx_shape"),
        (dict(z_positions=torch.zeros(2, 2, 2, dtype=F64)), "z_positions"),
        (dict(zenith=torch.zeros(2, 1, dtype=F64)), "zenith"),
        (dict(azimuth=torch.zeros(2, 1, dtype=F64)), "azimuth"),
        (dict(pupil_steepness=0.0), "pupil_steepness"),
        (dict(zenith=torch.zeros(3, dtype=F64), azimuth=torch.zeros(2, dtype=F64)), "azimuth"),
        (
            dict(z_positions=torch.zeros(2, 4, dtype=F64), zenith=torch.zeros(3, dtype=F64)),
            "zenith",
        ),
    ],
)
def test_thin_rejects_bad_shapes(changes, argument):
    with raises_naming(ValueError, "thin_transfer_functions", argument):
        _thin_call(**changes)()


def test_thin_rejects_an_integer_dtype():
    with raises_naming(TypeError, "thin_transfer_functions", "dtype"):
        _thin_call(dtype=torch.int32)()


@pytest.mark.parametrize(
    "fn, changes, argument",
    [
        ("shared_optics_3d", dict(z_padding=-1), "z_padding"),
        ("shared_optics_3d", dict(z_pixel_size=0.0), "z_pixel_size"),
        ("shared_optics_3d", dict(zyx_shape=(4, 6)), "zyx_shape"),
        ("shared_optics_3d", dict(na_detection=1.5), "na_detection"),
        ("thick_transfer_function", dict(z_padding=-1), "z_padding"),
        ("thick_transfer_function", dict(yx_pixel_size=-0.2), "yx_pixel_size"),
        ("thick_transfer_function", dict(na_illumination=-0.2), "na_illumination"),
        ("thick_transfer_function", dict(zyx_shape=(4, 0, -2)), "zyx_shape"),
    ],
)
def test_3d_builders_reject_bad_inputs(fn, changes, argument):
    kwargs = dict(
        zyx_shape=(4, 6, 5),
        yx_pixel_size=0.2,
        z_pixel_size=0.5,
        wavelength=0.532,
        index_medium=1.0,
        na_detection=0.55,
    )
    if fn == "thick_transfer_function":
        kwargs["na_illumination"] = 0.4
    kwargs.update(changes)
    order = ["zyx_shape", "yx_pixel_size", "z_pixel_size", "wavelength", "index_medium"]
    order += (
        ["na_illumination", "na_detection"] if fn == "thick_transfer_function" else ["na_detection"]
    )
    positional = [kwargs.pop(name) for name in order]
    with raises_naming(ValueError, fn, argument):
        optics_api(fn)(*positional, **kwargs)
