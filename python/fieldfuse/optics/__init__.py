# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.optics: microscope transfer functions, the exact Tikhonov inverse, sharpness losses and
the batched per-tile optimiser of focus and illumination tilt (issue 15, specs/optics.md)."""

from __future__ import annotations

from .inverse import midband_power, thin_forward_model, tikhonov_filter, tikhonov_inverse, tikhonov_inverse_3d
from .tiles import TileOptimization, optimize_tiles, reconstruct_phase
from .transfer import (
    Microscope,
    shared_optics_3d,
    thick_transfer_function,
    thin_transfer_functions,
    thin_upsampling_factor,
    z_positions,
)

__all__ = [
    "Microscope",
    "TileOptimization",
    "midband_power",
    "optimize_tiles",
    "reconstruct_phase",
    "shared_optics_3d",
    "thick_transfer_function",
    "thin_forward_model",
    "thin_transfer_functions",
    "thin_upsampling_factor",
    "tikhonov_filter",
    "tikhonov_inverse",
    "tikhonov_inverse_3d",
    "z_positions",
]
