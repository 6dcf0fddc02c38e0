# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch reference implementations (oracles) of fieldfuse ops, one module per family.

They import nothing from the compiled extension, so they work without it; use them in float64 to
check a kernel or to prototype on a machine without a fieldfuse build.
"""

from . import hash_grid, kplanes, mlp, project, render, tv

__all__ = ["hash_grid", "kplanes", "mlp", "project", "render", "tv"]
