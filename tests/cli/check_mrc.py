# SPDX-License-Identifier: Apache-2.0
"""Checks the MRC2014 header of a volume `fieldfuse tomo` wrote, byte by byte, independently of
the C++ reader: check_mrc.py FILE NX NY NZ VOXEL_SIZE (VOXEL_SIZE in Å, or 'any')."""
import math
import struct
import sys

path, nx, ny, nz, voxel = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
data = open(path, "rb").read()
header = data[:1024]
def i32(offset):
    return struct.unpack_from("<i", header, offset)[0]
def f32(offset):
    return struct.unpack_from("<f", header, offset)[0]
def check(condition, what):
    if not condition:
        sys.exit(f"{path}: {what}")

check((i32(0), i32(4), i32(8)) == (nx, ny, nz), f"nx, ny, nz = {i32(0)}, {i32(4)}, {i32(8)}")
check(i32(12) == 2, f"mode {i32(12)}, expected 2 (float32)")
check((i32(28), i32(32), i32(36)) == (nx, ny, nz), "mx, my, mz differ from the sizes")
if voxel != "any":
    for axis, n in enumerate((nx, ny, nz)):
        check(abs(f32(40 + 4 * axis) - float(voxel) * n) < 1e-3 * n, f"cell {axis}: {f32(40 + 4 * axis)}")
check([f32(52 + 4 * a) for a in range(3)] == [90.0] * 3, "cell angles are not 90")
check([i32(64 + 4 * a) for a in range(3)] == [1, 2, 3], "mapc, mapr, maps are not 1, 2, 3")
check(i32(88) == 1, f"ispg {i32(88)}, expected 1 (a volume)")
check(i32(92) == 0, "nsymbt is not 0")
check(i32(108) == 20140, f"nversion {i32(108)}")
check(header[208:212] == b"MAP ", "no 'MAP ' at byte 208")
check(header[212:214] == b"\x44\x44", "machst is not 0x44 0x44")
check(i32(220) == 1 and header[224:233] == b"fieldfuse", "the label does not start with fieldfuse")
check(len(data) == 1024 + 4 * nx * ny * nz, f"{len(data)} bytes, expected {1024 + 4 * nx * ny * nz}")
values = struct.unpack_from(f"<{nx * ny * nz}f", data, 1024)
mean = sum(values) / len(values)
rms = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
for offset, name, expected in ((76, "dmin", min(values)), (80, "dmax", max(values)),
                               (84, "dmean", mean), (216, "rms", rms)):
    check(math.isclose(f32(offset), expected, rel_tol=1e-4, abs_tol=1e-6),
          f"{name} {f32(offset)}, the data give {expected}")
print(f"{path}: MRC2014 header OK ({nx} x {ny} x {nz})")
