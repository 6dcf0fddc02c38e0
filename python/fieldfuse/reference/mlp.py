# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch oracle of ``fieldfuse.mlp``: the same network from ``torch.nn.functional`` ops, so
autograd gives its first and second derivatives (use float64 to check the fused kernels)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def apply_activation(p: Tensor, name: str, *, softplus_beta: float = 1.0, sine_omega0: float = 30.0,
               leaky_slope: float = 0.01) -> Tensor:
    """σ(p) for one of fieldfuse's activation names (softplus with PyTorch's threshold 20)."""
    if name == "relu":
        return F.relu(p)
    if name == "leaky_relu":
        return F.leaky_relu(p, leaky_slope)
    if name == "softplus":
        return F.softplus(p, beta=softplus_beta, threshold=20.0)
    if name == "sine":
        return torch.sin(sine_omega0 * p)
    if name == "tanh":
        return torch.tanh(p)
    if name == "sigmoid":
        return torch.sigmoid(p)
    if name == "silu":
        return F.silu(p)
    if name == "exp":
        return torch.exp(p)
    if name == "none":
        return p
    raise ValueError(f"unknown activation {name!r}")


def mlp(x: Tensor, weights: Sequence[Tensor], biases: Sequence[Tensor | None] | None = None, *,
        activation: str = "relu", output_activation: str = "none", softplus_beta: float = 1.0,
        sine_omega0: float = 30.0, leaky_slope: float = 0.01) -> Tensor:
    """``a_k = σ_k(a_{k−1} W_kᵀ + b_k)``; hidden layers use ``activation``, the last
    ``output_activation`` (the contract of ``fieldfuse.mlp``)."""
    params = dict(softplus_beta=softplus_beta, sine_omega0=sine_omega0, leaky_slope=leaky_slope)
    a = x
    for k, w in enumerate(weights):
        b = None if biases is None else biases[k]
        name = output_activation if k == len(weights) - 1 else activation
        a = apply_activation(F.linear(a, w, b), name, **params)
    return a

