# SPDX-License-Identifier: Apache-2.0
"""Ray integration: volume rendering, X-ray line integrals and ray–box sampling (packed rays).

Rays are packed: the samples of ray ``r`` occupy ``[offsets[r], offsets[r+1])`` of every
per-sample tensor; ``offsets`` is int64 ``[R+1]`` with ``offsets[0] = 0``, ``offsets[R] = N``,
non-decreasing (empty rays allowed). Inputs may be float32 or float64 on CPU and CUDA, and float16
or bfloat16 on CUDA; every ray is accumulated in float64 in a fixed order (deterministic, no
atomics). Outputs have the inputs' dtype.

The family is split by concern, each module with its op table (Note [op table] in
``_registry.py``): ``render_volume`` (:func:`volume_render`, :func:`volume_render_alpha`),
``render_line`` (:func:`line_integral`), ``render_ray_box`` (:func:`ray_box_samples`,
:func:`ray_box_samples_padded`) and ``render_geometry`` (:func:`tilt_rotations`,
:func:`parallel_beam_rays`, plain PyTorch). Raw ops, each with a fake impl so
``torch.compile(fullgraph=True)`` traces them: ``torch.ops.fieldfuse.<name>_forward`` and
``<name>_backward`` for every public name above with a C++ entry, and
``ray_box_samples_counts``.
"""

from __future__ import annotations

from .render_geometry import parallel_beam_rays, tilt_rotations
from .render_line import line_integral
from .render_ray_box import ray_box_samples, ray_box_samples_padded
from .render_volume import RenderOutput, volume_render, volume_render_alpha

__all__ = [
    "RenderOutput",
    "volume_render",
    "volume_render_alpha",
    "line_integral",
    "ray_box_samples",
    "ray_box_samples_padded",
    "parallel_beam_rays",
    "tilt_rotations",
]
