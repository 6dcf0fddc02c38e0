# SPDX-License-Identifier: Apache-2.0
"""CPU timing of fieldfuse.mlp against PyTorch eager: forward + backward (to x and parameters) of
an MLP 32 → 64×4 → 16 (ReLU) by default. Prints the median of several repetitions; never asserts.

    python bench/bench_mlp_cpu.py [--batch 65536] [--width 64] [--reps 7] [--activation relu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import fieldfuse


def network(width: int, in_features: int = 32, out_features: int = 16, hidden_layers: int = 4):
    sizes = [in_features] + [width] * hidden_layers + [out_features]
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    return layers


def median_ms(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1 << 16)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--activation", default="relu")
    args = parser.parse_args()
    torch.manual_seed(0)
    layers = network(args.width)
    weights = [layer.weight for layer in layers]
    biases = [layer.bias for layer in layers]
    acts = {"relu": torch.nn.ReLU, "silu": torch.nn.SiLU, "tanh": torch.nn.Tanh,
            "softplus": torch.nn.Softplus}
    modules = []
    for layer in layers[:-1]:
        modules += [layer, acts[args.activation]()]
    sequential = torch.nn.Sequential(*modules, layers[-1])
    x = torch.randn(args.batch, 32, requires_grad=True)

    def fused_step():
        y = fieldfuse.mlp(x, weights, biases, activation=args.activation)
        torch.autograd.grad(y.square().sum(), [x, *weights, *biases])

    def torch_step():
        y = sequential(x)
        torch.autograd.grad(y.square().sum(), [x, *weights, *biases])

    def fused_forward():
        with torch.no_grad():
            fieldfuse.mlp(x, weights, biases, activation=args.activation)

    def torch_forward():
        with torch.no_grad():
            sequential(x)

    print(f"threads {torch.get_num_threads()}, B = {args.batch}, 32 → {args.width}×4 → 16 "
          f"({args.activation}), median of {args.reps}")
    for name, ours, theirs in (("forward", fused_forward, torch_forward),
                               ("forward + backward", fused_step, torch_step)):
        t_ours, t_torch = median_ms(ours, args.reps), median_ms(theirs, args.reps)
        print(f"{name:20s} fieldfuse {t_ours:8.2f} ms   torch eager {t_torch:8.2f} ms   "
              f"speed-up {t_torch / t_ours:5.2f}x")


if __name__ == "__main__":
    main()
