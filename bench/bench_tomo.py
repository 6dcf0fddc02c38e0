# SPDX-License-Identifier: Apache-2.0
"""Times the K-Planes tomography training step (issue 14) at the spec's reference configuration.

Reference configuration (specs/tomography.md): a 300³ volume, 41 tilts over ±70°, T = 4 field
rotations, C = 8 channels, planes at the volume resolution, 2048 rays per step with ds = 2/300
(≈ 300 samples a ray), volume TV from the 4 taps at ≤ 10 000 of the step's samples, plane TV,
pose refinement, Adam with clipping and cosine decay, fp32. Three implementations of one step:

- **C++**: `fieldfuse.tomo.KPlanesReconstruction.step()` — the reconstruction `fieldfuse tomo
  --method kplanes` runs, all on the C++ API (CUDA-graphed after a warm-up step, and eager);
- **torch + fieldfuse**: the plain-PyTorch twin of examples/tomo_kplanes_torch.py (torch autograd
  over fieldfuse's ops: `ray_box_samples_padded`, `nn.KPlanesTilted.forward_with_tv_taps`,
  `plane_tv`; `torch.optim.Adam(fused=True)`);
- **plain PyTorch**: the same model and loss with no fieldfuse op — a vectorised slab ray–box
  sampler, K-Planes by `grid_sample` (fieldfuse.reference.kplanes_tilted and its taps), the
  reference plane TV — what users write today (quantem's pipeline is of this kind).

Each step's time is the median over many steps (CUDA events, after warm-up); peak memory is
`max_memory_allocated` over a step above what was resident before it. The whole reference run
(300 epochs, an epoch being every detector pixel once) is extrapolated from the step time.
quantem 0.1.10 (PyPI, pure PyTorch) at this configuration on an H100: 28.8 ms per step (fp32),
1.6 GB peak (issue 14). Targets: ≥ 6× the plain-PyTorch step and ≤ 1.5 ms per step.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

import _timing as tm
import fieldfuse
from fieldfuse.reference import kplanes as ref
from fieldfuse import tomo

ROOT = Path(__file__).resolve().parents[1]
QUANTEM_MS, QUANTEM_MIB = 28.8, 1.6e9 / 2**20
EPOCHS = 300


def _twin_module():
    """examples/tomo_kplanes_torch.py as a module (its model is the torch + fieldfuse step)."""
    spec = importlib.util.spec_from_file_location("tomo_kplanes_torch",
                                                  ROOT / "examples" / "tomo_kplanes_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


twin = _twin_module()


def reference_args(quick: bool) -> argparse.Namespace:
    """The twin's settings at the reference configuration (--quick: a small smoke size)."""
    args = twin.parse_args([])
    args.size = 48 if quick else 300
    args.tilt_range, args.tilt_count = 70.0, 41
    args.rays = 256 if quick else 2048
    args.tv_points = 1000 if quick else 10000
    return args


def make_data(args: argparse.Namespace, device: torch.device):
    """A synthetic stack of the reference shape: the timing does not depend on its values, only
    on its shape (every ray crosses the box)."""
    angles = torch.linspace(-args.tilt_range, args.tilt_range, args.tilt_count,
                            dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    stack = torch.rand(args.tilt_count, args.size, args.size, generator=g).to(device)
    return stack, angles


class PlainField(torch.nn.Module):
    """KPlanesTilted's field with no fieldfuse op: planes sampled by grid_sample (the reference
    implementation), quaternion rotations, a Linear decoder, softplus(x − 1)."""

    def __init__(self, field: fieldfuse.nn.KPlanesTilted) -> None:
        super().__init__()
        self.planes = torch.nn.ParameterList(
            torch.nn.Parameter(p.detach().clone().contiguous()) for p in field.planes)
        self.rotation_params = torch.nn.Parameter(field.rotation_params.detach().clone())
        self.decoder = torch.nn.Linear(field.decoder.in_features, 1, device=field.planes[0].device)
        self.num_tilts = field.num_tilts
        self.tap_step = field.tap_step

    def rotations(self) -> torch.Tensor:
        return fieldfuse.nn.quaternion_to_rotation(self.rotation_params)

    def decode(self, features: torch.Tensor) -> torch.Tensor:
        return F.softplus(self.decoder(features) - 1)

    def tv_tap_coords(self, pts, n_max, generator=None):
        index = torch.randperm(len(pts), device=pts.device, generator=generator)[:n_max]
        return pts.detach()[index]

    def forward_with_tv_taps(self, pts, taps):
        rotations, planes = self.rotations(), list(self.planes)
        density = self.decode(ref.kplanes_tilted(pts, rotations, planes))
        tap_density = self.decode(ref.kplanes_tilted_taps(taps, rotations, planes, self.tap_step))
        return density, tap_density

    def volume_tv(self, tap_density, weight):
        return ref.volume_tv_from_taps(tap_density, self.tap_step, weight)

    def plane_tv(self):
        return ref.plane_tv(list(self.planes), self.num_tilts)


def plain_ray_box_samples_padded(origins, directions, ds):
    """Vectorised slab sampling, the same contract as fieldfuse.ray_box_samples_padded."""
    capacity = math.ceil(2 * math.sqrt(3) / ds) + 1
    safe = torch.where(directions.abs() > 1e-8, directions, torch.full_like(directions, 1e-8))
    t0, t1 = (-1 - origins) / safe, (1 - origins) / safe
    t_in = torch.minimum(t0, t1).amax(dim=1)
    t_out = torch.maximum(t0, t1).amin(dim=1)
    length = (t_out - t_in).clamp_min(0) * directions.norm(dim=1)
    count = torch.where(t_out > t_in, torch.ceil(length / ds) + 1, torch.zeros_like(length))
    delta = (t_out - t_in) / (count - 1).clamp_min(1)
    k = torch.arange(capacity, device=origins.device, dtype=origins.dtype)
    valid = k[None, :] < count[:, None]
    t = t_in[:, None] + k[None, :] * delta[:, None]
    points = origins[:, None, :] + t[:, :, None] * directions[:, None, :]
    return (points * valid[:, :, None], delta[:, None] * valid, valid)


def time_steps(step: Callable[[], Any], device: torch.device, budget: tm.Budget) -> dict:
    """Median ms per step (CUDA events around each step, after warm-up), peak MiB of one step."""
    for _ in range(budget.warmup_reps):
        step()
    tm.sync(device)
    peak = None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        tm.sync(device)
        peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20
    stats = tm.time_fn(lambda _: step(), [torch.empty(0, device=device)], budget)
    return {"median_ms": stats.median_ms, "p10_ms": stats.p10_ms, "p90_ms": stats.p90_ms,
            "host_ms": stats.host_ms, "reps": stats.reps, "peak_mib": peak}


def _device_used(device: torch.device) -> float | None:
    """MiB in use on the device (all allocators), after a sync; None on the CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return (total - free) / 2**20


def run(args_cli: argparse.Namespace) -> dict[str, Any]:
    device = torch.device("cpu" if args_cli.cpu else "cuda")
    budget = tm.budget_for(args_cli.quick, args_cli.cpu)
    args = reference_args(args_cli.quick or args_cli.cpu)
    stack, angles = make_data(args, device)
    data, _ = twin.normalised(stack)
    rows = {}

    # The C++ step on a side stream: the legacy default stream cannot be captured in a graph. Its
    # memory is its own (cudaMalloc, not PyTorch's allocator): the device's used memory grows by
    # it, which is what the peak column shows for these rows.
    side = torch.cuda.Stream() if device.type == "cuda" else None
    variants = [("C++", dict(cuda_graph=False))]
    if device.type == "cuda":
        variants = [("C++ (CUDA graph)", dict(cuda_graph=True)),
                    ("C++ (eager)", dict(cuda_graph=False)),
                    ("C++ (CUDA graph, deterministic)", dict(cuda_graph=True,
                                                              deterministic=True))]
    for name, extra in variants:
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            used = _device_used(device)
            recon = tomo.KPlanesReconstruction(stack, angles, rays=args.rays,
                                               tv_points=args.tv_points, iterations=10**6,
                                               **extra)
            recon.step()
            grown = _device_used(device) - used if used is not None else None
            rows[name] = time_steps(recon.step, device, budget)
            rows[name]["peak_mib"] = grown
            rows[name]["first_loss"] = recon.loss()
            del recon
        tm.release(device)

    torch.manual_seed(0)
    model = twin.TiltSeriesModel(tuple(stack.shape), angles, args, device)
    args.iterations = 10**6  # the cosine period: the rate stays near its start
    rows["torch + fieldfuse ops"] = time_steps(twin.make_step(model, data, args, device), device,
                                               budget)
    plain_model = twin.TiltSeriesModel(tuple(stack.shape), angles, args, device)
    plain_model.field = PlainField(plain_model.field)
    plain_model.sampler = plain_ray_box_samples_padded
    try:
        rows["plain PyTorch"] = time_steps(twin.make_step(plain_model, data, args, device),
                                           device, budget)
    except torch.OutOfMemoryError as err:
        rows["plain PyTorch"] = tm.failure(err)
    return {"rows": rows, "config": vars(args), "pixels": stack.numel(), "device": device.type}


def markdown(result: dict[str, Any], env: dict[str, Any], command: str) -> str:
    rows = result["rows"]
    plain = rows.get("plain PyTorch", {}).get("median_ms")
    steps_per_epoch = result["pixels"] / result["config"]["rays"]
    lines = [tm.header_line("fieldfuse tomography training step", env), "",
             f"Command: `{command}`. Reference configuration: {result['config']['size']}³, "
             f"{result['config']['tilt_count']} tilts ±{result['config']['tilt_range']:g}°, T = 4, "
             f"C = 8, {result['config']['rays']} rays, ds = 2/{result['config']['size']}, "
             f"{result['config']['tv_points']} TV points, plane TV, pose refinement, Adam, fp32. "
             f"An epoch is {steps_per_epoch:.0f} steps; quantem 0.1.10 (issue 14, H100): "
             f"{QUANTEM_MS} ms per step, {QUANTEM_MIB:.0f} MiB peak.", ""]
    table = []
    for name, row in rows.items():
        ms = row.get("median_ms")
        table.append([name, tm.fmt(ms, ".3f"), f"{tm.fmt(row.get('p10_ms'), '.3f')}–"
                      f"{tm.fmt(row.get('p90_ms'), '.3f')}", tm.fmt(row.get("host_ms"), ".3f"),
                      tm.fmt(tm.ratio(plain, ms), ".1f", "×"),
                      # quantem's time is an H100's: no ratio for a CPU run.
                      tm.fmt(tm.ratio(QUANTEM_MS, ms) if result["device"] == "cuda" else None,
                             ".1f", "×"),
                      tm.fmt(row.get("peak_mib"), ".0f"),
                      tm.fmt(None if ms is None else ms * steps_per_epoch * EPOCHS / 60000, ".1f")])
    lines.append(tm.markdown_table(
        ["step", "ms/step", "p10–p90", "host ms/step", "× plain PyTorch", "× quantem",
         "peak MiB", f"{EPOCHS} epochs, min"], table))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = tm.bench_parser(__doc__.split("\n\n")[0])
    args = tm.parse_bench_args(parser, argv)
    device = torch.device("cpu" if args.cpu else "cuda")
    env = tm.fieldfuse_environment(device)
    start = time.perf_counter()
    result = run(args)
    command = "python3 bench/bench_tomo.py " + " ".join(sys.argv[1:])
    text = markdown(result, env, command.strip())
    notes = [f"{name}: {row['error']}" for name, row in result["rows"].items() if "error" in row]
    tm.publish(args.out, "tomo_" + device.type,
               {"env": env, **result, "seconds": time.perf_counter() - start}, text, notes)


if __name__ == "__main__":
    main()
