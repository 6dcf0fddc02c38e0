# SPDX-License-Identifier: Apache-2.0
"""Prints how far two .npy volumes differ (max abs and relative L2), for CPU/GPU parity of the CLI.

Exits 1 when the relative L2 difference exceeds --rtol.
"""

import argparse
import sys

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rtol", type=float, default=1e-4)
    args = parser.parse_args()
    a = np.load(args.a).astype(np.float64)
    b = np.load(args.b).astype(np.float64)
    if a.shape != b.shape:
        print(f"shape mismatch: {a.shape} vs {b.shape}")
        return 1
    rel = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
    print(f"max |a-b| = {np.abs(a - b).max():.3e}, relative L2 = {rel:.3e} (rtol {args.rtol:g})")
    return 0 if rel <= args.rtol else 1


if __name__ == "__main__":
    sys.exit(main())
