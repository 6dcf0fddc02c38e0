#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU machine's one-call check: builds fieldfuse (CUDA on, for the GPU present: `native`), runs
# the whole Python suite with its CUDA tests, the C++ suites when GoogleTest is there, the CLI on
# the GPU against the CPU, and the CUDA benchmarks. Logs and tables go to $OUT (the device tool's folder) or build/gpu_check.
# Usage: bash scripts/gpu_check.sh [--no-bench] [--no-tests] [extra pytest args...]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_deps.sh  # KissFFT and Eigen where the machine lacks them
out=${OUT:-build/gpu_check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 FIELDFUSE_CUDA=ON
run_bench=1 run_tests=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) run_bench=0; shift ;;
    --no-tests) run_tests=0; shift ;;
    *) break ;;
  esac
done
status=0
step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

step "machine"
# At most 8 files come back from the device tool, so the machine facts open build.log.
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/build.log"
"$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' | tee -a "$out/build.log"

step "build: Python package"
if ! "$py" -m pip install -q --no-build-isolation --no-deps . >>"$out/build.log" 2>&1; then
  tail -50 "$out/build.log"; exit 1
fi
"$py" -c 'import fieldfuse; print(fieldfuse.build_info())' | tee -a "$out/build.log"

step "build: C++ library, CLI and tests"
tests=OFF
[ -f /usr/include/gtest/gtest.h ] && tests=ON
cmake -S . -B build/gpu -G Ninja -DFIELDFUSE_CUDA=ON -DFIELDFUSE_TESTS=$tests >>"$out/build.log" 2>&1 &&
  cmake --build build/gpu -j "$(nproc)" >>"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }

if [ "$run_tests" = 1 ]; then
  if [ "$tests" = ON ]; then
    step "ctest"
    ctest --test-dir build/gpu --output-on-failure -j 8 >"$out/ctest.log" 2>&1 || status=1
    tail -3 "$out/ctest.log"
  fi
  step "CLI denoise on cuda vs cpu"
  {
    build/gpu/apps/fieldfuse denoise --device cuda --output build/gpu/denoise_cuda &&
      build/gpu/apps/fieldfuse denoise --device cpu --quiet --output build/gpu/denoise_cpu &&
      "$py" scripts/compare_npy.py build/gpu/denoise_cuda.npy build/gpu/denoise_cpu.npy &&
      cp build/gpu/denoise_cuda.json "$out/"
  } >"$out/cli.log" 2>&1 || status=1
  tail -12 "$out/cli.log"
  step "pytest (CUDA included)"
  "$py" -m pytest -v -rs -p no:cacheprovider tests/python "$@" >"$out/pytest.log" 2>&1 || status=1
  grep -E "FAILED|ERROR|Fatal|Segmentation" "$out/pytest.log" | head -20
  tail -3 "$out/pytest.log"
fi

if [ "$run_bench" = 1 ]; then
  step "benchmarks"
  for bench in bench/bench_*.py; do
    "$py" "$bench" --out "$out" 2>>"$out/bench.log" || status=1
  done
fi
step "done (status $status)"
exit $status
