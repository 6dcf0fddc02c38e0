# SPDX-License-Identifier: Apache-2.0
"""Microscope optics for quantitative phase imaging from a defocus stack (issue 15,
specs/optics.md)."""

from __future__ import annotations

from .inverse import (
    midband_power,
    thin_forward_model,
    tikhonov_filter,
    tikhonov_inverse,
    tikhonov_inverse_3d,
)

__all__ = [
    "midband_power",
    "thin_forward_model",
    "tikhonov_filter",
    "tikhonov_inverse",
    "tikhonov_inverse_3d",
]
