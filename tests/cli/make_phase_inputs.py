# SPDX-License-Identifier: Apache-2.0
"""Writes the inputs of the `fieldfuse phase` tests with the standard library only: a defocus stack
[5, 75, 91] (odd sizes) as .npy and as raw float32 pages for raw2tiff, and settings files (JSON,
TOML, YAML: the same microscope, tile 48 and overlap 8, written by hand for the last two)."""
import json
import math
import struct
import sys
from pathlib import Path

Z, Y, X = 5, 75, 91


def value(z: int, y: int, x: int) -> float:
    # Intensity near 1 whose pattern changes with z, as a defocus series does.
    return 1.0 + 0.05 * math.sin(0.31 * x + 0.2 * z) * math.cos(0.23 * y - 0.1 * z)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pages = [[value(z, y, x) for y in range(Y) for x in range(X)] for z in range(Z)]
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d), }" % (Z, Y, X)
    header += " " * (-(len(header) + 11) % 64) + "\n"  # 10-byte preamble + header: 64-aligned
    with open(out / "phase_stack.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        for page in pages:
            f.write(struct.pack("<%df" % len(page), *page))
    for z, page in enumerate(pages):
        (out / f"phase_page{z}.raw").write_bytes(struct.pack("<%df" % len(page), *page))
    microscope = {"pixel_size": 0.1, "wavelength": 0.532, "na_illumination": 0.4,
                  "na_detection": 0.55, "z_spacing": 0.4}
    (out / "phase_settings.json").write_text(json.dumps({**microscope, "tile": 48, "overlap": 8}))
    (out / "phase_unknown_key.json").write_text(json.dumps({**microscope, "pixel_sise": 0.1}))
    toml = "".join(f"{key} = {value}\n" for key, value in microscope.items())
    (out / "phase_settings.toml").write_text(f"# a comment\n{toml}tile = 48\noverlap = 8\n"
                                             'optimize = ["z"]\nmethod = "nadam"\n')
    (out / "phase_unknown_key.toml").write_text(f"{toml}tiles = 48\n")
    yaml = "".join(f"{key}: {value}\n" for key, value in microscope.items())
    (out / "phase_settings.yaml").write_text(f"# a comment\n{yaml}tile: 48\noverlap: 8\n"
                                             "optimize: [z, zenith]\ninvert_phase_contrast: true\n")
    (out / "phase_wrong_type.yaml").write_text(f"{yaml}tile: [48]\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
