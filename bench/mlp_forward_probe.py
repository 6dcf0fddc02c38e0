# SPDX-License-Identifier: Apache-2.0
"""A quick probe of the 16-bit MLP forward (issue 13) without bench_mlp.py's long Eikonal rows.

fieldfuse.mlp 32 → W×4 → 16 ReLU at B = 2^18 against nn.Sequential under torch.autocast, both in
this process: CUDA events, median of 100 calls after 10 warm-up calls, inputs rotated over four
tensors; "graph" is a CUDA graph of 20 calls on one input replayed, per call, and "rotated
inputs" the same with the calls cycling through the four inputs. Then the forward + backward
(autograd, to x, weights and biases) at W <= 128, and the Eikonal step of the SDF 3 → 64×4 → 1
(Softplus β = 100, bench_mlp.py's loss), both eager and graphed. CUDA only; prints one line per
case.

``--widths 64`` limits the widths and ``--cases eikonal`` the cases; ``--every-gradient`` makes
each backward compute every gradient whose input requires grad, as before Note [gradients the
pass uses] (for comparing the Eikonal step with and without it in one run).

    python3 bench/mlp_forward_probe.py [--widths 64 16 ...] [--cases inference fwdbwd eikonal]
                                       [--every-gradient]
"""

from __future__ import annotations

import argparse
import statistics

import torch

import fieldfuse
from fieldfuse import _registry

BATCH = 1 << 18
WIDTHS = (64, 16, 32, 128, 256)
ROTATION = 4
CASES = ("inference", "fwdbwd", "eikonal")


def median_ms(fn, reps: int = 100) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def graphed_ms(fn, calls: int = 20) -> float:
    """Per-call time of `calls` calls captured in one CUDA graph (after warm-up on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return median_ms(graph.replay, 30) / calls


def network(width: int, device: torch.device):
    sizes = [32] + [width] * 4 + [16]
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    weights = [layer.weight.detach().to(device) for layer in layers]
    biases = [layer.bias.detach().to(device) for layer in layers]
    modules = []
    for layer in layers:
        modules += [layer.to(device), torch.nn.ReLU()]
    return weights, biases, torch.nn.Sequential(*modules[:-1])


def inference(width: int, compute: torch.dtype, device: torch.device) -> str:
    weights, biases, sequential = network(width, device)
    xs = [torch.randn(BATCH, 32, device=device) for _ in range(ROTATION)]
    exact = sequential.double()(xs[0].double()).float()
    sequential.float()
    turn = [0]

    def next_x() -> torch.Tensor:
        turn[0] = (turn[0] + 1) % ROTATION
        return xs[turn[0]]

    def ours():
        return fieldfuse.mlp(next_x(), weights, biases, activation="relu", compute_dtype=compute)

    def eager():
        with torch.autocast("cuda", dtype=compute):
            return sequential(next_x())

    y = fieldfuse.mlp(xs[0], weights, biases, activation="relu", compute_dtype=compute)
    error = ((y - exact).norm() / exact.norm()).item()
    with torch.no_grad():
        ours_ms, eager_ms = median_ms(ours), median_ms(eager)
    graph_ms = graphed_ms(
        lambda: fieldfuse.mlp(xs[0], weights, biases, activation="relu", compute_dtype=compute))
    # x is 32 MiB at 32 columns, within reach of the H100's 50 MB L2 across replays of one input:
    # the rotated graph cycles through the four inputs (128 MiB) as the eager timing does.
    rotated_ms = graphed_ms(ours)
    return (f"width {width} {compute}: ours {ours_ms:.4f} ms (graph {graph_ms:.4f}, rotated "
            f"inputs {rotated_ms:.4f}), eager {eager_ms:.4f}, rel err {error:.2e}")


def forward_backward(width: int, compute: torch.dtype, device: torch.device) -> str:
    """Forward + backward to x, weights and biases (autograd), fieldfuse against nn.Sequential
    under torch.autocast, each as an eager call and replayed from a CUDA graph."""
    weights, biases, sequential = network(width, device)
    params = [p.requires_grad_() for p in weights + biases]
    x = torch.randn(BATCH, 32, device=device, requires_grad=True)
    upstream = torch.randn(BATCH, 16, device=device)

    def ours():
        y = fieldfuse.mlp(x, weights, biases, activation="relu", compute_dtype=compute)
        torch.autograd.grad(y, [x] + params, upstream)

    def eager():
        with torch.autocast("cuda", dtype=compute):
            y = sequential(x)
        torch.autograd.grad(y, [x] + list(sequential.parameters()), upstream)

    return (f"fwd+bwd width {width} {compute}: ours {median_ms(ours, 50):.4f} ms (graph "
            f"{graphed_ms(ours):.4f}), eager {median_ms(eager, 50):.4f} (graph "
            f"{graphed_ms(eager):.4f})")


def eikonal(compute: torch.dtype, device: torch.device) -> str:
    """Forward, input gradient with create_graph, Eikonal + surface loss, backward to every
    parameter: fieldfuse against nn.Sequential (Softplus) under torch.autocast."""
    sizes = [3, 64, 64, 64, 64, 1]
    layers = [torch.nn.Linear(a, b).to(device) for a, b in zip(sizes[:-1], sizes[1:])]
    modules = []
    for layer in layers:
        modules += [layer, torch.nn.Softplus(beta=100.0)]
    sequential = torch.nn.Sequential(*modules[:-1])
    weights = [layer.weight.detach().clone().requires_grad_() for layer in layers]
    biases = [layer.bias.detach().clone().requires_grad_() for layer in layers]
    points = (torch.rand(BATCH, 3, device=device) - 0.5).requires_grad_()

    def terms(y, grad):
        return (grad.float().norm(dim=1) - 1).square().mean() + y.float().abs().mean()

    def step(y):
        (grad,) = torch.autograd.grad(y.sum(), points, create_graph=True)
        return terms(y, grad)

    options = dict(activation="softplus", softplus_beta=100.0, compute_dtype=compute)

    def ours():
        y = fieldfuse.mlp(points, weights, biases, **options)
        torch.autograd.grad(step(y), weights + biases)

    def fused():  # y and ∇y from one op, one double-backward sweep for both terms
        y, grad = fieldfuse.mlp_value_and_input_grad(points, weights, biases, **options)
        torch.autograd.grad(terms(y, grad), weights + biases)

    def eager():
        with torch.autocast("cuda", dtype=compute):
            y = sequential(points)
        torch.autograd.grad(step(y), list(sequential.parameters()))

    return (f"eikonal {compute}: ours {median_ms(ours, 30):.4f} ms (graph "
            f"{graphed_ms(ours):.4f}), value_and_input_grad {median_ms(fused, 30):.4f} (graph "
            f"{graphed_ms(fused):.4f}), eager {median_ms(eager, 30):.4f} (graph "
            f"{graphed_ms(eager):.4f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--every-gradient", action="store_true",
                        help="backwards compute every gradient whose input requires grad")
    args = parser.parse_args()
    if args.every_gradient:  # every edge counts as used (Note [gradients the pass uses])
        _registry._will_engine_execute_node = lambda node: True
    torch.manual_seed(0)
    device = torch.device("cuda")
    for case, run in (("inference", inference), ("fwdbwd", forward_backward)):
        if case not in args.cases:
            continue
        for width in args.widths:
            if case == "fwdbwd" and width == 256:  # keeps the warp-fused kernels
                continue
            for compute in (torch.float16, torch.bfloat16):
                if width == 64 or compute == torch.float16:
                    print(run(width, compute, device), flush=True)
    if "eikonal" in args.cases:
        for compute in (torch.float16, torch.bfloat16):
            print(eikonal(compute, device), flush=True)


if __name__ == "__main__":
    main()
