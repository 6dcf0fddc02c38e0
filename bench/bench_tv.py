# SPDX-License-Identifier: Apache-2.0
"""Times fieldfuse's volume TV functionals against PyTorch eager and torch.compile."""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

import _timing as tm
import fieldfuse

# Sizes from specs/tv.md: 256³ (64 MiB fp32), 512³ (512 MiB) and 4×256³ (256 MiB), all past the
# 50 MB L2 of an H100 (smaller inputs are also rotated, see _timing.rotation_count).
GPU_SHAPES = ((256, 256, 256), (512, 512, 512), (4, 256, 256, 256))
# The CPU targets: fieldfuse must beat PyTorch CPU eager by >= 3x at 128³ and 256³.
CPU_SHAPES = ((128, 128, 128), (256, 256, 256))
# --quick: every axis plus a batch dim, small enough for a 2-core smoke test.
QUICK_SHAPES = ((32, 32, 32), (2, 24, 24, 24))
GPU_DTYPES = (torch.float32, torch.bfloat16)
# 16-bit TV is CUDA-only (specs/tv.md), so the CPU table is float32.
CPU_DTYPES = (torch.float32,)
# torch.compile baselines are float32 only: bf16 compiles would double the compile time, already
# the largest part of a full run.
COMPILE_DTYPES = (torch.float32,)
DTYPE_LABELS = {torch.float32: "fp32", torch.bfloat16: "bf16"}
AXES = (-3, -2, -1)
# tv_iso_3d's default eps, passed explicitly so fieldfuse and the baselines agree by construction.
ISO_EPS = 1e-8
# Declared floor (specs/tv.md): forward reads each voxel once; backward reads it again and writes
# its gradient. Element transfers per voxel, times the element size, give the floor's bytes.
TRANSFERS_PER_VOXEL = {"fwd+bwd": 3, "fwd": 1}
SEED = 0
TABLE_HEADERS = ("op", "shape", "dtype", "fieldfuse ms", "p10–p90", "eager ms", "compile ms",
                 "× eager", "× compile", "GB/s", "% copy", "rel err")


def eager_sq(vol: torch.Tensor) -> torch.Tensor:
    """Plain-PyTorch squared TV: the sum of squared forward differences along each axis."""
    dd, dh, dw = (torch.diff(vol, dim=axis) for axis in AXES)
    return dd.square().sum() + dh.square().sum() + dw.square().sum()


def eager_iso(vol: torch.Tensor) -> torch.Tensor:
    """Plain-PyTorch isotropic TV: mean over corners of sqrt(Δd² + Δh² + Δw² + eps)."""
    dd = torch.diff(vol, dim=-3)[..., :, :-1, :-1]
    dh = torch.diff(vol, dim=-2)[..., :-1, :, :-1]
    dw = torch.diff(vol, dim=-1)[..., :-1, :-1, :]
    return torch.sqrt(dd.square() + dh.square() + dw.square() + ISO_EPS).mean()


def eager_l1_loss(vol: torch.Tensor) -> torch.Tensor:
    """Plain-PyTorch per-axis L1 TV, its three sums added into one loss."""
    return torch.stack([torch.diff(vol, dim=axis).abs().sum() for axis in AXES]).sum()


def fieldfuse_l1_loss(vol: torch.Tensor) -> torch.Tensor:
    return fieldfuse.tv_l1_3d(vol).sum()


@dataclass(frozen=True)
class Op:
    """One TV functional as a scalar loss: fieldfuse's and the plain-PyTorch formula."""

    name: str
    fieldfuse: Callable[[torch.Tensor], torch.Tensor]
    eager: Callable[[torch.Tensor], torch.Tensor]


OPS = (
    Op("sq", fieldfuse.tv_sq_3d, eager_sq),
    Op("iso", functools.partial(fieldfuse.tv_iso_3d, eps=ISO_EPS), eager_iso),
    Op("l1", fieldfuse_l1_loss, eager_l1_loss),
)


def fwd_bwd(loss_fn: Callable) -> Callable:
    """Forward plus the input gradient; `autograd.grad` avoids accumulating into `.grad`."""
    return lambda vol: torch.autograd.grad(loss_fn(vol), vol)


def fwd_only(loss_fn: Callable) -> Callable:
    """Forward under no_grad: nothing is saved for backward, as in inference."""
    def step(vol: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return loss_fn(vol)
    return step


STEPS = {"fwd+bwd": fwd_bwd, "fwd": fwd_only}


def make_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> list:
    """Random (never zero) leaf volumes, as many as it takes to overflow the cache."""
    count = tm.rotation_count(math.prod(shape) * dtype.itemsize, device)
    return [torch.rand(shape, device=device).to(dtype).requires_grad_() for _ in range(count)]


def flat64(out: torch.Tensor | tuple) -> torch.Tensor:
    parts = out if isinstance(out, tuple) else (out,)
    return torch.cat([part.detach().double().flatten() for part in parts])


def relative_error(ff_step: Callable, eager_step: Callable, vol: torch.Tensor) -> float | None:
    """‖fieldfuse − eager float64‖ / ‖eager float64‖ over the step's outputs (loss or gradient)."""
    try:
        got = flat64(ff_step(vol))
        ref = flat64(eager_step(vol.detach().double().requires_grad_()))
    except Exception:  # noqa: BLE001 -- the timing cell already reports fieldfuse's error
        return None
    return (torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref)).item()


def medians(row: dict[str, Any]) -> dict[str, float | None]:
    return {name: result["stats"] and result["stats"].median_ms
            for name, result in row["results"].items()}


def derive(row: dict[str, Any], copy_gbps: float) -> None:
    """Add speedups, effective bandwidth over the declared floor and its share of copy bandwidth."""
    ms = medians(row)
    row["speedup_vs_eager"] = tm.ratio(ms["eager"], ms["fieldfuse"])
    row["speedup_vs_compile"] = tm.ratio(ms["compile"], ms["fieldfuse"])
    row["gbps"] = tm.ratio(row["floor_bytes"] / tm.GB, ms["fieldfuse"] and ms["fieldfuse"] * 1e-3)
    row["pct_copy"] = row["gbps"] and 100 * row["gbps"] / copy_gbps


def run_case(op: Op, pass_name: str, inputs: list, compiled: Callable | None,
             budget: tm.Budget) -> dict[str, Any]:
    """Time fieldfuse, eager and (if given) compiled for one op, pass, shape and dtype."""
    make_step = STEPS[pass_name]
    steps = {"fieldfuse": make_step(op.fieldfuse), "eager": make_step(op.eager),
             "compile": compiled and make_step(compiled)}
    vol = inputs[0]
    return {
        "op": op.name, "pass": pass_name, "shape": list(vol.shape),
        "dtype": DTYPE_LABELS[vol.dtype], "inputs_rotated": len(inputs),
        "floor_bytes": TRANSFERS_PER_VOXEL[pass_name] * vol.numel() * vol.element_size(),
        "rel_err": relative_error(steps["fieldfuse"], steps["eager"], vol),
        "results": {name: (tm.measure(step, inputs, budget, memory=False) if step
                           else {"stats": None})
                    for name, step in steps.items()},
    }


def progress(row: dict[str, Any]) -> None:
    cells = [f"{name} {tm.fmt_num(ms)}" for name, ms in medians(row).items()]
    print(f"  {row['op']:>3} {row['pass']:<7} {tm.shape_label(row['shape']):>8} {row['dtype']}: "
          + ", ".join(cells) + " ms", file=sys.stderr, flush=True)


def run_shape(shape: tuple[int, ...], args: argparse.Namespace, copy_gbps: float) -> list[dict]:
    """Every op, pass and dtype at one shape.

    Dynamo is reset per shape so each shape compiles afresh with static shapes: a shared cache
    would pass dynamo's recompile limit and silently fall back to eager.
    """
    torch._dynamo.reset()
    compiled = {op.name: torch.compile(op.eager, fullgraph=True, dynamic=False) for op in OPS}
    rows = []
    for dtype in args.dtypes:
        inputs = make_inputs(shape, dtype, args.device)
        use_compile = args.compile and dtype in COMPILE_DTYPES
        for op in OPS:
            for pass_name in STEPS:
                row = run_case(op, pass_name, inputs, compiled[op.name] if use_compile else None,
                               args.budget)
                derive(row, copy_gbps)
                progress(row)
                rows.append(row)
        del inputs
        if args.device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def table_row(row: dict[str, Any]) -> list[str]:
    ms = medians(row)
    ff = row["results"]["fieldfuse"]["stats"]
    spread = f"{tm.fmt_num(ff.p10_ms)}–{tm.fmt_num(ff.p90_ms)}" if ff else tm.MISSING
    return [row["op"], tm.shape_label(row["shape"]), row["dtype"], tm.fmt_num(ms["fieldfuse"]),
            spread, tm.fmt_num(ms["eager"]), tm.fmt_num(ms["compile"]),
            tm.fmt(row["speedup_vs_eager"], ".1f", "×"),
            tm.fmt(row["speedup_vs_compile"], ".1f", "×"), tm.fmt_num(row["gbps"]),
            tm.fmt(row["pct_copy"], ".0f", "%"), tm.fmt(row["rel_err"], ".1e")]


def pass_table(rows: list[dict], pass_name: str) -> str:
    per_voxel = TRANSFERS_PER_VOXEL[pass_name]
    title = (f"### {pass_name} (floor: {per_voxel} element transfers per voxel, "
             f"{4 * per_voxel} B fp32 / {2 * per_voxel} B bf16)")
    body = [table_row(row) for row in rows if row["pass"] == pass_name]
    return title + "\n\n" + tm.markdown_table(TABLE_HEADERS, body)


def error_notes(rows: list[dict]) -> list[str]:
    return [f"- {row['op']} {row['pass']} {tm.shape_label(row['shape'])} {row['dtype']} "
            f"{name}: {result['error']}"
            for row in rows for name, result in row["results"].items() if "error" in result]


def summary(env: dict[str, Any], copy: dict[str, Any], elapsed_s: float) -> str:
    """Header line, copy bandwidth, fieldfuse build and (on CPU) fieldfuse's thread count."""
    build = env["fieldfuse_build"] or {}
    threads = ("" if "gpu" in env else
               f" fieldfuse OpenMP threads: {build.get('openmp_max_threads', 'unknown')}.")
    return (tm.header_line("fieldfuse tv benchmark", env) + "\n\n"
            f"Copy bandwidth (bytes read + written, median): {copy['gbps']:.0f} GB/s."
            f"{threads} fieldfuse {env['fieldfuse']}; build {build}. Run took {elapsed_s:.0f} s.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = tm.bench_parser(__doc__)
    args = tm.parse_bench_args(parser, argv)
    args.dtypes = CPU_DTYPES if args.cpu else GPU_DTYPES
    args.shapes = QUICK_SHAPES if args.quick else CPU_SHAPES if args.cpu else GPU_SHAPES
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    began = time.perf_counter()
    torch.manual_seed(SEED)
    env = tm.fieldfuse_environment(args.device)
    copy = tm.copy_bandwidth(args.device, args.copy_bytes, args.budget)
    print(f"copy bandwidth {copy['gbps']:.0f} GB/s", file=sys.stderr, flush=True)
    rows = [row for shape in args.shapes for row in run_shape(shape, args, copy["gbps"])]
    elapsed_s = time.perf_counter() - began
    tables = [pass_table(rows, pass_name) for pass_name in STEPS]
    notes = error_notes(rows)
    markdown = "\n\n".join([summary(env, copy, elapsed_s), *tables])
    stem = f"tv_{args.device.type}" + ("_quick" if args.quick else "")
    payload = {"env": env, "copy_bandwidth": copy, "elapsed_s": elapsed_s, "rows": rows}
    tm.publish(args.out, stem, payload, markdown, notes)


if __name__ == "__main__":
    main()
