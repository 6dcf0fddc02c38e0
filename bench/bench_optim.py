# SPDX-License-Identifier: Apache-2.0
"""Times one optimiser step of fieldfuse.optim.FusedAdam against PyTorch's Adam with
clip_grad_norm_ and CosineAnnealingLR, the step the K-Planes reconstruction takes (issue 14).

The parameters are those of the spec's reference field: three K-Planes plane stacks of
12 × 8 × 300 × 300 float32 (T·levels, channels, plane resolution) plus the small tensors of the
decoder and the pose (a few hundred elements). Gradients are filled once and stay put; each
timed call is a whole step: clip the global gradient norm to 1, Adam (β = 0.9, 0.999, eps 1e-8),
advance the cosine schedule. Implementations:

- fieldfuse: `FusedAdam(max_grad_norm=1, total_steps=T)`, eager and captured in a CUDA graph;
- torch fused: `clip_grad_norm_(foreach=True)` + `Adam(fused=True)` + `CosineAnnealingLR.step()`;
- torch foreach: the same with `Adam(foreach=True)` (torch's default on CUDA);
- torch fused graphed: `clip_grad_norm_` + `Adam(fused=True, capturable=True)` captured in a CUDA
  graph without the scheduler (a Python-side rate cannot be captured), a lower bound for torch.

GB/s counts the bytes fieldfuse's step must move: the norm pass reads g, the update reads g, p,
m, v and writes p, m, v (8 accesses of 4 bytes per element); torch's steps move more (clipping
writes the gradients back), and the same count is used for every row so the column compares time.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import torch

import _timing as tm
from _timing import graphed, measure, median, ms_cell
from fieldfuse.optim import FusedAdam

SEED = 0
BIG_SHAPES = {"gpu": [(12, 8, 300, 300)] * 3, "cpu": [(12, 8, 64, 64)] * 3,
              "quick": [(2, 2, 16, 16)] * 3}
# Decoder Linear(8 → 1) weight and bias, a hidden layer, 41 projections' in-plane angles and
# shifts, the tilt rotations: the tensors the reference run optimises besides the planes.
SMALL_SHAPES = [(8, 8), (8,), (1, 8), (1,), (41, 2), (41, 2), (41,), (4, 3)]
LRS = {"planes": 1e-2, "small": 1e-3}
MAX_GRAD_NORM = 1.0
TOTAL_STEPS = 10**6  # the rate barely decays while timing, but the schedule is evaluated
BYTES_PER_ELEMENT = 8 * 4


def make_params(shapes: list[tuple[int, ...]], device: torch.device) -> list[torch.Tensor]:
    params = []
    for shape in shapes:
        p = torch.randn(shape, device=device).requires_grad_()
        p.grad = torch.randn_like(p)  # random, never zeros (METHOD.md)
        params.append(p)
    return params


def groups(params: list[torch.Tensor]) -> list[dict[str, Any]]:
    return [{"params": params[:3], "lr": LRS["planes"]}, {"params": params[3:], "lr": LRS["small"]}]


def fieldfuse_step(params) -> Callable:
    opt = FusedAdam(groups(params), max_grad_norm=MAX_GRAD_NORM, total_steps=TOTAL_STEPS)
    return lambda _x: opt.step()


def torch_step(params, **adam) -> Callable:
    opt = torch.optim.Adam(groups(params), **adam)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=TOTAL_STEPS)

    def step(_x):
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM, foreach=True)
        opt.step()
        sched.step()

    return step


def torch_graphable_step(params) -> Callable:
    opt = torch.optim.Adam(groups(params), fused=True, capturable=True)

    def step(_x):
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM, foreach=True)
        opt.step()

    return step


def implementations(cuda: bool) -> dict[str, Callable[[list], Callable]]:
    impls = {"fieldfuse": fieldfuse_step,
             "torch foreach": lambda p: torch_step(p, foreach=True)}
    if cuda:
        impls["torch fused"] = lambda p: torch_step(p, fused=True)
    else:
        impls["torch single-tensor"] = lambda p: torch_step(p, foreach=False)
    return impls


def run(shapes, args) -> list[dict[str, Any]]:
    device = args.device
    cuda = device.type == "cuda"
    elements = sum(torch.Size(s).numel() for s in shapes)
    token = [torch.empty(1, device=device)]  # the harness reads the device of its inputs
    results = {}
    builders = dict(implementations(cuda))
    if cuda:
        builders["fieldfuse graphed"] = lambda p: graphed(fieldfuse_step(p), token)
        builders["torch fused graphed"] = lambda p: graphed(torch_graphable_step(p), token)
    for name, build in builders.items():
        print(f"{name}", file=sys.stderr, flush=True)
        try:
            params = make_params(shapes, device)
            step = build(params)
        except Exception as err:  # noqa: BLE001 -- a failed build is a reported cell
            results[name] = tm.failure(err)
            continue
        results[name] = measure(step, token, args.budget, memory=False)
        del params, step
        tm.release(device)
    return [{"elements": elements, "tensors": len(shapes), "results": results}]


def table(rows: list[dict], copy: dict[str, Any]) -> str:
    headers = ["implementation", "ms", "p10–p90", "time ÷ fieldfuse", "GB/s", "% of copy"]
    body = []
    for row in rows:
        base = median(row["results"].get("fieldfuse"))
        for name, result in row["results"].items():
            ms = median(result)
            stats = result.get("stats")
            spread = f"{stats.p10_ms:.3g}–{stats.p90_ms:.3g}" if stats else tm.MISSING
            gbps = None if ms is None else row["elements"] * BYTES_PER_ELEMENT / (ms * 1e-3) / tm.GB
            share = tm.ratio(gbps, copy["gbps"])
            body.append([name, ms_cell(result), spread, tm.fmt(tm.ratio(ms, base), ".2f", "×"),
                         tm.fmt(gbps, ".0f"), tm.fmt(None if share is None else 100 * share, ".0f",
                                                     "%")])
    return tm.markdown_table(headers, body)


def summary(env: dict[str, Any], shapes, rows, elapsed_s: float) -> str:
    build = env["fieldfuse_build"] or {}
    big = ", ".join(tm.shape_label(s) if len(s) >= 3 else str(s) for s in shapes[:3])
    return (tm.header_line("fieldfuse optim benchmark", env) + "\n\n"
            f"fieldfuse {env['fieldfuse']}; build {build}. Run took {elapsed_s:.0f} s.\n\n"
            f"One Adam step with global-norm clipping (max norm {MAX_GRAD_NORM}) and cosine decay "
            f"over {rows[0]['tensors']} float32 tensors, {rows[0]['elements']:,} elements: planes "
            f"{big} (lr {LRS['planes']}) and {len(shapes) - 3} small tensors (lr {LRS['small']}). "
            "GB/s: 32 bytes per element (fieldfuse's traffic) over the median time, for every row. "
            "torch fused graphed leaves the scheduler out (not capturable).")


def main(argv: list[str] | None = None) -> None:
    parser = tm.bench_parser(__doc__)
    args = tm.parse_bench_args(parser, argv)
    size = "quick" if args.quick else "cpu" if args.cpu else "gpu"
    shapes = BIG_SHAPES[size] + SMALL_SHAPES
    began = time.perf_counter()
    torch.manual_seed(SEED)
    env = tm.fieldfuse_environment(args.device)
    copy = tm.copy_bandwidth(args.device, args.copy_bytes, args.budget)
    rows = run(shapes, args)
    elapsed_s = time.perf_counter() - began
    markdown = "\n\n".join([summary(env, shapes, rows, elapsed_s), table(rows, copy)])
    notes = [f"- {name}: {result['error']}" for row in rows
             for name, result in row["results"].items() if "error" in result]
    payload = {"env": env, "shapes": shapes, "copy_bandwidth": copy, "elapsed_s": elapsed_s,
               "rows": rows}
    stem = "optim_" + ("cuda" if args.device.type == "cuda" else "cpu") + (
        "_quick" if args.quick else "")
    tm.publish(args.out, stem, payload, markdown, notes)


if __name__ == "__main__":
    main()
