# SPDX-License-Identifier: Apache-2.0
"""Tomographic reconstruction: :func:`sirt` and :func:`fbp` on a voxel grid, the K-Planes neural
field (:class:`KPlanesReconstruction`), :func:`reconstruct` running any of them on a tilt series,
and the tilt poses :func:`tilt_rotations` (the C++ implementations of ``include/fieldfuse/tomo.h``
and ``tomo_kplanes.h``, shared with the ``fieldfuse tomo`` CLI; docs/tomo.md and
docs/tomo_kplanes.md have the formulas).

These are solvers, not differentiable ops: they run under ``torch.no_grad()``, return new tensors
that do not require grad, and never record autograd history. Geometry is the projectors'
(:func:`fieldfuse.project`, :func:`fieldfuse.backproject`): ``volume [D, H, W]`` fills the box
[-1, 1]³, ``projections [n, Hd, Wd]`` the detector [-1, 1]², pose m is ``rotations[m]`` (applied as
R·p) with optional ``shifts[m]`` = (s_u, s_v).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ._backend import _C, check_tensor, dl, float_list, real_number, stream_of, workspace

__all__ = ["KPlanesReconstruction", "fbp", "phantom", "profile_error", "psnr", "reconstruct",
           "sirt", "ssim", "tilt_rotations"]


def _shape3(op: str, volume_shape) -> tuple[int, int, int]:
    """volume_shape as three ints: the output is allocated from it before the C++ front runs."""
    if isinstance(volume_shape, (str, bytes)) or not isinstance(volume_shape, Sequence):
        raise TypeError(f"{op}(): expected volume_shape to be a sequence of 3 ints (D, H, W), but "
                        f"got {type(volume_shape).__name__}")
    if len(volume_shape) != 3 or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                         for s in volume_shape):
        raise ValueError(f"{op}(): expected volume_shape to be 3 ints (D, H, W), but got "
                         f"{tuple(volume_shape)!r}")
    if any(int(s) < 0 for s in volume_shape):
        raise ValueError(f"{op}(): expected volume_shape to have sizes >= 0, but got "
                         f"{tuple(int(s) for s in volume_shape)!r}")
    return tuple(int(s) for s in volume_shape)


def _inputs(op: str, projections, rotations, shifts) -> None:
    check_tensor(op, "projections", projections)
    check_tensor(op, "rotations", rotations)
    if shifts is not None:
        check_tensor(op, "shifts", shifts)


def _float_values(op: str, arg: str, values) -> list[float]:
    """A sequence, 1-D tensor or NumPy array of real numbers as Python floats (angles, z1, z3)."""
    if isinstance(values, Tensor):
        values = values.detach().reshape(-1).tolist()
    elif hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        values = values.tolist()  # NumPy arrays
    return float_list(op, arg, values)


def _optional(shifts: Tensor | None):
    return None if shifts is None else dl(shifts.detach())


@torch.no_grad()
def sirt(projections: Tensor, rotations: Tensor, shifts: Tensor | None = None, *,
         volume_shape: Sequence[int], iterations: int = 50, relaxation: float = 1.0,
         positivity: bool = False, initial: Tensor | None = None) -> Tensor:
    """SIRT reconstruction ``x ← x + λ·C·Aᵀ·R·(b − A·x)`` with the projector A.

    R = diag(1 / A·1) and C = diag(1 / Aᵀ·1), each 0 where the sum is 0 (pixels whose ray misses the
    volume, voxels no ray reaches: those keep their value).

    Args:
        projections: b ``[n, Hd, Wd]``, float32 or float64, CPU or CUDA (any strides).
        rotations: ``[n, 3, 3]``, same dtype and device. shifts: ``[n, 2]`` or None.
        volume_shape: ``(D, H, W)`` of the result.
        iterations: >= 0 (0 returns the initial estimate). relaxation: λ in (0, 2).
        positivity: clamp the estimate at 0 after every update.
        initial: ``[D, H, W]`` starting estimate (copied, not modified); None: zeros.

    Returns:
        A new ``[D, H, W]`` tensor of projections' dtype and device (no autograd). Deterministic;
        NaN in projections spreads to the voxels its rays reach.
    """
    op = "sirt"
    _inputs(op, projections, rotations, shifts)
    shape = _shape3(op, volume_shape)
    if not isinstance(iterations, numbers.Integral) or isinstance(iterations, bool):
        raise TypeError(f"{op}(): expected iterations to be an int, but got "
                        f"{type(iterations).__name__}")
    if not isinstance(positivity, bool):
        raise TypeError(f"{op}(): expected positivity to be a bool, but got "
                        f"{type(positivity).__name__}")
    relaxation = real_number(op, "relaxation", relaxation)
    if initial is None:
        volume = projections.new_zeros(shape)
    else:
        check_tensor(op, "initial", initial)
        # The solver updates its volume in place: a private contiguous copy keeps `initial` intact
        # (its dtype and device are checked by the C++ front, as the volume's).
        if tuple(initial.shape) != shape:
            raise ValueError(f"{op}(): expected initial to have shape volume_shape {list(shape)}, "
                             f"but got shape {list(initial.shape)}")
        volume = initial.detach().clone(memory_format=torch.contiguous_format)
    b = projections.detach()
    scratch = workspace(_C.sirt_workspace_size(dl(b), dl(volume)), b.device)
    _C.sirt(dl(b), dl(rotations.detach()), _optional(shifts), int(iterations), relaxation,
            positivity, dl(volume), dl(scratch), stream_of(b))
    return volume


@torch.no_grad()
def fbp(projections: Tensor, rotations: Tensor, shifts: Tensor | None = None, *,
        volume_shape: Sequence[int], filter: str = "ramp") -> Tensor:
    """Filtered back-projection: each detector column (along v, the height) is filtered, then back
    projected with :func:`fieldfuse.backproject`, weighted by its projection's angular interval, so
    FBP of complete noiseless data reproduces the density.

    Args:
        projections: ``[n, Hd, Wd]`` float32, CPU or CUDA (any strides).
        rotations: ``[n, 3, 3]`` float32. shifts: ``[n, 2]`` or None.
        volume_shape: ``(D, H, W)`` of the result.
        filter: ``"ramp"`` (Ram-Lak), ``"shepp-logan"`` or ``"hann"``.

    Returns:
        A new ``[D, H, W]`` float32 tensor (no autograd). Deterministic. A NaN pixel makes its
        filtered column NaN, which spreads to every voxel that column's rays reach.
    """
    op = "fbp"
    _inputs(op, projections, rotations, shifts)
    shape = _shape3(op, volume_shape)
    if not isinstance(filter, str):
        raise TypeError(f"{op}(): expected filter to be a str, but got {type(filter).__name__}")
    b = projections.detach()
    volume = b.new_empty(shape)  # every element is written
    scratch = workspace(_C.fbp_workspace_size(dl(b), dl(volume)), b.device)
    _C.fbp(dl(b), dl(rotations.detach()), _optional(shifts), filter, dl(volume), dl(scratch),
           stream_of(b))
    return volume


def tilt_rotations(angles_degrees, z1=None, z3=None) -> Tensor:
    """Poses ``R = Rz(−z1)·Rx(tilt)·Rz(−z3)`` of a tilt series, ``[n, 3, 3]`` float64 on the CPU.

    Angles in degrees (specs/tomography.md). ``angles_degrees``: n tilts (a sequence or a 1-D
    tensor); ``z1``, ``z3``: in-plane angles, a number for all projections, n numbers, or None (0).
    With z1 = z3 = 0 the tilt axis is x, the detector's u axis.
    """
    op = "tilt_rotations"
    tilts = _float_values(op, "angles_degrees", angles_degrees)

    def per_projection(arg: str, value) -> list[float]:
        if value is None:
            return [0.0] * len(tilts)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return [float(value)] * len(tilts)
        values = _float_values(op, arg, value)
        if len(values) != len(tilts):
            raise ValueError(f"{op}(): expected {arg} to have {len(tilts)} values (one per tilt), "
                             f"but got {len(values)}")
        return values

    z1s, z3s = per_projection("z1", z1), per_projection("z3", z3)
    rows = [_C.tilt_rotation(t, a, c) for t, a, c in zip(tilts, z1s, z3s)]
    return torch.tensor(rows, dtype=torch.float64).reshape(len(tilts), 3, 3)


_METHODS = ("sirt", "fbp", "kplanes")


def _as_tensor(op: str, arg: str, value) -> tuple[Tensor, bool]:
    """A torch tensor, and whether the caller gave a NumPy array (then results go back as one)."""
    if isinstance(value, Tensor):
        return value, False
    if type(value).__module__ == "numpy" and hasattr(value, "__array__"):
        return torch.from_numpy(value), True
    raise TypeError(f"{op}(): expected {arg} to be a torch.Tensor or a NumPy array, but got "
                    f"{type(value).__name__}")


class KPlanesReconstruction:
    """The C++ K-Planes tomography reconstruction (docs/tomo_kplanes.md), driven step by step.

    Args:
        stack: ``[n, H, W]`` tilt series, float32 or float64, CPU or CUDA (copied and normalised
            by its 95th percentile).
        angles: n tilt angles in degrees (a sequence, tensor or NumPy array).
        device: where to train (default: the stack's device); CUDA work runs on that device's
            current stream at construction.
        **options: ``KPlanesReconOptions`` fields by name (``num_tilts``, ``channels``,
            ``resolutions``, ``decoder``, ``hidden``, ``layers``, ``rays``, ``ds``, ``tv_volume``,
            ``tv_points``, ``tv_plane``, ``sparsity``, ``lr_planes``, ``lr_decoder``,
            ``lr_rotations``, ``lr_pose``, ``cosine_decay``, ``max_grad_norm``,
            ``pose_refinement``, ``iterations``, ``epochs``, ``seed``, ``deterministic``,
            ``cuda_graph``, ``dtype``), each defaulting as the header says.
    """

    def __init__(self, stack: Tensor, angles, *, device: torch.device | str | None = None,
                 **options: Any) -> None:
        op = "kplanes_reconstruct"
        check_tensor(op, "stack", stack)
        where = torch.device(device) if device is not None else stack.device
        if where.type == "cuda" and where.index is None:
            where = torch.device("cuda", torch.cuda.current_device())
        stream = torch.cuda.current_stream(where).cuda_stream if where.type == "cuda" else 0
        self.device = where
        self._stack_shape = tuple(stack.shape)
        self._impl = _C.KPlanesReconstruction(dl(stack.detach()), _float_values(op, "angles", angles),
                                              options, str(where), stream)

    def step(self) -> None:
        """One training iteration (Adam update included), enqueued on the stream."""
        self._impl.step()

    def loss(self) -> float:
        """The last step's loss (synchronises the stream)."""
        return self._impl.loss()

    def steps_done(self) -> int:
        return self._impl.steps_done()

    @property
    def iterations(self) -> int:
        """Steps of the whole run (the cosine period)."""
        return self._impl.iterations()

    @property
    def normalisation(self) -> float:
        """The stack's 95th percentile, which the stack was divided by."""
        return self._impl.normalisation()

    @torch.no_grad()
    def volume(self, volume_shape: Sequence[int] | None = None,
               chunk_points: int = 1 << 18) -> Tensor:
        """The field's density on the voxel centres of a ``[D, H, W]`` grid (default ``(H, H,
        W)`` of the stack), in the stack's units, on the training device."""
        shape = _shape3("kplanes_reconstruct", volume_shape or
                        (self._stack_shape[1], self._stack_shape[1], self._stack_shape[2]))
        volume = torch.empty(shape, dtype=torch.float32, device=self.device)
        self._impl.export_volume(dl(volume), chunk_points)
        return volume * self.normalisation

    def save_checkpoint(self, path: str) -> None:
        self._impl.save_checkpoint(str(path))

    def load_checkpoint(self, path: str) -> None:
        self._impl.load_checkpoint(str(path))


@torch.no_grad()
def reconstruct(stack, angles, method: str = "sirt", *, volume_shape: Sequence[int] | None = None,
                device: torch.device | str | None = None,
                progress: Callable[[int, float], None] | None = None,
                **settings: Any) -> tuple[Any, dict[str, Any]]:
    """Reconstructs a volume from a parallel-beam tilt series: what ``fieldfuse tomo`` does, in
    Python.

    Geometry and units are the projectors' (:func:`fieldfuse.project`): pose m is
    ``tilt_rotations(angles)[m]``, a tilt about the detector's u axis (the image width); the volume
    ``[D, H, W]`` fills the box [-1, 1]³ and its values are densities in box units, so
    ``fieldfuse.project(volume, tilt_rotations(angles))`` reproduces the stack.

    Args:
        stack: ``[n, H, W]`` projections: a torch tensor (CPU or CUDA) or a NumPy array.
        angles: n tilt angles in degrees.
        method: ``"sirt"``, ``"fbp"`` or ``"kplanes"``.
        volume_shape: ``(D, H, W)`` of the result; default ``(H, H, W)``.
        device: where to compute (default: the stack's; NumPy stacks: the CPU).
        progress: ``kplanes`` only: called as ``progress(step, loss)`` after each step (each call
            synchronises).
        **settings: ``sirt``: ``iterations`` (50), ``relaxation`` (1.0), ``positivity`` (False);
            ``fbp``: ``filter`` ("ramp"); ``kplanes``: the options of
            :class:`KPlanesReconstruction`.

    Returns:
        ``(volume, report)``: the volume (a float32 tensor on the stack's device, or a NumPy array
        for a NumPy stack) and a dict with the method, its settings, the time and, for
        ``kplanes``, the losses, the final poses and the normalisation.
    """
    op = "reconstruct"
    stack, numpy_in = _as_tensor(op, "stack", stack)
    if method not in _METHODS:
        raise ValueError(f"{op}(): expected method to be one of {', '.join(_METHODS)}, but got "
                         f"{method!r}")
    if stack.dim() != 3:
        raise ValueError(f"{op}(): expected stack to have shape [n, H, W], but got shape "
                         f"{list(stack.shape)}")
    tilts = _float_values(op, "angles", angles)
    if len(tilts) != stack.shape[0]:
        raise ValueError(f"{op}(): expected one angle per projection ({stack.shape[0]}), but got "
                         f"{len(tilts)}")
    shape = _shape3(op, volume_shape or (stack.shape[1], stack.shape[1], stack.shape[2]))
    where = torch.device(device) if device is not None else stack.device
    report: dict[str, Any] = {"method": method, "volume_shape": list(shape),
                              "settings": dict(settings)}
    start = time.perf_counter()
    if method == "kplanes":
        recon = KPlanesReconstruction(stack, tilts, device=where, **settings)
        losses = []
        for step in range(recon.iterations):  # a fresh reconstruction: from step 0
            recon.step()
            if progress is not None:
                losses.append(recon.loss())
                progress(step + 1, losses[-1])
        final_loss = recon.loss()
        volume = recon.volume(shape)
        report.update(losses=losses, final_loss=final_loss, steps=recon.steps_done(),
                      normalisation=recon.normalisation)
    else:
        data = stack.to(device=where, dtype=torch.float32)
        rotations = tilt_rotations(tilts).to(device=where, dtype=torch.float32)
        solver = sirt if method == "sirt" else fbp
        volume = solver(data, rotations, volume_shape=shape, **settings)
    if volume.is_cuda:
        torch.cuda.synchronize(volume.device)
    report["seconds"] = time.perf_counter() - start
    volume = volume.to(stack.device)
    return (volume.numpy() if numpy_in else volume), report


# --- the embedded phantom and the quality metrics (the CLI's, from the C++ library) --------------


def phantom(size: int = 64, angles=None, *, noise: float = 0.02, seed: int = 0,
            supersample: int = 3, detector_supersample: int = 2) -> dict[str, Any]:
    """The embedded tomography phantom of ``fieldfuse tomo`` (docs/tomo_cli.md): ellipsoids and
    small dense particles in the box [-1, 1]³.

    Args:
        size: edge of the cubic volume and of the square detector.
        angles: tilt angles in degrees (default: −60° to 60° every 3°, 41 tilts: the missing
            wedge included), about the x axis (:func:`tilt_rotations`).
        noise: Gaussian noise, as a fraction of the largest projection value (seeded).
        seed: the noise's seed.
        supersample: points per voxel edge of the truth's voxelisation.
        detector_supersample: rays per pixel edge of the analytic projections.

    Returns:
        ``{"truth": [size]*3 float32, "stack": [n, size, size] float32, "clean": the stack without
        noise, "angles": float64 [n]}`` on the CPU, in the projectors' box units: the stack holds
        the exact line integrals (chord lengths of each ellipsoid, not our projector, so tests are
        no inverse crime), ``fieldfuse.project(truth, tilt_rotations(angles))`` approximates it.
    """
    op = "phantom"
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ValueError(f"{op}(): expected size to be an int >= 1, but got {size!r}")
    if angles is None:
        angles = [-60.0 + 3.0 * k for k in range(41)]
    tilts = _float_values(op, "angles", angles)
    truth = torch.empty((size, size, size), dtype=torch.float32)
    _C.tomo_phantom_volume(dl(truth), int(supersample))
    clean = torch.empty((len(tilts), size, size), dtype=torch.float32)
    _C.tomo_phantom_projections(dl(tilt_rotations(tilts)), dl(clean), int(detector_supersample))
    generator = torch.Generator().manual_seed(seed)
    sigma = float(noise) * float(clean.abs().max()) if clean.numel() else 0.0
    stack = clean + sigma * torch.randn(clean.shape, generator=generator)
    return {"truth": truth, "stack": stack, "clean": clean,
            "angles": torch.tensor(tilts, dtype=torch.float64)}


def _host_pair(op: str, estimate, reference) -> tuple[Tensor, Tensor]:
    estimate, _ = _as_tensor(op, "estimate", estimate)
    reference, _ = _as_tensor(op, "reference", reference)
    return (estimate.detach().to("cpu", torch.float32).contiguous(),
            reference.detach().to("cpu", torch.float32).contiguous())


def _data_range(reference: Tensor, data_range: float | None) -> float:
    """The given range, or the reference's max − min (0 for an empty one: the C++ check says so)."""
    if data_range is not None:
        return float(data_range)
    return float(reference.max() - reference.min()) if reference.numel() else 0.0


def psnr(estimate, reference, data_range: float | None = None) -> float:
    """PSNR in dB of a volume against a reference, ``10·log10(range² / mse)``; the range defaults
    to the reference's max − min (the CLI's metric)."""
    e, r = _host_pair("psnr", estimate, reference)
    return _C.psnr(dl(e), dl(r), _data_range(r, data_range))


def ssim(estimate, reference, data_range: float | None = None) -> float:
    """Mean 3-D SSIM (Gaussian window σ = 1.5, the CLI's metric) of a volume against a
    reference; the range defaults to the reference's max − min."""
    e, r = _host_pair("ssim", estimate, reference)
    return _C.ssim_3d(dl(e), dl(r), _data_range(r, data_range))


def profile_error(estimate, reference, axis: int) -> float:
    """‖p(estimate) − p(reference)‖ / ‖p(reference)‖ of the mean profiles along ``axis`` (0 = z,
    the beam at zero tilt and the missing-wedge direction; 1 = y; 2 = x)."""
    e, r = _host_pair("profile_error", estimate, reference)
    return _C.profile_error(dl(e), dl(r), int(axis))
