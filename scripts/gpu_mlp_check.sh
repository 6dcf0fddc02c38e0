#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The MLP family's GPU check in one device call: builds the package, runs the MLP and hash-grid
# CUDA tests (the pytest -k expression in $TESTS, default "cuda or float16 or bfloat16 or
# device_mismatch"), then bench/mlp_forward_probe.py (width 64, with and without Note [gradients
# the pass uses]) and bench/profile_mlp.py. With --baseline DIR it then installs the tree in DIR
# (e.g. `git archive <rev> | tar -x -C .baseline`) and times that with the same probes, for an A/B
# on one machine. Logs go to $OUT (the device tool's folder) or build/gpu_mlp. KissFFT and Eigen
# come from .deps/ where the machine lacks them (scripts/gpu_deps.sh).
# Usage: bash scripts/gpu_mlp_check.sh [--no-bench] [--baseline DIR]
out=${OUT:-build/gpu_mlp}; mkdir -p "$out"; OUT=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
source scripts/gpu_deps.sh
set -o pipefail; export PYTHONUNBUFFERED=1
run_bench=1 baseline=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) run_bench=0; shift ;;
    --baseline) baseline=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { tee -a "$OUT/summary.log"; }
stamp() { date -u +%T | log; }
install() {  # the tree in $1, its build log $2
  (cd "$1" && python3 -m pip install -q --no-build-isolation --no-deps . > "$OUT/$2" 2>&1) ||
    { tail -40 "$OUT/$2"; exit 1; }
}
probes() {  # every output line prefixed with $1
  python3 bench/mlp_forward_probe.py --widths 64 2>&1 | sed "s/^/$1/" | log
  python3 bench/mlp_forward_probe.py --cases eikonal --every-gradient 2>&1 |
    sed "s/^/${1}every-gradient /" | log
  python3 bench/profile_mlp.py 2>&1 | grep -v Warn | sed "s/^/$1/" | log
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.log"
stamp
install . build.log
stamp
workers=$(python3 -c 'import xdist' 2>/dev/null && echo "-n 6")  # pytest-xdist, where present
python3 -m pytest -q -p no:cacheprovider $workers -k "${TESTS:-cuda or float16 or bfloat16 or device_mismatch}" \
  tests/python/test_mlp_tensor_core.py tests/python/test_mlp.py tests/python/test_mlp_errors.py \
  tests/python/test_mlp_readout.py tests/python/test_mlp_nn.py tests/python/test_hash_grid_mlp.py \
  tests/python/test_hash_grid.py > "$OUT/pytest.log" 2>&1
grep -E "FAILED|ERROR" "$OUT/pytest.log" | head -20 | log
tail -1 "$OUT/pytest.log" | log
stamp
[ "$run_bench" = 1 ] || exit 0
probes ""
if [ -n "$baseline" ]; then
  install "$baseline" build_baseline.log
  stamp
  probes "baseline "
fi
stamp
