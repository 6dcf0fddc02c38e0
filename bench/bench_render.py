# SPDX-License-Identifier: Apache-2.0
"""Times fieldfuse's packed-ray volume rendering and line integral against PyTorch eager.

Two ray layouts at the issue's size: R = 65 536 rays of 256 samples each, and R = 65 536 rays of
lengths uniform in 1..512; C = 3 colour channels. Volume rendering is timed as inference (rgb and
opacity under no_grad), inference with the per-sample weights, and training fwd+bwd; the line
integral (scalar values) as fwd and fwd+bwd. The baselines are written here in plain PyTorch on
the same packed inputs (the cumsum formulation, along [R, S] rows where every ray has S samples;
index_add_ for ragged rays and for the line integral) and run eagerly, and on CUDA also
under torch.compile.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

import _timing as tm
from _timing import failure, graphed, measure, median, ms_cell, release
import fieldfuse

SEED = 0


@dataclass(frozen=True)
class Config:
    """A packed batch of rays: `rays` rays of `samples` samples each, or, with `max_len`, of
    lengths drawn uniformly from 1..max_len; `channels` colour channels."""

    name: str
    rays: int
    samples: int
    channels: int
    max_len: int | None = None

    @property
    def label(self) -> str:
        rays = f"{self.rays:,}".replace(",", " ")
        per_ray = f"1..{self.max_len}" if self.max_len else str(self.samples)
        return f"R={rays} × {per_ray}"


# The sizes: N = 16.8 M samples either way (the ragged mean is 256.5), C = 3.
GPU_CONFIGS = (Config("uniform", 65_536, 256, 3), Config("ragged", 65_536, 256, 3, 512))
# Same ray lengths, 16× fewer rays: PyTorch CPU eager fwd+bwd stays well under a second.
CPU_CONFIGS = (Config("uniform", 4_096, 256, 3), Config("ragged", 4_096, 256, 3, 512))
# --quick: both layouts at sizes a 2-core smoke test runs in seconds.
QUICK_CONFIGS = (Config("uniform", 512, 32, 3), Config("ragged", 512, 32, 3, 64))

# 16-bit inputs are CUDA-only (fieldfuse.render), so bf16 rows (inference only) are CUDA-only.
GPU_EXTRA_DTYPES = (torch.bfloat16,)
DTYPE_LABELS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
                torch.float64: "fp64"}
HALF_DTYPES = (torch.float16, torch.bfloat16)

# Sample data: δ uniform in [0.5, 1.5]·2/S (a ray of S samples spans about 2 units, the box
# [−1, 1]³), σ uniform in [0, SIGMA_MAX]. Then Σσδ ≈ 8 over S samples: rays of S samples end near
# T = 3e-4, short ragged rays stay partly transparent, and no T underflows to 0, so with
# threshold 0 fieldfuse composites every sample, as the eager baselines do.
SIGMA_MAX = 8.0
# Early termination is off in every timed row (see the summary).
THRESHOLD = 0.0

RENDER_PASSES = ("inference", "inference+weights", "fwd+bwd")
# fieldfuse also timed with validate=True (its default: checks the offsets, one device sync).
VALIDATED = "inference, validated"
# fwd+bwd also replayed from a CUDA graph, fieldfuse and eager alike: device time without the
# host's per-call overhead (Python, autograd, dispatch), which a graphed training step removes.
GRAPHED = "fwd+bwd, CUDA graph"
LINE_PASSES = ("fwd", "fwd+bwd")
# torch.compile baselines (fp32 only): the passes the issue sets targets for, which keeps a full
# CUDA run near two minutes (each pass and layout is its own static compile).
COMPILE_PASSES = {"volume_render": ("inference", "fwd+bwd"), "line_integral": ("fwd+bwd",)}

# specs/render.md, PyTorch eager on an H100 (fp32, R = 65 536 × 256, C = 3), and the issue's
# targets for fieldfuse at that size.
SPEC_EAGER_MS = {("volume_render", "inference"): 0.93, ("volume_render", "fwd+bwd"): 2.57,
                 ("line_integral", "fwd+bwd"): 0.67}
TARGET_PCT_COPY = 70.0  # volume render inference, at its 20 B/sample floor
TARGET_VS_EAGER = 5.0  # volume render fwd+bwd, line integral fwd+bwd

TABLE_HEADERS = ("rays", "dtype", "pass", "fieldfuse ms", "p10–p90", "eager ms", "× eager",
                 "compile ms", "× compile", "B/sample", "GB/s", "% copy", "rel err",
                 "eager rel err")


# --- inputs --------------------------------------------------------------------------------------


@dataclass
class Layout:
    """The ray packing, shared by every input set of a config: offsets for fieldfuse, and the
    per-sample ray ids and per-ray first samples the eager formulation indexes with."""

    offsets: Tensor  # [R + 1] int64
    ray_ids: Tensor  # [N] int64, eager only
    starts: Tensor  # [R] int64 first sample of each ray, clamped into [0, N), eager only
    uniform: int | None  # samples per ray when every ray has as many (the eager [R, S] layout)

    @property
    def num_rays(self) -> int:
        return self.offsets.numel() - 1

    @property
    def num_samples(self) -> int:
        return self.ray_ids.numel()


def ray_ids_from(offsets: Tensor, num_samples: int) -> Tensor:
    """Each sample's ray. `output_size` spares repeat_interleave its device sync."""
    rays = torch.arange(offsets.numel() - 1, device=offsets.device)
    return torch.repeat_interleave(rays, offsets.diff(), output_size=num_samples)


def make_layout(cfg: Config, device: torch.device) -> Layout:
    if cfg.max_len:
        lengths = torch.randint(1, cfg.max_len + 1, (cfg.rays,), device=device)
    else:
        lengths = torch.full((cfg.rays,), cfg.samples, device=device, dtype=torch.int64)
    offsets = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
    num_samples = int(offsets[-1])
    starts = offsets[:-1].clamp(max=max(num_samples - 1, 0))
    return Layout(offsets, ray_ids_from(offsets, num_samples), starts,
                  None if cfg.max_len else cfg.samples)


def random_deltas(cfg: Config, n: int, device: torch.device) -> Tensor:
    return (torch.rand(n, device=device) + 0.5) * (2.0 / cfg.samples)


@dataclass
class RenderSet:
    """One volume-render call's inputs; `grad_rgb` weighs the training loss (rgb·g).sum()."""

    layout: Layout
    sigmas: Tensor  # [N], requires grad
    rgbs: Tensor  # [N, C], requires grad
    delta_ts: Tensor  # [N]
    grad_rgb: Tensor  # [R, C]

    @property
    def device(self) -> torch.device:
        return self.sigmas.device

    def to(self, dtype: torch.dtype) -> RenderSet:
        """The same values in another dtype, as fresh leaves."""
        def leaf(t: Tensor) -> Tensor:
            return t.detach().to(dtype).requires_grad_()
        return RenderSet(self.layout, leaf(self.sigmas), leaf(self.rgbs),
                         self.delta_ts.detach().to(dtype), self.grad_rgb.to(dtype))


@dataclass
class LineSet:
    """One line-integral call's inputs; `grad_out` weighs the training loss (P·g).sum()."""

    layout: Layout
    values: Tensor  # [N], requires grad
    delta_ts: Tensor  # [N]
    grad_out: Tensor  # [R]

    @property
    def device(self) -> torch.device:
        return self.values.device

    def to(self, dtype: torch.dtype) -> LineSet:
        return LineSet(self.layout, self.values.detach().to(dtype).requires_grad_(),
                       self.delta_ts.to(dtype), self.grad_out.to(dtype))


def make_render_sets(cfg: Config, layout: Layout, dtype: torch.dtype,
                     device: torch.device) -> list[RenderSet]:
    """As many random sets as it takes for the bytes a call reads to overflow the cache."""
    n, r, c = layout.num_samples, layout.num_rays, cfg.channels
    sets = []
    for _ in range(tm.rotation_count(n * (2 + c) * dtype.itemsize, device)):
        sigmas = torch.rand(n, device=device) * SIGMA_MAX
        sets.append(RenderSet(layout, sigmas, torch.rand(n, c, device=device),
                              random_deltas(cfg, n, device), torch.randn(r, c, device=device))
                    .to(dtype))
    return sets


def make_line_sets(cfg: Config, layout: Layout, device: torch.device) -> list[LineSet]:
    n = layout.num_samples
    return [LineSet(layout, torch.rand(n, device=device), random_deltas(cfg, n, device),
                    torch.randn(layout.num_rays, device=device)).to(torch.float32)
            for _ in range(tm.rotation_count(n * 2 * 4, device))]


# --- the plain-PyTorch baselines -----------------------------------------------------------------


def eager_volume_render(sigmas: Tensor, rgbs: Tensor, delta_ts: Tensor, ray_ids: Tensor,
                        starts: Tensor, num_rays: int, weights: bool,
                        uniform: int | None = None) -> tuple[Tensor, ...]:
    """Emission-absorption rendering with cumsum, no early termination.

    T_s = exp(−Σ σδ over the ray's samples before s). When every ray has `uniform` samples the
    packed tensors are viewed as [R, S] and the exclusive prefix sum runs along each ray (the
    common NeRF formulation, and the spec's baseline). Otherwise it runs over all N samples, minus
    its value at each ray's first sample, and rgb and opacity are summed with index_add_; that
    prefix is accumulated in float64: over the 16.8 M samples here it grows to about 5·10⁵, where
    float32 loses each ray's share of it (1% error in T on the CPU; the cumsum's backward sums
    over all later samples in the same way). 16-bit inputs are computed in float32, as a careful
    user would.
    """
    dtype = sigmas.dtype
    if dtype in HALF_DTYPES:
        sigmas, rgbs, delta_ts = sigmas.float(), rgbs.float(), delta_ts.float()
    tau = sigmas * delta_ts
    if uniform is not None:
        tau = tau.view(num_rays, uniform)
        w = -torch.expm1(-tau) * torch.exp(-(torch.cumsum(tau, 1) - tau))
        rgb = (w[..., None] * rgbs.view(num_rays, uniform, -1)).sum(1)
        out = (rgb.to(dtype), w.sum(1).to(dtype))
        return out + (w.reshape(-1).to(dtype),) if weights else out
    before = torch.cumsum(tau, 0, dtype=torch.float64) - tau
    log_t = (before - before[starts][ray_ids]).to(tau.dtype)
    w = -torch.expm1(-tau) * torch.exp(-log_t)  # α·T, α = 1 − exp(−σδ)
    rgb = tau.new_zeros(num_rays, rgbs.shape[1]).index_add_(0, ray_ids, w[:, None] * rgbs)
    opacity = tau.new_zeros(num_rays).index_add_(0, ray_ids, w)
    out = (rgb.to(dtype), opacity.to(dtype))
    return out + (w.to(dtype),) if weights else out


def eager_line_integral(values: Tensor, delta_ts: Tensor, ray_ids: Tensor,
                        num_rays: int) -> Tensor:
    return values.new_zeros(num_rays).index_add_(0, ray_ids, values * delta_ts)


# --- the timed calls -----------------------------------------------------------------------------


Render = Callable[[RenderSet], tuple[Tensor, ...]]
Line = Callable[[LineSet], Tensor]


def fieldfuse_render(weights: bool, validate: bool = False) -> Render:
    """ts is not passed, so there is no depth: rgb and opacity (and the weights if asked)."""
    def render(s: RenderSet) -> tuple[Tensor, ...]:
        out = fieldfuse.volume_render(s.sigmas, s.rgbs, s.delta_ts, None, s.layout.offsets,
                                      THRESHOLD, weights=weights, validate=validate)
        return (out.rgb, out.opacity) + ((out.weights,) if weights else ())
    return render


def baseline_render(fn: Callable, weights: bool) -> Render:
    return lambda s: fn(s.sigmas, s.rgbs, s.delta_ts, s.layout.ray_ids, s.layout.starts,
                        s.layout.num_rays, weights, s.layout.uniform)


def fieldfuse_line(s: LineSet) -> Tensor:
    return fieldfuse.line_integral(s.values, s.delta_ts, s.layout.offsets, validate=False)


def baseline_line(fn: Callable) -> Line:
    return lambda s: fn(s.values, s.delta_ts, s.layout.ray_ids, s.layout.num_rays)


def no_grad_step(fn: Callable) -> Callable:
    """Under no_grad: nothing is saved for backward, as in inference."""
    def step(s):
        with torch.no_grad():
            return fn(s)
    return step


def render_train_step(render: Render) -> Callable:
    """loss = (rgb·g).sum(); its gradients to σ and rgb (`autograd.grad` does not accumulate)."""
    def step(s: RenderSet) -> tuple[Tensor, ...]:
        rgb = render(s)[0]
        return torch.autograd.grad((rgb * s.grad_rgb).sum(), (s.sigmas, s.rgbs))
    return step


def line_train_step(line: Line) -> Callable:
    """loss = (P·g).sum(); its gradient to the values (δ is data)."""
    return lambda s: torch.autograd.grad((line(s) * s.grad_out).sum(), (s.values,))


def render_steps(impl: Callable | None, pass_name: str) -> Callable:
    """The pass's step for a baseline function, or for fieldfuse where `impl` is None."""
    weights = pass_name == "inference+weights"
    render = fieldfuse_render(weights) if impl is None else baseline_render(impl, weights)
    return render_train_step(render) if pass_name == "fwd+bwd" else no_grad_step(render)


def line_steps(impl: Callable | None, pass_name: str) -> Callable:
    line = fieldfuse_line if impl is None else baseline_line(impl)
    return line_train_step(line) if pass_name == "fwd+bwd" else no_grad_step(line)


# --- measuring -----------------------------------------------------------------------------------


def as_tuple(out: Tensor | Sequence[Tensor]) -> tuple[Tensor, ...]:
    return (out,) if isinstance(out, Tensor) else tuple(out)


def relative_error(step: Callable, s: Any, expected: tuple[Tensor, ...] | None) -> float | None:
    """Largest ‖out − expected‖ / ‖expected‖ over the call's outputs (None if either failed)."""
    if expected is None:
        return None
    try:
        worst = 0.0
        for got, want in zip(as_tuple(step(s)), expected, strict=True):
            diff = torch.linalg.vector_norm(got.detach().double() - want)
            worst = max(worst, (diff / torch.linalg.vector_norm(want)).item())
        return worst
    except Exception:  # noqa: BLE001 -- the timing cell reports the failure
        pass
    release(s.device)
    return None


def reference64(eager_step: Callable, s: Any) -> tuple[Tensor, ...] | None:
    """The eager step in float64 on the set's values: the yardstick for both timed sides."""
    try:
        return tuple(t.detach() for t in as_tuple(eager_step(s.to(torch.float64))))
    except Exception:  # noqa: BLE001 -- no rel err columns then
        pass
    release(s.device)
    return None


# --- bytes ---------------------------------------------------------------------------------------


def render_floor(pass_name: str, n: int, r: int, c: int, itemsize: int) -> int:
    """Declared floor: inference reads σ, δ and rgb once (C + 2 elements a sample) and writes rgb
    and opacity per ray; the weights add one write a sample; fwd+bwd is that forward, plus a
    backward that reads σ, δ, rgb again and ∂rgb per ray and writes ∂σ and ∂rgb (C + 1 a
    sample). Offsets (int64) are read once per kernel."""
    pass_name = "fwd+bwd" if pass_name == GRAPHED else pass_name
    per_sample = {"inference": c + 2, "inference+weights": c + 3, VALIDATED: c + 2,
                  "fwd+bwd": 2 * (c + 2) + c + 1}[pass_name]
    per_ray = c + 1 + (c if pass_name == "fwd+bwd" else 0)
    kernels = 2 if pass_name == "fwd+bwd" else 1
    return (per_sample * n + per_ray * r) * itemsize + kernels * 8 * (r + 1)


def line_floor(pass_name: str, n: int, r: int, itemsize: int) -> int:
    """fwd reads v and δ and writes P; the backward reads δ and ∂P and writes ∂v."""
    per_sample, per_ray, kernels = (2, 1, 1) if pass_name == "fwd" else (4, 2, 2)  # or GRAPHED
    return (per_sample * n + per_ray * r) * itemsize + kernels * 8 * (r + 1)


# --- rows ----------------------------------------------------------------------------------------


def derive(row: dict[str, Any], copy_gbps: float) -> None:
    """Speedups, effective bandwidth at the declared floor and its share of copy bandwidth."""
    ms = {name: median(result) for name, result in row["results"].items()}
    row["speedup_vs_eager"] = tm.ratio(ms["eager"], ms["fieldfuse"])
    row["speedup_vs_compile"] = tm.ratio(ms["compile"], ms["fieldfuse"])
    row["gbps"] = tm.ratio(row["floor_bytes"] / tm.GB, ms["fieldfuse"] and ms["fieldfuse"] * 1e-3)
    row["pct_copy"] = row["gbps"] and 100 * row["gbps"] / copy_gbps


def progress(row: dict[str, Any]) -> None:
    cells = [f"{name} {ms_cell(result)}" for name, result in row["results"].items()]
    print(f"  {row['family']} {row['config']} {row['dtype']} {row['pass']}: "
          + ", ".join(cells) + " ms", file=sys.stderr, flush=True)


@dataclass
class Family:
    """One op's rows at one config and dtype: how to build each implementation's step per pass,
    the passes, the compiled baseline (or None) and the declared floor."""

    name: str
    passes: tuple[str, ...]
    make_step: Callable[[Callable | None, str], Callable]
    eager_fn: Callable
    compiled_fn: Callable | None
    floor: Callable[[str], int]


def run_family(fam: Family, cfg: Config, sets: Sequence, dtype: torch.dtype,
               args: argparse.Namespace, copy_gbps: float,
               extra_validated: bool = False) -> list[dict]:
    """Every pass of one family at one config and dtype: fieldfuse, eager and (where compiled)
    torch.compile, each against the eager formula in float64 on the first set's values."""
    s0 = sets[0]
    rows = []
    for pass_name in fam.passes:
        steps = {"fieldfuse": fam.make_step(None, pass_name),
                 "eager": fam.make_step(fam.eager_fn, pass_name),
                 "compile": (fam.make_step(fam.compiled_fn, pass_name)
                             if fam.compiled_fn and pass_name in COMPILE_PASSES[fam.name]
                             else None)}
        expected = reference64(fam.make_step(fam.eager_fn, pass_name), s0)
        results = {name: measure(step, sets, args.budget) if step else {"stats": None}
                   for name, step in steps.items()}
        passes = [(pass_name, steps["fieldfuse"], results)]
        if pass_name == "fwd+bwd" and s0.device.type == "cuda":
            replays = {name: attempt(lambda step=step: graphed(step, sets))
                       for name, step in steps.items() if step and name != "compile"}
            passes.append((GRAPHED, steps["fieldfuse"], {
                name: (measure(replay, sets, args.budget) if error is None
                       else {"stats": None, "error": error})
                for name, (replay, error) in replays.items()} | {"compile": {"stats": None}}))
        if extra_validated and pass_name == "inference":
            # fieldfuse's default validate=True; the baselines' timings are shared with the row
            # above (they validate nothing).
            validated = no_grad_step(fieldfuse_render(weights=False, validate=True))
            passes.append((VALIDATED, validated, {
                "fieldfuse": measure(validated, sets, args.budget),
                "eager": results["eager"], "compile": results["compile"]}))
        for name, ff_step, res in passes:
            row = {"family": fam.name, "config": cfg.name, "label": cfg.label,
                   "dtype": DTYPE_LABELS[dtype],
                   "pass": name, "rays": s0.layout.num_rays, "samples": s0.layout.num_samples,
                   "channels": cfg.channels if fam.name == "volume_render" else 1,
                   "inputs_rotated": len(sets), "floor_bytes": fam.floor(name),
                   "rel_err": relative_error(ff_step, s0, expected),
                   "eager_rel_err": relative_error(steps["eager"], s0, expected),
                   "results": res}
            row["bytes_per_sample"] = row["floor_bytes"] / max(row["samples"], 1)
            derive(row, copy_gbps)
            progress(row)
            rows.append(row)
    return rows


def attempt(make: Callable[[], Any]) -> tuple[Any, str | None]:
    """`make()`, or None and the error (e.g. out of memory while allocating inputs)."""
    try:
        return make(), None
    except Exception as err:  # noqa: BLE001
        error = failure(err)["error"]
    return None, error


def run_config(cfg: Config, args: argparse.Namespace, copy_gbps: float) -> dict[str, Any]:
    """Both families at one config: fp32 rows, then the extra-dtype inference rows.

    Dynamo is reset per config so each compiles afresh with static shapes: a shared cache would
    pass dynamo's recompile limit and silently fall back to eager.
    """
    torch._dynamo.reset()
    compiled = ({"volume_render": torch.compile(eager_volume_render, fullgraph=True,
                                                dynamic=False),
                 "line_integral": torch.compile(eager_line_integral, fullgraph=True,
                                                dynamic=False)}
                if args.compile else {})
    entry: dict[str, Any] = {"config": cfg.name, "label": cfg.label, "rows": [], "errors": []}
    layout, error = attempt(lambda: make_layout(cfg, args.device))
    if error:
        entry["errors"].append(f"layout: {error}")
        release(args.device)
        return entry
    n, r, c = layout.num_samples, layout.num_rays, cfg.channels
    entry.update(rays=r, samples=n)
    entry["ray_ids"] = measure(lambda o: ray_ids_from(o, n), [layout.offsets], args.budget)

    def render_family(dtype: torch.dtype, passes: tuple[str, ...], compiled_fn) -> Family:
        return Family("volume_render", passes, render_steps, eager_volume_render, compiled_fn,
                      lambda p: render_floor(p, n, r, c, dtype.itemsize))

    line = Family("line_integral", LINE_PASSES, line_steps, eager_line_integral,
                  compiled.get("line_integral"), lambda p: line_floor(p, n, r, 4))
    jobs = [(render_family(torch.float32, RENDER_PASSES, compiled.get("volume_render")),
             torch.float32, lambda: make_render_sets(cfg, layout, torch.float32, args.device)),
            (line, torch.float32, lambda: make_line_sets(cfg, layout, args.device))]
    jobs += [(render_family(dtype, ("inference",), None), dtype,
              lambda dtype=dtype: make_render_sets(cfg, layout, dtype, args.device))
             for dtype in args.extra_dtypes]
    for fam, dtype, make_sets in jobs:
        sets, error = attempt(make_sets)
        if error:
            entry["errors"].append(f"{fam.name} {DTYPE_LABELS[dtype]} inputs: {error}")
            print(f"  {fam.name} {cfg.name} {DTYPE_LABELS[dtype]}: inputs failed: {error}",
                  file=sys.stderr, flush=True)
        else:
            entry["rows"] += run_family(fam, cfg, sets, dtype, args, copy_gbps,
                                        extra_validated=(fam.name == "volume_render"
                                                         and dtype == torch.float32
                                                         and cfg.max_len is None))
        del sets
        release(args.device)
    return entry


# --- report --------------------------------------------------------------------------------------


def table_row(row: dict[str, Any]) -> list[str]:
    res = row["results"]
    ff = res["fieldfuse"].get("stats")
    spread = f"{tm.fmt_num(ff.p10_ms)}–{tm.fmt_num(ff.p90_ms)}" if ff else tm.MISSING
    return [row["label"], row["dtype"], row["pass"], ms_cell(res["fieldfuse"]), spread,
            ms_cell(res["eager"]), tm.fmt(row["speedup_vs_eager"], ".1f", "×"),
            ms_cell(res["compile"]), tm.fmt(row["speedup_vs_compile"], ".1f", "×"),
            f"{row['bytes_per_sample']:.1f}", tm.fmt_num(row["gbps"]),
            tm.fmt(row["pct_copy"], ".0f", "%"), tm.fmt(row["rel_err"], ".1e"),
            tm.fmt(row["eager_rel_err"], ".1e")]


def family_table(rows: list[dict], family: str) -> str:
    if family == "volume_render":
        title = ("### Volume rendering (`fieldfuse.volume_render`, threshold 0, no depth; "
                 "floor per sample: inference 20 B fp32 / 10 B bf16, +weights 24 B, fwd+bwd 56 B)")
    else:
        title = ("### Line integral (`fieldfuse.line_integral`, scalar values; floor per sample: "
                 "fwd 8 B, fwd+bwd 16 B)")
    body = [table_row(row) for row in rows if row["family"] == family]
    return title + "\n\n" + tm.markdown_table(TABLE_HEADERS, body)


def find_row(rows: list[dict], family: str, config: str, pass_name: str) -> dict | None:
    return next((row for row in rows if row["family"] == family and row["config"] == config
                 and row["dtype"] == "fp32" and row["pass"] == pass_name), None)


def target_table(rows: list[dict], configs: Sequence[Config]) -> str:
    """The issue's targets, at both layouts; the spec's eager times are for the uniform one."""
    headers = ("target", "rays", "fieldfuse ms", "measured", "met", "eager ms (this run)",
               "spec eager ms", "× spec eager")
    goals = ((("volume_render", "inference"),
              f"volume render inference ≥ {TARGET_PCT_COPY:.0f}% of copy bandwidth at 20 B/sample"),
             (("volume_render", "fwd+bwd"),
              f"volume render fwd+bwd ≥ {TARGET_VS_EAGER:.0f}× eager"),
             (("volume_render", GRAPHED),
              f"volume render fwd+bwd ≥ {TARGET_VS_EAGER:.0f}× eager, both CUDA-graphed"),
             (("line_integral", "fwd+bwd"), f"line integral fwd+bwd ≥ {TARGET_VS_EAGER:.0f}× "
              "index_add_"),
             (("line_integral", GRAPHED), f"line integral fwd+bwd ≥ {TARGET_VS_EAGER:.0f}× "
              "index_add_, both CUDA-graphed"))
    body = []
    for (family, pass_name), goal in goals:
        for cfg in configs:
            row = find_row(rows, family, cfg.name, pass_name)
            if row is None:
                continue
            ff_ms = median(row["results"]["fieldfuse"])
            if pass_name == "inference":
                value, met = row["pct_copy"], row["pct_copy"] and row["pct_copy"] >= TARGET_PCT_COPY
                measured = tm.fmt(value, ".0f", "% copy")
            else:
                value = row["speedup_vs_eager"]
                met = value and value >= TARGET_VS_EAGER
                measured = tm.fmt(value, ".1f", "× eager")
            spec_pass = "fwd+bwd" if pass_name == GRAPHED else pass_name
            spec = SPEC_EAGER_MS[(family, spec_pass)] if cfg.max_len is None else None
            body.append([goal, row["label"], ms_cell(row["results"]["fieldfuse"]), measured,
                         tm.MISSING if value is None else ("yes" if met else "no"),
                         ms_cell(row["results"]["eager"]), tm.fmt_num(spec),
                         tm.fmt(tm.ratio(spec, ff_ms), ".1f", "×")])
    return ("### Targets (fp32; spec eager: specs/render.md, H100, uniform rays)\n\n"
            + tm.markdown_table(headers, body))


def memory_table(rows: list[dict]) -> str:
    headers = ("op", "rays", "dtype", "pass", "fieldfuse MiB", "eager MiB", "compile MiB")

    def cell(result: dict[str, Any]) -> str:
        return "OOM" if result.get("oom") else tm.fmt(result.get("peak_mib"), ".0f")

    body = [[row["family"], row["label"], row["dtype"], row["pass"],
             *(cell(row["results"][name]) for name in ("fieldfuse", "eager", "compile"))]
            for row in rows if row["pass"] not in (VALIDATED, GRAPHED)]  # graphs pre-allocate
    return ("### Peak memory (one call, above the resident inputs)\n\n"
            + tm.markdown_table(headers, body))


def error_notes(entries: list[dict]) -> list[str]:
    notes = [f"- {e['config']}: {error}" for e in entries for error in e["errors"]]
    notes += [f"- {row['family']} {row['config']} {row['dtype']} {row['pass']} {name}: "
              f"{result['error']}"
              for e in entries for row in e["rows"]
              for name, result in row["results"].items() if "error" in result]
    notes += [f"- {e['config']} ray ids: {e['ray_ids']['error']}"
              for e in entries if "error" in e.get("ray_ids", {})]
    return list(dict.fromkeys(notes))


def summary(env: dict[str, Any], copy: dict[str, Any], entries: list[dict], compiled: bool,
            elapsed_s: float) -> str:
    build = env["fieldfuse_build"] or {}
    threads = ("" if "gpu" in env else
               f" fieldfuse OpenMP threads: {build.get('openmp_max_threads', 'unknown')}.")
    ray_ids = "; ".join(f"{e['label']}: {ms_cell(e['ray_ids'])} ms" for e in entries
                        if "ray_ids" in e)
    compile_note = ("torch.compile(fullgraph=True, dynamic=False) of the same functions, fp32, "
                    "for the passes with targets" if compiled else "not timed (--no-compile)")
    return (tm.header_line("fieldfuse render benchmark", env) + "\n\n"
            f"Copy bandwidth (bytes read + written, median): {copy['gbps']:.0f} GB/s."
            f"{threads} fieldfuse {env['fieldfuse']}; build {build}. Run took {elapsed_s:.0f} s."
            "\n\n"
            "Packed rays, C = 3; σ uniform in [0, 8], δ uniform in [0.5, 1.5]·2/S (S = 256; 32 "
            "with --quick), rgb uniform in [0, 1], so Σσδ ≈ 8 over S samples and no "
            "transmittance reaches 0. "
            "Threshold 0 in every row: the eager formulation has no early termination, and "
            "fieldfuse with threshold 0 stops a ray only where T reaches exactly 0, so both "
            "composite every sample. fieldfuse is called with `validate=False` (the "
            f"`{VALIDATED}` row shows its default, which checks the offsets, on CUDA with a "
            "device sync) and without ts (no depth). The "
            f"`{GRAPHED}` rows replay the same training step, fieldfuse's and eager's alike, from "
            "a CUDA graph captured per input set: device time without the host's per-step "
            "overhead (Python, autograd, op dispatch), which otherwise bounds a step this short. "
            "Training: loss = Σ rgb·g (g random), "
            "gradients to σ and rgb; line integral: Σ P·g, gradient to the values.\n\n"
            "Eager (written here, plain PyTorch): τ = σδ and w = −expm1(−τ)·exp(−log T), with "
            "log T the exclusive prefix sum of τ along the ray. Uniform rays: the packed tensors "
            "viewed as [R, S], a cumsum along each ray, and sums over it (the spec's cumsum "
            "formulation). Ragged rays: a cumsum over all N samples in float64 minus its value "
            "at each ray's first sample, and rgb and opacity by index_add_ over per-sample ray "
            "ids. bf16 inputs are upcast to fp32. The line integral is index_add_ of v·δ over "
            "the ray ids. The ray ids and ray starts "
            "are built once per layout, outside the timed calls (repeat_interleave over the "
            f"offsets: {ray_ids}). compile: {compile_note}.\n\n"
            "Floors (bytes per sample, fp32; per-ray terms — offsets, rgb, opacity, ∂rgb — are "
            "added to the total for GB/s and B/sample, < 1% at 256 samples a ray): inference "
            "reads σ, δ, rgb×3 = 20 B; +weights writes w = 24 B; fwd+bwd = that forward (20 B) "
            "+ a backward that reads σ, δ, rgb×3 again (20 B) and writes ∂σ, ∂rgb×3 (16 B) = "
            "56 B (the spec's ≈60 B). Line integral: fwd reads v, δ = 8 B; fwd+bwd adds the "
            "backward's read of δ and write of ∂v = 16 B. GB/s = floor / fieldfuse median; "
            "% copy = that over the copy bandwidth. rel err: ‖out − eager in float64‖ / ‖eager "
            "in float64‖, max over the call's outputs (rgb, opacity[, weights]; or ∂σ, ∂rgb; or "
            "P; or ∂v), on the same values; eager rel err: the same for the eager baseline.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = tm.bench_parser(__doc__)
    args = tm.parse_bench_args(parser, argv)
    args.extra_dtypes = () if args.cpu else GPU_EXTRA_DTYPES
    args.configs = QUICK_CONFIGS if args.quick else CPU_CONFIGS if args.cpu else GPU_CONFIGS
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    began = time.perf_counter()
    torch.manual_seed(SEED)
    env = tm.fieldfuse_environment(args.device)
    copy = tm.copy_bandwidth(args.device, args.copy_bytes, args.budget)
    print(f"copy bandwidth {copy['gbps']:.0f} GB/s", file=sys.stderr, flush=True)
    entries = [run_config(cfg, args, copy["gbps"]) for cfg in args.configs]
    torch._dynamo.reset()
    rows = [row for entry in entries for row in entry["rows"]]
    elapsed_s = time.perf_counter() - began
    tables = [family_table(rows, "volume_render"), family_table(rows, "line_integral")]
    if args.device.type == "cuda" and not args.quick:
        tables.insert(0, target_table(rows, args.configs))
    if args.device.type == "cuda":
        tables.append(memory_table(rows))
    notes = error_notes(entries)
    markdown = "\n\n".join([summary(env, copy, entries, args.compile, elapsed_s), *tables])
    options = {"compile": args.compile, "quick": args.quick, "threshold": THRESHOLD,
               "sigma_max": SIGMA_MAX,
               "dtypes": ["fp32", *(DTYPE_LABELS[d] for d in args.extra_dtypes)]}
    payload = {"env": env, "options": options, "copy_bandwidth": copy, "elapsed_s": elapsed_s,
               "configs": [vars(cfg) | {"label": cfg.label} for cfg in args.configs],
               "layouts": [{k: v for k, v in e.items() if k != "rows"} for e in entries],
               "rows": rows}
    tm.publish(args.out, "render", payload, markdown, notes)


if __name__ == "__main__":
    main()
