# SPDX-License-Identifier: Apache-2.0
"""Times the optics family (issue 15) against plain PyTorch written the way waveorder computes it.

Five measurements, each in one process on the same inputs (bench/README.md has the details):

1. the closed-form inverse filter, N = 115 000 matrices 2 × 21 complex64: fieldfuse.optics.
   tikhonov_filter against torch.linalg.svd and the closed form in PyTorch (max |Δ| against the
   SVD filter, % of copy bandwidth at read M + write G);
2. the shared 3-D optics for (40, 512, 512): fieldfuse.optics.shared_optics_3d against the same
   grids, pupil, propagation kernel and Green's function built on the device in PyTorch;
3. one optimiser iteration for 256 tiles of 128², Z = 7 (thin transfer functions, inverse,
   mid-band loss, backward, update): the plain-PyTorch NAdam iteration, eager and CUDA-graphed,
   against fieldfuse.optics.optimize_tiles timed as (t(11 iterations) − t(1 iteration)) / 10;
4. the final reconstruction of those tiles: transfer functions + tikhonov_inverse against the
   PyTorch SVD path and the PyTorch closed form;
5. a whole 2048² field of view, Z = 7, 256 tiles of 128², 50 NAdam iterations: tiling,
   optimisation, reconstruction and blending, in seconds per field.

Measurements 3 and 4 run at the production setting (Nyquist upsampling factor 1 for 128² tiles)
and at a factor-2 setting. Until fieldfuse.optics is installed, the fieldfuse cells print — and
the baselines still run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

import _optics_baseline as base
import _timing as tm

SEED = 0
# 20× / 0.55 NA objective, 6.5 µm camera pixels (0.325 µm in the object), 532 nm, water. NAi 0.25
# keeps waveorder's Nyquist factor ceil(0.325 / (0.532 / (2·0.80))) at 1; NAi 0.45 makes it 2.
PRODUCTION = base.Settings(pixel_size=0.325, wavelength=0.532, index_medium=1.33,
                           na_illumination=0.25, na_detection=0.55)
FACTOR_TWO = dataclasses.replace(PRODUCTION, na_illumination=0.45)
Z_SPACING = 1.0  # µm, below the axial Nyquist spacing (2.2 µm at NAd 0.55, n 1.33)
REGULARIZATION = 1e-3
BAND = (0.125, 0.25)
OPTIMIZE_STEEPNESS = 100.0  # the soft pupil waveorder optimises with
RECONSTRUCT_STEEPNESS = 1e4
# (initial value, learning rate); for Newton the rate is the damping floor and the step cap.
PARAMETERS = {"z_offset": (0.0, 0.05), "zenith": (0.1, 0.01), "azimuth": (0.0, 0.05)}
METHODS = ("adam", "nadam", "newton")
SHORT_RUN, LONG_RUN = 1, 11  # optimize_tiles iterations; the difference over 10 is per iteration

# The spec's and the H100 numbers (ms; field in s), printed next to the measurements.
REFERENCE = {"svd filter": 22.3, "closed form filter": 1.28, "filter floor": 0.026,
             "filter target": 0.04, "shared optics": 0.75, "shared optics target": 0.08,
             "waveorder iteration": 900.0, "iteration target": 10.0,
             "waveorder reconstruction": 950.0, "reconstruction target": 5.0,
             "field target": 1.0}


@dataclass(frozen=True)
class Sizes:
    filter_n: int
    filter_z: int
    optics_shape: tuple[int, int, int]
    tiles: int
    tile: int
    z: int
    field: int
    field_iterations: int


GPU_SIZES = Sizes(115_000, 21, (40, 512, 512), 256, 128, 7, 2048, 50)
# CPU: the same per-tile work on 16 tiles (one 512² field) so PyTorch eager stays within seconds.
CPU_SIZES = Sizes(115_000, 21, (40, 512, 512), 16, 128, 7, 512, 50)
QUICK_SIZES = Sizes(2_000, 21, (8, 32, 32), 4, 32, 7, 64, 3)
# Whole-field runs last seconds: a few reps, no probe-driven rep count.
FIELD_BUDGET = tm.Budget(min_reps=3, min_seconds=0.0, max_reps=3, warmup_reps=1)
QUICK_FIELD_BUDGET = tm.Budget(min_reps=1, min_seconds=0.0, max_reps=1, warmup_reps=1)


def load_optics():
    """fieldfuse.optics, or None with the reason (the baselines still run without it)."""
    try:
        from fieldfuse import optics
    except ImportError as err:
        return None, f"fieldfuse.optics is not importable: {err}"
    return optics, None


class Bench:
    """The run's device, budget, fieldfuse module and collected failures."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = args.device
        self.cuda = self.device.type == "cuda"
        self.budget = args.budget
        self.optics, self.missing = load_optics()
        self.token = [torch.empty(1, device=self.device)]  # step functions that take no input

    def microscope(self, s: base.Settings, steepness: float):
        return self.optics.Microscope(**dataclasses.asdict(s), pupil_steepness=steepness)

    def run(self, build: Callable[[], Callable], inputs=None, budget: tm.Budget | None = None,
            fieldfuse: bool = False) -> dict[str, Any]:
        """Build a step and time it; a failed build or call becomes a reported cell."""
        if fieldfuse and self.optics is None:
            return {"stats": None, "oom": False, "error": self.missing}
        inputs = inputs or self.token
        try:
            step = build()
        except Exception as err:  # noqa: BLE001 -- a failed build is a reported cell
            result = tm.failure(err)
            tm.release(self.device)
            return result
        return tm.measure(step, inputs, budget or self.budget, memory=False)

    def graphed(self, build: Callable[[], Callable], inputs=None,
                fieldfuse: bool = False) -> dict[str, Any]:
        inputs = inputs or self.token
        return self.run(lambda: tm.graphed(build(), inputs), inputs, fieldfuse=fieldfuse)


def progress(section: str, name: str, result: dict[str, Any]) -> None:
    cell = tm.ms_cell(result) if "error" not in result else "failed"
    print(f"[{section}] {name}: {cell}", file=sys.stderr, flush=True)


def max_abs_diff(a: Tensor, b: Tensor) -> float:
    return (a.to(torch.complex128) - b.to(torch.complex128)).abs().max().item()


def safe_diff(make: Callable[[], tuple[Tensor, Tensor]]) -> float | None:
    try:
        return max_abs_diff(*make())
    except Exception:  # noqa: BLE001 -- the timing row carries the error
        return None


# --- 1. the inverse filter ---------------------------------------------------------------------


def filter_inputs(sizes: Sizes, device: torch.device) -> list[Tensor]:
    """Thin transfer functions of the production setting at Z = filter_z on a square grid of at
    least N frequencies, flattened to the first N: [2, 1, Z, N, 1] (Hu, Hp). The filter is
    per-frequency, so [1, Z, N, 1] has the memory pattern of [1, Z, Y, X] (Z planes of Y·X
    contiguous values) with exactly the spec's N; the values keep the zeros outside the pupil,
    where M is rank deficient."""
    side = math.isqrt(sizes.filter_n - 1) + 1
    grid = base.thin_grid(PRODUCTION, (side, side), RECONSTRUCT_STEEPNESS, device)
    hu, hp = base.thin_transfer_functions(
        grid, base.z_positions(sizes.filter_z, Z_SPACING, device=device))
    m = torch.stack((hu, hp)).reshape(2, sizes.filter_z, -1)[:, :, :sizes.filter_n]
    m = m.reshape(2, 1, sizes.filter_z, sizes.filter_n, 1).contiguous()
    copies = tm.rotation_count(2 * m.numel() * m.element_size(), device)
    return [m] + [m.clone() for _ in range(copies - 1)]


def bench_filter(bench: Bench, sizes: Sizes) -> dict[str, Any]:
    inputs = filter_inputs(sizes, bench.device)
    m = inputs[0]
    fo = bench.optics
    steps = {
        "fieldfuse tikhonov_filter": (lambda: lambda x: fo.tikhonov_filter(
            x[0], x[1], REGULARIZATION), True),
        "PyTorch closed form": (lambda: lambda x: base.closed_form_filter(
            x[0], x[1], REGULARIZATION), False),
        "PyTorch SVD (torch.linalg.svd)": (lambda: lambda x: base.svd_filter(
            x[0], x[1], REGULARIZATION), False),
    }
    reference = base.svd_filter(m[0], m[1], REGULARIZATION)
    rows = []
    for name, (build, ff) in steps.items():
        result = bench.run(build, inputs, fieldfuse=ff)
        diff = None if result.get("stats") is None else safe_diff(
            lambda b=build: (b()(m), reference))
        rows.append({"name": name, "result": result, "max_abs_diff": diff})
        progress("filter", name, result)
    if bench.cuda:
        for name, (build, ff) in list(steps.items())[:2]:
            result = bench.graphed(build, inputs, fieldfuse=ff)
            rows.append({"name": name + ", CUDA graph", "result": result})
            progress("filter", name + ", CUDA graph", result)
    if bench.args.compile:
        compiled = torch.compile(base.closed_form_filter, fullgraph=True, dynamic=False)
        result = bench.run(lambda: lambda x: compiled(x[0], x[1], REGULARIZATION), inputs)
        rows.append({"name": "PyTorch closed form, torch.compile", "result": result})
        progress("filter", "torch.compile", result)
    del reference
    tm.release(bench.device)
    # Read M, write G: 2·(2·Z·N) complex64 values.
    return {"rows": rows, "bytes": 2 * m.numel() * m.element_size(), "n": sizes.filter_n,
            "z": sizes.filter_z, "layout": list(m.shape[1:])}


# --- 2. the shared 3-D optics ------------------------------------------------------------------


def bench_shared_optics(bench: Bench, sizes: Sizes) -> dict[str, Any]:
    s, shape, device = PRODUCTION, sizes.optics_shape, bench.device
    fo = bench.optics

    def torch_step(_x=None):
        return base.shared_optics_3d(shape, s.pixel_size, Z_SPACING, s, RECONSTRUCT_STEEPNESS,
                                     device)

    def ff_step(_x=None):
        return fo.shared_optics_3d(shape, s.pixel_size, Z_SPACING, s.wavelength, s.index_medium,
                                   s.na_detection, pupil_steepness=RECONSTRUCT_STEEPNESS,
                                   device=device)

    rows = [{"name": "fieldfuse shared_optics_3d", "result": bench.run(lambda: ff_step,
                                                                       fieldfuse=True)},
            {"name": "PyTorch on the device", "result": bench.run(lambda: torch_step)}]
    if rows[0]["result"].get("stats") is not None:
        diffs = [safe_diff(lambda a=a, b=b: (a, b)) for a, b in zip(ff_step(), torch_step())]
        rows[0]["max_abs_diff"] = None if None in diffs else max(diffs)
    if bench.cuda:
        rows.append({"name": "fieldfuse shared_optics_3d, CUDA graph",
                     "result": bench.graphed(lambda: ff_step, fieldfuse=True)})
        rows.append({"name": "PyTorch on the device, CUDA graph",
                     "result": bench.graphed(lambda: torch_step)})
    if bench.args.compile:
        compiled = torch.compile(base.shared_optics_3d, fullgraph=True, dynamic=False)
        rows.append({"name": "PyTorch, torch.compile", "result": bench.run(
            lambda: lambda _x: compiled(shape, s.pixel_size, Z_SPACING, s, RECONSTRUCT_STEEPNESS,
                                        device))})
    for row in rows:
        progress("shared optics", row["name"], row["result"])
    tm.release(device)
    z, y, x = shape
    # Writes only: the real pupil and the two complex kernels.
    return {"rows": rows, "bytes": y * x * 4 + 2 * z * y * x * 8, "shape": list(shape)}


# --- simulated tiles -----------------------------------------------------------------------------


def smooth_noise(shape: tuple[int, ...], cutoff: float, generator: torch.Generator) -> Tensor:
    """Gaussian noise low-passed to |f| ≲ cutoff (cycles per pixel), unit standard deviation."""
    noise = torch.randn(shape, generator=generator)
    fy = torch.fft.fftfreq(shape[-2])[:, None]
    fx = torch.fft.fftfreq(shape[-1])[None, :]
    smooth = torch.fft.ifft2(torch.fft.fft2(noise) * torch.exp(-(fy**2 + fx**2) / cutoff**2)).real
    return smooth / smooth.std()


def simulate_tiles(s: base.Settings, sizes: Sizes, count: int, device: torch.device,
                   seed: int = SEED) -> tuple[Tensor, dict[str, Tensor]]:
    """Defocus stacks [count, Z, tile, tile] of a random smooth phase object (and a weak
    absorption), each tile imaged with its own focus offset and tilt, plus 0.1 % noise."""
    g = torch.Generator().manual_seed(seed)
    shape = (count, sizes.tile, sizes.tile)
    phase = 0.5 * smooth_noise(shape, 0.15, g)
    absorption = 0.05 * smooth_noise(shape, 0.15, g)
    truth = {"z_offset": torch.rand(count, generator=g) - 0.5,
             "zenith": 0.05 + 0.1 * torch.rand(count, generator=g),
             "azimuth": (2 * torch.rand(count, generator=g) - 1) * math.pi}
    truth = {k: v.to(device) for k, v in truth.items()}
    grid = base.thin_grid(s, (sizes.tile, sizes.tile), RECONSTRUCT_STEEPNESS, device)
    z = base.z_positions(sizes.z, Z_SPACING, truth["z_offset"], device)
    with torch.no_grad():
        hu, hp = base.thin_transfer_functions(grid, z, truth["zenith"], truth["azimuth"])
        stack = base.forward_model(absorption.to(device), phase.to(device), hu, hp)
    noise = torch.randn(stack.shape, generator=g).to(device)
    return stack * (1 + 1e-3 * noise), truth


def setting_label(s: base.Settings) -> str:
    return f"NAi {s.na_illumination:g}, f = {base.upsampling_factor(s)}"


# --- 3. one optimiser iteration ------------------------------------------------------------------


def per_iteration(short: dict[str, Any], long: dict[str, Any]) -> float | None:
    a, b = tm.median(short), tm.median(long)
    return None if a is None or b is None else (b - a) / (LONG_RUN - SHORT_RUN)


def bench_iteration(bench: Bench, sizes: Sizes, s: base.Settings) -> dict[str, Any]:
    device, fo = bench.device, bench.optics
    tiles, _ = simulate_tiles(s, sizes, sizes.tiles, device)
    grid = base.thin_grid(s, (sizes.tile, sizes.tile), OPTIMIZE_STEEPNESS, device)

    def plain(method: str, capturable: bool = False) -> Callable:
        return base.TileIteration(tiles, grid, Z_SPACING, PARAMETERS,
                                  regularization=REGULARIZATION, band=BAND, method=method,
                                  capturable=capturable).step

    rows = []
    for name, method in (("PyTorch NAdam, closed form", "closed form"),
                         ("PyTorch NAdam, waveorder's decoupled approximation", "decoupled")):
        result = bench.run(lambda m=method: plain(m))
        rows.append({"name": name + ", eager", "result": result,
                     "ms_per_iteration": tm.median(result)})
    if bench.cuda:
        result = bench.graphed(lambda: plain("closed form", capturable=True))
        rows.append({"name": "PyTorch NAdam, closed form, CUDA graph", "result": result,
                     "ms_per_iteration": tm.median(result)})
    for method in METHODS:
        runs = {}
        for iterations in (SHORT_RUN, LONG_RUN):
            runs[iterations] = bench.run(
                lambda k=iterations, m=method: lambda _x: fo.optimize_tiles(
                    tiles, bench.microscope(s, OPTIMIZE_STEEPNESS), Z_SPACING, PARAMETERS,
                    method=m, iterations=k, regularization=REGULARIZATION, band=BAND),
                fieldfuse=True)
        rows.append({"name": f"fieldfuse optimize_tiles, {method}", "result": runs[LONG_RUN],
                     "short": runs[SHORT_RUN],
                     "ms_per_iteration": per_iteration(runs[SHORT_RUN], runs[LONG_RUN])})
    for row in rows:
        progress(f"iteration {setting_label(s)}", row["name"], row["result"])
    del tiles
    tm.release(device)
    return {"setting": dataclasses.asdict(s), "factor": base.upsampling_factor(s), "rows": rows}


# --- 4. the final reconstruction -----------------------------------------------------------------


def bench_reconstruction(bench: Bench, sizes: Sizes, s: base.Settings) -> dict[str, Any]:
    device, fo = bench.device, bench.optics
    tiles, truth = simulate_tiles(s, sizes, sizes.tiles, device)
    yx = (sizes.tile, sizes.tile)
    copies = tm.rotation_count(tiles.numel() * tiles.element_size(), device)
    inputs = [tiles] + [tiles.clone() for _ in range(copies - 1)]

    def plain(method: str) -> Callable:
        def step(x: Tensor) -> Tensor:
            grid = base.thin_grid(s, yx, RECONSTRUCT_STEEPNESS, device)
            z = base.z_positions(sizes.z, Z_SPACING, truth["z_offset"], device)
            return base.reconstruct(x, grid, z, truth["zenith"], truth["azimuth"],
                                    REGULARIZATION, method)[:, 1]
        return step

    def fieldfuse_step(x: Tensor) -> Tensor:
        z = fo.z_positions(sizes.z, Z_SPACING, truth["z_offset"], device=device)
        hu, hp = fo.thin_transfer_functions(
            yx, s.pixel_size, z, s.wavelength, s.index_medium, s.na_illumination,
            s.na_detection, zenith=truth["zenith"], azimuth=truth["azimuth"],
            pupil_steepness=RECONSTRUCT_STEEPNESS, device=device)
        return fo.tikhonov_inverse(x, hu, hp, REGULARIZATION)[1]

    def convenience_step(x: Tensor) -> Tensor:
        return fo.reconstruct_phase(x, bench.microscope(s, RECONSTRUCT_STEEPNESS), Z_SPACING,
                                    z_offset=truth["z_offset"], zenith=truth["zenith"],
                                    azimuth=truth["azimuth"], regularization=REGULARIZATION)[1]

    with torch.no_grad():
        reference = plain("svd")(tiles)
    steps = {"fieldfuse TFs + tikhonov_inverse": (fieldfuse_step, True),
             "fieldfuse reconstruct_phase": (convenience_step, True),
             "PyTorch TFs + closed form": (plain("closed form"), False),
             "PyTorch TFs + SVD (waveorder's path)": (plain("svd"), False)}
    rows = []
    with torch.no_grad():
        for name, (step, ff) in steps.items():
            result = bench.run(lambda st=step: st, inputs, fieldfuse=ff)
            diff = None if result.get("stats") is None else safe_diff(
                lambda st=step: (st(tiles), reference))
            rows.append({"name": name, "result": result, "max_abs_diff": diff})
        if bench.cuda:
            for name in ("fieldfuse TFs + tikhonov_inverse", "fieldfuse reconstruct_phase",
                         "PyTorch TFs + closed form"):
                step, ff = steps[name]
                rows.append({"name": name + ", CUDA graph",
                             "result": bench.graphed(lambda st=step: st, inputs, fieldfuse=ff)})
    for row in rows:
        progress(f"reconstruction {setting_label(s)}", row["name"], row["result"])
    scale = reference.abs().max().item()
    del inputs, tiles, reference
    tm.release(device)
    return {"setting": dataclasses.asdict(s), "factor": base.upsampling_factor(s),
            "rows": rows, "phase_max_abs": scale}


# --- 5. a whole field of view --------------------------------------------------------------------


class Tiling:
    """Square tiles of `tile` pixels at a stride of tile − overlap, the last row and column
    aligned to the field's edge; blending averages the tiles over the pixels they share."""

    def __init__(self, height: int, width: int, tile: int, overlap: int, device: torch.device):
        ys = torch.tensor(self.starts(height, tile, overlap), device=device)
        xs = torch.tensor(self.starts(width, tile, overlap), device=device)
        r = torch.arange(tile, device=device)
        rows, cols = ys[:, None] + r, xs[:, None] + r  # [ty, tile], [tx, tile]
        self.index = (rows[:, None, :, None] * width + cols[None, :, None, :]).reshape(-1)
        self.count = len(ys) * len(xs)
        self.shape, self.tile = (height, width), tile
        self.norm = torch.zeros(height * width, device=device).index_add_(
            0, self.index, torch.ones(self.index.numel(), device=device))

    @staticmethod
    def starts(n: int, tile: int, overlap: int) -> list[int]:
        starts = list(range(0, n - tile + 1, tile - overlap))
        return starts if starts[-1] == n - tile else starts + [n - tile]

    def split(self, stack: Tensor) -> Tensor:
        """[Z, H, W] -> [tiles, Z, tile, tile]."""
        z = stack.shape[0]
        picked = stack.reshape(z, -1)[:, self.index]
        return picked.reshape(z, self.count, self.tile, self.tile).transpose(0, 1).contiguous()

    def blend(self, tiles: Tensor) -> Tensor:
        """[tiles, tile, tile] -> [H, W], each pixel the mean of the tiles covering it."""
        total = torch.zeros_like(self.norm).index_add_(0, self.index, tiles.reshape(-1))
        return (total / self.norm).reshape(self.shape)


def simulate_field(sizes: Sizes, tiling: Tiling, device: torch.device) -> Tensor:
    """A [Z, field, field] stack made of independently simulated tiles (no overlap)."""
    tiles, _ = simulate_tiles(PRODUCTION, sizes, tiling.count, device, seed=SEED + 1)
    stack = torch.zeros(sizes.z, sizes.field * sizes.field, device=device)
    stack[:, tiling.index] = tiles.transpose(0, 1).reshape(sizes.z, -1)
    return stack.reshape(sizes.z, sizes.field, sizes.field)


def bench_field(bench: Bench, sizes: Sizes) -> dict[str, Any]:
    device, fo, s = bench.device, bench.optics, PRODUCTION
    tiling = Tiling(sizes.field, sizes.field, sizes.tile, 0, device)
    stack = simulate_field(sizes, tiling, device)
    yx = (sizes.tile, sizes.tile)

    def fieldfuse_field(x: Tensor) -> Tensor:
        tiles = tiling.split(x)
        fit = fo.optimize_tiles(tiles, bench.microscope(s, OPTIMIZE_STEEPNESS), Z_SPACING,
                                PARAMETERS, method="nadam", iterations=sizes.field_iterations,
                                regularization=REGULARIZATION, band=BAND)
        _, phase = fo.reconstruct_phase(tiles, bench.microscope(s, RECONSTRUCT_STEEPNESS),
                                        Z_SPACING, z_offset=fit.z_offset, zenith=fit.zenith,
                                        azimuth=fit.azimuth, regularization=REGULARIZATION)
        return tiling.blend(phase)

    def plain_field(x: Tensor) -> Tensor:
        tiles = tiling.split(x)
        grid = base.thin_grid(s, yx, OPTIMIZE_STEEPNESS, device)
        fit = base.TileIteration(tiles, grid, Z_SPACING, PARAMETERS,
                                 regularization=REGULARIZATION, band=BAND)
        for _ in range(sizes.field_iterations):
            fit.step()
        p = {k: v.detach() for k, v in fit.params.items()}
        with torch.no_grad():
            final = base.thin_grid(s, yx, RECONSTRUCT_STEEPNESS, device)
            z = base.z_positions(sizes.z, Z_SPACING, p["z_offset"], device)
            phase = base.reconstruct(tiles, final, z, p["zenith"], p["azimuth"], REGULARIZATION,
                                     "closed form")[:, 1]
        return tiling.blend(phase)

    budget = QUICK_FIELD_BUDGET if bench.args.quick else FIELD_BUDGET
    rows = [{"name": "fieldfuse (optimize_tiles nadam + reconstruct_phase)",
             "result": bench.run(lambda: fieldfuse_field, [stack], budget, fieldfuse=True)},
            {"name": "PyTorch NAdam + closed form, eager",
             "result": bench.run(lambda: plain_field, [stack], budget)}]
    for row in rows:
        progress("field", row["name"], row["result"])
    del stack
    tm.release(device)
    return {"rows": rows, "field": sizes.field, "tiles": tiling.count, "tile": sizes.tile,
            "z": sizes.z, "iterations": sizes.field_iterations}


# --- report --------------------------------------------------------------------------------------


def spread(result: dict[str, Any]) -> str:
    stats = result.get("stats")
    return f"{stats.p10_ms:.3g}–{stats.p90_ms:.3g}" if stats else tm.MISSING


def diff_cell(row: dict[str, Any]) -> str:
    return tm.fmt(row.get("max_abs_diff"), ".1e")


def bandwidth_table(section: dict[str, Any], copy_gbps: float, diff_header: str) -> str:
    ref = tm.median(section["rows"][0]["result"])
    body = []
    for row in section["rows"]:
        ms = tm.median(row["result"])
        gbps = None if ms is None else section["bytes"] / (ms * 1e-3) / tm.GB
        share = tm.ratio(gbps, copy_gbps)
        body.append([row["name"], tm.ms_cell(row["result"]), spread(row["result"]),
                     tm.fmt(tm.ratio(ms, ref), ".1f", "×"), tm.fmt(gbps, ".0f"),
                     tm.fmt(None if share is None else 100 * share, ".0f", " %"), diff_cell(row)])
    return tm.markdown_table(["implementation", "ms", "p10–p90", "time ÷ fieldfuse", "GB/s",
                              "% copy", diff_header], body)


def iteration_table(sections: list[dict[str, Any]]) -> str:
    body = []
    for section in sections:
        plain = section["rows"][0]["ms_per_iteration"]
        for row in section["rows"]:
            ms = row["ms_per_iteration"]
            how = (f"(t({LONG_RUN}) − t({SHORT_RUN}))/{LONG_RUN - SHORT_RUN}: "
                   f"{tm.fmt_num(tm.median(row['result']))} − {tm.fmt_num(tm.median(row['short']))}"
                   if "short" in row else "one step")
            body.append([setting_label(base.Settings(**section["setting"])), row["name"],
                         tm.fmt_num(ms) if ms is not None else tm.ms_cell(row["result"]), how,
                         tm.fmt(tm.ratio(plain, ms), ".1f", "×")])
    return tm.markdown_table(["setting", "implementation", "ms / iteration", "measured as",
                              "× PyTorch eager (closed form)"], body)


def reconstruction_table(sections: list[dict[str, Any]]) -> str:
    body = []
    for section in sections:
        ref = tm.median(section["rows"][0]["result"])
        for row in section["rows"]:
            ms = tm.median(row["result"])
            body.append([setting_label(base.Settings(**section["setting"])), row["name"],
                         tm.ms_cell(row["result"]), spread(row["result"]),
                         tm.fmt(tm.ratio(ms, ref), ".1f", "×"), diff_cell(row)])
    return tm.markdown_table(["setting", "implementation", "ms", "p10–p90", "time ÷ fieldfuse",
                              "max |Δ| phase vs SVD"], body)


def field_table(section: dict[str, Any]) -> str:
    body = []
    for row in section["rows"]:
        ms = tm.median(row["result"])
        stats = row["result"].get("stats")
        body.append([row["name"], tm.fmt(None if ms is None else ms / 1e3, ".3f"),
                     tm.fmt(None if stats is None else stats.host_ms / 1e3, ".3f"),
                     tm.fmt(None if ms is None else 3.6e6 / ms, ".0f"),
                     str(stats.reps) if stats else tm.MISSING])
    return tm.markdown_table(["pipeline", "s / field", "host s / field", "fields / hour", "reps"],
                             body)


def markdown(env: dict[str, Any], result: dict[str, Any]) -> str:
    copy_gbps = result["copy_bandwidth"]["gbps"]
    f1, f2 = (setting_label(s) for s in (PRODUCTION, FACTOR_TWO))
    filt, optics, field = result["filter"], result["shared_optics"], result["field"]
    r = REFERENCE
    out = [tm.header_line("fieldfuse optics benchmark", env), "",
           f"Microscope: λ = {PRODUCTION.wavelength} µm, n = {PRODUCTION.index_medium}, NAd = "
           f"{PRODUCTION.na_detection}, pixel {PRODUCTION.pixel_size} µm (6.5 µm camera pixels at "
           f"20×), Δz = {Z_SPACING} µm, λr = {REGULARIZATION}, band {BAND}. Production setting "
           f"{f1} (Nyquist upsampling factor 1 for 128² tiles); factor-2 setting {f2}. Optimiser "
           f"pupil steepness {OPTIMIZE_STEEPNESS:g}, reconstruction {RECONSTRUCT_STEEPNESS:g}; "
           f"parameters (initial, rate) {PARAMETERS}. Copy bandwidth "
           f"{copy_gbps:.0f} GB/s (read + write).", "",
           f"### 1. Inverse filter, N = {filt['n']:,} matrices 2 × {filt['z']} complex64 "
           f"(layout {filt['layout']})", "",
           f"Bytes: read M + write G = {filt['bytes'] / 1e6:.1f} MB. H100 reference: SVD "
           f"{r['svd filter']} ms, PyTorch closed form {r['closed form filter']} ms, floor "
           f"{r['filter floor']} ms; target ≤ {r['filter target']} ms.", "",
           bandwidth_table(filt, copy_gbps, "max |Δ| vs SVD"), "",
           f"### 2. Shared 3-D optics {tuple(optics['shape'])}", "",
           f"Bytes: writes of the pupil and both kernels = {optics['bytes'] / 1e6:.1f} MB. H100 "
           f"reference: PyTorch on the device {r['shared optics']} ms; target ≤ "
           f"{r['shared optics target']} ms.", "",
           bandwidth_table(optics, copy_gbps, "max |Δ| vs PyTorch"), "",
           "### 3. One optimiser iteration "
           f"({result['sizes']['tiles']} tiles of {result['sizes']['tile']}², Z = "
           f"{result['sizes']['z']})", "",
           f"waveorder 3.0.x batched NAdam (H100, issue 15): about {r['waveorder iteration']:.0f}"
           f" ms; target ≤ {r['iteration target']} ms.", "",
           iteration_table(result["iteration"]), "",
           "### 4. Final reconstruction of the tiles", "",
           f"waveorder's SVD reconstruction (H100, issue 15): about "
           f"{r['waveorder reconstruction']:.0f} ms; target ≤ {r['reconstruction target']} ms.",
           "", reconstruction_table(result["reconstruction"]), "",
           f"### 5. Whole field {field['field']}², Z = {field['z']}, {field['tiles']} tiles of "
           f"{field['tile']}², {field['iterations']} NAdam iterations", "",
           f"Tiling, optimisation, reconstruction and blending; target < {r['field target']} s.",
           "", field_table(field)]
    return "\n".join(out)


def failures(result: dict[str, Any]) -> list[str]:
    notes = []
    sections = [result["filter"], result["shared_optics"], result["field"],
                *result["iteration"], *result["reconstruction"]]
    for section in sections:
        where = (f" ({setting_label(base.Settings(**section['setting']))})"
                 if "setting" in section else "")
        for row in section["rows"]:
            for res in (row["result"], row.get("short") or {}):
                if "error" in res:
                    notes.append(f"- {row['name']}{where}: {res['error']}")
    return sorted(set(notes))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = tm.bench_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the JSON report to this path")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--quick" in argv and "--cpu" not in argv and not torch.cuda.is_available():
        argv.append("--cpu")  # the smoke test runs anywhere
    return tm.parse_bench_args(parser, argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.manual_seed(SEED)
    began = time.perf_counter()
    sizes = QUICK_SIZES if args.quick else CPU_SIZES if args.cpu else GPU_SIZES
    bench = Bench(args)
    if bench.missing:
        print(bench.missing + " (fieldfuse rows will be empty)", file=sys.stderr)
    env = tm.fieldfuse_environment(args.device)
    result: dict[str, Any] = {"sizes": dataclasses.asdict(sizes),
                              "copy_bandwidth": tm.copy_bandwidth(args.device, args.copy_bytes,
                                                                  args.budget)}
    result["filter"] = bench_filter(bench, sizes)
    result["shared_optics"] = bench_shared_optics(bench, sizes)
    result["iteration"] = [bench_iteration(bench, sizes, s) for s in (PRODUCTION, FACTOR_TWO)]
    result["reconstruction"] = [bench_reconstruction(bench, sizes, s)
                                for s in (PRODUCTION, FACTOR_TWO)]
    result["field"] = bench_field(bench, sizes)
    result["seconds"] = time.perf_counter() - began
    payload = {"env": env, "reference_ms": REFERENCE, **result}
    stem = "optics_" + args.device.type + ("_quick" if args.quick else "")
    tm.publish(args.out, stem, payload, markdown(env, result), failures(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2, default=tm._jsonable) + "\n",
                             encoding="utf-8")


if __name__ == "__main__":
    main()
