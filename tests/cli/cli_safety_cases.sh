#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End-to-end cases of `fieldfuse denoise` and `fieldfuse tomo` that need a shell: outputs that would destroy an input, a
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
  tomo_error_leaves_no_file)
    # An input error before the work and a failure after it (--output-dir is a file): no output,
    # no temporary file, exit 3 and 1.
    cp "$inputs/tilt_24.mrc" .
    run 3 "gives 41 angles, but --input 'tilt_24.mrc' holds 21 projections" tomo \
      --input tilt_24.mrc --angles -60:60:3 --output v.mrc --report r.json --device cpu
    echo "not a directory" >taken
    run 1 "cannot create directory 'taken'" tomo --phantom-size 16 --iterations 2 \
      --kplanes-iterations 2 --output-dir taken --png-dir png --report r.json --device cpu --quiet
    only_files tilt_24.mrc taken
    ;;
  tomo_full_disk)
    # A 32 KB file-size limit stops the 128 KB volumes part way: the earlier outputs stay as they
    # were and nothing else appears.
    mkdir out
    echo "previous sirt" >out/sirt.mrc
    got=0
    bash -c 'trap "" XFSZ; ulimit -f 32; exec "$@"' _ "$exe" tomo --phantom-size 32 \
      --iterations 2 --kplanes-iterations 2 --output-dir out --report r.json --device cpu --quiet \
      >stdout.txt 2>stderr.txt || got=$?
    cat stdout.txt stderr.txt
    [ "$got" = 1 ] || fail "exit $got, expected 1"
    grep -q "cannot write 'out/sirt.mrc': File too large" stderr.txt || fail "no message naming out/sirt.mrc"
    [ "$(cat out/sirt.mrc)" = "previous sirt" ] || fail "out/sirt.mrc was changed"
    [ "$(ls -A out)" = "sirt.mrc" ] || fail "out holds $(ls -A out)"
    only_files out
    ;;
  tomo_output_is_input)
    cp "$inputs/tilt_24.mrc" stack.mrc
    run 2 "--output would overwrite --input 'stack.mrc'" tomo --input stack.mrc \
      --angles -60:60:6 --output ./stack.mrc --device cpu
    cmp -s stack.mrc "$inputs/tilt_24.mrc" || fail "the input was changed"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "PASS ($case)"
