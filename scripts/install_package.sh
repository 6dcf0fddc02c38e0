#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the fieldfuse wheel once into build/wheelhouse/ and installs it into the given venv Python
# (default .venv/bin/python). The extension talks to torch through DLPack only (no libtorch link),
# so this one wheel also serves the oldest-torch venv (scripts/test_torch_floor.sh installs it there
# too) instead of a second compile. Honours FIELDFUSE_CUDA and FIELDFUSE_CUDA_ARCHITECTURES, which
# defaults to sm_90 only here, as in scripts/setup.sh: development builds stay fast.
set -euo pipefail
cd "$(dirname "$0")/.."
export FIELDFUSE_CUDA_ARCHITECTURES="${FIELDFUSE_CUDA_ARCHITECTURES:-90}"
py=${1:-.venv/bin/python}
wheelhouse=build/wheelhouse
rm -rf "$wheelhouse"
# --no-build-isolation: the venv's pinned nanobind/scikit-build-core, and no download per build.
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$wheelhouse" .
# --force-reinstall: a rebuilt wheel keeps its version number, which pip would take as installed.
"$py" -m pip install -q --no-deps --force-reinstall "$wheelhouse"/fieldfuse-*.whl
