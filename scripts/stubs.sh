#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates python/fieldfuse/_C.pyi, the type stubs of the extension, with nanobind's stubgen:
# rebuilds and installs the package into .venv first (scripts/install_package.sh), and again when
# the stub changed, so this one command brings the stub up to date after any binding change.
# tests/python/test_packaging.py fails while the checked-in stub differs from a fresh one.
# Needs .venv (scripts/setup.sh creates it).
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
bash scripts/install_package.sh "$py"
stub=python/fieldfuse/_C.pyi
old=$(cat "$stub" 2>/dev/null || true)
# The package source sits in python/, so `fieldfuse._C` is the extension just installed.
"$py" -m nanobind.stubgen -q -m fieldfuse._C -o "$stub"
if [ "$(cat "$stub")" != "$old" ]; then
  echo "[stubs] $stub changed; reinstalling so the installed package ships it too"
  bash scripts/install_package.sh "$py"
else
  echo "[stubs] $stub is up to date"
fi
