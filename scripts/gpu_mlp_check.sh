#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The MLP family's GPU check in one device call: builds the package, runs the MLP and hash-grid
# CUDA tests, then bench/mlp_forward_probe.py (width 64, with and without Note [gradients the pass
# uses]) and bench/profile_mlp.py. Logs go to $OUT (the device tool's folder) or build/gpu_mlp.
# KissFFT and Eigen come from .deps/ where the machine lacks them (scripts/gpu_deps.sh).
out=${OUT:-build/gpu_mlp}; mkdir -p "$out"; OUT=$out
cd "$(dirname "$0")/.."
source scripts/gpu_deps.sh
set -o pipefail; export PYTHONUNBUFFERED=1
workers=$(python3 -c 'import xdist' 2>/dev/null && echo "-n 6")  # pytest-xdist, where present
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/summary.log
date -u +%T | tee -a $OUT/summary.log
(time python3 -m pip install -q --no-build-isolation --no-deps .) > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
tail -4 $OUT/build.log | tee -a $OUT/summary.log; date -u +%T | tee -a $OUT/summary.log
python3 -m pytest -q -p no:cacheprovider $workers -k "cuda or float16 or bfloat16 or device_mismatch" tests/python/test_mlp_tensor_core.py tests/python/test_mlp.py tests/python/test_mlp_errors.py tests/python/test_mlp_readout.py tests/python/test_mlp_nn.py tests/python/test_hash_grid_mlp.py tests/python/test_hash_grid.py > $OUT/pytest.log 2>&1
grep -E "FAILED|ERROR" $OUT/pytest.log | head -20 | tee -a $OUT/summary.log; tail -1 $OUT/pytest.log | tee -a $OUT/summary.log; date -u +%T | tee -a $OUT/summary.log
python3 bench/mlp_forward_probe.py --widths 64 2>&1 | tee -a $OUT/summary.log
python3 bench/mlp_forward_probe.py --cases eikonal --every-gradient 2>&1 | sed 's/^/every-gradient /' | tee -a $OUT/summary.log
python3 bench/profile_mlp.py 2>&1 | tee -a $OUT/summary.log; date -u +%T | tee -a $OUT/summary.log
