# SPDX-License-Identifier: Apache-2.0
"""Tests of the fieldfuse projectors (``project`` / ``backproject``): against the float64 oracle
of fieldfuse.reference.project, the adjoint identity and the transpose, analytic projections of a
Gaussian blob and of a ball, edge cases, autograd, torch.compile, CUDA graphs and CPU/CUDA parity.

Contract: include/fieldfuse/project.h and python/fieldfuse/project.py. Poses are random general
rotations (not only tilts about one axis) with random shifts, on non-cubic volumes and detectors of
another size than the volume, so every dominant axis and index map is exercised.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

import fieldfuse
from fieldfuse import _registry
from fieldfuse.reference import project as ref
from device_params import DEVICES, F32, F64, FLOAT_DTYPES, capture_cuda_graph, cuda_only

DEVICE_DTYPES = [pytest.param(d.values[0], t.values[0], id=f"{d.id}-{t.id}", marks=d.marks)
                 for d in DEVICES for t in FLOAT_DTYPES]


def _rotations(n, rng, dtype=F64, device="cpu"):
    """n random rotations (QR of Gaussian matrices, determinant +1)."""
    q, r = torch.linalg.qr(torch.randn(n, 3, 3, generator=rng, dtype=F64))
    q = q * torch.sign(torch.diagonal(r, dim1=1, dim2=2))[:, None, :]
    q = q * torch.linalg.det(q)[:, None, None]
    return q.to(device, dtype)


def _uniform(shape, lo, hi, rng, dtype=F64, device="cpu"):
    return (lo + (hi - lo) * torch.rand(shape, generator=rng, dtype=F64)).to(device, dtype)


def _tilts(n, axis, rng, dtype=F64, device="cpu"):
    """n tilts about a detector axis, over ±80° (both sides of 45°: two dominant axes)."""
    angles = _uniform(n, -1.4, 1.4, rng)
    return fieldfuse.tilt_rotations(angles, axis).to(device, dtype)


def _problem(rng, device, dtype, n=3, volume=(7, 11, 5), detector=(9, 13), poses="general"):
    """A volume, poses (general rotations, or tilts about x or y, which take the separable back
    projection: Note [separable gather]) and a stack of matching shapes."""
    rotations = (_rotations(n, rng, dtype, device) if poses == "general"
                 else _tilts(n, poses[-1], rng, dtype, device))
    return {
        "volume": _uniform(volume, -1.0, 1.0, rng, dtype, device),
        "rotations": rotations,
        "shifts": _uniform((n, 2), -0.3, 0.3, rng, dtype, device),
        "stack": _uniform((n, *detector), -1.0, 1.0, rng, dtype, device),
    }


def _tolerance(dtype, scale):
    """Against the float64 oracle on the same (rounded) inputs. float64: sums of at most a few
    hundred terms, relative to the output's scale. float32: the kernels index and sum in float32,
    so a weight is off by a few ulps of the index (≤ 16 here) and every term by about 1e-6."""
    if dtype == F64:
        return {"rtol": 1e-12, "atol": 1e-13 * scale}
    return {"rtol": 1e-5, "atol": 2e-5 * scale}


# --- against the reference -------------------------------------------------------------------------


POSES = ["general", "tilt-x", "tilt-y"]


@pytest.mark.parametrize("poses", POSES)
@pytest.mark.parametrize("shifts", [True, False], ids=["shifts", "no-shifts"])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_matches_reference(device, dtype, shifts, poses, rng):
    x = _problem(rng, device, dtype, n=4, poses=poses)
    s = x["shifts"] if shifts else None
    detector = tuple(x["stack"].shape[1:])
    out = fieldfuse.project(x["volume"], x["rotations"], s, detector_shape=detector)
    want = ref.project(x["volume"].double(), x["rotations"].double(),
                       None if s is None else s.double(), detector)
    assert out.dtype == dtype and out.shape == want.shape
    assert_close(out.double(), want, **_tolerance(dtype, want.abs().max().item()))
    back = fieldfuse.backproject(x["stack"], x["rotations"], s, volume_shape=(7, 11, 5))
    want = ref.backproject(x["stack"].double(), x["rotations"].double(),
                           None if s is None else s.double(), volume_shape=(7, 11, 5))
    assert back.dtype == dtype and back.shape == (7, 11, 5)
    assert_close(back.double(), want, **_tolerance(dtype, want.abs().max().item()))


@pytest.mark.parametrize("device", DEVICES)
def test_default_detector_is_the_volume_height_and_width(device, rng):
    x = _problem(rng, device, F64)
    out = fieldfuse.project(x["volume"], x["rotations"], x["shifts"])
    assert out.shape == (3, 11, 5)
    assert_close(out, ref.project(x["volume"], x["rotations"], x["shifts"]))


# --- the adjoint ---------------------------------------------------------------------------------


SHAPES = [((7, 11, 5), (9, 13)), ((5, 6, 8), (6, 5)), ((12, 3, 9), (16, 11)),
          ((4, 9, 10), (3, 20)), ((9, 9, 9), (9, 9))]


@pytest.mark.parametrize("poses", POSES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_adjoint_identity(device, dtype, n, poses, rng):
    volume_shape, detector = SHAPES[n - 1]
    x = _problem(rng, device, dtype, n, volume_shape, detector, poses)
    ax = fieldfuse.project(x["volume"], x["rotations"], x["shifts"], detector_shape=detector)
    aty = fieldfuse.backproject(x["stack"], x["rotations"], x["shifts"], volume_shape=volume_shape)
    left = (ax.double() * x["stack"].double())
    right = (x["volume"].double() * aty.double())
    scale = (left.abs().sum() + right.abs().sum()).item()
    assert scale > 0
    # float64: both sides are sums of the same products, rounded differently (~1e-16 each).
    # float32: each output element carries its own float32 rounding of a few hundred terms.
    rtol = 1e-13 if dtype == F64 else 1e-6
    assert abs(left.sum().item() - right.sum().item()) <= rtol * scale


@pytest.mark.parametrize("poses", POSES)
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_dense_matrices_are_transposes(device, dtype, poses, rng):
    """A built column by column from unit volumes equals the transpose of A^T built row by row
    from unit stacks: the back projection gathers with the forward's very weights."""
    volume_shape, detector, n = (3, 4, 2), (3, 5), 3
    x = _problem(rng, device, dtype, n, volume_shape, detector, poses)
    voxels, pixels = math.prod(volume_shape), n * math.prod(detector)
    units = torch.eye(voxels, dtype=dtype, device=device).reshape(voxels, *volume_shape)
    a = torch.stack([fieldfuse.project(u, x["rotations"], x["shifts"], detector_shape=detector)
                     .reshape(-1) for u in units], dim=1)
    units = torch.eye(pixels, dtype=dtype, device=device).reshape(pixels, n, *detector)
    at = torch.stack([fieldfuse.backproject(u, x["rotations"], x["shifts"],
                                            volume_shape=volume_shape).reshape(-1)
                      for u in units], dim=0)
    assert (a != 0).sum() > 0
    assert_close(a, at, rtol=0, atol=1e-14)
    assert torch.equal(a, at)  # in fact bit for bit


# --- the tilt paths (Note [tilt path], Note [corner runs]) --------------------------------------


# volume, detector, shifts: aligned detectors (integer x indices), coarser ones, 1.2 times finer
# ones (still corner runs for most angles) and 2.5 times finer ones (the general loop); sizes that
# fill no CUDA tile (32 x, 8 y, 8 z) evenly.
TILT_CASES = {
    "aligned": ((10, 12, 37), (12, 37), False),
    "aligned-shifts": ((10, 12, 37), (12, 37), True),
    "coarser": ((9, 13, 11), (10, 8), True),
    "finer": ((9, 10, 11), (12, 13), True),
    "much-finer": ((5, 6, 7), (15, 17), True),
}


def _tilt_series(n, rng, dtype, device):
    """n tilts about x over ±86° (0 and ±45° included), every fifth pose a general rotation, so
    one call switches between the tilt and general paths projection by projection."""
    angles = torch.linspace(-1.5, 1.5, n, dtype=F64)
    angles[n // 2] = 0.0
    angles[1], angles[-2] = -math.pi / 4, math.pi / 4
    rotations = fieldfuse.tilt_rotations(angles, "x")
    rotations[::5] = _rotations(len(range(0, n, 5)), rng)
    return rotations.to(device, dtype)


@pytest.mark.parametrize("case", TILT_CASES)
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_tilt_series_match_reference_and_adjoint(device, dtype, case, rng):
    volume_shape, detector, with_shifts = TILT_CASES[case]
    n = 19  # more than one chunk of corner runs (17 in float32, 8 in float64)
    rotations = _tilt_series(n, rng, dtype, device)
    shifts = _uniform((n, 2), -0.3, 0.3, rng, dtype, device) if with_shifts else None
    volume = _uniform(volume_shape, -1.0, 1.0, rng, dtype, device)
    stack = _uniform((n, *detector), -1.0, 1.0, rng, dtype, device)
    out = fieldfuse.project(volume, rotations, shifts, detector_shape=detector)
    double = None if shifts is None else shifts.double()
    want = ref.project(volume.double(), rotations.double(), double, detector)
    assert_close(out.double(), want, **_tolerance(dtype, want.abs().max().item()))
    back = fieldfuse.backproject(stack, rotations, shifts, volume_shape=volume_shape)
    want = ref.backproject(stack.double(), rotations.double(), double, volume_shape=volume_shape)
    assert_close(back.double(), want, **_tolerance(dtype, want.abs().max().item()))
    left, right = out.double() * stack.double(), volume.double() * back.double()
    scale = (left.abs().sum() + right.abs().sum()).item()
    rtol = 1e-13 if dtype == F64 else 1e-6
    assert abs(left.sum().item() - right.sum().item()) <= rtol * scale


@pytest.mark.parametrize("case", ["aligned", "aligned-shifts", "coarser", "finer"])
@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_tilt_dense_matrices_are_transposes(device, dtype, case, rng):
    """The corner runs gather exactly the forward's terms: A equals A^T's transpose bit for bit
    on tilt series (and the general poses among them)."""
    volume_shape = {"aligned": (3, 4, 5), "aligned-shifts": (3, 4, 5), "coarser": (4, 5, 3),
                    "finer": (5, 5, 4)}[case]
    detector = {"aligned": (4, 5), "aligned-shifts": (4, 5), "coarser": (3, 2),
                "finer": (6, 4)}[case]
    n = 6
    rotations = _tilt_series(n, rng, dtype, device)
    shifts = (_uniform((n, 2), -0.3, 0.3, rng, dtype, device) if case != "aligned" else None)
    voxels, pixels = math.prod(volume_shape), n * math.prod(detector)
    units = torch.eye(voxels, dtype=dtype, device=device).reshape(voxels, *volume_shape)
    a = torch.stack([fieldfuse.project(u, rotations, shifts, detector_shape=detector).reshape(-1)
                     for u in units], dim=1)
    units = torch.eye(pixels, dtype=dtype, device=device).reshape(pixels, n, *detector)
    at = torch.stack([fieldfuse.backproject(u, rotations, shifts, volume_shape=volume_shape)
                      .reshape(-1) for u in units], dim=0)
    assert (a != 0).sum() > 0
    assert torch.equal(a, at)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_identity_pose_sums_along_z(device, dtype, rng):
    volume = _uniform((6, 4, 5), -1.0, 1.0, rng, dtype, device)
    identity = torch.eye(3, dtype=dtype, device=device)[None]
    out = fieldfuse.project(volume, identity)
    assert_close(out[0], volume.sum(0) * 2 / 6, rtol=1e-6 if dtype == F32 else 1e-14,
                 atol=1e-6 if dtype == F32 else 1e-14)


# --- analytic projections --------------------------------------------------------------------------


def _centres(count):
    return -1 + (2 * torch.arange(count, dtype=F64) + 1) / count


def _rays(rotations, detector):
    """Origins [n, Hd, Wd, 3] on the detector plane and unit directions [n, 1, 1, 3] (world x, y,
    z), from the contract."""
    u, v = _centres(detector[1]), _centres(detector[0])
    origins = (u[None, None, :, None] * rotations[:, None, None, :, 0]
               + v[None, :, None, None] * rotations[:, None, None, :, 1])
    return origins, rotations[:, None, None, :, 2]


def _distance_squared(rotations, detector, centre):
    """Squared distance from `centre` (x, y, z) to every pixel's ray."""
    origins, directions = _rays(rotations, detector)
    offset = origins - centre
    return offset.square().sum(-1) - (offset * directions).sum(-1).square()


TILTS = torch.tensor([0.3, -0.7, 1.1], dtype=F64)  # about x: one interpolated in-slice axis


def _blob_poses(rng):
    return torch.cat([fieldfuse.tilt_rotations(TILTS, "x"), _rotations(3, rng)])


def _gaussian(size, sigma, centre):
    z, y, x = torch.meshgrid(_centres(size), _centres(size), _centres(size), indexing="ij")
    return torch.exp(-((x - centre[0]) ** 2 + (y - centre[1]) ** 2 + (z - centre[2]) ** 2)
                     / (2 * sigma**2))


def _blob_error(size, sigma, centre, rotations, device):
    """max |P − σ√(2π)·exp(−r⊥²/2σ²)| over the peak, per projection."""
    volume = _gaussian(size, sigma, centre)
    out = fieldfuse.project(volume.to(device), rotations.to(device)).cpu()
    r2 = _distance_squared(rotations, (size, size), centre)
    exact = sigma * math.sqrt(2 * math.pi) * torch.exp(-r2 / (2 * sigma**2))
    return (out - exact).abs().amax(dim=(1, 2)) / exact.max()


BLOB_CENTRE = torch.tensor([0.12, -0.07, 0.05], dtype=F64)


@pytest.mark.parametrize("device", DEVICES)
def test_gaussian_blob_projects_to_its_line_integrals(device, rng):
    size, voxels = 64, 5
    sigma = voxels * 2 / size
    # Rays through the voxel centres (R = I; a quarter turn about x maps z to y): the slice sum is
    # the midpoint rule of a Gaussian sampled 5 voxels per σ, exact to ~exp(−2π²·25), less the
    # tails the box cuts off (every face is about 6σ from the centre: ~1e-9 of the integral).
    quarter = fieldfuse.tilt_rotations(torch.tensor([0.0, math.pi / 2], dtype=F64), "x")
    quarter = quarter.round(decimals=12)
    aligned = _blob_error(size, sigma, BLOB_CENTRE, quarter, device)
    assert aligned.max() < 1e-8
    # Tilted rays interpolate each slice: on average linear interpolation smooths a profile like
    # a hat kernel of variance h²/6 along each interpolated axis, which lowers the projected peak
    # by about h²/(12σ²) per axis, h the voxel: two axes give 1/(6·5²) = 6.7e-3. Allow 1.5× that
    # for the spread of the sub-voxel offsets along a ray (measured: 3e-3 tilts, 6e-3 general).
    tilted = _blob_error(size, sigma, BLOB_CENTRE, _blob_poses(rng), device)
    assert tilted.max() < 1.5 / (6 * voxels**2)


def test_gaussian_blob_error_is_second_order(rng):
    # σ fixed in world units; halving the voxel must quarter the interpolation error.
    sigma, poses = 0.16, _blob_poses(rng)
    coarse = _blob_error(32, sigma, BLOB_CENTRE, poses, "cpu")
    fine = _blob_error(64, sigma, BLOB_CENTRE, poses, "cpu")
    ratio = coarse / fine
    assert bool((ratio > 3.0).all() and (ratio < 5.5).all()), ratio


@pytest.mark.parametrize("device", DEVICES)
def test_uniform_ball_projects_to_its_chord_lengths(device, rng):
    size, supersample, radius = 48, 4, 0.7
    centre = torch.tensor([0.06, -0.04, 0.03], dtype=F64)
    fine = _centres(size * supersample)
    inside = ((fine - centre[2])[:, None, None] ** 2 + (fine - centre[1])[None, :, None] ** 2
              + (fine - centre[0])[None, None, :] ** 2) <= radius**2
    s = supersample
    volume = inside.to(F64).reshape(size, s, size, s, size, s).mean(dim=(1, 3, 5))
    poses = _blob_poses(rng)
    out = fieldfuse.project(volume.to(device), poses.to(device)).cpu()
    rho2 = _distance_squared(poses, (size, size), centre)
    chord = 2 * torch.sqrt((radius**2 - rho2).clamp(min=0))
    h = 2 / size
    # Interior pixels (ρ ≤ r − 3h): the ray crosses the sphere at cos θ = √(1 − ρ²/r²) ≥ 0.57.
    # Each crossing is off by the partial-volume quantisation, h/(2s) along the normal at most
    # (s = 4 subsamples per voxel), i.e. h/(2s·cos θ) ≤ 0.22h along the ray; the interpolation of
    # a planar edge by symmetric kernels moves nothing (it only adds a curvature term of order
    # h²/r). Two crossings: 0.44h; we allow 0.5h (measured 0.37h) and a mean error below 0.1h.
    interior = rho2.sqrt() <= radius - 3 * h
    error = (out - chord)[interior]
    assert error.abs().max() < 0.5 * h
    assert error.mean().abs() < 0.1 * h


# --- edge cases -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs_read_in_place(device, rng):
    x = _problem(rng, device, F64, n=3)
    volume = x["volume"]
    rotations, shifts, stack = x["rotations"], x["shifts"], x["stack"]
    want = fieldfuse.project(volume, rotations, shifts, detector_shape=(9, 13))
    want_back = fieldfuse.backproject(stack, rotations, shifts, volume_shape=(7, 11, 5))
    # A permuted volume, transposed rotations, every other column of shifts, a reversed-layout
    # stack: the same values in other layouts.
    volume_t = volume.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    rotations_t = rotations.transpose(1, 2).contiguous().transpose(1, 2)
    shifts_t = torch.stack([shifts, shifts], dim=2).reshape(3, 4)[:, ::2]
    stack_t = stack.permute(2, 1, 0).contiguous().permute(2, 1, 0)
    for t in (volume_t, rotations_t, shifts_t, stack_t):
        assert not t.is_contiguous()
    assert torch.equal(fieldfuse.project(volume_t, rotations_t, shifts_t, detector_shape=(9, 13)),
                       want)
    assert torch.equal(fieldfuse.backproject(stack_t, rotations_t, shifts_t,
                                             volume_shape=(7, 11, 5)), want_back)
    # Expanded (stride-0) inputs: one pose for all projections, a constant stack.
    one = rotations[:1].expand(3, 3, 3)
    assert torch.equal(fieldfuse.project(volume, one)[2], fieldfuse.project(volume, one)[0])
    ones = torch.ones((), dtype=F64, device=device).expand(3, 9, 13)
    assert torch.equal(fieldfuse.backproject(ones, rotations, volume_shape=(7, 11, 5)),
                       fieldfuse.backproject(ones.contiguous(), rotations, volume_shape=(7, 11, 5)))


@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_voxel_poisons_only_the_rays_through_it(device, rng):
    x = _problem(rng, device, F64, n=3)
    detector = (9, 13)
    for index in [(3, 5, 2), (0, 0, 0), (6, 10, 4)]:
        unit = torch.zeros_like(x["volume"])
        unit[index] = 1.0
        column = fieldfuse.project(unit, x["rotations"], x["shifts"], detector_shape=detector)
        poisoned = x["volume"].clone()
        poisoned[index] = math.nan
        out = fieldfuse.project(poisoned, x["rotations"], x["shifts"], detector_shape=detector)
        assert torch.equal(out.isnan(), column != 0)
    # Rays that touch a NaN voxel's neighbour with weight exactly 0 stay finite: R = I on an H×W
    # detector puts every sample on a voxel centre.
    identity = torch.eye(3, dtype=F64, device=device)[None]
    poisoned = x["volume"].clone()
    poisoned[2, 4, 3] = math.nan
    out = fieldfuse.project(poisoned, identity)[0]
    assert out.isnan().sum() == 1 and out[4, 3].isnan()
    # The other direction: a NaN pixel reaches the voxels it is spread to, and only those.
    stack = x["stack"].clone()
    stack[1, 4, 6] = math.nan
    unit = torch.zeros_like(stack)
    unit[1, 4, 6] = 1.0
    row = fieldfuse.backproject(unit, x["rotations"], x["shifts"], volume_shape=(7, 11, 5))
    back = fieldfuse.backproject(stack, x["rotations"], x["shifts"], volume_shape=(7, 11, 5))
    assert row.ne(0).sum() > 0 and torch.equal(back.isnan(), row != 0)


@pytest.mark.parametrize("device", DEVICES)
def test_a_non_finite_pose_poisons_its_projection(device, rng):
    x = _problem(rng, device, F64, n=3)
    rotations = x["rotations"].clone()
    rotations[1, 0, 2] = math.inf
    out = fieldfuse.project(x["volume"], rotations, x["shifts"])
    assert out[1].isnan().all() and out[[0, 2]].isfinite().all()
    back = fieldfuse.backproject(x["stack"], rotations, volume_shape=(7, 11, 5))
    assert back.isnan().all()


@pytest.mark.parametrize("device", DEVICES)
def test_empty_sizes(device, rng):
    rotations = _rotations(2, rng, device=device)
    volume = _uniform((3, 4, 5), -1, 1, rng, device=device)
    # No projections; an empty detector; a volume with a zero dim (its rays integrate nothing).
    assert fieldfuse.project(volume, rotations[:0]).shape == (0, 4, 5)
    assert fieldfuse.project(volume, rotations, detector_shape=(0, 7)).shape == (2, 0, 7)
    flat = fieldfuse.project(volume[:0], rotations, detector_shape=(3, 2))
    assert flat.shape == (2, 3, 2) and bool((flat == 0).all())
    for stack in (volume.new_zeros(0, 3, 2), volume.new_ones(2, 0, 3)):
        back = fieldfuse.backproject(stack, rotations[: stack.shape[0]], volume_shape=(3, 4, 5))
        assert back.shape == (3, 4, 5) and bool((back == 0).all())
    assert fieldfuse.backproject(volume.new_ones(2, 3, 2), rotations,
                                 volume_shape=(3, 0, 5)).shape == (3, 0, 5)
    # And the gradients through them.
    leaf = volume[:0].clone().requires_grad_()
    fieldfuse.project(leaf, rotations, detector_shape=(3, 2)).sum().backward()
    assert leaf.grad.shape == (0, 4, 5)


@pytest.mark.parametrize("device", DEVICES)
def test_repeated_calls_give_the_same_bits(device, rng):
    x = _problem(rng, device, F32, n=5, volume=(20, 24, 18), detector=(22, 26))
    runs = [fieldfuse.project(x["volume"], x["rotations"], x["shifts"], detector_shape=(22, 26))
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    stack = runs[0]
    backs = [fieldfuse.backproject(stack, x["rotations"], x["shifts"], volume_shape=(20, 24, 18))
             for _ in range(2)]
    assert torch.equal(backs[0], backs[1])


_THREADS_SCRIPT = """
import hashlib, torch, fieldfuse
g = torch.Generator().manual_seed(3)
volume = torch.rand(40, 48, 36, generator=g, dtype=torch.float64)
q = torch.linalg.qr(torch.randn(4, 3, 3, generator=g, dtype=torch.float64))[0]
out = fieldfuse.project(volume, q, detector_shape=(44, 52))
back = fieldfuse.backproject(out, q, volume_shape=(40, 48, 36))
print(hashlib.sha256(out.numpy().tobytes() + back.numpy().tobytes()).hexdigest())
"""


def test_results_do_not_depend_on_the_thread_count():
    digests = set()
    for threads in ("1", "3"):
        env = {**os.environ, "OMP_NUM_THREADS": threads}
        result = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], env=env, check=True,
                                capture_output=True, text=True)
        digests.add(result.stdout.strip())
    assert len(digests) == 1


# --- autograd ------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_are_the_other_projector(device, rng):
    x = _problem(rng, device, F64)
    volume = x["volume"].clone().requires_grad_()
    out = fieldfuse.project(volume, x["rotations"], x["shifts"], detector_shape=(9, 13))
    (grad,) = torch.autograd.grad(out, volume, x["stack"])
    assert torch.equal(grad, fieldfuse.backproject(x["stack"], x["rotations"], x["shifts"],
                                                   volume_shape=(7, 11, 5)))
    stack = x["stack"].clone().requires_grad_()
    back = fieldfuse.backproject(stack, x["rotations"], x["shifts"], volume_shape=(7, 11, 5))
    (grad,) = torch.autograd.grad(back, stack, x["volume"])
    assert torch.equal(grad, fieldfuse.project(x["volume"], x["rotations"], x["shifts"],
                                               detector_shape=(9, 13)))


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device, rng):
    x = _problem(rng, device, F64, n=2, volume=(3, 4, 3), detector=(4, 3))
    rotations, shifts = x["rotations"], x["shifts"]
    volume = x["volume"].clone().requires_grad_()
    stack = x["stack"].clone().requires_grad_()

    def forward(v):
        return fieldfuse.project(v, rotations, shifts, detector_shape=(4, 3))

    def backward(p):
        return fieldfuse.backproject(p, rotations, shifts, volume_shape=(3, 4, 3))

    for fn, leaf in ((forward, volume), (backward, stack)):
        assert torch.autograd.gradcheck(fn, (leaf,), eps=1e-6, atol=1e-9, rtol=1e-7)
        # Linear maps: the second derivative is zero, but it must flow (double backward).
        assert torch.autograd.gradgradcheck(fn, (leaf,), eps=1e-6, atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("path", ["eager", "library"])
@pytest.mark.parametrize("device", DEVICES)
def test_pose_gradients_are_refused_by_name(device, path, rng):
    x = _problem(rng, device, F64)
    library = _registry.library_path if path == "library" else None
    for arg in ("rotations", "shifts"):
        for op, first, kwargs in (
            ("project", "volume", {"detector_shape": (9, 13)}),
            ("backproject", "stack", {"volume_shape": (7, 11, 5)}),
        ):
            inputs = {"first": x[first].clone().requires_grad_(), "rotations": x["rotations"],
                      "shifts": x["shifts"]}
            inputs[arg] = inputs[arg].clone().requires_grad_()
            fn = getattr(fieldfuse, op)
            with library() if library else _no_context():
                out = fn(inputs["first"], inputs["rotations"], inputs["shifts"], **kwargs)
            with pytest.raises(NotImplementedError, match=rf"^{op}\(\): .*\b{arg}\b"):
                out.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_a_pose_that_requires_grad_is_fine_where_the_pass_does_not_use_its_gradient(device, rng):
    # Note [gradients the pass uses]: the eager path refuses a pose gradient only where the
    # running backward pass would use it, as PyTorch's ops raise "not implemented" derivatives.
    x = _problem(rng, device, F64)
    volume = x["volume"].clone().requires_grad_()
    rotations = x["rotations"].clone().requires_grad_()
    out = fieldfuse.project(volume, rotations, x["shifts"], detector_shape=(9, 13))
    (grad,) = torch.autograd.grad(out.sum(), volume)
    expected = fieldfuse.backproject(torch.ones_like(out), x["rotations"], x["shifts"],
                                     volume_shape=volume.shape)
    torch.testing.assert_close(grad, expected, rtol=0, atol=0)


class _no_context:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("device", DEVICES)
def test_eager_calls_equal_the_registered_ops(device, rng):
    x = _problem(rng, device, F64)
    results = []
    for library in (False, True):
        volume = x["volume"].clone().requires_grad_()
        ctx = _registry.library_path() if library else _no_context()
        with ctx:
            out = fieldfuse.project(volume, x["rotations"], x["shifts"], detector_shape=(9, 13))
            back = fieldfuse.backproject(out, x["rotations"], x["shifts"], volume_shape=(7, 11, 5))
            (grad,) = torch.autograd.grad((back * x["volume"]).sum(), volume)
        results.append((out.detach(), back.detach(), grad))
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, rng):
    x = _problem(rng, device, F64, n=2, volume=(3, 4, 3), detector=(4, 5))
    ops = torch.ops.fieldfuse
    leaf = x["volume"].clone().requires_grad_()
    torch.library.opcheck(ops.project_forward, (leaf, x["rotations"], x["shifts"], [4, 5]))
    torch.library.opcheck(ops.project_forward, (x["volume"], x["rotations"], None, [2, 3]))
    stack = x["stack"].clone().requires_grad_()
    torch.library.opcheck(ops.backproject_forward, (stack, x["rotations"], x["shifts"], [3, 4, 3]))


def _sirt_like_loss(volume, rotations, shifts, stack):
    """A loss with both projectors: data misfit plus a back-projected residual term."""
    residual = fieldfuse.project(volume, rotations, shifts, detector_shape=(9, 13)) - stack
    update = fieldfuse.backproject(residual, rotations, shifts, volume_shape=(7, 11, 5))
    return residual.square().sum() + (update * volume).sum()


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device, rng):
    # CPU: Dynamo and AOTAutograd with the fake impls, eager kernels ("aot_eager"), to keep the
    # 2-core CI fast; CUDA: the default Inductor backend.
    backend = "aot_eager" if device == "cpu" else "inductor"
    torch._dynamo.reset()
    x = _problem(rng, device, F32)
    compiled = torch.compile(_sirt_like_loss, fullgraph=True, backend=backend)
    results = []
    for fn in (_sirt_like_loss, compiled):
        volume = x["volume"].clone().requires_grad_()
        loss = fn(volume, x["rotations"], x["shifts"], x["stack"])
        (grad,) = torch.autograd.grad(loss, volume)
        results.append((loss.detach(), grad))
    (eager_loss, eager_grad), (compiled_loss, compiled_grad) = results
    assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-5)
    assert_close(compiled_grad, eager_grad, rtol=1e-5, atol=1e-5 * eager_grad.abs().max().item())


def test_fake_tensors_take_the_registered_ops(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = _problem(rng, "cpu", F64)
    with FakeTensorMode() as mode:
        fake = {k: mode.from_tensor(v) for k, v in x.items()}
        out = fieldfuse.project(fake["volume"].requires_grad_(), fake["rotations"],
                                fake["shifts"], detector_shape=(9, 13))
        back = fieldfuse.backproject(out, fake["rotations"], volume_shape=(2, 3, 4))
        assert out.shape == (3, 9, 13) and back.shape == (2, 3, 4)


# --- CUDA ------------------------------------------------------------------------------------------


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cpu_cuda_parity(dtype, rng):
    x = _problem(rng, "cuda", dtype, n=6, volume=(33, 40, 29), detector=(37, 45))
    cpu = {k: v.cpu() for k, v in x.items()}
    out = fieldfuse.project(x["volume"], x["rotations"], x["shifts"], detector_shape=(37, 45))
    want = fieldfuse.project(cpu["volume"], cpu["rotations"], cpu["shifts"],
                             detector_shape=(37, 45))
    # The device evaluates the index maps with FMAs, the host with a product and a sum: weights
    # agree to a few ulps of the index, which the oracle tolerance covers.
    assert_close(out.cpu(), want, **_tolerance(dtype, want.abs().max().item()))
    back = fieldfuse.backproject(x["stack"], x["rotations"], x["shifts"],
                                 volume_shape=(33, 40, 29))
    back_cpu = fieldfuse.backproject(cpu["stack"], cpu["rotations"], cpu["shifts"],
                                     volume_shape=(33, 40, 29))
    assert_close(back.cpu(), back_cpu, **_tolerance(dtype, back_cpu.abs().max().item()))


@cuda_only
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_long_tilt_series_matches_cpu(dtype, rng):
    """130 poses (more than one chunk of geometry, 128), tilts about x with general rotations
    among them, on a volume that fills no tile evenly: the CUDA back projection's tile and chunk
    edges against the CPU."""
    n, volume_shape, detector = 130, (19, 21, 45), (21, 45)
    rotations = _tilt_series(n, rng, dtype, "cpu")
    shifts = _uniform((n, 2), -0.2, 0.2, rng, dtype)
    volume = _uniform(volume_shape, -1.0, 1.0, rng, dtype)
    stack = _uniform((n, *detector), -1.0, 1.0, rng, dtype)
    want = fieldfuse.project(volume, rotations, shifts, detector_shape=detector)
    out = fieldfuse.project(volume.cuda(), rotations.cuda(), shifts.cuda(), detector_shape=detector)
    assert_close(out.cpu(), want, **_tolerance(dtype, want.abs().max().item()))
    want = fieldfuse.backproject(stack, rotations, shifts, volume_shape=volume_shape)
    back = fieldfuse.backproject(stack.cuda(), rotations.cuda(), shifts.cuda(),
                                 volume_shape=volume_shape)
    assert_close(back.cpu(), want, **_tolerance(dtype, want.abs().max().item()))


@cuda_only
def test_cuda_graph_capture(rng):
    x = _problem(rng, "cuda", F32)

    def step():
        out = fieldfuse.project(x["volume"], x["rotations"], x["shifts"], detector_shape=(9, 13))
        return out, fieldfuse.backproject(out, x["rotations"], x["shifts"],
                                          volume_shape=(7, 11, 5))

    graph, (static_out, static_back) = capture_cuda_graph(step)
    x["volume"].mul_(2.0)
    graph.replay()
    torch.cuda.synchronize()
    out, back = step()
    assert torch.equal(static_out, out) and torch.equal(static_back, back)


@cuda_only
def test_large_problem_matches_cpu(rng):
    """A 96³ volume and 16 tilts about x (the benchmark's geometry, smaller): the int32 index path
    and many blocks per projection."""
    angles = torch.linspace(-1.5, 1.5, 16, dtype=F64)
    rotations = fieldfuse.tilt_rotations(angles, "x").float()
    volume = _uniform((96, 96, 96), 0.0, 1.0, rng, F32)
    out = fieldfuse.project(volume.cuda(), rotations.cuda())
    want = fieldfuse.project(volume, rotations)
    assert_close(out.cpu(), want, rtol=1e-5, atol=2e-5 * want.abs().max().item())
    back = fieldfuse.backproject(want.cuda(), rotations.cuda(), volume_shape=(96, 96, 96))
    back_cpu = fieldfuse.backproject(want, rotations, volume_shape=(96, 96, 96))
    assert_close(back.cpu(), back_cpu, rtol=1e-5, atol=2e-5 * back_cpu.abs().max().item())
