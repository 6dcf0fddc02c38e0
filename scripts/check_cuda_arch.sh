#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves that FIELDFUSE_CUDA_ARCHITECTURES reaches the kernels, without a GPU: builds the fieldfuse
# library with CUDA on for the given list (default 80: an A100, i.e. `pip install .` on a non-Hopper
# GPU) into build/arch-<list>/, then reads its fatbinaries back with cuobjdump. Every CUDA object
# must hold exactly what the list asks for: "NN" sm_NN code and compute_NN PTX, "NN-real" the code
# only, "NN-virtual" the PTX only. cuobjdump comes from PyPI (nvidia-cuda-cuobjdump, into .venv).
# Costs one CUDA compile of the library: about 2 minutes per architecture on 2 cores.
# Usage: bash scripts/check_cuda_arch.sh ["80" | "86;90-real" | ...]
set -euo pipefail
cd "$(dirname "$0")/.."
archs=${1:-80}
py=.venv/bin/python
build="build/arch-${archs//;/_}"
log() { printf '[cuda-arch] %s\n' "$*"; }

# The CUDA 13 wheel puts the binary in the `nvidia` namespace package, under cu13/bin.
find_cuobjdump() {
  "$py" -c 'import nvidia, pathlib; print(pathlib.Path(nvidia.__path__[0], "cu13/bin/cuobjdump"))' \
    2>/dev/null || true
}
cuobjdump=$(find_cuobjdump)
if [ ! -x "$cuobjdump" ]; then
  log "installing cuobjdump (nvidia-cuda-cuobjdump) into .venv"
  "$py" -m pip install -q "nvidia-cuda-cuobjdump==13.*"
  cuobjdump=$(find_cuobjdump)
fi

log "building the library for \"$archs\" into $build"
# The environment variable is the route `pip install` takes; unset here so only the cache one counts.
env -u FIELDFUSE_CUDA_ARCHITECTURES cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFIELDFUSE_CUDA=ON -DFIELDFUSE_CUDA_ARCHITECTURES="$archs" -DFIELDFUSE_TESTS=OFF \
  -DFIELDFUSE_BUILD_APPS=OFF >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
grep "fieldfuse: CUDA" "$build.configure.log"
cmake --build "$build" -j "$(nproc)" --target fieldfuse >/dev/null

"$cuobjdump" --list-elf "$build/libfieldfuse.a" >"$build/elf.txt"
"$cuobjdump" --list-ptx "$build/libfieldfuse.a" >"$build/ptx.txt"
"$py" - "$archs" "$build/elf.txt" "$build/ptx.txt" <<'EOF'
"""Compares each object's cubins and PTX (cuobjdump listings) with the requested list."""
import re
import sys

archs, elf_listing, ptx_listing = sys.argv[1].split(";"), sys.argv[2], sys.argv[3]
want = {
    "ELF": {a.split("-")[0] for a in archs if not a.endswith("-virtual")},
    "PTX": {a.split("-")[0] for a in archs if not a.endswith("-real")},
}


def per_member(path):
    """{archive member: set of sm numbers} for the members that carry device code."""
    found, member = {}, None
    for line in open(path):
        if line.startswith("member "):
            member = line.split(":")[-2]
        elif match := re.search(r"\.sm_(\d+a?)\.(cubin|ptx)$", line.strip()):
            found.setdefault(member, set()).add(match.group(1))
    return found


status = 0
for kind, path in (("ELF", elf_listing), ("PTX", ptx_listing)):
    found = per_member(path)
    if want[kind] and not found:
        print(f"[cuda-arch] FAIL: no {kind} entries at all (wanted sm {sorted(want[kind])})")
        status = 1
    for member, sms in sorted(found.items()):
        ok = sms == want[kind]
        status |= not ok
        print(f"[cuda-arch] {'ok' if ok else 'FAIL'}: {member} {kind} sm {sorted(sms)}"
              f" (wanted {sorted(want[kind])})")
sys.exit(status)
EOF
log "passed: the library holds exactly the code and PTX that \"$archs\" asks for"
