# SPDX-License-Identifier: Apache-2.0
"""Where a K-Planes forward + backward and a full training step spend their device time.

Two modes (CUDA only):
- ``--what step``: ``torch.profiler`` over a few training steps of bench_kplanes.py's fused step
  (channels-last and NCHW), one table of kernels by device time per layout.
- ``--what kernels``: a few fwd+bwd calls of ``kplanes_tilted`` (default and deterministic
  backward) at the tomography and production configs, for Nsight Compute to attach to, selecting
  kernels by name: ``ncu --target-processes all -k "regex:forward_kernel|backward_kernel|
  run_partials" --metrics ... python3 bench/profile_kplanes.py --what kernels``. (NVTX ranges
  would not do: the backward kernels are launched from autograd's own thread.)

Usage: python3 bench/profile_kplanes.py --what step|kernels [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import bench_kplanes as bk
import fieldfuse


def profile_step(out: Path) -> None:
    sc = bk.GPU_STEP
    device = torch.device("cuda")
    torch.manual_seed(bk.SEED)
    batches = bk.make_batches(sc, device)
    make, _ = bk.field_factory(sc, device)
    lines = []
    for channels_last in (True, False):
        step = bk.train_step(make(channels_last, False), bk.fused_densities,
                             bk.fieldfuse_regularisers, sc)
        for i in range(5):
            step(batches[i % len(batches)])
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                torch.profiler.ProfilerActivity.CPU]) as prof:
            for i in range(10):
                step(batches[i % len(batches)])
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30)
        lines += [f"## fused step, {'channels-last' if channels_last else 'NCHW'} planes "
                  f"(10 steps)", "", "```", table, "```", ""]
    text = "\n".join(lines)
    print(text)
    (out / "profile_step.md").write_text(text)


def profile_kernels() -> None:
    device = torch.device("cuda")
    for cfg in bk.GPU_CONFIGS:
        s = bk.make_input_sets(cfg, torch.float32, device).channels_last[0]
        for deterministic in (False, True):
            for _ in range(2):  # the second call is the one to read (warm caches, no first-use)
                f = fieldfuse.kplanes_tilted(s.pts, s.rotations, s.planes,
                                             deterministic=deterministic)
                f.sum().backward()
            torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=("step", "kernels"), required=True)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "step":
        profile_step(args.out)
    else:
        profile_kernels()


if __name__ == "__main__":
    main()
