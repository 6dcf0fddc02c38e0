# SPDX-License-Identifier: Apache-2.0
"""Timing, copy-bandwidth, environment and report helpers shared by the fieldfuse benchmarks."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

# Decimal gigabytes, the unit bandwidth datasheets and specs/*.md quote.
GB = 1e9
# Device-to-device copy probe: 1 GiB read plus 1 GiB written is far past any GPU's L2 and long
# enough (~0.7 ms at 3 TB/s) that launch overhead is noise.
CUDA_COPY_BYTES = 1 << 30
# CPU copy probe: 256 MiB is well past any server L3 and still copies in tens of milliseconds.
CPU_COPY_BYTES = 256 << 20
# --quick copy probe: only has to run.
QUICK_COPY_BYTES = 16 << 20
# Inputs are rotated until together they exceed the last-level cache this many times over, so each
# one has been evicted by the time it comes round again (METHOD.md: "rotate among input sets").
CACHE_MULTIPLE = 4
# CPU last-level cache size is not portable to query; this covers large server L3s.
CPU_CACHE_BYTES = 64 << 20
# Cap on distinct inputs: bounds memory, and tiny --quick inputs would otherwise ask for thousands.
MAX_ROTATION = 64
# Used by the `None`-aware formatters for a missing value (failed or skipped measurement).
MISSING = "—"


@dataclass(frozen=True)
class Budget:
    """How long to time: enough reps to fill `min_seconds`, clamped to [min_reps, max_reps]."""

    min_reps: int
    min_seconds: float
    max_reps: int
    warmup_reps: int


# GPU: at least 50 event-timed reps (a stable median and p10/p90) and 0.25 s per measurement,
# which keeps a full family table near two minutes; 1000 reps bounds the 20 µs kernels.
GPU_BUDGET = Budget(min_reps=50, min_seconds=0.25, max_reps=1000, warmup_reps=3)
# CPU: eager calls at 256³ take 0.1-1 s, so fewer reps over a longer window.
CPU_BUDGET = Budget(min_reps=5, min_seconds=1.0, max_reps=200, warmup_reps=1)
# --quick: a smoke test only has to run end to end.
QUICK_BUDGET = Budget(min_reps=3, min_seconds=0.02, max_reps=20, warmup_reps=1)


@dataclass(frozen=True)
class Stats:
    """Per-rep times in milliseconds, plus host wall time per rep over the whole timed loop.

    On CUDA `median_ms` is device time between events; `host_ms` above it means the loop was
    bound by launch overhead on the host rather than by the device.
    """

    median_ms: float
    p10_ms: float
    p90_ms: float
    reps: int
    host_ms: float


def summarize(samples_ms: Sequence[float], host_ms: float) -> Stats:
    """Median and 10th/90th percentiles (inclusive deciles) of `samples_ms`."""
    if len(samples_ms) < 2:
        only = samples_ms[0]
        return Stats(only, only, only, 1, host_ms)
    deciles = statistics.quantiles(samples_ms, n=10, method="inclusive")
    return Stats(statistics.median(samples_ms), deciles[0], deciles[-1], len(samples_ms), host_ms)


def _cuda_samples(fn: Callable, inputs: Sequence, reps: int) -> tuple[list[float], float]:
    """Event-timed reps queued back to back on the current stream; one sync at the end."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for i in range(reps):
        starts[i].record()
        fn(inputs[i % len(inputs)])
        ends[i].record()
    torch.cuda.synchronize()
    host_ms = (time.perf_counter() - begin) * 1e3 / reps
    return [s.elapsed_time(e) for s, e in zip(starts, ends)], host_ms


def _cpu_samples(fn: Callable, inputs: Sequence, reps: int) -> tuple[list[float], float]:
    """`perf_counter` around each rep."""
    samples = []
    begin = time.perf_counter()
    for i in range(reps):
        start = time.perf_counter()
        fn(inputs[i % len(inputs)])
        samples.append((time.perf_counter() - start) * 1e3)
    return samples, (time.perf_counter() - begin) * 1e3 / reps


def time_fn(fn: Callable, inputs: Sequence[torch.Tensor], budget: Budget) -> Stats:
    """Time `fn(x)` cycling over `inputs` (all on one device) after warm-up.

    The rep count comes from a short timed probe: enough reps to fill `budget.min_seconds`.
    """
    sampler = _cuda_samples if inputs[0].device.type == "cuda" else _cpu_samples
    for i in range(budget.warmup_reps):
        fn(inputs[i % len(inputs)])
    probe, _ = sampler(fn, inputs, max(1, budget.warmup_reps))
    estimate_s = max(statistics.median(probe) * 1e-3, 1e-9)
    reps = min(max(math.ceil(budget.min_seconds / estimate_s), budget.min_reps), budget.max_reps)
    return summarize(*sampler(fn, inputs, reps))


def cache_bytes(device: torch.device) -> int:
    """The last-level cache that timed inputs must overflow: L2 on CUDA, an assumed L3 on CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).L2_cache_size
    return CPU_CACHE_BYTES


def rotation_count(bytes_per_input: int, device: torch.device) -> int:
    """How many distinct inputs to cycle through so that none is still cached when reused."""
    wanted = math.ceil(CACHE_MULTIPLE * cache_bytes(device) / max(bytes_per_input, 1))
    return min(max(wanted, 1), MAX_ROTATION)


def copy_bandwidth(device: torch.device, nbytes: int, budget: Budget) -> dict[str, Any]:
    """Measured `dst.copy_(src)` bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.rand(nbytes // 4, device=device)  # random, never zeros (METHOD.md)
    dst = torch.empty_like(src)
    stats = time_fn(dst.copy_, [src], budget)
    moved = 2 * src.numel() * src.element_size()
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"bytes_moved": moved, "gbps": moved / (stats.median_ms * 1e-3) / GB,
            "stats": stats}


def _nvidia_driver() -> str | None:
    """The NVIDIA driver release from nvidia-smi; torch only exposes the CUDA API version."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device) -> dict[str, Any]:
    """Date, command, versions and the device, for the report header and JSON."""
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, driver=_nvidia_driver(), cuda=torch.version.cuda,
                   sm_count=props.multi_processor_count, l2_bytes=props.L2_cache_size,
                   memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}")
    return env


def bench_parser(description: str | None) -> argparse.ArgumentParser:
    """The flags every benchmark shares: --cpu, --quick, --compile/--no-compile and --out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cpu", action="store_true", help="time the CPU path against CPU eager")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test only")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="time torch.compile baselines (default: on for CUDA, off for CPU)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out",
                        help="directory for the JSON and markdown reports (default: bench/out)")
    return parser


def parse_bench_args(parser: argparse.ArgumentParser,
                     argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses `argv` and adds what the shared flags imply: the device (an error without CUDA unless
    --cpu), whether to compile (by default on CUDA only), the timing budget and the copy-probe
    size."""
    args = parser.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        parser.error("no CUDA device; pass --cpu to time the CPU path")
    args.device = torch.device("cpu" if args.cpu else "cuda")
    args.compile = (not args.cpu) if args.compile is None else args.compile
    args.budget = budget_for(args.quick, args.cpu)
    args.copy_bytes = copy_bytes_for(args.quick, args.cpu)
    return args


def publish(out_dir: Path, stem: str, payload: dict[str, Any], markdown: str,
            notes: Sequence[str]) -> None:
    """Writes the report (failures appended), echoes the failures and paths to stderr and prints
    the markdown."""
    paths = write_report(out_dir, stem, payload,
                         markdown + ("\n\nFailures:\n" + "\n".join(notes) if notes else ""))
    for note in notes:
        print(note, file=sys.stderr)
    print("wrote " + ", ".join(map(str, paths)), file=sys.stderr, flush=True)
    print(markdown)


def fieldfuse_environment(device: torch.device) -> dict[str, Any]:
    """`environment(device)` plus the fieldfuse version and build facts of this run."""
    import fieldfuse  # the benchmarks' subject; imported here so the harness has no import cycle

    env = environment(device)
    build_info = getattr(fieldfuse, "build_info", None)
    env.update(fieldfuse=getattr(fieldfuse, "__version__", "unknown"),
               fieldfuse_build=build_info() if build_info else None)
    return env


def budget_for(quick: bool, cpu: bool) -> Budget:
    """The timing budget of a run mode: --quick, --cpu or a full GPU run."""
    return QUICK_BUDGET if quick else CPU_BUDGET if cpu else GPU_BUDGET


def copy_bytes_for(quick: bool, cpu: bool) -> int:
    """The copy-bandwidth probe's size in a run mode: --quick, --cpu or a full GPU run."""
    return QUICK_COPY_BYTES if quick else CPU_COPY_BYTES if cpu else CUDA_COPY_BYTES


# --- measuring one implementation ----------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def release(device: torch.device) -> None:
    """Hand cached blocks back (after an OOM, or between configs)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def failure(err: BaseException) -> dict[str, Any]:
    """A failed measurement as a result: OOM is flagged (the cell says so), others are listed.

    Call `release` after the `except` block, once the traceback no longer holds the tensors.
    """
    return {"stats": None, "oom": is_oom(err),
            "error": f"{type(err).__name__}: {err}".splitlines()[0]}


def peak_mib(step: Callable, x: Any) -> float | None:
    """Peak CUDA memory one call allocates above what was allocated before it (the inputs)."""
    if x.device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = step(x)
    torch.cuda.synchronize()
    del out
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def measure(step: Callable, inputs: Sequence, budget: Budget,
            memory: bool = True) -> dict[str, Any]:
    """Time one implementation; its first call (torch.compile's compile) is timed apart, and with
    `memory` one more call after the timing gives its peak memory.

    A failure (unsupported dtype, compile error, out of memory) must not end the run: the error
    goes into the result and the table prints a dash, or OOM.
    """
    try:
        start = time.perf_counter()
        step(inputs[0])
        sync(inputs[0].device)
        first_call_s = time.perf_counter() - start
        stats = time_fn(step, inputs, budget)
        peak = peak_mib(step, inputs[0]) if memory else None
        return {"stats": stats, "first_call_s": first_call_s, "peak_mib": peak}
    except Exception as err:  # noqa: BLE001 -- any failure becomes a reported cell
        result = failure(err)
    release(inputs[0].device)  # after the except block, once the traceback has let go
    return result


def graphed(step: Callable, inputs: Sequence) -> Callable:
    """`step` captured in one CUDA graph per input set; the returned step replays the graph of
    the set it is given. Warm-up calls run on a side stream first, as capture requires."""
    graphs, outputs = {}, []
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x in inputs:
            for _ in range(2):
                step(x)
    torch.cuda.current_stream().wait_stream(side)
    pool = torch.cuda.graph_pool_handle()
    for x in inputs:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs.append(step(x))  # kept alive: the graph writes into them
        graphs[id(x)] = graph
    return lambda x: graphs[id(x)].replay()


def median(result: dict[str, Any] | None) -> float | None:
    return result["stats"].median_ms if result and result.get("stats") else None


def ms_cell(result: dict[str, Any] | None) -> str:
    return "OOM" if result and result.get("oom") else fmt_num(median(result))


def header_line(title: str, env: dict[str, Any]) -> str:
    """One markdown line: title, date, device, torch and the exact command."""
    if "gpu" in env:
        where = f"{env['gpu']} (driver {env['driver'] or 'unknown'}, CUDA {env['cuda']})"
    else:
        where = f"{env['cpu']} ({env['torch_threads']} torch threads of {env['cpu_count']} CPUs)"
    return (f"**{title}** — {env['date']} — {where} — torch {env['torch']} — "
            f"`{env['command']}`")


def fmt_num(value: float | None) -> str:
    """About four significant digits, never in exponent form."""
    if value is None:
        return MISSING
    if value < 1:
        return f"{value:.3f}"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    """`format(value, spec) + suffix`, or the missing mark."""
    return MISSING if value is None else f"{value:{spec}}{suffix}"


def ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den == 0 else num / den


def shape_label(shape: Sequence[int]) -> str:
    """`(4, 256, 256, 256)` → `4×256³`; unequal spatial dims are spelled out."""
    *lead, d, h, w = shape
    spatial = f"{d}³" if d == h == w else f"{d}×{h}×{w}"
    return "×".join([*map(str, lead), spatial])


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    """JSON fallback: dataclasses (Stats) as dicts, anything else (dtypes, devices) as text."""
    return asdict(value) if is_dataclass(value) else str(value)


def write_report(out_dir: Path, stem: str, payload: dict[str, Any], markdown: str) -> list[Path]:
    """Write `<stem>.json` and `<stem>.md` under `out_dir` (created if needed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    text = json.dumps(payload, indent=2, default=_jsonable)
    json_path.write_text(text + "\n", encoding="utf-8")
    md_path.write_text(markdown + "\n", encoding="utf-8")
    return [json_path, md_path]
