#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets everything up (scripts/setup.sh) and runs every test: the C++ suites through ctest, then the
# Python suite through pytest. CUDA tests run where a GPU is visible and are skipped elsewhere.
# Extra arguments go to pytest (e.g. `-k tv -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build/release --output-on-failure -j "$(nproc)"
# The package source sits in python/, so `import fieldfuse` resolves to the installed build.
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"
