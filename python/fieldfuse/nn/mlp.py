# SPDX-License-Identifier: Apache-2.0
"""``fieldfuse.nn.MLP``: the fused MLP as a module holding nn.Linear-layout parameters."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..mlp import mlp, mlp_value_and_input_grad

# torch.nn activation modules from_torch understands, with the fieldfuse name, the parameter each
# carries and the module attribute holding it (sine and exp have no torch module, so a Sequential
# cannot express them).
_TORCH_ACTIVATIONS = {
    torch.nn.ReLU: ("relu", None, None),
    torch.nn.LeakyReLU: ("leaky_relu", "leaky_slope", "negative_slope"),
    torch.nn.Softplus: ("softplus", "softplus_beta", "beta"),
    torch.nn.Tanh: ("tanh", None, None),
    torch.nn.Sigmoid: ("sigmoid", None, None),
    torch.nn.SiLU: ("silu", None, None),
    torch.nn.Identity: ("none", None, None),
}
# fieldfuse's softplus is p itself where βp > 20, torch.nn.Softplus's default threshold.
_SOFTPLUS_THRESHOLD = 20.0


class MLP(torch.nn.Module):
    """``in_features → hidden × layers → out_features`` through :func:`fieldfuse.mlp`.

    Parameters are a ParameterList ``weights`` (``[out, in]`` each, nn.Linear layout) and, with
    ``bias=True``, ``biases``; they are initialised as nn.Linear does, except for ``sine``, which
    uses SIREN's init (first layer U(−1/in, 1/in), later ones U(±sqrt(6/in)/ω₀)).
    ``activation_params`` are ``softplus_beta``, ``sine_omega0`` and ``leaky_slope``.
    """

    def __init__(self, in_features: int, out_features: int, hidden: int, layers: int, *,
                 activation: str = "relu", output_activation: str = "none", bias: bool = True,
                 compute_dtype: torch.dtype | None = None, device=None, dtype=None,
                 **activation_params) -> None:
        super().__init__()
        unknown = set(activation_params) - {"softplus_beta", "sine_omega0", "leaky_slope"}
        if unknown:
            raise TypeError(f"MLP(): unknown activation parameters {sorted(unknown)}")
        self.activation, self.output_activation = activation, output_activation
        self.compute_dtype, self.activation_params = compute_dtype, dict(activation_params)
        sizes = [in_features] + [hidden] * layers + [out_features]
        linears = [torch.nn.Linear(i, o, bias=bias, device=device, dtype=dtype)
                   for i, o in zip(sizes[:-1], sizes[1:])]
        self.weights = torch.nn.ParameterList([lin.weight for lin in linears])
        self.biases = torch.nn.ParameterList([lin.bias for lin in linears]) if bias else None
        self._check_network()
        if activation == "sine":
            self._siren_init(activation_params.get("sine_omega0", 30.0))

    @torch.no_grad()
    def _check_network(self) -> None:
        """The op's own checks of the widths, activations and their parameters, on an empty
        batch, so a network it would refuse is refused here rather than at the first forward
        (compute_dtype is checked there: it depends on the device the module will be moved to)."""
        if self.weights[0].is_meta:
            return  # the fake impl checks nothing
        kwargs = dict(self._network_kwargs(), compute_dtype=None)
        empty = self.weights[0].new_empty((0, self.in_features))
        mlp(empty, list(self.weights), self._biases(), **kwargs)

    @torch.no_grad()
    def _siren_init(self, omega0: float) -> None:
        if omega0 == 0:
            raise ValueError("MLP(): expected sine_omega0 to be non-zero for SIREN's init (its "
                             "bounds divide by ω₀), but got 0")
        for k, w in enumerate(self.weights):
            bound = 1.0 / w.shape[1] if k == 0 else math.sqrt(6.0 / w.shape[1]) / abs(omega0)
            w.uniform_(-bound, bound)

    @property
    def in_features(self) -> int:
        return self.weights[0].shape[1]

    @property
    def out_features(self) -> int:
        return self.weights[-1].shape[0]

    def _network_kwargs(self) -> dict:
        return dict(activation=self.activation, output_activation=self.output_activation,
                    compute_dtype=self.compute_dtype, **self.activation_params)

    def _biases(self) -> list | None:
        return None if self.biases is None else list(self.biases)

    def forward(self, x: Tensor) -> Tensor:
        return mlp(x, list(self.weights), self._biases(), **self._network_kwargs())

    def value_and_input_grad(self, x: Tensor,
                             grad_out: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(self(x), ∂(Σ grad_out ⊙ self(x))/∂x)`` through
        :func:`fieldfuse.mlp_value_and_input_grad` (grad_out None: ones, so ``∇ₓy`` for one
        output): an SDF's value and gradient, whose surface and Eikonal losses then backpropagate
        in one sweep."""
        return mlp_value_and_input_grad(x, list(self.weights), self._biases(), grad_out,
                                        **self._network_kwargs())

    @classmethod
    def from_torch(cls, sequential: torch.nn.Sequential, **kwargs) -> MLP:
        """An MLP with the weights of ``Linear, act, Linear, act, ..., Linear[, act]`` (a copy).

        Hidden activations must all be the same module type; a trailing activation becomes
        ``output_activation``. Sine and exp have no torch module, so they cannot come from here.
        ``kwargs`` go to the constructor: ``compute_dtype`` (the rest comes from the Sequential).
        """
        derived = sorted(set(kwargs) - {"compute_dtype"})
        if derived:
            raise TypeError("MLP.from_torch(): expected no keyword argument but compute_dtype "
                            f"(the rest comes from the Sequential), but got {', '.join(derived)}")
        modules = list(sequential)
        linears = [m for m in modules if isinstance(m, torch.nn.Linear)]
        acts = [m for m in modules if not isinstance(m, torch.nn.Linear)]
        if not linears or not isinstance(modules[0], torch.nn.Linear):
            raise ValueError("MLP.from_torch(): expected a Sequential starting with nn.Linear")
        names, params = [], {}
        for module in acts:
            kind = type(module).__name__
            entry = _TORCH_ACTIVATIONS.get(type(module))
            if entry is None:
                raise ValueError(f"MLP.from_torch(): unsupported module {kind}")
            name, param, attribute = entry
            names.append(name)
            if name == "softplus" and float(module.threshold) != _SOFTPLUS_THRESHOLD:
                raise ValueError(f"MLP.from_torch(): expected Softplus with threshold "
                                 f"{_SOFTPLUS_THRESHOLD:g} (fieldfuse's softplus is p itself where "
                                 f"βp > 20), but got threshold={module.threshold}")
            if param is not None:
                # One value per network: a second, different one cannot be expressed.
                value = float(getattr(module, attribute))
                if params.setdefault(param, value) != value:
                    raise ValueError(f"MLP.from_torch(): expected every {kind} to have the same "
                                     f"{attribute} (the MLP has one {param}), but got "
                                     f"{params[param]:g} and {value:g}")
        trailing = not isinstance(modules[-1], torch.nn.Linear)
        hidden_names = names[:-1] if trailing else names
        if len(set(hidden_names)) > 1 or len(hidden_names) != len(linears) - 1:
            raise ValueError("MLP.from_torch(): expected one activation of a single type between "
                             "consecutive Linear layers")
        first, last = linears[0], linears[-1]
        hidden = first.out_features if len(linears) > 1 else first.in_features
        bias = first.bias is not None
        if any((lin.bias is not None) != bias for lin in linears):
            raise ValueError("MLP.from_torch(): expected every Linear to have a bias or none to, "
                             "but got a mix")
        net = cls(first.in_features, last.out_features, hidden, len(linears) - 1,
                  activation=hidden_names[0] if hidden_names else "relu",
                  output_activation=names[-1] if trailing else "none", bias=bias,
                  device=first.weight.device, dtype=first.weight.dtype, **params, **kwargs)
        with torch.no_grad():
            for k, lin in enumerate(linears):
                if tuple(net.weights[k].shape) != tuple(lin.weight.shape):
                    raise ValueError("MLP.from_torch(): expected equal hidden widths")
                net.weights[k].copy_(lin.weight)
                if bias:
                    net.biases[k].copy_(lin.bias)
        return net
