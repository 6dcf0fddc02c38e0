# SPDX-License-Identifier: Apache-2.0
"""The hash-grid encoding as an `nn.Module`: it holds the table; the math is
:func:`fieldfuse.hash_grid`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..hash_grid import INTERPOLATIONS, _input_grad, hash_grid, hash_grid_num_params

__all__ = ["HashGrid"]

# tiny-cuda-nn initialises grid tables uniformly in [−1e-4, 1e-4]: small enough that an untrained
# encoding is almost 0, yet not exactly 0, so every entry gets distinct gradients.
INIT_RANGE = 1e-4


class HashGrid(nn.Module):
    """Multiresolution hash-grid encoding ``[B, n_input_dims] -> [B, n_levels·n_features_per_level]``.

    ``params`` is ``[hash_grid_num_params(n_input_dims, ...), n_features_per_level]`` in
    tiny-cuda-nn's layout (a tcnn ``HashGrid`` encoding's flat parameter vector reshaped to
    ``[-1, n_features_per_level]`` loads directly), initialised U(−1e-4, 1e-4) as tcnn does.
    Inputs are clamped to [0, 1]; see :func:`fieldfuse.hash_grid` for the contract.

    Args:
        n_input_dims: D, 2 or 3.
        n_levels, n_features_per_level, log2_hashmap_size, base_resolution, per_level_scale,
            interpolation: as :func:`fieldfuse.hash_grid`.
        dtype: the table's dtype (default: torch's default float dtype); float16 tables run on
            CUDA with float32 inputs.
        device: where the table lives.
    """

    def __init__(
        self,
        n_input_dims: int,
        n_levels: int = 16,
        n_features_per_level: int = 2,
        log2_hashmap_size: int = 19,
        base_resolution: int = 16,
        per_level_scale: float = 2.0,
        interpolation: str = "linear",
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        # The other options are checked by hash_grid_num_params below; interpolation would
        # otherwise wait for the first forward.
        if interpolation not in INTERPOLATIONS:
            raise ValueError("HashGrid(): expected interpolation to be "
                             f"{' or '.join(repr(n) for n in INTERPOLATIONS)}, but got "
                             f"{interpolation!r}")
        self.n_input_dims = n_input_dims
        self.n_levels = n_levels
        self.n_features_per_level = n_features_per_level
        self.log2_hashmap_size = log2_hashmap_size
        self.base_resolution = base_resolution
        self.per_level_scale = per_level_scale
        self.interpolation = interpolation
        rows = hash_grid_num_params(
            n_input_dims, n_levels=n_levels, n_features_per_level=n_features_per_level,
            log2_hashmap_size=log2_hashmap_size, base_resolution=base_resolution,
            per_level_scale=per_level_scale,
        )
        table = torch.empty((rows, n_features_per_level), dtype=dtype, device=device)
        self.params = nn.Parameter(table.uniform_(-INIT_RANGE, INIT_RANGE))

    @property
    def n_output_dims(self) -> int:
        return self.n_levels * self.n_features_per_level

    def _check_points(self, x: Tensor) -> None:
        # The table of some configs has the same rows in 2-D and 3-D, so the op cannot tell a
        # [B, 2] x given to a 3-D encoding (or the reverse): the module knows its D.
        if isinstance(x, Tensor) and x.dim() == 2 and x.shape[1] != self.n_input_dims:
            raise ValueError(f"HashGrid(): expected x to have n_input_dims = {self.n_input_dims} "
                             f"columns, but got shape {list(x.shape)}")

    def _options(self) -> dict:
        """The encoding's keyword arguments of :func:`fieldfuse.hash_grid`."""
        return dict(n_levels=self.n_levels, n_features_per_level=self.n_features_per_level,
                    log2_hashmap_size=self.log2_hashmap_size,
                    base_resolution=self.base_resolution, per_level_scale=self.per_level_scale,
                    interpolation=self.interpolation)

    def forward(self, x: Tensor) -> Tensor:
        self._check_points(x)
        return hash_grid(x, self.params, **self._options())

    def input_grad(self, x: Tensor, grad_out: Tensor) -> Tensor:
        """``∂(Σ grad_out ⊙ self(x))/∂x``, ``[B, n_input_dims]``: the encoding's backward to x
        alone, differentiable again (to grad_out, x and the table) where grad mode records it,
        and without recording the forward (it runs under no_grad and inference_mode too)."""
        self._check_points(x)
        return _input_grad(grad_out, x, self.params, **self._options())

    def extra_repr(self) -> str:
        return (f"n_input_dims={self.n_input_dims}, n_levels={self.n_levels}, "
                f"n_features_per_level={self.n_features_per_level}, "
                f"log2_hashmap_size={self.log2_hashmap_size}, "
                f"base_resolution={self.base_resolution}, "
                f"per_level_scale={self.per_level_scale}, interpolation={self.interpolation!r}")
