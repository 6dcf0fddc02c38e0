#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End-to-end cases of `fieldfuse denoise` that need a shell: outputs that would destroy an input, a
# full disk, paths that are not UTF-8, inputs that are devices, pipes or lie about their size.
#   cli_safety_cases.sh EXE INPUTS WORKDIR CASE
set -euo pipefail
exe=$1 inputs=$2 work=$3 case=$4
rm -rf "$work"
mkdir -p "$work"
cd "$work"

fail() { echo "FAIL ($case): $*" >&2; exit 1; }
# run EXPECTED_EXIT REGEX args...: runs the CLI, checks its exit code and that stderr matches
# (REGEX "-": not checked).
run() {
  local want=$1 pattern=$2
  shift 2
  local got=0
  "$exe" "$@" >stdout.txt 2>stderr.txt || got=$?
  cat stdout.txt stderr.txt
  [ "$got" = "$want" ] || fail "exit $got, expected $want"
  [ "$pattern" = - ] || grep -Eq -- "$pattern" stderr.txt || fail "stderr does not match '$pattern'"
}
# Only the named files may be left in the directory (no temporary or half-written ones).
only_files() {
  local listing expected
  listing=$(ls -A | grep -v -x -e stdout.txt -e stderr.txt | sort | tr '\n' ' ')
  expected=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
  [ "$listing" = "$expected" ] || fail "directory holds [$listing], expected [$expected]"
}
json_is_valid() {  # strict: the bytes must be UTF-8 and the text JSON
  python3 -c 'import json, sys; json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))' "$1" ||
    fail "$1 is not valid UTF-8 JSON"
}

case $case in
  output_is_input)
    # --output x would write x.npy over --input x.npy; also --clean, and via another spelling.
    cp "$inputs/noisy_24.npy" x.npy
    cp "$inputs/clean_24.npy" c.npy
    run 2 "--output would overwrite --input 'x.npy'" denoise --input x.npy --output x --device cpu
    run 2 "--output would overwrite --clean 'c.npy'" \
      denoise --input x.npy --clean c.npy --output ./c --device cpu
    mkdir sub
    run 2 "would overwrite --input" denoise --input x.npy --output sub/../x --device cpu
    cmp -s x.npy "$inputs/noisy_24.npy" || fail "the input was changed"
    cmp -s c.npy "$inputs/clean_24.npy" || fail "the clean reference was changed"
    ;;
  output_is_input_via_symlink)
    cp "$inputs/noisy_24.npy" data.npy
    ln -s data.npy out.npy
    run 2 "would overwrite --input 'data.npy'" denoise --input data.npy --output out --device cpu
    cmp -s data.npy "$inputs/noisy_24.npy" || fail "the input was changed"
    ;;
  full_disk)
    # A file-size limit makes write(2) fail with EFBIG part way through the 55 KB volume while the
    # PNG and the JSON would fit: the run must fail and leave the previous outputs as they were.
    cp "$inputs/noisy_24.npy" in.npy
    for suffix in npy png json; do echo "previous $suffix" >"out.$suffix"; done
    got=0
    bash -c 'trap "" XFSZ; ulimit -f 32; exec "$@"' _ "$exe" denoise --input in.npy \
      --output out --device cpu --quiet >stdout.txt 2>stderr.txt || got=$?
    cat stdout.txt stderr.txt
    [ "$got" = 1 ] || fail "exit $got, expected 1"
    grep -q "cannot write 'out.npy': File too large" stderr.txt || fail "no message naming out.npy"
    for suffix in npy png json; do
      [ "$(cat "out.$suffix")" = "previous $suffix" ] || fail "out.$suffix was changed"
    done
    cmp -s in.npy "$inputs/noisy_24.npy" || fail "the input was changed"
    only_files in.npy out.npy out.png out.json
    ;;
  non_utf8_paths)
    # Byte 0xFF in the input path and the output prefix: the report must still be valid JSON.
    input=$'noisy\xff.npy' prefix=$'out\xff'
    cp "$inputs/noisy_24.npy" "$input"
    run 0 - denoise --input "$input" --output "$prefix" --device cpu --quiet --iters 5
    json_is_valid "$prefix.json"
    ;;
  device_named_npy)
    # /dev/zero named .npy used to be read until memory ran out; a pipe would block forever.
    ln -s /dev/zero zero.npy
    mkfifo pipe.npy
    ulimit -v 4000000
    run 3 "'zero.npy': it is a character device, not a regular file" denoise --input zero.npy --device cpu
    run 3 "'pipe.npy': it is a pipe, not a regular file" denoise --input pipe.npy --device cpu
    ;;
  tiff_claims_beyond_its_size)
    # A few kilobytes claiming 60000 x 60000 float pages once made the reader allocate 14 GB.
    ulimit -v 2000000
    run 3 "huge_claims.tif' (is truncated|.*claims)" denoise --input "$inputs/huge_claims.tif" --device cpu
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "PASS ($case)"
