# SPDX-License-Identifier: Apache-2.0
"""K-Planes tomography written with fieldfuse's PyTorch ops: the twin of `fieldfuse tomo --method
kplanes` (the C++ reconstruction behind `fieldfuse.tomo.reconstruct`), for users to modify.

The model and loss are those of specs/tomography.md and docs/tomo_kplanes.md:

- each step draws `rays` detector pixels, ray r from projection r mod n; pixel (i, j) of
  projection m sits at (u, v) = (−1 + (2j+1)/W, −1 + (2i+1)/H) and casts the ray
  o = R_m·(u − s_u, v − s_v, 0), d = R_m·e_z, with R_m = Rz(−z1_m)·Rx(tilt_m)·Rz(−z3_m);
- `fieldfuse.ray_box_samples_padded` samples it through [−1, 1]³ with step ds = 2/max(H, W);
- the field is `fieldfuse.nn.KPlanesTilted` (T quaternion rotations, a Linear decoder, density
  softplus(x − 1)); pred = Σ ρ·δ over the ray's samples;
- loss = mean (pred − target)² + tv_volume·(volume TV at ≤ tv_points of the step's samples, h one
  finest-plane cell) + tv_plane·plane TV;
- Adam with learning rates planes 1e-2 (`--lr-planes`), decoder 1e-3, rotations 1e-2, pose 1e-2, cosine decay over
  the run, gradient-norm clipping at 1; z1, z3 and the shift of every projection but the one
  closest to 0° are learnable (pose refinement).

The C++ route draws its pixels with its own counter-based generator, so the two routes see
different batches: they agree in quality (PSNR, SSIM against the truth) within the spread that
reruns with different seeds show, not bit for bit. `--compare` runs both and prints that check.

    python examples/tomo_kplanes_torch.py                        # the embedded phantom, CPU
    python examples/tomo_kplanes_torch.py --compare --seeds 3    # both routes, several seeds
    python examples/tomo_kplanes_torch.py --stack s.npy --angles=-60:60:3 --output vol.npy
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

import fieldfuse
from fieldfuse import tomo


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="tilt stack [n, H, W] as .npy (default: the embedded "
                        "phantom's analytic projections)")
    parser.add_argument("--angles", help="tilt angles in degrees: start:stop:step (write --angles=-60:60:3), or a text file "
                        "with one angle per line (required with --stack)")
    parser.add_argument("--truth", help="the true volume as .npy, to score against")
    parser.add_argument("--phantom-size", type=int, default=48,
                        help="edge of the embedded phantom's volume and detector (default 48)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--iterations", type=int, default=300, help="Adam steps (default 300)")
    parser.add_argument("--rays", type=int, default=2048, help="rays per step (default 2048)")
    parser.add_argument("--tilts", type=int, default=4, help="field rotations T (default 4)")
    parser.add_argument("--channels", type=int, default=8, help="channels per plane (default 8)")
    parser.add_argument("--tv-volume", type=float, default=1e-3, help="volume-TV weight")
    parser.add_argument("--tv-points", type=int, default=10000, help="volume-TV points per step")
    parser.add_argument("--tv-plane", type=float, default=1e-3, help="plane-TV weight")
    parser.add_argument("--lr-planes", type=float, default=1e-2,
                        help="planes' learning rate (default 1e-2, the spec's; the CLI's embedded "
                        "run uses 0.1 on its small phantom)")
    parser.add_argument("--no-pose-refinement", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write the reconstruction here (.npy)")
    parser.add_argument("--compare", action="store_true",
                        help="also run fieldfuse.tomo.reconstruct(method='kplanes') and compare")
    parser.add_argument("--seeds", type=int, default=1,
                        help="with --compare: seeds per route, for the spread (default 1)")
    return parser.parse_args(argv)


def parse_angles(text: str) -> torch.Tensor:
    """`start:stop:step` (stop included when the steps land on it) or a file of angles."""
    if text.count(":") == 2:
        start, stop, step = (float(part) for part in text.split(":"))
        count = math.floor((stop - start) / step + 1e-9) + 1
        return torch.tensor([start + k * step for k in range(count)], dtype=torch.float64)
    with open(text, encoding="utf-8") as handle:
        return torch.tensor([float(line) for line in handle if line.strip()], dtype=torch.float64)


def rz(angle: torch.Tensor) -> torch.Tensor:
    c, s, one, zero = angle.cos(), angle.sin(), torch.ones_like(angle), torch.zeros_like(angle)
    return torch.stack([torch.stack([c, -s, zero], -1), torch.stack([s, c, zero], -1),
                        torch.stack([zero, zero, one], -1)], -2)


def rx(angle: torch.Tensor) -> torch.Tensor:
    c, s, one, zero = angle.cos(), angle.sin(), torch.ones_like(angle), torch.zeros_like(angle)
    return torch.stack([torch.stack([one, zero, zero], -1), torch.stack([zero, c, -s], -1),
                        torch.stack([zero, s, c], -1)], -2)


class TiltSeriesModel(torch.nn.Module):
    """The field and the per-projection poses (z1, z3 in degrees, shifts in detector units)."""

    def __init__(self, stack_shape, tilts_degrees: torch.Tensor, args: argparse.Namespace,
                 device: torch.device) -> None:
        super().__init__()
        n, height, width = stack_shape
        resolution = max(height, width)
        generator = torch.Generator().manual_seed(args.seed)
        self.field = fieldfuse.nn.KPlanesTilted(args.tilts, args.channels, [resolution],
                                                rotation_param="quaternion", device=device,
                                                generator=generator)
        self.register_buffer("tilts", torch.deg2rad(tilts_degrees).float().to(device))
        self.z1 = torch.nn.Parameter(torch.zeros(n, device=device))
        self.z3 = torch.nn.Parameter(torch.zeros(n, device=device))
        self.shifts = torch.nn.Parameter(torch.zeros(n, 2, device=device))
        # The projection closest to 0° anchors the frame: its pose is never updated.
        self.reference = int(tilts_degrees.abs().argmin())
        learnable = torch.ones(n, device=device)
        learnable[self.reference] = 0
        self.register_buffer("learnable", learnable)
        self.height, self.width = height, width
        self.ds = 2.0 / max(height, width)
        # The ray sampler (bench/bench_tomo.py swaps in a plain-PyTorch one).
        self.sampler = fieldfuse.ray_box_samples_padded

    def rotations(self) -> torch.Tensor:
        z1 = torch.deg2rad(self.z1 * self.learnable)
        z3 = torch.deg2rad(self.z3 * self.learnable)
        return rz(-z1) @ rx(self.tilts) @ rz(-z3)

    def rays(self, m: torch.Tensor, i: torch.Tensor, j: torch.Tensor):
        rotations = self.rotations()[m]
        shifts = (self.shifts * self.learnable[:, None])[m]
        u = -1 + (2 * j.to(shifts.dtype) + 1) / self.width - shifts[:, 0]
        v = -1 + (2 * i.to(shifts.dtype) + 1) / self.height - shifts[:, 1]
        local = torch.stack([u, v, torch.zeros_like(u)], -1)
        return (rotations @ local[:, :, None])[:, :, 0], rotations[:, :, 2]

    def loss(self, m, i, j, target, args: argparse.Namespace, generator: torch.Generator):
        origins, directions = self.rays(m, i, j)
        points, deltas, valid = self.sampler(origins, directions, self.ds)
        flat = points[valid]
        taps = self.field.tv_tap_coords(flat, args.tv_points, generator=generator)
        density, tap_density = self.field.forward_with_tv_taps(flat, taps)
        rho = torch.zeros(valid.shape, dtype=density.dtype, device=density.device)
        rho = rho.masked_scatter(valid, density[:, 0])
        prediction = (rho * deltas).sum(dim=1)
        loss = F.mse_loss(prediction, target)
        if args.tv_volume > 0:
            loss = loss + self.field.volume_tv(tap_density, args.tv_volume)
        if args.tv_plane > 0:
            loss = loss + args.tv_plane * self.field.plane_tv()
        return loss

    @torch.no_grad()
    def volume(self, shape, chunk: int = 1 << 18) -> torch.Tensor:
        """The density at the voxel centres of a [D, H, W] grid (the projector's convention)."""
        axes = [-1 + (2 * torch.arange(size, device=self.tilts.device) + 1) / size
                for size in shape]
        z, y, x = torch.meshgrid(*axes, indexing="ij")
        points = torch.stack([x, y, z], -1).reshape(-1, 3).float()
        values = torch.cat([self.field(points[k:k + chunk])[:, 0]
                            for k in range(0, len(points), chunk)])
        return values.reshape(shape)


def make_step(model: TiltSeriesModel, data: torch.Tensor, args: argparse.Namespace,
              device: torch.device) -> Callable[[], torch.Tensor]:
    """One training step of `model` on the normalised stack `data`: draw `args.rays` pixels (ray
    r from projection r mod n), the loss, its backward, clipping, Adam with the spec's rates and
    a cosine decay over `args.iterations`. Returns the step's loss (on the device)."""
    field = model.field
    groups = [{"params": list(field.planes), "lr": args.lr_planes},
              {"params": list(field.decoder.parameters()), "lr": 1e-3},
              {"params": [field.rotation_params], "lr": 1e-2}]
    if not args.no_pose_refinement:
        groups.append({"params": [model.z1, model.z3, model.shifts], "lr": 1e-2})
    optimizer = torch.optim.Adam(groups, fused=device.type == "cuda" or None)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.iterations)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    n, height, width = data.shape

    def step() -> torch.Tensor:
        m = torch.arange(args.rays, device=device) % n
        i = torch.randint(height, (args.rays,), device=device, generator=generator)
        j = torch.randint(width, (args.rays,), device=device, generator=generator)
        loss = model.loss(m, i, j, data[m, i, j], args, generator)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        return loss.detach()
    return step


def normalised(stack: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The stack divided by its 95th percentile (as the C++ route does), and that percentile."""
    scale = float(np.percentile(stack.double().cpu().numpy(), 95))
    return (stack / scale).float(), scale


def train(stack: torch.Tensor, tilts: torch.Tensor, volume_shape, args: argparse.Namespace,
          device: torch.device) -> tuple[torch.Tensor, list[float]]:
    """Trains on `stack` and returns the volume in the stack's units and the losses."""
    data, scale = normalised(stack)
    data = data.to(device)
    torch.manual_seed(args.seed)  # the decoder's initialisation
    model = TiltSeriesModel(tuple(stack.shape), tilts, args, device)
    step = make_step(model, data, args, device)
    losses = [step().item() for _ in range(args.iterations)]
    return model.volume(volume_shape).cpu() * scale, losses


def psnr(volume: torch.Tensor, truth: torch.Tensor) -> float:
    """PSNR against the truth's range."""
    mse = (volume.double() - truth.double()).square().mean().item()
    peak = (truth.max() - truth.min()).item()
    return 10 * math.log10(peak * peak / mse) if mse > 0 else math.inf


def load_inputs(args: argparse.Namespace):
    if args.stack is None:
        phantom = tomo.phantom(args.phantom_size, seed=args.seed)
        return phantom["stack"], phantom["angles"], phantom["truth"]
    if args.angles is None:
        sys.exit("tomo_kplanes_torch.py: error: --stack needs --angles")
    stack = torch.from_numpy(np.load(args.stack)).float()
    angles = parse_angles(args.angles)
    if len(angles) != stack.shape[0]:
        sys.exit(f"tomo_kplanes_torch.py: error: {len(angles)} angles for {stack.shape[0]} "
                 "projections")
    truth = torch.from_numpy(np.load(args.truth)).float() if args.truth else None
    return stack, angles, truth


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    stack, angles, truth = load_inputs(args)
    shape = tuple(truth.shape) if truth is not None else (stack.shape[1],) * 2 + (stack.shape[2],)
    start = time.perf_counter()
    volume, losses = train(stack, angles, shape, args, device)
    seconds = time.perf_counter() - start
    print(f"torch twin: {args.iterations} steps in {seconds:.1f} s, loss {losses[0]:.4g} -> "
          f"{losses[-1]:.4g}")
    if truth is not None:
        print(f"torch twin: PSNR {psnr(volume, truth):.2f} dB, SSIM "
              f"{tomo.ssim(volume, truth):.4f}")
    if args.output:
        np.save(args.output, volume.numpy())
    if args.compare:
        if truth is None:
            sys.exit("tomo_kplanes_torch.py: error: --compare needs a truth (the phantom or "
                     "--truth)")
        compare(stack, angles, truth, args, device)
    return 0 if losses[-1] < losses[0] else 1


def compare(stack, angles, truth, args: argparse.Namespace, device: torch.device) -> None:
    """SSIM of both routes over `args.seeds` seeds each: they agree when their means differ by
    less than the spread (max − min) of the seeds within either route."""
    settings = dict(iterations=args.iterations, rays=args.rays, num_tilts=args.tilts,
                    lr_planes=args.lr_planes,
                    channels=args.channels, tv_volume=args.tv_volume, tv_points=args.tv_points,
                    tv_plane=args.tv_plane, pose_refinement=not args.no_pose_refinement)
    twin, cxx = [], []
    for seed in range(args.seeds):
        run_args = argparse.Namespace(**{**vars(args), "seed": seed})
        twin.append(tomo.ssim(train(stack, angles, tuple(truth.shape), run_args, device)[0],
                              truth))
        volume, _ = tomo.reconstruct(stack.to(device), angles, method="kplanes",
                                     volume_shape=tuple(truth.shape), seed=seed, **settings)
        cxx.append(tomo.ssim(volume.cpu(), truth))
    spread = max(max(twin) - min(twin), max(cxx) - min(cxx))
    gap = abs(statistics.mean(twin) - statistics.mean(cxx))
    print(f"SSIM torch twin {statistics.mean(twin):.4f} (seeds {', '.join(f'{s:.4f}' for s in twin)})")
    print(f"SSIM C++ route  {statistics.mean(cxx):.4f} (seeds {', '.join(f'{s:.4f}' for s in cxx)})")
    print(f"routes differ by {gap:.4f}; seed spread {spread:.4f}: "
          f"{'agree' if gap <= max(spread, 1e-3) else 'DIFFER'}")


if __name__ == "__main__":
    sys.exit(main())
