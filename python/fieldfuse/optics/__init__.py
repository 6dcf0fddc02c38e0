# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.optics: microscope transfer functions, the exact Tikhonov inverse, sharpness losses and
the batched per-tile optimiser of focus and illumination tilt (specs/optics.md)."""

from .tiles import TileOptimization, optimize_tiles
from .transfer import Microscope, shared_optics_3d, thin_transfer_functions, thin_upsampling_factor, z_positions

__all__ = [
    "Microscope",
    "TileOptimization",
    "optimize_tiles",
    "shared_optics_3d", "thin_transfer_functions", "thin_upsampling_factor", "z_positions"]
