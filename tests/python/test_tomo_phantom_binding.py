# SPDX-License-Identifier: Apache-2.0
"""The bindings of the analytic tomography phantom and the image-quality metrics
(``_C.tomo_phantom_volume``, ``_C.tomo_phantom_projections``, ``_C.psnr``, ``_C.ssim_3d``,
``_C.profile_error``) on NumPy and torch CPU arrays: the numbers the C++ tests pin
(tests/cpp/test_tomo_phantom.cpp, tests/cpp/test_metrics.cpp), and the C++ front's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fieldfuse
from fieldfuse import _C


def _poses(angles) -> torch.Tensor:
    return fieldfuse.tomo.tilt_rotations(torch.tensor(angles, dtype=torch.float64))


def test_volume_has_the_documented_densities_in_numpy_and_torch():
    n = 64
    truth = np.empty((n, n, n), dtype=np.float32)
    _C.tomo_phantom_volume(truth, 3)
    assert truth[0, 0, 0] == 0.0  # outside the body
    assert truth[n // 2, n // 2, n // 2] == pytest.approx(2.5, abs=1e-5)  # body + central particle
    assert truth[n // 2, n // 2, 48] == pytest.approx(0.5, abs=1e-5)  # body only
    as_torch = torch.empty(n, n, n, dtype=torch.float64)
    _C.tomo_phantom_volume(as_torch, 3)
    # One rounding of the same float64 sum: float32 is float64 rounded.
    np.testing.assert_array_equal(as_torch.to(torch.float32).numpy(), truth)


def test_projections_of_a_slab_match_the_projector_of_the_truth():
    n, angles = 32, [-60.0, 0.0, 45.0]
    rotations = _poses(angles)
    analytic = torch.empty(len(angles), n, n, dtype=torch.float64)
    _C.tomo_phantom_projections(rotations, analytic, 2)
    truth = torch.empty(n, n, n, dtype=torch.float64)
    _C.tomo_phantom_volume(truth, 3)
    ours = fieldfuse.project(truth, rotations, detector_shape=(n, n))
    relative = ((ours - analytic).norm() / analytic.norm()).item()
    # The 32^3 grid's discretisation error at the sharp edges (3% at 64^3 in the C++ test).
    assert relative < 0.05
    # At 0° with one ray per pixel, pixel (16, 16) at (u, v) = (1/32, 1/32) crosses only the body
    # (semi-axes 0.8, 0.7, 0.3, density 0.5) and the central particle (radius 0.06, density 2),
    # both centred on 0: the sum of their exact chords along z.
    one_ray = torch.empty(len(angles), n, n, dtype=torch.float64)
    _C.tomo_phantom_projections(rotations, one_ray, 1)
    u = v = 1 / 32
    body = 0.5 * 2 * 0.3 * math.sqrt(1 - (u / 0.8) ** 2 - (v / 0.7) ** 2)
    particle = 2.0 * 2 * math.sqrt(0.06**2 - u * u - v * v)
    assert one_ray[1, 16, 16].item() == pytest.approx(body + particle, rel=1e-12)


def test_metrics_give_the_closed_forms():
    rng = np.random.default_rng(1)
    reference = rng.random((4, 5, 6), dtype=np.float32)
    shifted = reference + np.float32(0.1)
    assert _C.psnr(shifted, reference, 1.0) == pytest.approx(20.0, abs=1e-4)
    assert math.isinf(_C.psnr(reference, reference, 1.0))
    assert _C.ssim_3d(reference, reference, 1.0) == pytest.approx(1.0, abs=1e-12)
    a, b, c1 = 0.3, 0.5, 0.01**2
    constant = (2 * a * b + c1) / (a * a + b * b + c1)
    got = _C.ssim_3d(torch.full((7, 6, 5), a, dtype=torch.float64),
                     torch.full((7, 6, 5), b, dtype=torch.float64), 1.0)
    assert got == pytest.approx(constant, abs=1e-12)
    ramp = torch.arange(1, 9, dtype=torch.float32).view(8, 1, 1).expand(8, 6, 6).contiguous()
    flat = torch.full_like(ramp, 4.5)
    assert _C.profile_error(flat, ramp, 0) == pytest.approx(math.sqrt(42 / 204), abs=1e-6)
    assert _C.profile_error(flat, ramp, 2) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: _C.tomo_phantom_volume(np.empty((4, 4, 4), np.float32), 0), ValueError,
         r"^tomo_phantom_volume\(\): expected supersample to be in \[1, 16\], but got 0"),
        (lambda: _C.tomo_phantom_volume(np.empty((4, 4), np.float32), 1), ValueError,
         r"^tomo_phantom_volume\(\): expected volume to have shape \[D, H, W\]"),
        (lambda: _C.tomo_phantom_volume(np.empty((4, 4, 4), np.int32), 1), TypeError,
         r"^tomo_phantom_volume\(\): expected volume to have dtype float32 or float64"),
        (lambda: _C.tomo_phantom_volume(torch.empty(4, 4, 8)[:, :, ::2], 1), ValueError,
         r"^tomo_phantom_volume\(\): .*volume"),
        (lambda: _C.tomo_phantom_projections(_poses([0.0]).float(), np.empty((1, 4, 4)), 1),
         TypeError, r"^tomo_phantom_projections\(\): expected rotations to have dtype float64"),
        (lambda: _C.tomo_phantom_projections(_poses([0.0]), np.empty((2, 4, 4)), 1), ValueError,
         r"^tomo_phantom_projections\(\): expected rotations to have shape \[2, 3, 3\]"),
        (lambda: _C.psnr(np.zeros(3, np.float32), np.zeros(3, np.float32), 0.0), ValueError,
         r"^psnr\(\): expected data_range to be finite and > 0, but got 0"),
        (lambda: _C.psnr(np.zeros(3, np.float32), np.zeros(3, np.float64), 1.0), TypeError,
         r"^psnr\(\): expected reference to have dtype float32"),
        (lambda: _C.ssim_3d(np.zeros((2, 2)), np.zeros((2, 2)), 1.0), ValueError,
         r"^ssim_3d\(\): expected estimate to have shape \[D, H, W\]"),
        (lambda: _C.ssim_3d(np.zeros((2, 2, 2)), np.zeros((2, 2, 3)), 1.0), ValueError,
         r"^ssim_3d\(\): expected reference"),
        (lambda: _C.profile_error(np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), 3), ValueError,
         r"^profile_error\(\): expected axis to be 0 \(D\), 1 \(H\) or 2 \(W\), but got 3"),
    ],
    ids=["supersample", "volume-dims", "volume-dtype", "volume-strided", "rotations-dtype",
         "rotations-shape", "data-range", "dtype-mismatch", "ssim-dims", "shape-mismatch",
         "axis"],
)
def test_errors_name_the_function_and_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
