# SPDX-License-Identifier: Apache-2.0
"""Checks a PNG written by `fieldfuse denoise` with Python's own zlib: chunk CRCs, inflation, size."""
import struct
import sys
import zlib


def main(path: str) -> None:
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad signature"
    at, chunks = 8, {}
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body), f"CRC mismatch in {kind!r}"
        chunks.setdefault(kind, b"")
        chunks[kind] += body
        at += 12 + length
    assert list(chunks)[0] == b"IHDR" and list(chunks)[-1] == b"IEND", list(chunks)
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 0), "expected 8-bit grayscale"
    raw = zlib.decompress(chunks[b"IDAT"])  # also verifies the Adler-32 trailer
    assert len(raw) == (width + 1) * height, (len(raw), width, height)
    assert all(raw[row * (width + 1)] == 0 for row in range(height)), "unexpected filter type"
    print(f"{path}: {width}x{height} grayscale, CRCs and zlib stream valid")


if __name__ == "__main__":
    main(sys.argv[1])
