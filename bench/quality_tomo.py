# SPDX-License-Identifier: Apache-2.0
"""Reconstruction quality of `fieldfuse.tomo` on the embedded phantom (issue 14's quality tables).

Two phantoms (`fieldfuse.tomo.phantom`: ellipsoids and dense particles, analytic projections,
2 % Gaussian noise, tilts about x with the missing wedge): the embedded default (64³, 41 tilts
−60°..60° every 3°) and a larger one (128³, 61 tilts −60°..60° every 2°). For each: SIRT (50
iterations, positivity), FBP (Hann filter) and K-Planes (the C++ reconstruction), with PSNR, SSIM
and the per-axis profile error (z is the beam at zero tilt, the missing-wedge direction), and the
time. Then the chaos floor on the 64³ phantom: K-Planes SSIM over several seeds from the C++
route and from the PyTorch twin (examples/tomo_kplanes_torch.py), and, with --cpu-parity, the C++
route on the CPU for the same seeds.

    python3 bench/quality_tomo.py                 # on CUDA
    python3 bench/quality_tomo.py --cpu --quick   # a smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

import _timing as tm
from fieldfuse import tomo

ROOT = Path(__file__).resolve().parents[1]

PHANTOMS = {"embedded 64³, 41 tilts ±60°": (64, [-60.0 + 3.0 * k for k in range(41)]),
            "large 128³, 61 tilts ±60°": (128, [-60.0 + 2.0 * k for k in range(61)])}


def kplanes_settings(size: int, quick: bool) -> dict:
    """About 25 epochs of 2048 rays, with the planes' rate of the CLI's embedded run (0.1: at
    the spec's 1e-2 these small phantoms need many more steps; docs/tomo_cli.md)."""
    iterations = 60 if quick else max(500, 25 * 41 * size * size // 2048)
    return {"iterations": iterations, "rays": 2048, "tv_points": 10000, "lr_planes": 0.1}


def scores(volume, truth) -> dict:
    return {"psnr": tomo.psnr(volume, truth), "ssim": tomo.ssim(volume, truth),
            "profile": [tomo.profile_error(volume, truth, axis) for axis in range(3)]}


def run_methods(size: int, angles: list[float], device: torch.device, quick: bool) -> list[dict]:
    ph = tomo.phantom(size, angles)
    stack = ph["stack"].to(device)
    rows = []
    for method, settings in (("sirt", {"iterations": 50, "positivity": True}),
                             ("fbp", {"filter": "hann"}),
                             ("kplanes", kplanes_settings(size, quick))):
        volume, report = tomo.reconstruct(stack, angles, method, **settings)
        rows.append({"method": method, "settings": settings, "seconds": report["seconds"],
                     **scores(volume.cpu(), ph["truth"])})
    return rows


def twin_module():
    spec = importlib.util.spec_from_file_location("tomo_kplanes_torch",
                                                  ROOT / "examples" / "tomo_kplanes_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chaos_floor(device: torch.device, seeds: int, quick: bool, cpu_parity: bool) -> dict:
    """SSIM of K-Planes over seeds: C++ on `device`, the PyTorch twin on `device`, and the C++
    route on the CPU (optional)."""
    size, angles = PHANTOMS["embedded 64³, 41 tilts ±60°"]
    ph = tomo.phantom(size, angles)
    settings = kplanes_settings(size, quick)
    twin = twin_module()
    out = {"cxx": [], "twin": [], "cxx_cpu": []}
    for seed in range(seeds):
        volume, _ = tomo.reconstruct(ph["stack"].to(device), angles, "kplanes", seed=seed,
                                     **settings)
        out["cxx"].append(tomo.ssim(volume.cpu(), ph["truth"]))
        if cpu_parity and device.type == "cuda":
            volume, _ = tomo.reconstruct(ph["stack"], angles, "kplanes", seed=seed, **settings)
            out["cxx_cpu"].append(tomo.ssim(volume, ph["truth"]))
        args = twin.parse_args(["--iterations", str(settings["iterations"]), "--rays",
                                str(settings["rays"]), "--tv-points", str(settings["tv_points"]),
                                "--lr-planes", str(settings["lr_planes"]), "--seed", str(seed)])
        volume, _ = twin.train(ph["stack"], ph["angles"], tuple(ph["truth"].shape), args, device)
        out["twin"].append(tomo.ssim(volume, ph["truth"]))
    return out


def markdown(tables: dict, floor: dict, env: dict, command: str) -> str:
    lines = [tm.header_line("fieldfuse tomography quality", env), "", f"Command: `{command}`.", ""]
    for name, rows in tables.items():
        lines += [f"**{name}**", "", tm.markdown_table(
            ["method", "PSNR dB", "SSIM", "profile error z / y / x", "seconds"],
            [[r["method"], f"{r['psnr']:.2f}", f"{r['ssim']:.4f}",
              " / ".join(f"{p:.3f}" for p in r["profile"]), f"{r['seconds']:.2f}"]
             for r in rows]), ""]
    lines.append("**K-Planes chaos floor (SSIM per seed, embedded phantom)**")
    lines.append("")
    body = []
    for key, label in (("cxx", "C++ route"), ("twin", "PyTorch twin"), ("cxx_cpu", "C++ on CPU")):
        values = floor[key]
        if values:
            body.append([label, ", ".join(f"{v:.4f}" for v in values),
                         f"{statistics.mean(values):.4f}", f"{max(values) - min(values):.4f}"])
    lines.append(tm.markdown_table(["route", "SSIM per seed", "mean", "spread"], body))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = tm.bench_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cpu-parity", action="store_true",
                        help="also run the C++ route on the CPU for the chaos-floor seeds")
    args = tm.parse_bench_args(parser, argv)
    device = args.device
    env = tm.fieldfuse_environment(device)
    start = time.perf_counter()
    phantoms = dict(list(PHANTOMS.items())[:1]) if args.quick else PHANTOMS
    tables = {name: run_methods(size, angles, device, args.quick)
              for name, (size, angles) in phantoms.items()}
    floor = chaos_floor(device, 2 if args.quick else args.seeds, args.quick, args.cpu_parity)
    command = "python3 bench/quality_tomo.py " + " ".join(sys.argv[1:])
    text = markdown(tables, floor, env, command.strip())
    tm.publish(args.out, "quality_tomo_" + device.type,
               {"env": env, "tables": tables, "floor": floor,
                "seconds": time.perf_counter() - start}, text, [])


if __name__ == "__main__":
    main()
