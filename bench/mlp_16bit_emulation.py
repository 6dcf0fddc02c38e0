# SPDX-License-Identifier: Apache-2.0
"""The 16-bit Eikonal step of bench_mlp.py emulated in float64, to separate the format's error from
the kernels' and to see what a loss scale does to it.

    python bench/mlp_16bit_emulation.py [--log2-batch 18] [--scales 1 65536]

The SDF 3 → 64×4 → 1 (Softplus β = 100) takes the step of `fieldfuse.mlp_value_and_input_grad`:
y and g = ∂y/∂x, the loss mean(|y|) + mean((‖g‖ − 1)²), and its gradients to every weight and
bias through the one-sweep double backward (Note [mlp value and input gradient]). Every operand
of a matrix product is rounded to float16 or bfloat16 as it enters the product, as on the tensor
cores; everything else, the accumulation included, stays float64 (the kernels accumulate in
float32, whose error is a thousand times smaller). `--scales` multiplies the loss before the
backward and divides the gradients after, as torch.amp.GradScaler does. Each row also runs with
the hidden softplus slopes taken from the stored 16-bit outputs (Note [mlp slope from the
output]): σ′ = 1 − e^(−βa) in the first-order sweep, σ″u = β(1 − σ′)t in the double backward.
Prints a markdown table of ‖result − exact‖ / ‖exact‖ over every parameter gradient. CPU only;
B = 2^18 takes about three minutes and 4 GB on two cores.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import Tensor

BETA = 100.0
SIZES = [3, 64, 64, 64, 64, 1]
ROUNDINGS: dict[str, Callable[[Tensor], Tensor]] = {
    "float16": lambda t: t.half().double(),
    "bfloat16": lambda t: t.bfloat16().double(),
}


def softplus_slopes(p: Tensor) -> tuple[Tensor, Tensor]:
    """σ′ and σ″ of softplus with β = BETA."""
    s = torch.sigmoid(BETA * p)
    return s, BETA * s * (1 - s)


def parameter_gradients(weights, biases, x, rnd, loss_scale: float,
                        slopes_from_output: bool) -> list[Tensor]:
    """The step's weight and bias gradients with products of `rnd`-rounded operands."""
    L, batch = len(weights), x.shape[0]
    w16 = [rnd(w) for w in weights]
    # Forward: a_k and p_k, then the first-order sweep g_{k−1} = (g_k ⊙ σ′) W_k from grad_out = 1.
    a, p = [x], []
    for k in range(L):
        p.append(rnd(a[-1]) @ w16[k].T + biases[k])
        a.append(torch.nn.functional.softplus(p[-1], BETA) if k < L - 1 else p[-1])
    slope = [softplus_slopes(p[k]) if k < L - 1 else (torch.ones_like(p[k]), 0 * p[k])
             for k in range(L)]
    g = torch.ones_like(a[-1])
    for k in reversed(range(L)):
        s1 = slope[k][0]
        if slopes_from_output and k < L - 1:
            s1 = 1 - torch.exp(-BETA * rnd(a[k + 1]))
        g = rnd(g * s1) @ w16[k]
    # The loss's upstream gradients, times the loss scale.
    norm = g.norm(dim=1, keepdim=True)
    grad_y = torch.sign(a[-1]) / batch * loss_scale
    grad_g = 2 * (norm - 1) * g / norm / batch * loss_scale
    # Double backward: the tangent t_k forward, then δ_k and q_k backward with r_L = grad_y.
    t, u = [grad_g], []
    for k in range(L):
        u.append(rnd(t[-1]) @ w16[k].T)
        t.append(slope[k][0] * u[-1])
    g, r = torch.ones_like(a[-1]), grad_y
    grads_w, grads_b = [None] * L, [None] * L
    for k in reversed(range(L)):
        s1, s2 = slope[k]
        curvature = s2 * u[k]
        if slopes_from_output and k < L - 1:
            curvature = BETA * (1 - s1) * rnd(t[k + 1])
        delta, q = rnd(s1 * g), rnd(s1 * r + curvature * g)
        grads_w[k] = (delta.T @ rnd(t[k]) + q.T @ rnd(a[k])) / loss_scale
        grads_b[k] = q.sum(0) / loss_scale
        g, r = delta @ w16[k], q @ w16[k]
    return grads_w + grads_b


def relative_error(got: list[Tensor], exact: list[Tensor]) -> float:
    got_flat = torch.cat([t.flatten() for t in got])
    exact_flat = torch.cat([t.flatten() for t in exact])
    return ((got_flat - exact_flat).norm() / exact_flat.norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-batch", type=int, default=18)
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 2.0**16])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    layers = [torch.nn.Linear(i, o) for i, o in zip(SIZES[:-1], SIZES[1:])]
    weights = [layer.weight.detach().double() for layer in layers]
    biases = [layer.bias.detach().double() for layer in layers]
    x = (torch.rand(1 << args.log2_batch, 3) - 0.5).double()
    exact = parameter_gradients(weights, biases, x, lambda t: t, 1.0, False)
    print(f"B = 2^{args.log2_batch}, seed {args.seed}\n")
    print("| operands | loss scale | slopes recomputed | slopes from outputs |")
    print("|---|---|---|---|")
    for name, rnd in ROUNDINGS.items():
        for scale in args.scales:
            errors = [relative_error(parameter_gradients(weights, biases, x, rnd, scale, fo), exact)
                      for fo in (False, True)]
            print(f"| {name} | {scale:g} | {errors[0]:.2e} | {errors[1]:.2e} |", flush=True)


if __name__ == "__main__":
    main()
