#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the Python suite against the oldest PyTorch that pyproject.toml allows (`torch>=X.Y` there
# becomes torch==X.Y.* here) in a venv of its own, .venv-torch-floor/, with the fieldfuse wheel that
# scripts/setup.sh built (build/wheelhouse; the extension does not link libtorch, so it is not
# rebuilt). Run scripts/setup.sh first. Arguments go to pytest.
# PyPI's Linux torch wheels of that age are CUDA builds: with their nvidia-* dependencies about
# 2.5 GB to download and 5 GB on disk, about 3.5 minutes here; they import and run on a CPU-only
# machine. Installed once, the venv is reused while its torch matches the floor. pip's cache is
# skipped: it would hold a second copy of those downloads, and CI disks can be tight.
set -euo pipefail
cd "$(dirname "$0")/.."
floor=$(sed -n 's/^dependencies = .*"torch>=\([0-9][0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$floor" ] || { echo "[torch-floor] no \"torch>=X.Y\" in pyproject.toml's dependencies" >&2; exit 1; }
venv=.venv-torch-floor
py=$venv/bin/python
log() { printf '[torch-floor] %s\n' "$*"; }

if ! "$py" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$floor.'))" 2>/dev/null; then
  log "installing torch==$floor.* into $venv"
  rm -rf "$venv"
  need_gib=6
  free_gib=$(df --output=avail -B1G . | tail -n 1 | tr -d ' ')
  if [ "$free_gib" -lt "$need_gib" ]; then
    echo "[torch-floor] installing torch==$floor.* needs about $need_gib GiB free in $(pwd); $free_gib GiB are free" >&2
    exit 1
  fi
  python3 -m venv "$venv"
  "$py" -m pip install -q --no-cache-dir "torch==$floor.*" pytest numpy
fi
"$py" -m pip install -q --no-deps --force-reinstall build/wheelhouse/fieldfuse-*.whl
log "pytest with torch $("$py" -c 'import torch; print(torch.__version__)')"
# The package source sits in python/, so `import fieldfuse` resolves to the installed wheel.
"$py" -m pytest -q -p no:cacheprovider tests/python "$@"
