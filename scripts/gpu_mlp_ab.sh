#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for an A/B of the MLP kernels on one machine: builds this tree and runs the tests
# named in $TESTS (pytest -k expression over the MLP and hash-grid files), then installs the
# tree copied to .baseline/ (e.g. `git archive <rev> | tar -x -C .baseline`) and times it with
# this tree's bench/mlp_forward_probe.py and bench/profile_mlp.py. Logs go to $OUT.
out=${OUT:-build/gpu_mlp_ab}; mkdir -p "$out"; OUT=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_deps.sh
set -o pipefail; export PYTHONUNBUFFERED=1
workers=$(python3 -c 'import xdist' 2>/dev/null && echo "-n 4")  # pytest-xdist, where present
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/summary.log
python3 -m pip install -q --no-build-isolation --no-deps . > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
date -u +%T | tee -a $OUT/summary.log
python3 -m pytest -q -p no:cacheprovider $workers -k "${TESTS:-cuda}" tests/python/test_mlp.py tests/python/test_mlp_tensor_core.py tests/python/test_hash_grid.py > $OUT/pytest.log 2>&1
grep -E "FAILED|ERROR" $OUT/pytest.log | head | tee -a $OUT/summary.log; tail -1 $OUT/pytest.log | tee -a $OUT/summary.log
(cd .baseline && python3 -m pip install -q --no-build-isolation --no-deps . > "$OUT/build_baseline.log" 2>&1) || { tail -40 $OUT/build_baseline.log; exit 1; }
date -u +%T | tee -a $OUT/summary.log
python3 bench/mlp_forward_probe.py --widths 64 --cases fwdbwd eikonal --every-gradient 2>&1 | sed 's/^/baseline every-gradient /' | tee -a $OUT/summary.log
python3 bench/mlp_forward_probe.py --cases eikonal 2>&1 | sed 's/^/baseline /' | tee -a $OUT/summary.log
python3 bench/profile_mlp.py 2>&1 | grep -v Warn | sed 's/^/baseline /' | tee -a $OUT/summary.log
date -u +%T | tee -a $OUT/summary.log
