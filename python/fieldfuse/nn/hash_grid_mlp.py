# SPDX-License-Identifier: Apache-2.0
"""``fieldfuse.nn.HashGridMLP``: a hash-grid encoding followed by a fused MLP, as one module."""

from __future__ import annotations

from torch import Tensor, nn

from .hash_grid import HashGrid
from .mlp import MLP

__all__ = ["HashGridMLP"]


class HashGridMLP(nn.Module):
    """``network(encoding(x))``: ``[B, D]`` points in [0, 1]^D to ``[B, out_features]``.

    Both stages are fused ops with a differentiable backward, so second order composes as the spec
    describes: in a double backward the encoding's own double backward hands ``J_enc·v`` to the
    MLP's, and the MLP's gradient to its features flows back through the encoding's backward. An
    Eikonal loss built from ``torch.autograd.grad(y, x, create_graph=True)`` therefore trains the
    table, the weights and the biases. The state_dict holds ``encoding.params`` and the network's
    ``weights.k`` / ``biases.k``.

    Args:
        encoding: a :class:`fieldfuse.nn.HashGrid`.
        network: a :class:`fieldfuse.nn.MLP` whose input width is ``encoding.n_output_dims``.
    """

    def __init__(self, encoding: HashGrid, network: MLP) -> None:
        super().__init__()
        if not isinstance(encoding, HashGrid):
            raise TypeError("HashGridMLP(): expected encoding to be a fieldfuse.nn.HashGrid, got "
                            f"{type(encoding).__name__}")
        if not isinstance(network, MLP):
            raise TypeError("HashGridMLP(): expected network to be a fieldfuse.nn.MLP, got "
                            f"{type(network).__name__}")
        if network.in_features != encoding.n_output_dims:
            raise ValueError(
                "HashGridMLP(): expected network.in_features to equal encoding.n_output_dims "
                f"(n_levels·n_features_per_level = {encoding.n_levels}·"
                f"{encoding.n_features_per_level} = {encoding.n_output_dims}), got "
                f"network.in_features = {network.in_features}")
        self.encoding = encoding
        self.network = network

    @property
    def n_input_dims(self) -> int:
        return self.encoding.n_input_dims

    @property
    def out_features(self) -> int:
        return self.network.out_features

    def forward(self, x: Tensor) -> Tensor:
        return self.network(self.encoding(x))

    def value_and_input_grad(self, x: Tensor,
                             grad_out: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(self(x), ∂(Σ grad_out ⊙ self(x))/∂x)`` (grad_out None: ones, so ``∇ₓy`` of a
        one-output SDF), differentiable: the network's part through
        :meth:`fieldfuse.nn.MLP.value_and_input_grad` (one double-backward sweep for losses on
        both outputs, Note [mlp value and input gradient]), the encoding's through
        :meth:`fieldfuse.nn.HashGrid.input_grad` (its backward op, itself differentiable).
        Gradients reach x where it requires them; under no_grad or inference_mode nothing is
        recorded."""
        features = self.encoding(x)
        y, grad_features = self.network.value_and_input_grad(features, grad_out)
        return y, self.encoding.input_grad(x, grad_features)
