#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The shortest GPU check of the MLP family: builds the package and runs the pytest -k expression in
# $TESTS (default "cuda") over the MLP and hash-grid test files. Logs go to $OUT or
# build/gpu_mlp_tests. KissFFT and Eigen come from .deps/ where the machine lacks them
# (scripts/gpu_deps.sh).
out=${OUT:-build/gpu_mlp_tests}; mkdir -p "$out"; OUT=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_deps.sh
set -o pipefail; export PYTHONUNBUFFERED=1
workers=$(python3 -c 'import xdist' 2>/dev/null && echo "-n 8")  # pytest-xdist, where present
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.log"
python3 -m pip install -q --no-build-isolation --no-deps . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
date -u +%T | tee -a "$OUT/summary.log"
python3 -m pytest -q -p no:cacheprovider $workers -k "${TESTS:-cuda}" tests/python/test_mlp.py \
  tests/python/test_mlp_tensor_core.py tests/python/test_hash_grid.py tests/python/test_hash_grid_mlp.py \
  > "$OUT/pytest.log" 2>&1
grep -E "FAILED|ERROR" "$OUT/pytest.log" | head | tee -a "$OUT/summary.log"
tail -1 "$OUT/pytest.log" | tee -a "$OUT/summary.log"; date -u +%T | tee -a "$OUT/summary.log"
