#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The inputs of the `fieldfuse phase` tests: make_phase_inputs.py's stack and settings, and the
# same stack as a multi-page float32 TIFF written by libtiff's own tools (raw2tiff, tiffcp).
#   make_phase_inputs.sh PYTHON DIR
set -euo pipefail
python=$1 dir=$2
"$python" "$(dirname "$0")/make_phase_inputs.py" "$dir"
cd "$dir"
parts=()
for z in 0 1 2 3 4; do
  raw2tiff -c none -w 91 -l 75 -d float "phase_page$z.raw" "phase_page$z.tif"
  parts+=("phase_page$z.tif")
done
tiffcp "${parts[@]}" phase_stack.tif
