# SPDX-License-Identifier: Apache-2.0
"""The layout table of bench_kplanes.py: each K-Planes function with NCHW planes against the same
call with channels-last planes (issue 12's target: NCHW within 15% of channels-last).

Every function that takes planes, fp32 and bf16, forward and forward+backward, at both configs;
CUDA-event medians over inputs rotated past the cache, as the kernel table. On CUDA each call is
also replayed from a CUDA graph (device time): the short calls' eager times carry host overhead
that varies from run to run, so the target is judged on the graphed times where there are some.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

import torch

import _timing as tm
from _timing import graphed, measure, median, ms_cell
import fieldfuse

TARGET_RATIO = 1.15
# Taps per point of the with_taps rows: a training batch plus a quarter as many TV tap points.
TAP_FRACTION = 4
H = 0.01
HEADERS = ("function", "config", "dtype", "pass", "NCHW ms", "channels-last ms", "NCHW / CL",
           "NCHW graphed ms", "CL graphed ms", "graphed NCHW / CL", "≤ 1.15")


@dataclass(frozen=True)
class Function:
    """A timed call: `call(s)` returns the outputs of a set; `configs` limits where it runs."""

    name: str
    call: Callable[[Any], Any]
    configs: tuple[str, ...] = ("tomography", "production")


def _planes3(s) -> list[torch.Tensor]:
    """The first tilt's three planes of each level, for the axis-aligned kplanes."""
    return [p[:3] for p in s.planes]


FUNCTIONS = (
    Function("kplanes_tilted", lambda s: fieldfuse.kplanes_tilted(s.pts, s.rotations, s.planes)),
    Function("kplanes", lambda s: fieldfuse.kplanes(s.pts, _planes3(s))),
    Function("kplanes_tilted_taps",
             lambda s: fieldfuse.kplanes_tilted_taps(s.pts[: s.pts.shape[0] // TAP_FRACTION],
                                                     s.rotations, s.planes, H)),
    Function("kplanes_tilted_with_taps",
             lambda s: fieldfuse.kplanes_tilted_with_taps(
                 s.pts, s.pts[: s.pts.shape[0] // TAP_FRACTION], s.rotations, s.planes, H)),
    Function("plane_tv", lambda s: fieldfuse.plane_tv(s.planes, s.rotations.shape[0])),
)


def _loss(out) -> torch.Tensor:
    outs = (out,) if isinstance(out, torch.Tensor) else out
    return sum(o.float().sum() for o in outs)


def _step(fn: Function, pass_name: str) -> Callable:
    if pass_name == "fwd":
        def forward(s):
            with torch.no_grad():
                return fn.call(s)
        return forward
    # Gradients to every leaf the call reads (plane_tv reads no points, kplanes no rotations).
    return lambda s: torch.autograd.grad(_loss(fn.call(s)), s.leaves(), allow_unused=True)


def layout_rows(cfg, dtype: torch.dtype, sets, args: argparse.Namespace,
                dtype_label: str) -> list[dict[str, Any]]:
    """Every function of FUNCTIONS at one config and dtype, on the NCHW and channels-last sets."""
    rows = []
    for fn in FUNCTIONS:
        if cfg.name not in fn.configs:
            continue
        for pass_name in ("fwd", "fwd+bwd"):
            step = _step(fn, pass_name)
            layouts = {"NCHW": sets.nchw, "channels_last": sets.channels_last}
            results = {name: measure(step, s, args.budget, memory=False)
                       for name, s in layouts.items()}
            if args.device.type == "cuda":
                results |= {f"{name} graphed": _graphed_measure(step, s, args)
                            for name, s in layouts.items()}
            ratio = tm.ratio(median(results["NCHW"]), median(results["channels_last"]))
            graphed_ratio = tm.ratio(median(results.get("NCHW graphed")),
                                     median(results.get("channels_last graphed")))
            row = {"function": fn.name, "config": cfg.name, "config_label": cfg.label,
                   "dtype": dtype_label, "pass": pass_name, "results": results, "ratio": ratio,
                   "graphed_ratio": graphed_ratio}
            print(f"  layout {fn.name} {cfg.name} {dtype_label} {pass_name}: "
                  f"NCHW {ms_cell(results['NCHW'])} ms, channels-last "
                  f"{ms_cell(results['channels_last'])} ms", flush=True)
            rows.append(row)
    return rows


def _graphed_measure(step: Callable, sets, args: argparse.Namespace) -> dict[str, Any]:
    try:
        replay = graphed(step, sets)
    except Exception as err:  # noqa: BLE001 -- a failed capture is a reported cell
        return tm.failure(err)
    result = measure(replay, sets, args.budget, memory=False)
    del replay
    tm.release(args.device)
    return result


def _judged(row: dict[str, Any]) -> str:
    ratio = row.get("graphed_ratio") or row["ratio"]
    return tm.MISSING if ratio is None else ("yes" if ratio <= TARGET_RATIO else "NO")


def layout_table(rows: list[dict[str, Any]]) -> str:
    body = [[r["function"], r["config"], r["dtype"], r["pass"], ms_cell(r["results"]["NCHW"]),
             ms_cell(r["results"]["channels_last"]), tm.fmt(r["ratio"], ".2f"),
             ms_cell(r["results"].get("NCHW graphed")),
             ms_cell(r["results"].get("channels_last graphed")),
             tm.fmt(r.get("graphed_ratio"), ".2f"), _judged(r)]
            for r in rows]
    return ("### Plane layouts: NCHW against channels-last planes (same inputs; fieldfuse stages "
            "NCHW levels channels-last in its workspace, Note [plane staging]; target NCHW ≤ 1.15× "
            "channels-last)\n\n" + tm.markdown_table(HEADERS, body))


def layout_errors(rows: list[dict[str, Any]]) -> list[str]:
    return [f"- layout {r['function']} {r['config']} {r['dtype']} {r['pass']} {layout}: "
            f"{result['error']}"
            for r in rows for layout, result in r["results"].items() if "error" in result]
