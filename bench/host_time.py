# SPDX-License-Identifier: Apache-2.0
"""Host time of one small forward + backward of every public fieldfuse function (CPU tensors).

Inputs are tiny, so the kernels take a few microseconds and what is left is host work: the Python
wrapper, the op registry, DLPack conversion, output and workspace allocation, the autograd engine.
Each function is timed on both call paths (Note [op table] in python/fieldfuse/_registry.py):
the eager fast path that plain calls take, and the library path (torch.library dispatch, as under
torch.compile). The yardsticks are single PyTorch ops of the same kind: ``F.grid_sample`` forward +
backward (the op K-Planes replaces) and ``(x * x).sum()`` forward + backward, and for the MLP an
``nn.Sequential`` of the same five Linear + ReLU layers. Times are medians of
``--reps`` calls timed one by one with ``time.perf_counter_ns``, after a warm-up.

``--points`` sets the K-Planes points and grid_sample's sample points (default 64). At 64 the CPU
kernels add real work (about 15 µs for kplanes_tilted's backward); ``--points 1`` leaves host time
alone, which is what the GPU machines pay per call while their kernels run asynchronously.

Usage: python3 bench/host_time.py [--reps 2000] [--points 64] [--out DIR]
Writes host_time.md (and .json) to DIR (default bench/out).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import fieldfuse
from fieldfuse import _registry

GRID = 8  # planes and volumes of 8² / 8³: kernels of a few µs, far below the host cost measured


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().requires_grad_()


def _cases(points: int) -> dict:
    """name -> a step running one forward + backward (fresh leaves each call are not needed: the
    gradients accumulate, which is what a training step does as well)."""
    g = torch.Generator().manual_seed(0)
    vol = _leaf(torch.rand(2, GRID, GRID, GRID, generator=g))
    pts = torch.rand(points, 3, generator=g) * 2 - 1
    rotations = _leaf(torch.linalg.qr(torch.randn(2, 3, 3, generator=g))[0])
    planes = [_leaf(torch.rand(6, 4, GRID, GRID, generator=g))]
    planes_aligned = [_leaf(torch.rand(3, 4, GRID, GRID, generator=g))]
    n_rays, per_ray = 16, 8
    offsets = torch.arange(0, n_rays * per_ray + 1, per_ray)
    sigmas = _leaf(torch.rand(n_rays * per_ray, generator=g))
    alphas = _leaf(torch.rand(n_rays * per_ray, generator=g) * 0.5)
    rgbs = _leaf(torch.rand(n_rays * per_ray, 3, generator=g))
    deltas = torch.full((n_rays * per_ray,), 0.05)
    ts = torch.cumsum(deltas, 0)
    origins = _leaf(torch.rand(n_rays, 3, generator=g) * 0.5)
    directions = torch.tensor([[0.0, 0.0, 1.0]]).expand(n_rays, 3).contiguous()
    grid_input = _leaf(torch.rand(1, 4, GRID, GRID, generator=g))
    grid = torch.rand(1, points, 1, 2, generator=g) * 2 - 1
    square = _leaf(torch.rand(2, GRID, GRID, GRID, generator=g))
    # The MLP of issue 13's benchmark (32 → 64×4 → 16) on 8 rows, and its SDF network on 8 points;
    # a hash grid of 16 levels × 2 features with a 2^10-row table. nn.Sequential with the same
    # weights is the MLP's yardstick.
    sizes = [32, 64, 64, 64, 64, 16]
    linears = [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    mlp_weights = [_leaf(layer.weight.detach()) for layer in linears]
    mlp_biases = [_leaf(layer.bias.detach()) for layer in linears]
    mlp_x = _leaf(torch.randn(8, 32, generator=g))
    sequential = torch.nn.Sequential(*[m for layer in linears for m in (layer, torch.nn.ReLU())][:-1])
    sdf_sizes = [3, 64, 64, 64, 64, 1]
    sdf_weights = [_leaf(torch.randn(b, a, generator=g) / a**0.5)
                   for a, b in zip(sdf_sizes[:-1], sdf_sizes[1:])]
    sdf_biases = [_leaf(torch.zeros(b)) for b in sdf_sizes[1:]]
    sdf_x = _leaf(torch.rand(8, 3, generator=g) - 0.5)
    grid_options = dict(n_levels=16, n_features_per_level=2, log2_hashmap_size=10)
    grid_params = _leaf(torch.rand(fieldfuse.hash_grid_num_params(3, **grid_options), 2,
                                   generator=g) * 1e-2)
    grid_x = torch.rand(points, 3, generator=g)

    def eikonal_step():
        y = fieldfuse.mlp(sdf_x, sdf_weights, sdf_biases, activation="softplus",
                          softplus_beta=100.0)
        (grad,) = torch.autograd.grad(y.sum(), sdf_x, create_graph=True)
        ((grad.norm(dim=1) - 1).square().mean() + y.abs().mean()).backward()

    def render_rgb(out):
        return out.rgb.sum()

    return {
        "tv_sq_3d": lambda: fieldfuse.tv_sq_3d(vol).backward(),
        "tv_iso_3d": lambda: fieldfuse.tv_iso_3d(vol).backward(),
        "tv_l1_3d": lambda: fieldfuse.tv_l1_3d(vol).sum().backward(),
        "tv_weighted_l1": lambda: fieldfuse.tv_weighted_l1(vol, (0.5, 0.1, 0.1)).backward(),
        "kplanes_tilted": lambda: fieldfuse.kplanes_tilted(pts, rotations, planes).sum().backward(),
        "kplanes": lambda: fieldfuse.kplanes(pts, planes_aligned).sum().backward(),
        "kplanes_tilted_taps": lambda: fieldfuse.kplanes_tilted_taps(
            pts, rotations, planes, 0.01).sum().backward(),
        "kplanes_tilted_with_taps": lambda: sum(
            o.sum() for o in fieldfuse.kplanes_tilted_with_taps(pts, pts[:16], rotations, planes,
                                                                0.01)
        ).backward(),
        "plane_tv": lambda: fieldfuse.plane_tv(planes, num_tilts=2).backward(),
        "volume_render": lambda: render_rgb(
            fieldfuse.volume_render(sigmas, rgbs, deltas, ts, offsets, validate=False)).backward(),
        "volume_render_alpha": lambda: render_rgb(
            fieldfuse.volume_render_alpha(alphas, rgbs, ts, offsets, validate=False)).backward(),
        "line_integral": lambda: fieldfuse.line_integral(
            sigmas, deltas, offsets, validate=False).sum().backward(),
        "ray_box_samples_padded": lambda: fieldfuse.ray_box_samples_padded(
            origins, directions, 0.25)[0].sum().backward(),
        "mlp": lambda: fieldfuse.mlp(mlp_x, mlp_weights, mlp_biases).sum().backward(),
        "mlp Eikonal step (double backward)": eikonal_step,
        "hash_grid": lambda: fieldfuse.hash_grid(grid_x, grid_params, **grid_options
                                                 ).sum().backward(),
        "nn.Sequential MLP (yardstick)": lambda: sequential(mlp_x).sum().backward(),
        "F.grid_sample (yardstick)": lambda: F.grid_sample(
            grid_input, grid, align_corners=True).sum().backward(),
        "(x * x).sum() (yardstick)": lambda: (square * square).sum().backward(),
    }


def _median_us(step, reps: int) -> float:
    for _ in range(max(20, reps // 20)):
        step()
    samples = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        step()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--points", type=int, default=64, help="K-Planes / grid_sample points")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()
    torch.set_num_threads(1)  # host overhead, not parallel speed-up, is what is measured

    rows = []
    for name, step in _cases(args.points).items():
        eager = _median_us(step, args.reps)
        if "yardstick" in name:
            library = None
        else:
            with _registry.library_path():
                library = _median_us(step, args.reps)
        rows.append({"function": name, "eager_us": eager, "library_us": library})
    grid_sample = next(r["eager_us"] for r in rows if r["function"].startswith("F.grid_sample"))

    lines = [
        f"Host time of one small forward + backward, CPU tensors, 1 thread, median of {args.reps}, "
        f"{args.points} K-Planes / grid_sample points",
        f"({platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"fieldfuse {fieldfuse.__version__}, {time.strftime('%Y-%m-%d')}; "
        f"`python3 bench/host_time.py --reps {args.reps} --points {args.points}`).",
        "",
        "| function | eager path (µs) | library path (µs) | eager − F.grid_sample (µs) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        library = "—" if row["library_us"] is None else f"{row['library_us']:.1f}"
        extra = "—" if "yardstick" in row["function"] else f"{row['eager_us'] - grid_sample:+.1f}"
        lines.append(f"| `{row['function']}` | {row['eager_us']:.1f} | {library} | {extra} |")
    report = "\n".join(lines) + "\n"
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_time.md").write_text(report)
    (args.out / "host_time.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
