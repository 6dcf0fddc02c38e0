#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up everything fieldfuse needs on a Debian machine and builds it; safe to run again (each step
# skips what is already there). Creates .venv/ (PyTorch 2.11 from PyPI, matching the GPU machines),
# builds the C++ library, CLI and tests into build/release/, and installs the Python package into
# the venv. Environment: FIELDFUSE_CUDA=AUTO|ON|OFF (default AUTO: CUDA code is compiled whenever
# nvcc is found, even on machines without a GPU); FIELDFUSE_CUDA_ARCHITECTURES (default here 90,
# sm_90 only, to keep CI and development builds fast; a plain `pip install .` builds for the GPU
# present or a list of all supported generations instead, see CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"
build="$root/build/release"
torch_spec="torch==2.11.*"
# Pinned: stubgen's output, python/fieldfuse/_C.pyi (checked by tests/python/test_packaging.py),
# depends on nanobind's version. Update both together (scripts/stubs.sh).
nanobind_version="3.1.0"
export FIELDFUSE_CUDA_ARCHITECTURES="${FIELDFUSE_CUDA_ARCHITECTURES:-90}"
log() { printf '[setup] %s\n' "$*"; }

# --- system packages ------------------------------------------------------------------------------
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
# The CLI's libraries (found by CMake's find_package) and libtiff's tools, which write the TIFF
# files the CLI tests read.
compgen -G '/usr/include/*tiffio.h' >/dev/null || compgen -G '/usr/include/*/tiffio.h' >/dev/null ||
  need+=(libtiff-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
# `fieldfuse phase --config` reads TOML (toml++ v3, MIT) and YAML (yaml-cpp, MIT) besides JSON.
[ -f /usr/include/toml++/toml.h ] || need+=(libtomlplusplus-dev)
[ -f /usr/include/yaml-cpp/yaml.h ] || need+=(libyaml-cpp-dev)
command -v tiffcp >/dev/null || need+=(libtiff-tools)
# FBP's CPU FFT (KissFFT, BSD-3-Clause; float32), found by find_package(kissfft CONFIG).
[ -f /usr/include/kissfft/kiss_fftr.h ] || need+=(libkissfft-dev)
# The optics family's CPU FFT (Eigen's header-only FFT module, MPL-2.0; float and double).
[ -f /usr/include/eigen3/unsupported/Eigen/FFT ] || need+=(libeigen3-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# --- Python venv ----------------------------------------------------------------------------------
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.11") else 1)' 2>/dev/null; then
  log "installing $torch_spec (cached in the venv afterwards)"
  "$py" -m pip install -q --upgrade pip
  # No cache: it would keep a second copy of torch's CUDA wheels (about 3 GB) on disk.
  "$py" -m pip install -q --no-cache-dir "$torch_spec"
fi
if ! "$py" -c "import nanobind, scikit_build_core, pytest, numpy, sys
sys.exit(nanobind.__version__ != '$nanobind_version')" 2>/dev/null; then
  log "installing build and test tools"
  "$py" -m pip install -q "nanobind==$nanobind_version" "scikit-build-core>=0.11" pytest numpy
fi

# --- C++ library, CLI and C++ tests ---------------------------------------------------------------
log "building C++ (build/release)"
mkdir -p "$root/build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFIELDFUSE_TESTS=ON \
  -DFIELDFUSE_CUDA="${FIELDFUSE_CUDA:-AUTO}" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)"

# --- Python package -------------------------------------------------------------------------------
log "building the fieldfuse wheel (build/wheelhouse) and installing it into the venv"
bash scripts/install_package.sh "$py"
log "ready: $("$py" -c 'import fieldfuse; print(fieldfuse.build_info())')"
