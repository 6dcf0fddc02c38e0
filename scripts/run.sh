#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets everything up (scripts/setup.sh) and runs the main job: TV denoising with the fieldfuse CLI.
# With no arguments it denoises the built-in noisy 3-D phantom; any arguments go to
# `fieldfuse denoise` (see `build/release/apps/fieldfuse denoise --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/release/apps/fieldfuse denoise "$@"
