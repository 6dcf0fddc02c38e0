# SPDX-License-Identifier: Apache-2.0
"""Where the MLP's forward + backward and its Eikonal step spend their device time (issue 13).

``torch.profiler`` over 5 calls after 3 warm-up calls, in float32 and float16 compute, at
bench_mlp.py's sizes (B = 2^18): forward + backward of 32 → 64×4 → 16 ReLU to x, weights and
biases, and the Eikonal step of the SDF 3 → 64×4 → 1 (Softplus β = 100). Prints the busiest
kernels of each with their device time per call. CUDA only.

    python3 bench/profile_mlp.py
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import fieldfuse

BATCH = 1 << 18
CALLS, WARMUP, SHOWN = 5, 3, 6


def network(sizes: list[int], device: torch.device) -> tuple[list, list]:
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    return ([layer.weight.detach().to(device).requires_grad_() for layer in layers],
            [layer.bias.detach().to(device).requires_grad_() for layer in layers])


def kernel_table(name: str, fn: Callable[[], object]) -> str:
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name] = per_kernel.get(event.name, 0.0) + event.device_time_total
    lines = [f"{name}: {sum(per_kernel.values()) / CALLS / 1e3:.3f} ms of kernels per call"]
    for kernel, us in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:SHOWN]:
        lines.append(f"  {us / CALLS / 1e3:8.3f} ms  {kernel[:100]}")
    return "\n".join(lines)


def main() -> None:
    device = torch.device("cuda")
    torch.manual_seed(0)
    for compute in (None, torch.float16):
        label = "fp32" if compute is None else "fp16"
        weights, biases = network([32, 64, 64, 64, 64, 16], device)
        x = torch.randn(BATCH, 32, device=device, requires_grad=True)

        def forward_backward():
            y = fieldfuse.mlp(x, weights, biases, activation="relu", compute_dtype=compute)
            return torch.autograd.grad(y.sum(), [x, *weights, *biases])

        print(kernel_table(f"fwd+bwd 32→64×4→16 {label}", forward_backward), flush=True)
        sdf_weights, sdf_biases = network([3, 64, 64, 64, 64, 1], device)
        points = (torch.rand(BATCH, 3, device=device) - 0.5).requires_grad_()

        def eikonal_step():
            y = fieldfuse.mlp(points, sdf_weights, sdf_biases, activation="softplus",
                              softplus_beta=100.0, compute_dtype=compute)
            (grad,) = torch.autograd.grad(y.sum(), points, create_graph=True)
            loss = (grad.float().norm(dim=1) - 1).square().mean() + y.float().abs().mean()
            return torch.autograd.grad(loss, [*sdf_weights, *sdf_biases])

        print(kernel_table(f"Eikonal step 3→64×4→1 {label}", eikonal_step), flush=True)


if __name__ == "__main__":
    main()
