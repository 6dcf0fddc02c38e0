# SPDX-License-Identifier: Apache-2.0
"""Times fieldfuse's tilted K-Planes interpolation against PyTorch eager and torch.compile.

Five tables: the kernel (fwd and fwd+bwd of sum(features), fp32 and bf16, default and
deterministic backward), its peak memory, what a dense zero-fill of the plane gradient costs, one
full Adam training step of a K-Planes field (main batch + volume-TV taps + plane TV), and every
K-Planes function with NCHW against channels-last planes (`--layout-only` runs just that one).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

import _kplanes_layouts as layouts
import _timing as tm
from _timing import failure, measure, median, ms_cell, release
import fieldfuse
from fieldfuse.reference import kplanes as ref

SEED = 0


@dataclass(frozen=True)
class Config:
    """A tilted K-Planes field and a batch: T tilts, C channels per level, square levels."""

    name: str
    tilts: int
    channels: int
    resolutions: tuple[int, ...]
    batch: int

    @property
    def label(self) -> str:
        levels = "/".join(f"{r}²" for r in self.resolutions)
        batch = f"{self.batch:,}".replace(",", " ")
        return f"T={self.tilts}, C={self.channels}, {levels}, B={batch}"

    def plane_shapes(self) -> list[tuple[int, int, int, int]]:
        return [(3 * self.tilts, self.channels, r, r) for r in self.resolutions]

    @property
    def features(self) -> int:
        return self.tilts * self.channels * len(self.resolutions)


# specs/kplanes.md: the tomography config (2048 rays × 300 samples) and the production config.
GPU_CONFIGS = (Config("tomography", 4, 8, (200,), 614_400),
               Config("production", 8, 48, (50, 100, 200), 262_144))
# Same fields, batches cut so that PyTorch CPU eager takes well under a second per fwd+bwd on
# 2 cores.
CPU_CONFIGS = (Config("tomography", 4, 8, (200,), 65_536),
               Config("production", 8, 48, (50, 100, 200), 4_096))
# --quick: every code path (one level and three) at sizes a 2-core smoke test runs in seconds.
QUICK_CONFIGS = (Config("tomography", 2, 4, (24,), 2_048),
                 Config("production", 2, 6, (8, 16, 24), 1_024))

# bf16 planes (with float32 points) are CUDA-only (fieldfuse.kplanes), so the CPU table is fp32.
GPU_DTYPES = (torch.float32, torch.bfloat16)
CPU_DTYPES = (torch.float32,)
DTYPE_LABELS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
HALF_DTYPES = (torch.float16, torch.bfloat16)
# torch.compile baselines: fp32 at the tomography config by default; --compile-production adds
# the production config (its compile takes far longer than everything else in the run).
COMPILE_DTYPES = (torch.float32,)
DEFAULT_COMPILE_CONFIGS = ("tomography",)
# fieldfuse also timed with NCHW planes (fp32 fwd+bwd) at these configs; channels-last elsewhere.
NCHW_CONFIGS = ("tomography",)
PASSES = ("fwd", "fwd+bwd")
BACKWARDS = ("default", "deterministic")
NO_BACKWARD = "—"

# specs/kplanes.md, measured on an H100 (PyTorch 2.11, fp32, fwd+bwd of sum(features)), and the
# issue's targets for fieldfuse fp32 fwd+bwd (default backward).
SPEC_EAGER_MS = {"tomography": 10.2, "production": 81.8}
SPEC_COMPILE_MS = {"tomography": 5.7}
TARGET_VS_EAGER = {"tomography": 10.0, "production": 10.0}
TARGET_VS_COMPILE = {"tomography": 5.0}

KERNEL_HEADERS = ("config", "dtype", "pass", "backward", "layout", "fieldfuse ms", "p10–p90",
                  "eager ms", "× eager", "compile ms", "× compile", "rel err", "eager rel err")


# --- inputs --------------------------------------------------------------------------------------


@dataclass
class InputSet:
    """One set of differentiable leaves for a call: points, rotations and the planes' levels.

    `time_fn` only needs `.device` from its inputs, so a set is passed to it whole.
    """

    pts: torch.Tensor
    rotations: torch.Tensor
    planes: list[torch.Tensor]

    @property
    def device(self) -> torch.device:
        return self.pts.device

    def leaves(self) -> list[torch.Tensor]:
        return [self.pts, self.rotations, *self.planes]


def random_points(count: int, device: torch.device) -> torch.Tensor:
    """Uniform in [−1, 1]³ (training points lie inside the box)."""
    return torch.rand(count, 3, device=device) * 2 - 1


def random_rotations(tilts: int, device: torch.device) -> torch.Tensor:
    """Random orthogonal matrices: the Q of a Gaussian matrix's QR."""
    return torch.linalg.qr(torch.randn(tilts, 3, 3, device=device))[0].contiguous()


def random_planes(cfg: Config, device: torch.device) -> list[torch.Tensor]:
    """NCHW float32 levels, uniform in [0.1, 0.5] as in the spec's test configurations."""
    return [torch.rand(shape, device=device) * 0.4 + 0.1 for shape in cfg.plane_shapes()]


def leaf(t: torch.Tensor, dtype: torch.dtype | None = None, channels_last: bool = False):
    t = t.to(dtype) if dtype is not None else t
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return t.detach().contiguous(memory_format=fmt).clone().requires_grad_()


@dataclass
class InputSets:
    """Rotated input sets for one config and dtype, in the three forms the rows need.

    `nchw` holds the float32 points and rotations with the planes in `dtype`, NCHW (fieldfuse's
    NCHW row and, for fp32, the eager and compile baselines); `channels_last` shares those points
    and rotations with channels-last planes (fieldfuse's default layout); `eager` is what a plain
    PyTorch user would run at that dtype: in bf16 every tensor is bf16 (grid_sample needs the
    grid in the input's dtype).
    """

    nchw: list[InputSet]
    channels_last: list[InputSet]
    eager: list[InputSet]


def make_input_sets(cfg: Config, dtype: torch.dtype, device: torch.device) -> InputSets:
    """As many random sets as it takes for their bytes to overflow the last-level cache."""
    per_set = (cfg.batch * 3 * 4 + cfg.tilts * 9 * 4
               + sum(n * c * h * w for n, c, h, w in cfg.plane_shapes()) * dtype.itemsize)
    nchw, channels_last, eager = [], [], []
    for _ in range(tm.rotation_count(per_set, device)):
        pts = leaf(random_points(cfg.batch, device))
        rotations = leaf(random_rotations(cfg.tilts, device))
        planes = random_planes(cfg, device)
        nchw.append(InputSet(pts, rotations, [leaf(p, dtype) for p in planes]))
        channels_last.append(InputSet(pts, rotations,
                                      [leaf(p, dtype, channels_last=True) for p in planes]))
        eager.append(nchw[-1] if dtype == torch.float32 else InputSet(
            leaf(pts, dtype), leaf(rotations, dtype), nchw[-1].planes))
    return InputSets(nchw, channels_last, eager)


# --- the timed calls -----------------------------------------------------------------------------


FeaturesFn = Callable[[InputSet], torch.Tensor]


def fieldfuse_features(deterministic: bool) -> FeaturesFn:
    """Default features dtype: float32 (the points' dtype), also for bf16 planes."""
    return lambda s: fieldfuse.kplanes_tilted(s.pts, s.rotations, s.planes,
                                              deterministic=deterministic)


def eager_features(s: InputSet) -> torch.Tensor:
    return ref.kplanes_tilted(s.pts, s.rotations, s.planes)


def eager_loss(pts, rotations, planes) -> torch.Tensor:
    return ref.kplanes_tilted(pts, rotations, planes).sum()


def fwd_step(features: FeaturesFn) -> Callable:
    """Features under no_grad: nothing is saved for backward, as in inference."""
    def step(s: InputSet) -> torch.Tensor:
        with torch.no_grad():
            return features(s)
    return step


def fwd_bwd_step(loss: Callable[[InputSet], torch.Tensor]) -> Callable:
    """sum(features) and its gradients to points, rotations and planes; `autograd.grad` does not
    accumulate into `.grad`."""
    return lambda s: torch.autograd.grad(loss(s), s.leaves())


def sum_of(features: FeaturesFn) -> Callable[[InputSet], torch.Tensor]:
    return lambda s: features(s).sum()


def mib_cell(result: dict[str, Any] | None) -> str:
    if result and result.get("oom"):
        return "OOM"
    return tm.fmt(result and result.get("peak_mib"), ".0f")


# --- accuracy ------------------------------------------------------------------------------------


def as_tuple(out: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def reference64(s: InputSet) -> dict[str, tuple[torch.Tensor, ...]]:
    """The reference chain in float64 on a set's values: features, and the fwd+bwd gradients."""
    leaves = [t.detach().double().requires_grad_() for t in s.leaves()]
    features = ref.kplanes_tilted(leaves[0], leaves[1], leaves[2:])
    grads = torch.autograd.grad(features.sum(), leaves)
    return {"fwd": (features.detach(),), "fwd+bwd": tuple(grads)}


def relative_error(out, expected: tuple[torch.Tensor, ...]) -> float:
    """Largest ‖out − expected‖ / ‖expected‖ over the call's outputs (features, or each gradient)."""
    worst = 0.0
    for got, want in zip(as_tuple(out), expected, strict=True):
        diff = torch.linalg.vector_norm(got.detach().double() - want)
        worst = max(worst, (diff / torch.linalg.vector_norm(want)).item())
    return worst


# --- kernel rows ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One fieldfuse row: a pass, a backward flavour (fwd+bwd only) and the planes' layout."""

    pass_name: str
    backward: str
    layout: str


def cases_for(cfg: Config, dtype: torch.dtype) -> list[Case]:
    cases = [Case("fwd", NO_BACKWARD, "NHWC")]
    cases += [Case("fwd+bwd", backward, "NHWC") for backward in BACKWARDS]
    if dtype == torch.float32 and cfg.name in NCHW_CONFIGS:
        cases.append(Case("fwd+bwd", "default", "NCHW"))
    return cases


def fieldfuse_step(case: Case) -> Callable:
    features = fieldfuse_features(case.backward == "deterministic")
    return fwd_step(features) if case.pass_name == "fwd" else fwd_bwd_step(sum_of(features))


def baseline_steps(compiled: dict[str, Callable] | None) -> dict[str, dict[str, Callable | None]]:
    """Eager and (if compiled) torch.compile steps per pass. Compiled steps call a function
    compiled once per config and pass: `features` under no_grad, `loss` with its backward."""
    eager = {"fwd": fwd_step(eager_features), "fwd+bwd": fwd_bwd_step(sum_of(eager_features))}
    if compiled is None:
        return {"eager": eager, "compile": {name: None for name in PASSES}}
    compile_steps = {
        "fwd": fwd_step(lambda s: compiled["features"](s.pts, s.rotations, s.planes)),
        "fwd+bwd": fwd_bwd_step(lambda s: compiled["loss"](s.pts, s.rotations, s.planes)),
    }
    return {"eager": eager, "compile": compile_steps}


def checked_relative_error(step: Callable, s: InputSet, expected) -> float | None:
    try:
        return relative_error(step(s), expected)
    except Exception:  # noqa: BLE001 -- the timing cell reports the failure
        pass
    release(s.device)
    return None


def input_sets(cfg: Config, dtype: torch.dtype,
               args: argparse.Namespace) -> tuple[InputSets | None, dict[str, Any] | None]:
    """The config's input sets, or the failure (reported on stderr) that stopped them."""
    try:
        return make_input_sets(cfg, dtype, args.device), None
    except Exception as err:  # noqa: BLE001 -- e.g. OOM while allocating the inputs
        fail = failure(err)
    release(args.device)  # after the except block, once the traceback has let go
    print(f"  {cfg.name} {DTYPE_LABELS[dtype]}: inputs failed: {fail['error']}",
          file=sys.stderr, flush=True)
    return None, fail


def run_dtype(cfg: Config, dtype: torch.dtype, compiled: dict[str, Callable] | None,
              args: argparse.Namespace) -> tuple[list[dict], dict[str, Any]]:
    """Every fieldfuse case at one config and dtype, the baselines once per pass, and the
    zero-fill of the plane gradient the default backward writes."""
    sets, fail = input_sets(cfg, dtype, args)
    if fail:
        return [], {"config": cfg.name, "dtype": DTYPE_LABELS[dtype], "error": fail["error"]}
    expected = None
    try:
        expected = reference64(sets.nchw[0])
    except Exception:  # noqa: BLE001 -- no rel err column then
        release(args.device)
    steps = baseline_steps(compiled if dtype in COMPILE_DTYPES else None)
    baselines = {(impl, pass_name): (measure(step, sets.eager if impl == "eager" else sets.nchw,
                                             args.budget) if step else {"stats": None})
                 for impl, per_pass in steps.items() for pass_name, step in per_pass.items()}
    # Eager's own error against the same float64 reference: the yardstick for fieldfuse's (a
    # point whose fp32 index rounds into the neighbouring cell gets that cell's slope in both).
    eager_rel = {pass_name: (checked_relative_error(step, sets.eager[0], expected[pass_name])
                             if expected else None)
                 for pass_name, step in steps["eager"].items()}
    rows = []
    for case in cases_for(cfg, dtype):
        step = fieldfuse_step(case)
        inputs = sets.channels_last if case.layout == "NHWC" else sets.nchw
        rel = (checked_relative_error(step, inputs[0], expected[case.pass_name])
               if expected else None)
        row = {
            "config": cfg.name, "config_label": cfg.label, "dtype": DTYPE_LABELS[dtype],
            "pass": case.pass_name, "backward": case.backward, "layout": case.layout,
            "inputs_rotated": len(inputs), "rel_err": rel,
            "eager_rel_err": eager_rel[case.pass_name],
            "results": {"fieldfuse": measure(step, inputs, args.budget),
                        "eager": baselines[("eager", case.pass_name)],
                        "compile": baselines[("compile", case.pass_name)]},
        }
        ms = {name: median(result) for name, result in row["results"].items()}
        row["speedup_vs_eager"] = tm.ratio(ms["eager"], ms["fieldfuse"])
        row["speedup_vs_compile"] = tm.ratio(ms["compile"], ms["fieldfuse"])
        progress(row)
        rows.append(row)
    zero_fill = measure_zero_fill(cfg, dtype, sets.channels_last[0], rows, args)
    del sets, expected
    release(args.device)
    return rows, zero_fill


def run_layouts(cfg: Config, dtype: torch.dtype, args: argparse.Namespace) -> list[dict]:
    """The layout table's rows at one config and dtype, on fresh NCHW and channels-last sets."""
    sets, fail = input_sets(cfg, dtype, args)
    if fail:
        return []
    rows = layouts.layout_rows(cfg, dtype, sets, args, DTYPE_LABELS[dtype])
    del sets
    release(args.device)
    return rows


def progress(row: dict[str, Any]) -> None:
    cells = [f"{name} {ms_cell(result)}" for name, result in row["results"].items()]
    print(f"  {row['config']} {row['dtype']} {row['pass']:<7} {row['backward']:<13} "
          f"{row['layout']}: " + ", ".join(cells) + " ms", file=sys.stderr, flush=True)


def measure_zero_fill(cfg: Config, dtype: torch.dtype, s: InputSet, rows: list[dict],
                      args: argparse.Namespace) -> dict[str, Any]:
    """What a dense zero-fill of the plane gradient costs next to the whole fwd+bwd.

    The default CUDA backward scatters into a zeroed buffer: the plane gradient itself, or a
    float32 accumulator for 16-bit planes. Timed as a memset of that many bytes (`zero_()` of a
    flat buffer) and as `torch.zeros_like` of each level (allocation plus fill).
    """
    acc_dtype = torch.float32 if dtype in HALF_DTYPES else dtype
    numel = sum(p.numel() for p in s.planes)

    def fwd_bwd_ms(backward: str) -> float | None:
        return next((median(r["results"]["fieldfuse"]) for r in rows
                     if r["pass"] == "fwd+bwd" and r["backward"] == backward
                     and r["layout"] == "NHWC"), None)

    try:
        flat = torch.empty(numel, dtype=acc_dtype, device=args.device)
    except Exception as err:  # noqa: BLE001
        memset = failure(err)
    else:
        memset = measure(lambda b: b.zero_(), [flat], args.budget, memory=False)
        del flat
    zeros_like = measure(lambda x: [torch.zeros_like(p, dtype=acc_dtype) for p in x.planes], [s],
                         args.budget, memory=False)
    default_ms = fwd_bwd_ms("default")
    return {
        "config": cfg.name, "dtype": DTYPE_LABELS[dtype],
        "buffer": ("float32 accumulator" if dtype in HALF_DTYPES
                   else f"plane gradient ({DTYPE_LABELS[dtype]})"),
        "bytes": numel * acc_dtype.itemsize, "memset": memset, "zeros_like": zeros_like,
        "fwd_bwd_default_ms": default_ms, "fwd_bwd_deterministic_ms": fwd_bwd_ms("deterministic"),
        "share": tm.ratio(median(memset), default_ms),
    }


def compiled_baselines(cfg: Config, args: argparse.Namespace) -> dict[str, Callable] | None:
    """torch.compile of the reference chain for this config, or None where it is not timed.

    Dynamo is reset per config so each compiles afresh with static shapes: a shared cache would
    pass dynamo's recompile limit and silently fall back to eager.
    """
    torch._dynamo.reset()
    if not args.compile or cfg.name not in args.compile_configs:
        return None
    return {"features": torch.compile(ref.kplanes_tilted, fullgraph=True, dynamic=False),
            "loss": torch.compile(eager_loss, fullgraph=True, dynamic=False)}


# --- full training step --------------------------------------------------------------------------


@dataclass(frozen=True)
class StepConfig:
    """One training step: a field, its main batch, N volume-TV tap points, loss weights."""

    field: Config
    taps: int
    tv_weight: float = 1e-3
    plane_tv_weight: float = 1e-3
    lr: float = 1e-2


# specs/tomography.md: at most 10 000 tap points per step, h = one finest-plane cell (2/200).
GPU_STEP = StepConfig(GPU_CONFIGS[0], 10_000)
CPU_STEP = StepConfig(Config("tomography", 4, 8, (200,), 16_384), 2_000)
QUICK_STEP = StepConfig(QUICK_CONFIGS[0], 256)

STEP_HEADERS = ("path", "ms/step", "p10–p90", "× plain PyTorch", "peak MiB", "first loss")


@dataclass
class Batch:
    """One step's data: main-batch points, their targets, and the volume-TV tap base points (a
    random subset of the batch, drawn here rather than in the timed step so every path gets the
    same ones)."""

    pts: torch.Tensor
    target: torch.Tensor
    tap_pts: torch.Tensor

    @property
    def device(self) -> torch.device:
        return self.pts.device


def make_batches(sc: StepConfig, device: torch.device) -> list[Batch]:
    """Points are data here (no pose refinement): no gradient flows to them."""
    per_batch = (sc.field.batch * 4 + sc.taps * 3) * 4
    batches = []
    for _ in range(tm.rotation_count(per_batch, device)):
        pts = random_points(sc.field.batch, device)
        subset = torch.randperm(sc.field.batch, device=device)[:sc.taps]
        batches.append(Batch(pts, torch.rand(sc.field.batch, 1, device=device), pts[subset]))
    return batches


class FunctionalField(torch.nn.Module):
    """The field from fieldfuse's functions, for when `fieldfuse.nn.KPlanesTilted` is missing.

    It offers the methods of that module that the step uses (`rotations()`, `planes`, `decode`,
    `forward`, `tv_tap_densities`, `forward_with_tv_taps`, `volume_tv`, `plane_tv`, `tap_step`):
    planes as parameters (uniform in [0.1, 0.5]), a free `[T, 3, 3]` rotation parameter started
    orthogonal, a Linear decoder and density softplus(x − 1).
    """

    def __init__(self, cfg: Config, device: torch.device, channels_last: bool,
                 deterministic: bool):
        super().__init__()
        gen = torch.Generator().manual_seed(SEED)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.num_tilts = cfg.tilts
        self.deterministic = deterministic
        self.tap_step = 2.0 / max(cfg.resolutions)
        self.planes = torch.nn.ParameterList(
            torch.nn.Parameter((torch.rand(shape, generator=gen) * 0.4 + 0.1).to(device)
                               .contiguous(memory_format=fmt))
            for shape in cfg.plane_shapes())
        initial = torch.linalg.qr(torch.randn(cfg.tilts, 3, 3, generator=gen))[0]
        self.rotation_params = torch.nn.Parameter(initial.contiguous().to(device))
        self.decoder = torch.nn.Linear(cfg.features, 1, device=device)

    def rotations(self) -> torch.Tensor:
        return self.rotation_params

    def decode(self, features: torch.Tensor) -> torch.Tensor:
        return F.softplus(self.decoder(features) - 1)

    def forward(self, pts: torch.Tensor) -> torch.Tensor:
        return self.decode(fieldfuse.kplanes_tilted(pts, self.rotations(), list(self.planes),
                                                    deterministic=self.deterministic))

    def tv_tap_densities(self, tap_pts: torch.Tensor) -> torch.Tensor:
        return self.decode(fieldfuse.kplanes_tilted_taps(
            tap_pts, self.rotations(), list(self.planes), self.tap_step,
            deterministic=self.deterministic))

    def forward_with_tv_taps(self, pts: torch.Tensor, tap_pts: torch.Tensor):
        """One fused feature call and one decoder call on the batch and its taps."""
        features, taps = fieldfuse.kplanes_tilted_with_taps(
            pts, tap_pts, self.rotations(), list(self.planes), self.tap_step,
            deterministic=self.deterministic)
        density = self.decode(torch.cat([features, taps.flatten(0, 1)]))
        return density[:len(pts)], density[len(pts):].unflatten(0, (4, len(tap_pts)))

    def volume_tv(self, tap_densities: torch.Tensor, weight: float) -> torch.Tensor:
        return ref.volume_tv_from_taps(tap_densities, self.tap_step, weight)

    def plane_tv(self) -> torch.Tensor:
        return fieldfuse.plane_tv(list(self.planes), self.num_tilts)


def field_factory(sc: StepConfig, device: torch.device) -> tuple[Callable, str]:
    """`make(channels_last, deterministic)` building the field, and which field it is.

    `fieldfuse.nn.KPlanesTilted` where it imports and builds, else `FunctionalField`. Every build
    starts from the same values (planes from a seeded generator, the decoder's default init under
    a reset global seed), so every path's first loss is the same to rounding.
    """
    cfg = sc.field

    def functional(channels_last: bool, deterministic: bool) -> torch.nn.Module:
        torch.manual_seed(SEED)
        return FunctionalField(cfg, device, channels_last, deterministic)

    try:
        from fieldfuse.nn import KPlanesTilted  # noqa: PLC0415 -- optional module
    except ImportError as err:
        return functional, f"FunctionalField (fieldfuse.nn.KPlanesTilted not importable: {err})"

    def module(channels_last: bool, deterministic: bool) -> torch.nn.Module:
        torch.manual_seed(SEED)
        return KPlanesTilted(cfg.tilts, cfg.channels, list(cfg.resolutions),
                             channels_last=channels_last, deterministic=deterministic,
                             device=device, generator=torch.Generator().manual_seed(SEED))

    try:
        module(True, False)
    except Exception as err:  # noqa: BLE001 -- an API mismatch falls back, and says so
        reason = f"{type(err).__name__}: {err}".splitlines()[0]
        return functional, f"FunctionalField (fieldfuse.nn.KPlanesTilted failed to build: {reason})"
    return module, "fieldfuse.nn.KPlanesTilted"


def plain_densities(model: torch.nn.Module, batch: Batch):
    """The same field in plain PyTorch: the reference chain for the batch and for its taps (two
    calls), the model's own rotations and decoder, reference volume TV and plane TV."""
    rotations, planes = model.rotations(), list(model.planes)
    density = model.decode(ref.kplanes_tilted(batch.pts, rotations, planes))
    taps = model.decode(ref.kplanes_tilted_taps(batch.tap_pts, rotations, planes, model.tap_step))
    return density, taps


def plain_regularisers(model: torch.nn.Module, taps: torch.Tensor, sc: StepConfig):
    return (ref.volume_tv_from_taps(taps, model.tap_step, sc.tv_weight)
            + sc.plane_tv_weight * ref.plane_tv(list(model.planes), model.num_tilts))


def unfused_densities(model: torch.nn.Module, batch: Batch):
    """fieldfuse, two calls: the batch, then its taps (two backward accumulations into planes)."""
    return model(batch.pts), model.tv_tap_densities(batch.tap_pts)


def fused_densities(model: torch.nn.Module, batch: Batch):
    """fieldfuse, one call for the batch and its taps (one backward into the planes)."""
    return model.forward_with_tv_taps(batch.pts, batch.tap_pts)


def fieldfuse_regularisers(model: torch.nn.Module, taps: torch.Tensor, sc: StepConfig):
    return model.volume_tv(taps, sc.tv_weight) + sc.plane_tv_weight * model.plane_tv()


def make_optimizer(model: torch.nn.Module, sc: StepConfig,
                   capturable: bool = False) -> torch.optim.Optimizer:
    """Adam for every path; on CUDA its fused kernel (one launch for all parameters), which any
    user timing a step would pick, and which spares the eager paths a dozen foreach launches."""
    cuda = next(model.parameters()).is_cuda
    return torch.optim.Adam(model.parameters(), lr=sc.lr, fused=cuda or None,
                            capturable=capturable)


def loss_function(model: torch.nn.Module, densities: Callable, regularisers: Callable,
                  sc: StepConfig) -> Callable:
    """MSE to the target + volume TV on the taps + plane TV, as a function of the batch's tensors
    (what torch.compile compiles: the loss and, through AOTAutograd, its backward)."""

    def loss_of(pts: torch.Tensor, target: torch.Tensor, tap_pts: torch.Tensor) -> torch.Tensor:
        density, taps = densities(model, Batch(pts, target, tap_pts))
        return F.mse_loss(density, target) + regularisers(model, taps, sc)
    return loss_of


def train_step(model: torch.nn.Module, densities: Callable, regularisers: Callable,
               sc: StepConfig, compiled: bool = False) -> Callable:
    """One step: the loss (eager, or torch.compile'd with fullgraph), backward, one Adam step."""
    optimizer = make_optimizer(model, sc)
    loss_of = loss_function(model, densities, regularisers, sc)
    if compiled:
        torch._dynamo.reset()
        loss_of = torch.compile(loss_of, fullgraph=True, dynamic=False)

    def step(batch: Batch) -> torch.Tensor:
        loss = loss_of(batch.pts, batch.target, batch.tap_pts)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()
    return step


def measure_step(name: str, make_step: Callable[[], Callable], batches: list[Batch],
                 args: argparse.Namespace) -> dict[str, Any]:
    """First loss (from the shared initial values), then the timing of further steps."""
    device = batches[0].device
    try:
        step = make_step()
        first_loss = step(batches[0]).item()
    except Exception as err:  # noqa: BLE001
        result = failure(err)
    else:
        result = measure(step, batches, args.budget)
        result["first_loss"] = first_loss
        del step
    result["path"] = name
    print(f"  step {name}: {ms_cell(result)} ms", file=sys.stderr, flush=True)
    release(device)
    return result


def run_full_step(args: argparse.Namespace) -> dict[str, Any]:
    sc = args.step_config
    torch.manual_seed(SEED)
    batches = make_batches(sc, args.device)
    make, field_name = field_factory(sc, args.device)

    def fused(channels_last: bool, compiled: bool = False) -> Callable:
        return train_step(make(channels_last, False), fused_densities, fieldfuse_regularisers, sc,
                          compiled)

    paths = [
        ("plain PyTorch, eager (reference chain, two calls; NCHW)",
         lambda: train_step(make(False, False), plain_densities, plain_regularisers, sc)),
        ("fieldfuse fused (forward_with_tv_taps), eager, channels-last", lambda: fused(True)),
        ("fieldfuse fused, eager, NCHW", lambda: fused(False)),
        ("fieldfuse unfused (two calls), eager, channels-last",
         lambda: train_step(make(True, False), unfused_densities, fieldfuse_regularisers, sc)),
        ("fieldfuse fused, deterministic, eager, channels-last",
         lambda: train_step(make(True, True), fused_densities, fieldfuse_regularisers, sc)),
    ]
    if args.compile:
        paths[1:1] = [("plain PyTorch, torch.compile (NCHW)",
                       lambda: train_step(make(False, False), plain_densities, plain_regularisers,
                                          sc, compiled=True))]
        paths += [("fieldfuse fused, torch.compile, channels-last", lambda: fused(True, True)),
                  ("fieldfuse fused, torch.compile, NCHW", lambda: fused(False, True))]
    results = [measure_step(name, make_path, batches, args) for name, make_path in paths]
    plain_ms = median(results[0])
    for result in results:
        result["speedup_vs_plain"] = tm.ratio(plain_ms, median(result))
    del batches
    return {"config": sc.field.label, "field": field_name, "taps": sc.taps,
            "h": 2.0 / max(sc.field.resolutions), "tv_weight": sc.tv_weight,
            "plane_tv_weight": sc.plane_tv_weight, "lr": sc.lr, "paths": results}


# --- report --------------------------------------------------------------------------------------


def kernel_row(row: dict[str, Any]) -> list[str]:
    results = row["results"]
    ff = results["fieldfuse"].get("stats")
    spread = f"{tm.fmt_num(ff.p10_ms)}–{tm.fmt_num(ff.p90_ms)}" if ff else tm.MISSING
    return [row["config"], row["dtype"], row["pass"], row["backward"], row["layout"],
            ms_cell(results["fieldfuse"]), spread, ms_cell(results["eager"]),
            tm.fmt(row["speedup_vs_eager"], ".1f", "×"), ms_cell(results["compile"]),
            tm.fmt(row["speedup_vs_compile"], ".1f", "×"), tm.fmt(row["rel_err"], ".1e"),
            tm.fmt(row["eager_rel_err"], ".1e")]


def kernel_table(rows: list[dict], configs: Sequence[Config]) -> str:
    legend = "; ".join(f"{cfg.name}: {cfg.label}" for cfg in configs)
    return ("### Kernel: `kplanes_tilted`, fwd and fwd+bwd of sum(features)\n\n" + legend + ".\n\n"
            + tm.markdown_table(KERNEL_HEADERS, [kernel_row(row) for row in rows]))


def target_table(rows: list[dict], configs: Sequence[Config]) -> str:
    """fp32 fwd+bwd (default backward, channels-last) against the issue's H100 targets."""
    headers = ("config", "fieldfuse ms", "eager ms", "spec eager ms", "× eager", "target",
               "compile ms", "spec compile ms", "× compile", "target")
    body = []
    for cfg in configs:
        row = next((r for r in rows if r["config"] == cfg.name and r["dtype"] == "fp32"
                    and r["pass"] == "fwd+bwd" and r["backward"] == "default"
                    and r["layout"] == "NHWC"), None)
        if row is None:
            continue
        res = row["results"]
        compile_target = TARGET_VS_COMPILE.get(cfg.name)
        body.append([cfg.name, ms_cell(res["fieldfuse"]), ms_cell(res["eager"]),
                     tm.fmt(SPEC_EAGER_MS.get(cfg.name), ".1f"),
                     tm.fmt(row["speedup_vs_eager"], ".1f", "×"),
                     tm.fmt(TARGET_VS_EAGER.get(cfg.name), ".0f", "×"), ms_cell(res["compile"]),
                     tm.fmt(SPEC_COMPILE_MS.get(cfg.name), ".1f"),
                     tm.fmt(row["speedup_vs_compile"], ".1f", "×"),
                     tm.fmt(compile_target, ".0f", "×")])
    return ("### Targets (fp32, fwd+bwd, default backward, channels-last; spec numbers: H100)\n\n"
            + tm.markdown_table(headers, body))


def memory_table(rows: list[dict]) -> str:
    """Peak fwd+bwd memory above the resident inputs."""
    headers = ("config", "dtype", "fieldfuse MiB", "deterministic MiB", "eager MiB",
               "compile MiB", "eager / fieldfuse")
    body = []
    for key in dict.fromkeys((r["config"], r["dtype"]) for r in rows):
        picked = {r["backward"]: r for r in rows if (r["config"], r["dtype"]) == key
                  and r["pass"] == "fwd+bwd" and r["layout"] == "NHWC"}
        if "default" not in picked:
            continue
        res = picked["default"]["results"]
        det = picked.get("deterministic", {"results": {}})["results"].get("fieldfuse")
        body.append([*key, mib_cell(res["fieldfuse"]), mib_cell(det), mib_cell(res["eager"]),
                     mib_cell(res["compile"]),
                     tm.fmt(tm.ratio(res["eager"].get("peak_mib"),
                                     res["fieldfuse"].get("peak_mib")), ".1f", "×")])
    return ("### Peak memory, fwd+bwd (`max_memory_allocated` above the resident inputs; "
            "fieldfuse channels-last)\n\n" + tm.markdown_table(headers, body))


def zero_fill_table(zero_fills: list[dict]) -> str:
    headers = ("config", "dtype", "zeroed buffer", "MiB", "zero_() ms", "zeros_like ms",
               "fwd+bwd ms", "zero-fill share", "deterministic fwd+bwd ms")
    body = [[z["config"], z["dtype"], z["buffer"], f"{z['bytes'] / 2**20:.1f}",
             ms_cell(z["memset"]), ms_cell(z["zeros_like"]), tm.fmt_num(z["fwd_bwd_default_ms"]),
             tm.fmt(z["share"] and 100 * z["share"], ".1f", "%"),
             tm.fmt_num(z["fwd_bwd_deterministic_ms"])]
            for z in zero_fills if "bytes" in z]
    return ("### Plane-gradient zero-fill (what the default backward's dense memset costs; the "
            "deterministic backward writes every cell and fills nothing)\n\n"
            + tm.markdown_table(headers, body))


def step_table(step: dict[str, Any]) -> str:
    body = []
    for result in step["paths"]:
        stats = result.get("stats")
        spread = f"{tm.fmt_num(stats.p10_ms)}–{tm.fmt_num(stats.p90_ms)}" if stats else tm.MISSING
        body.append([result["path"], ms_cell(result), spread,
                     tm.fmt(result.get("speedup_vs_plain"), ".2f", "×"), mib_cell(result),
                     tm.fmt(result.get("first_loss"), ".6g")])
    return (f"### Full training step ({step['config']}; {step['taps']} tap points, "
            f"h = {step['h']:.4g}; loss = MSE + {step['tv_weight']:g}·volume TV + "
            f"{step['plane_tv_weight']:g}·plane TV; Adam, lr {step['lr']:g}, fused on CUDA)\n\n"
            f"Field: {step['field']}; every path starts from the same parameters.\n\n"
            + tm.markdown_table(STEP_HEADERS, body))


def error_notes(rows: list[dict], zero_fills: list[dict], step: dict[str, Any] | None) -> list[str]:
    """Every failure once (a baseline's is shared by the rows of its pass)."""
    notes = [f"- {r['config']} {r['dtype']} {r['pass']} "
             + (f"{r['backward']} {r['layout']} " if name == "fieldfuse" else "")
             + f"{name}: {result['error']}"
             for r in rows for name, result in r["results"].items() if "error" in result]
    notes += [f"- zero-fill {z['config']} {z['dtype']}: {z.get('error') or part['error']}"
              for z in zero_fills
              for part in ([z] if "error" in z else [z["memset"], z["zeros_like"]])
              if "error" in part]
    if step:
        notes += [f"- step {r['path']}: {r['error']}" for r in step["paths"] if "error" in r]
    return list(dict.fromkeys(notes))


def summary(env: dict[str, Any], elapsed_s: float) -> str:
    build = env["fieldfuse_build"] or {}
    threads = ("" if "gpu" in env else
               f" fieldfuse OpenMP threads: {build.get('openmp_max_threads', 'unknown')}.")
    return (tm.header_line("fieldfuse kplanes benchmark", env) + "\n\n"
            f"fieldfuse {env['fieldfuse']}; build {build}.{threads} Run took {elapsed_s:.0f} s. "
            "Points uniform in [−1, 1]³, random orthogonal rotations, planes uniform in "
            "[0.1, 0.5]. fieldfuse planes channels-last (NHWC) unless marked NCHW; fieldfuse bf16 "
            "rows: bf16 planes, fp32 points and rotations, fp32 features; eager bf16: every "
            "tensor bf16. Gradients to points, rotations and planes. Deterministic rows reuse the "
            "default rows' eager and compile timings (PyTorch's CUDA grid_sample backward has no "
            "deterministic mode). rel err: max over outputs (features; or each gradient) of "
            "‖fieldfuse − reference in float64‖ / ‖reference‖ on the fp32 inputs; eager rel err: "
            "the same for the eager baseline (in bf16 rows, eager's bf16 inputs included).")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = tm.bench_parser(__doc__)
    parser.add_argument("--compile-production", action="store_true",
                        help="also compile the baseline at the production config (slow)")
    parser.add_argument("--layout-only", action="store_true",
                        help="only the NCHW vs channels-last table (no baselines, no step)")
    parser.add_argument("--no-step", dest="step", action="store_false",
                        help="skip the full training-step table")
    parser.add_argument("--step-only", action="store_true",
                        help="only the full training-step table")
    args = tm.parse_bench_args(parser, argv)
    args.compile_configs = DEFAULT_COMPILE_CONFIGS + (("production",) if args.compile_production
                                                      else ())
    args.dtypes = CPU_DTYPES if args.cpu else GPU_DTYPES
    args.configs = QUICK_CONFIGS if args.quick else CPU_CONFIGS if args.cpu else GPU_CONFIGS
    args.step_config = QUICK_STEP if args.quick else CPU_STEP if args.cpu else GPU_STEP
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    began = time.perf_counter()
    torch.manual_seed(SEED)
    env = tm.fieldfuse_environment(args.device)
    rows, zero_fills, layout_rows = [], [], []
    for cfg in () if args.step_only else args.configs:
        compiled = None if args.layout_only else compiled_baselines(cfg, args)
        for dtype in args.dtypes:
            if not args.layout_only:
                cfg_rows, zero_fill = run_dtype(cfg, dtype, compiled, args)
                rows += cfg_rows
                zero_fills.append(zero_fill)
            layout_rows += run_layouts(cfg, dtype, args)
    torch._dynamo.reset()
    step = run_full_step(args) if args.step and not args.layout_only else None
    elapsed_s = time.perf_counter() - began
    tables = []
    if not args.layout_only and not args.step_only:
        tables.append(kernel_table(rows, args.configs))
        if args.device.type == "cuda" and not args.quick:
            tables.append(target_table(rows, args.configs))
        if args.device.type == "cuda":
            tables.append(memory_table(rows))
        tables.append(zero_fill_table(zero_fills))
    if step:
        tables.append(step_table(step))
    if not args.step_only:
        tables.append(layouts.layout_table(layout_rows))
    notes = error_notes(rows, zero_fills, step) + layouts.layout_errors(layout_rows)
    markdown = "\n\n".join([summary(env, elapsed_s), *tables])
    options = {"compile": args.compile, "compile_configs": list(args.compile_configs),
               "dtypes": [DTYPE_LABELS[d] for d in args.dtypes], "quick": args.quick,
               "layout_only": args.layout_only}
    payload = {"env": env, "options": options, "elapsed_s": elapsed_s,
               "configs": [vars(cfg) | {"label": cfg.label} for cfg in args.configs],
               "rows": rows, "zero_fill": zero_fills, "full_step": step,
               "layouts": layout_rows}
    tm.publish(args.out, "kplanes", payload, markdown, notes)


if __name__ == "__main__":
    main()
