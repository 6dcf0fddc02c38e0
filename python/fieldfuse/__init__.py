# SPDX-License-Identifier: Apache-2.0
"""fieldfuse: fused, differentiable kernels for physics-based 3-D reconstruction.

Public functions live in one module per kernel family and are re-exported here; pure-PyTorch
float64 oracles for every op live in ``fieldfuse.reference``.
"""

from __future__ import annotations

# torch first: the GPU image's torch crashes while importing if our extension (and the OpenMP and
# C++ runtimes it loads) is loaded before it.
import torch  # noqa: F401  (import order, see above)

from . import _C, nn, optim, reference, tomo
from .hash_grid import hash_grid, hash_grid_num_params
from .kplanes_ops import (
    kplanes,
    kplanes_tilted,
    kplanes_tilted_taps,
    kplanes_tilted_with_taps,
    plane_tv,
)
from .mlp import mlp, mlp_value_and_input_grad
from .project import backproject, project
from .render import (
    RenderOutput,
    line_integral,
    parallel_beam_rays,
    ray_box_samples,
    ray_box_samples_padded,
    tilt_rotations,
    volume_render,
    volume_render_alpha,
)
from .tv import tv_iso_3d, tv_l1_3d, tv_sq_3d, tv_weighted_l1

__version__ = _C.build_info()["version"]

__all__ = [
    "backproject",
    "build_info",
    "hash_grid",
    "hash_grid_num_params",
    "kplanes",
    "kplanes_tilted",
    "kplanes_tilted_taps",
    "kplanes_tilted_with_taps",
    "mlp",
    "mlp_value_and_input_grad",
    "nn",
    "optim",
    "plane_tv",
    "project",
    "RenderOutput",
    "line_integral",
    "parallel_beam_rays",
    "ray_box_samples",
    "ray_box_samples_padded",
    "tilt_rotations",
    "tomo",
    "volume_render",
    "volume_render_alpha",
    "reference",
    "tv_iso_3d",
    "tv_l1_3d",
    "tv_sq_3d",
    "tv_weighted_l1",
]


def build_info() -> dict:
    """What this build contains: version, CUDA on/off and architectures, OpenMP and its threads,
    and how many CUDA devices are visible now."""
    info = dict(_C.build_info())
    info["cuda_device_count"] = _C.cuda_device_count()
    return info
