# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.optics.thick_transfer_function beyond the oracle comparisons of
test_optics_transfer.py: edge cases, the contract's properties, and every argument check."""

from __future__ import annotations

import optics_oracle as oracle
import pytest
import torch
from device_params import cuda_only
from optics_support import F32, F64, assert_close_scaled, optics_api, raises_naming

# zyx_shape, yx_pixel_size, z_pixel_size, wavelength, index_medium, na_illumination, na_detection
ARGS = ((4, 6, 5), 0.2, 0.5, 0.532, 1.0, 0.4, 0.55)


def thick(*args, **kwargs):
    return optics_api("thick_transfer_function")(*args, **kwargs)


def test_padding_only_stack_matches_the_oracle():
    """Z = 0 with padding: the upsampled stack is the padding alone (it is not upsampled)."""
    args = ((0,) + ARGS[0][1:],) + ARGS[1:]
    got = thick(*args, z_padding=2, zenith=0.1, dtype=F64)
    want = oracle.thick_transfer_function(*args, z_padding=2, zenith=0.1)
    for a, b in zip(got, want, strict=True):
        assert a.shape == (4, 6, 5)
        assert_close_scaled(a, b, rel=1e-10)


def test_empty_stack():
    real_tf, imag_tf = thick(((0,) + ARGS[0][1:]), *ARGS[1:])
    assert real_tf.shape == imag_tf.shape == (0, 6, 5)


def test_na_illumination_above_na_detection_is_not_clamped():
    """Unlike the thin model, the thick model takes NAi as given (waveorder's phase_thick_3d)."""
    args = ARGS[:5] + (0.6, 0.5)
    got = thick(*args, dtype=F64)
    assert_close_scaled(got[1], oracle.thick_transfer_function(*args)[1], rel=1e-10)
    clamped = oracle.thick_transfer_function(*args[:5], 0.45, 0.5)[1]
    assert (got[1] - clamped).abs().max() > 1e-3 * clamped.abs().max()


def test_real_tf_is_hermitian_on_odd_grids():
    """real = (H1 + H2)/I·Δz with H2(k) = conj(H1(−k)) is Hermitian. With ARGS both Nyquist
    factors are 1, so the crop is the identity and, every length odd, no bin lacks its mirror."""
    real_tf, _ = thick((3, 7, 9), *ARGS[1:], z_padding=1, zenith=0.2, azimuth=0.5, dtype=F64)
    mirrored = torch.roll(torch.flip(real_tf, dims=(0, 1, 2)), shifts=(1, 1, 1), dims=(0, 1, 2))
    assert_close_scaled(real_tf, mirrored.conj(), rel=1e-12)


def test_repeated_calls_agree_bit_for_bit():
    first = thick(*ARGS, z_padding=1, zenith=0.3)
    second = thick(*ARGS, z_padding=1, zenith=0.3)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@cuda_only
def test_cuda_stream_and_device():
    real_tf, imag_tf = thick(*ARGS, z_padding=1, device="cuda")
    assert real_tf.is_cuda and imag_tf.is_cuda
    cpu = thick(*ARGS, z_padding=1)
    assert_close_scaled(real_tf.cpu(), cpu[0], rel=2e-5)


@pytest.mark.parametrize(
    "changes, argument",
    [
        (dict(zyx_shape=(4, 6)), "zyx_shape"),
        (dict(zyx_shape=(4, 6.0, 5)), "zyx_shape"),
        (dict(zyx_shape=(-1, 6, 5)), "zyx_shape"),
        (dict(z_pixel_size=0.0), "z_pixel_size"),
        (dict(z_pixel_size=float("inf")), "z_pixel_size"),
        (dict(wavelength=-0.5), "wavelength"),
        (dict(index_medium=0.0), "index_medium"),
        (dict(na_detection=1.0), "na_detection"),
        (dict(pupil_steepness=0.0), "pupil_steepness"),
        (dict(zenith=float("nan")), "zenith"),
        (dict(azimuth=float("inf")), "azimuth"),
        (dict(yx_pixel_size=100.0), "yx_pixel_size"),
        (dict(z_pixel_size=1000.0), "z_pixel_size"),
    ],
)
def test_rejects_bad_values(changes, argument):
    kwargs = dict(
        zip(
            (
                "zyx_shape",
                "yx_pixel_size",
                "z_pixel_size",
                "wavelength",
                "index_medium",
                "na_illumination",
                "na_detection",
            ),
            ARGS,
        )
    )
    kwargs.update(changes)
    with raises_naming(ValueError, "thick_transfer_function", argument):
        thick(**kwargs)


@pytest.mark.parametrize(
    "changes, argument",
    [
        (dict(dtype=torch.int32), "dtype"),
        (dict(dtype=torch.complex64), "dtype"),
        (dict(z_padding=1.0), "z_padding"),
        (dict(zenith="0.1"), "zenith"),
    ],
)
def test_rejects_bad_types(changes, argument):
    with raises_naming(TypeError, "thick_transfer_function", argument):
        thick(*ARGS, **changes)


def test_rejects_a_non_number_pixel_size():
    with raises_naming(TypeError, "thick_transfer_function", "yx_pixel_size"):
        thick(ARGS[0], None, *ARGS[2:])


def test_float32_and_float64_agree():
    a = thick(*ARGS, z_padding=1, zenith=0.2, dtype=F32)
    b = thick(*ARGS, z_padding=1, zenith=0.2, dtype=F64)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == torch.complex64 and y.dtype == torch.complex128
        assert_close_scaled(x, y, rel=2e-5)
