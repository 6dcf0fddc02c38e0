#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets everything up (scripts/setup.sh) and runs every test: the C++ suites through ctest, the
# Python suite through pytest, the Python suite again on the oldest supported torch
# (scripts/test_torch_floor.sh) and, when CUDA is on, a build for another GPU generation read back
# with cuobjdump (scripts/check_cuda_arch.sh). CUDA tests run where a GPU is visible and are
# skipped elsewhere. Extra arguments go to both pytest runs (e.g. `-k tv -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build/release --output-on-failure -j "$(nproc)"
# The package source sits in python/, so `import fieldfuse` resolves to the installed build.
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"
bash scripts/test_torch_floor.sh "$@"
# CI builds for sm_90 only; this proves another architecture list reaches the kernels (sm_80).
if [ "${FIELDFUSE_CUDA:-AUTO}" = ON ]; then
  bash scripts/check_cuda_arch.sh 80
fi
