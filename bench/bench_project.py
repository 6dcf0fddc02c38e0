# SPDX-License-Identifier: Apache-2.0
"""Times fieldfuse's parallel-beam projectors against a PyTorch implementation of the same method.

The issue's size: a 256³ float32 volume, 256 projections tilted over ±90° about the x axis
(R = Rx(φ)), a 256² detector. Timed: forward projection, back projection, and FP + BP (the
projector cost of one SIRT iteration; SIRT adds only elementwise work). The baseline samples the
volume with `grid_sample` (trilinear, zero padding, align_corners=False) at the very sample
points of Joseph's method — where each ray meets the voxel-centre planes of its dominant axis, so
the trilinear weights reduce to fieldfuse's bilinear ones — chunked over projections to bound
memory, and sums each ray times Δ; its back projection is PyTorch's own transpose of that
sampling (`grid_sampler_3d_backward`, the gradient to the input). Both run in the same process on
the same inputs. ASTRA Toolbox 2.5 (measured on an H100 at exactly this size, issue 14): FP3D
11.3 ms, BP3D 10.6 ms, SIRT3D 30.3 ms per iteration; targets ≤ 5.5 ms each, ≤ 15 ms per SIRT
iteration.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

import _timing as tm
from _timing import measure, median, ms_cell
import fieldfuse

SEED = 0


@dataclass(frozen=True)
class Config:
    """A cubic volume of `size`³ voxels, `angles` tilts over ±90° about x, a `size`² detector,
    and how many projections the baseline samples at once."""

    size: int
    angles: int
    chunk: int

    @property
    def label(self) -> str:
        return f"{self.size}³, {self.angles} × {self.size}²"

    @property
    def voxel_projections(self) -> int:
        return self.size**3 * self.angles


GPU_CONFIG = Config(256, 256, 8)  # the baseline's grid: 8·256³·12 B = 1.6 GB per chunk
CPU_CONFIG = Config(64, 64, 8)
QUICK_CONFIG = Config(16, 8, 4)

# Issue 14: ASTRA Toolbox 2.5 on an H100 at 256³ × 256 × 256², and the targets.
ASTRA_MS = {"fp": 11.3, "bp": 10.6, "fp+bp": 30.3}
TARGET_MS = {"fp": 5.5, "bp": 5.5, "fp+bp": 15.0}
PASSES = ("fp", "bp", "fp+bp")


# --- the PyTorch baseline -------------------------------------------------------------------------


def _centres(count: int, like: Tensor) -> Tensor:
    return -1 + (2 * torch.arange(count, device=like.device, dtype=like.dtype) + 1) / count


def joseph_grid(rotations: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The sample points of a chunk of projections of a size³ volume onto a size² detector:
    a grid_sample grid [1, n·size, size, size, 3] (world x, y, z; slices of projection m are
    rows m·size … m·size + size − 1) and Δ [n]. The dominant axis is chosen per projection as
    fieldfuse does (largest |d_a|, ties to z, then y)."""
    direction = rotations[:, :, 2]  # d = R·e_z, world (x, y, z)
    magnitude = direction.abs()
    # Volume axes 0 = z, 1 = y, 2 = x are world components 2, 1, 0.
    axis = torch.where(magnitude[:, 1] > magnitude[:, 2], 1, 0)
    best = magnitude.gather(1, (2 - axis)[:, None])[:, 0]
    axis = torch.where(magnitude[:, 0] > best, 2, axis)
    component = 2 - axis  # [n]
    u = _centres(size, rotations)
    origins = (u[None, None, :, None] * rotations[:, None, None, :, 0]
               + u[None, :, None, None] * rotations[:, None, None, :, 1])  # [n, Hd, Wd, 3]
    d_a = direction.gather(1, component[:, None])[:, 0]  # [n]
    o_a = origins.gather(3, component[:, None, None, None].expand(-1, size, size, 1))[..., 0]
    planes = _centres(size, rotations)  # the centre planes of every axis (a cube)
    t = (planes[None, :, None, None] - o_a[:, None]) / d_a[:, None, None, None]
    points = origins[:, None] + t[..., None] * direction[:, None, None, None, :]
    grid = points.reshape(1, -1, size, size, 3)
    return grid, (2 / size) / d_a.abs()


def torch_project(volume: Tensor, rotations: Tensor, chunk: int) -> Tensor:
    size = volume.shape[0]
    out = []
    for first in range(0, rotations.shape[0], chunk):
        grid, delta = joseph_grid(rotations[first:first + chunk], size)
        samples = torch.nn.functional.grid_sample(volume[None, None], grid, mode="bilinear",
                                                  padding_mode="zeros", align_corners=False)
        rays = samples.reshape(-1, size, size, size).sum(1)  # [n, Hd, Wd]
        out.append(rays * delta[:, None, None])
    return torch.cat(out)


def torch_backproject(stack: Tensor, rotations: Tensor, chunk: int) -> Tensor:
    size = stack.shape[1]
    volume = stack.new_zeros(1, 1, size, size, size)
    total = torch.zeros_like(volume)
    for first in range(0, rotations.shape[0], chunk):
        grid, delta = joseph_grid(rotations[first:first + chunk], size)
        weighted = stack[first:first + chunk] * delta[:, None, None]
        grad = weighted[:, None].expand(-1, size, -1, -1).reshape(1, 1, -1, size, size)
        grad_input, _ = torch.ops.aten.grid_sampler_3d_backward(
            grad.contiguous(), volume, grid, 0, 0, False, [True, False])
        total += grad_input
    return total[0, 0]


# --- timing ----------------------------------------------------------------------------------------


def steps(cfg: Config, rotations: Tensor) -> dict[str, dict[str, Any]]:
    """(implementation → pass → step(x)), x = (volume, stack)."""
    shape = (cfg.size,) * 3

    def ff_fp(x):
        return fieldfuse.project(x[0], rotations)

    def ff_bp(x):
        return fieldfuse.backproject(x[1], rotations, volume_shape=shape)

    def ff_both(x):
        return fieldfuse.backproject(fieldfuse.project(x[0], rotations), rotations,
                                     volume_shape=shape)

    def pt_fp(x):
        return torch_project(x[0], rotations, cfg.chunk)

    def pt_bp(x):
        return torch_backproject(x[1], rotations, cfg.chunk)

    def pt_both(x):
        return torch_backproject(torch_project(x[0], rotations, cfg.chunk), rotations, cfg.chunk)

    return {"fieldfuse": {"fp": ff_fp, "bp": ff_bp, "fp+bp": ff_both},
            "torch": {"fp": pt_fp, "bp": pt_bp, "fp+bp": pt_both}}


class InputSet(tuple):
    """One (volume, stack) input set; the timer reads its `.device`."""

    @property
    def device(self) -> torch.device:
        return self[0].device


def run(cfg: Config, args) -> list[dict[str, Any]]:
    device = args.device
    angles = torch.linspace(-math.pi / 2, math.pi / 2, cfg.angles, dtype=torch.float64)
    rotations = fieldfuse.tilt_rotations(angles, "x").to(device, torch.float32)
    set_bytes = 4 * (cfg.size**3 + cfg.angles * cfg.size**2)
    count = tm.rotation_count(set_bytes, device)
    inputs = [InputSet((torch.rand((cfg.size,) * 3, device=device),
                        torch.rand(cfg.angles, cfg.size, cfg.size, device=device)))
              for _ in range(count)]
    rows = []
    with torch.no_grad():
        errors = accuracy(inputs[0], rotations, cfg)
        table = steps(cfg, rotations)
        for pass_name in PASSES:
            results = {}
            for impl, by_pass in table.items():
                print(f"{cfg.label} {pass_name} {impl}", file=sys.stderr, flush=True)
                results[impl] = measure(by_pass[pass_name], inputs, args.budget)
                tm.release(device)
            rows.append({"config": cfg.label, "pass": pass_name, "results": results,
                         "rel_err": errors.get(pass_name)})
    return rows


def accuracy(x, rotations: Tensor, cfg: Config) -> dict[str, float]:
    """‖fieldfuse − torch‖ / ‖torch‖ for FP and BP on one input set (float32 both)."""
    volume, stack = x
    shape = (cfg.size,) * 3
    pairs = {"fp": (fieldfuse.project(volume, rotations),
                    torch_project(volume, rotations, cfg.chunk)),
             "bp": (fieldfuse.backproject(stack, rotations, volume_shape=shape),
                    torch_backproject(stack, rotations, cfg.chunk))}
    return {name: (float((a.double() - b.double()).norm() / b.double().norm()))
            for name, (a, b) in pairs.items()}


def table(rows: list[dict], cfg: Config, cuda: bool) -> str:
    headers = ["size", "pass", "fieldfuse ms", "p10–p90", "torch ms", "× torch",
               "fieldfuse Gvox·proj/s", "torch Gvox·proj/s", "rel err"]
    if cuda:
        headers += ["ASTRA ms (H100)", "target ms"]
    body = []
    for row in rows:
        ff, pt = row["results"]["fieldfuse"], row["results"]["torch"]
        ff_ms, pt_ms = median(ff), median(pt)
        stats = ff.get("stats")
        spread = f"{stats.p10_ms:.3g}–{stats.p90_ms:.3g}" if stats else tm.MISSING
        # FP + BP touches every voxel–projection pair twice.
        pairs = cfg.voxel_projections * (2 if row["pass"] == "fp+bp" else 1)
        rate = lambda ms: None if ms is None else pairs / (ms * 1e-3) / 1e9  # noqa: E731
        cells = [row["config"], row["pass"], ms_cell(ff), spread, ms_cell(pt),
                 tm.fmt(tm.ratio(pt_ms, ff_ms), ".1f", "×"), tm.fmt(rate(ff_ms), ".1f"),
                 tm.fmt(rate(pt_ms), ".1f"),
                 tm.fmt(row["rel_err"], ".1e") if row["rel_err"] is not None else "—"]
        if cuda:
            cells += [tm.fmt_num(ASTRA_MS[row["pass"]]), tm.fmt_num(TARGET_MS[row["pass"]])]
        body.append(cells)
    return tm.markdown_table(headers, body)


def summary(env: dict[str, Any], cfg: Config, elapsed_s: float) -> str:
    build = env["fieldfuse_build"] or {}
    return (tm.header_line("fieldfuse project benchmark", env) + "\n\n"
            f"fieldfuse {env['fieldfuse']}; build {build}. Run took {elapsed_s:.0f} s.\n\n"
            f"Volume {cfg.size}³ float32 (uniform in [0, 1]), {cfg.angles} projections with "
            f"R = Rx(φ), φ evenly over [−90°, 90°], detector {cfg.size}², no shifts. fp: "
            "`fieldfuse.project`; bp: `fieldfuse.backproject`; fp+bp: one after the other (the "
            "projector cost of a SIRT iteration). torch: `grid_sample` at Joseph's sample points "
            f"({cfg.chunk} projections per call, the grid built per call as well), its rays summed "
            "and scaled by Δ; its back projection is `grid_sampler_3d_backward` (PyTorch's "
            "transpose of that sampling, with atomics). Gvox·proj/s: voxels × projections (twice "
            "for fp+bp) per second. rel err: ‖fieldfuse − torch‖/‖torch‖ on one input set. "
            "ASTRA: astra-toolbox 2.5 (FP3D, BP3D, SIRT3D per iteration) on an H100 at this "
            "size, from issue 14.")


def main(argv: list[str] | None = None) -> None:
    parser = tm.bench_parser(__doc__)
    args = tm.parse_bench_args(parser, argv)
    cfg = QUICK_CONFIG if args.quick else CPU_CONFIG if args.cpu else GPU_CONFIG
    began = time.perf_counter()
    torch.manual_seed(SEED)
    env = tm.fieldfuse_environment(args.device)
    rows = run(cfg, args)
    elapsed_s = time.perf_counter() - began
    cuda = args.device.type == "cuda"
    markdown = "\n\n".join([summary(env, cfg, elapsed_s), table(rows, cfg, cuda)])
    notes = [f"- {row['pass']} {name}: {result['error']}" for row in rows
             for name, result in row["results"].items() if "error" in result]
    payload = {"env": env, "config": vars(cfg), "elapsed_s": elapsed_s, "rows": rows,
               "astra_ms": ASTRA_MS, "target_ms": TARGET_MS}
    stem = "project_" + ("cuda" if cuda else "cpu") + ("_quick" if args.quick else "")
    tm.publish(args.out, stem, payload, markdown, notes)


if __name__ == "__main__":
    main()
