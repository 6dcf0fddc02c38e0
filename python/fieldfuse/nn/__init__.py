# SPDX-License-Identifier: Apache-2.0
"""`nn.Module`s over the fused fieldfuse ops: they hold parameters; the math lives in the ops.

- :class:`HashGrid`: the multiresolution hash-grid encoding (tiny-cuda-nn's table layout).
- :class:`MLP`: the fused MLP (nn.Linear-layout parameters, ``from_torch``).
- :class:`HashGridMLP`: a HashGrid followed by an MLP (an SDF or radiance-field decoder).
- :class:`KPlanesTilted`: tilted multiscale K-Planes density field with learnable rotations.
- :class:`KPlanes`: the axis-aligned variant.
- :func:`volume_tv_from_taps`: the volume-TV loss from the four finite-difference taps.
- :func:`nearest_rotation`, :func:`quaternion_to_rotation`: the two rotation parameterisations
  (module :mod:`fieldfuse.nn.rotations`, with :func:`default_rotations`).
"""

from __future__ import annotations

from .hash_grid import HashGrid
from .hash_grid_mlp import HashGridMLP
from .kplanes import EXP_INPUT_MAX, KPlanes, KPlanesTilted
from .losses import volume_tv_from_taps
from .mlp import MLP
from .rotations import default_rotations, nearest_rotation, quaternion_to_rotation

__all__ = [
    "EXP_INPUT_MAX",
    "HashGrid",
    "HashGridMLP",
    "KPlanes",
    "KPlanesTilted",
    "MLP",
    "default_rotations",
    "nearest_rotation",
    "quaternion_to_rotation",
    "volume_tv_from_taps",
]
