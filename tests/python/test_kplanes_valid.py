# SPDX-License-Identifier: Apache-2.0
"""The `valid` mask of kplanes_tilted_with_taps (C++ API; `_C` here): the padding of a padded ray
batch is skipped. A masked point's feature row is 0 and it adds nothing to any gradient, whatever
its coordinates (NaN included) and its upstream gradient; every other number is the unmasked
call's (the backward's equal to the unmasked call with the masked rows' upstream zeroed)."""

from __future__ import annotations

import pytest
import torch
from device_params import DEVICES, F32, F64, FLOAT_DTYPES, HAS_CUDA

from fieldfuse import _C

T, B, N, H = 2, 301, 7, 0.05


def _stream(device) -> int:
    return torch.cuda.current_stream().cuda_stream if torch.device(device).type == "cuda" else 0


def _rotations(g, dtype, device):
    q, _ = torch.linalg.qr(torch.randn(T, 3, 3, generator=g, dtype=F64))
    return q.to(device, dtype)


def _problem(device, dtype, channels, layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    pts = (torch.rand(B, 3, generator=g, dtype=F64) * 1.8 - 0.9).to(device, dtype)
    tap_pts = (torch.rand(N, 3, generator=g, dtype=F64) * 1.8 - 0.9).to(device, dtype)
    planes = [torch.rand(3 * T, c, r, r + 3, generator=g, dtype=F64).to(device, dtype)
              for c, r in ((channels, 9), (channels, 17))]
    if layout == "channels_last":
        planes = [p.contiguous(memory_format=torch.channels_last) for p in planes]
    # A prefix of each 20-slot "ray" is valid, as ray_box_samples_padded returns it.
    valid = (torch.arange(B) % 20) < torch.randint(0, 21, (B,), generator=g)
    return pts, tap_pts, _rotations(g, dtype, device), planes, valid.to(device)


def _num_features(planes) -> int:
    return sum(T * p.shape[1] for p in planes)


def _forward(pts, tap_pts, rot, planes, valid):
    f = _num_features(planes)
    features = pts.new_empty(B, f)
    taps = pts.new_empty(4, N, f)
    ws = torch.empty(_C.kplanes_tilted_with_taps_forward_workspace_size(pts, tap_pts, rot, planes),
                     dtype=torch.uint8, device=pts.device)
    _C.kplanes_tilted_with_taps_forward(pts, tap_pts, rot, planes, H, None, features, taps, ws,
                                        _stream(pts.device), valid=valid)
    return features, taps


def _backward(pts, tap_pts, rot, planes, valid, grad_features, grad_taps, deterministic):
    grads = {"pts": torch.empty_like(pts), "tap_pts": torch.empty_like(tap_pts),
             "rotations": torch.empty_like(rot)}
    grad_planes = [torch.empty_like(p) for p in planes]
    ws = torch.empty(_C.kplanes_tilted_with_taps_backward_workspace_size(
        pts, tap_pts, rot, planes, True, deterministic), dtype=torch.uint8, device=pts.device)
    _C.kplanes_tilted_with_taps_backward(
        pts, tap_pts, rot, planes, H, None, grad_features, grad_taps, grads["pts"],
        grads["tap_pts"], grads["rotations"], grad_planes, deterministic, ws, _stream(pts.device),
        valid=valid)
    return grads, grad_planes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("channels,layout", [(8, "channels_last"), (3, "nchw")])
def test_masked_rows_are_zero_and_the_rest_unchanged(device, dtype, channels, layout):
    pts, tap_pts, rot, planes, valid = _problem(device, dtype, channels, layout)
    full, full_taps = _forward(pts, tap_pts, rot, planes, None)
    poisoned = pts.clone()
    poisoned[~valid] = float("nan")  # a masked point's coordinates are never read
    masked, masked_taps = _forward(poisoned, tap_pts, rot, planes, valid)
    assert torch.equal(masked[valid], full[valid])
    assert torch.equal(masked[~valid], torch.zeros_like(masked[~valid]))
    assert torch.equal(masked_taps, full_taps)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("channels,layout", [(8, "channels_last"), (3, "nchw")])
def test_masked_rows_add_no_gradient(device, dtype, deterministic, channels, layout):
    pts, tap_pts, rot, planes, valid = _problem(device, dtype, channels, layout, seed=1)
    g = torch.Generator().manual_seed(2)
    f = _num_features(planes)
    grad_features = torch.randn(B, f, generator=g, dtype=F64).to(device, dtype)
    grad_taps = torch.randn(4, N, f, generator=g, dtype=F64).to(device, dtype)
    zeroed = grad_features.clone()
    zeroed[~valid] = 0
    expected, expected_planes = _backward(pts, tap_pts, rot, planes, None, zeroed, grad_taps,
                                          deterministic)
    poisoned = grad_features.clone()
    poisoned[~valid] = float("nan")  # a masked row's upstream gradient is never read
    got, got_planes = _backward(pts, tap_pts, rot, planes, valid, poisoned, grad_taps,
                                deterministic)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == F64 else dict(rtol=1e-5, atol=1e-5)
    assert torch.equal(got["pts"][~valid], torch.zeros_like(got["pts"][~valid]))
    for name in ("pts", "tap_pts", "rotations"):
        torch.testing.assert_close(got[name], expected[name], **tol, msg=name)
    for level, (a, e) in enumerate(zip(got_planes, expected_planes)):
        torch.testing.assert_close(a, e, **tol, msg=f"planes[{level}]")


@pytest.mark.parametrize("device", DEVICES)
def test_bad_masks_name_the_argument(device):
    pts, tap_pts, rot, planes, valid = _problem(device, F32, 4, "nchw")
    bad = {
        "float32": (valid.float(), r"expected valid to have dtype bool"),
        "shape": (valid[:-1], r"expected valid to have shape \[B\]"),
    }
    if HAS_CUDA and torch.device(device).type == "cpu":
        bad["device"] = (valid.cuda(), r"\bvalid\b.*device")
    for name, (mask, message) in bad.items():
        with pytest.raises((ValueError, TypeError), match=message):
            _forward(pts, tap_pts, rot, planes, mask)
