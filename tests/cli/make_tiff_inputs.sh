#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Turns the raw pages that make_cli_inputs wrote into TIFF files with libtiff's own tools (raw2tiff,
# tiffcp, tiffset), so the reader is tested against another writer: every sample type, LZW / Deflate
# / PackBits with and without predictors, tiles, BigTIFF, big-endian, several strips per page, an
# RGB file to refuse and a damaged file that claims 60000 x 60000 pixels in a few kilobytes.
#   make_tiff_inputs.sh DIR
set -euo pipefail
cd "$1"
w=37 h=21 pages=3

# One uncompressed multi-page stack from the raw pages of one type; extra arguments go to tiffcp.
stack() {  # stack TYPE OUT [tiffcp flags...]
  local type=$1 out=$2
  shift 2
  local parts=()
  for ((p = 0; p < pages; p++)); do
    raw2tiff -c none -w "$w" -l "$h" -d "$type" "ramp_${type}_page$p.raw" "ramp_${type}_page$p.tif"
    parts+=("ramp_${type}_page$p.tif")
  done
  tiffcp "$@" "${parts[@]}" "$out"
}

for type in byte sbyte short sshort long slong float double; do
  stack "$type" "ramp_$type.tif"
done
stack short ramp_short_lzw.tif -c lzw
stack short ramp_short_zip_predictor.tif -c zip:2
stack short ramp_short_packbits.tif -c packbits
stack short ramp_short_tiled.tif -t -w 16 -l 16
stack short ramp_short_bigtiff.tif -8
stack short ramp_short_strips_of_3_rows.tif -r 3
stack short ramp_short_bigendian_tiled_lzw_bigtiff.tif -B -t -w 16 -l 16 -c lzw -8
stack sshort ramp_sshort_bigendian_zip.tif -B -c zip
stack float ramp_float_lzw_float_predictor.tif -c lzw:3
stack double ramp_double_bigendian_tiled_zip.tif -B -t -w 16 -l 16 -c zip

# The noisy 24^3 phantom as uint16 stacks: plain strips, and LZW-compressed 16 x 16 tiles.
parts=()
for ((p = 0; p < 24; p++)); do
  raw2tiff -c none -w 24 -l 24 -d short "noisy_24_u16_page$p.raw" "noisy_24_u16_page$p.tif"
  parts+=("noisy_24_u16_page$p.tif")
done
tiffcp "${parts[@]}" noisy_24_u16.tif
tiffcp -c lzw -t -w 16 -l 16 "${parts[@]}" noisy_24_u16_lzw_tiled.tif

# Files to refuse: three samples per pixel, and pages claimed far larger than the file.
raw2tiff -c none -w "$w" -l 7 -b 3 -p rgb -d byte ramp_byte_page0.raw rgb.tif
cp ramp_float_page0.tif huge_claims.tif
tiffset -s 256 60000 huge_claims.tif
tiffset -s 257 60000 huge_claims.tif
raw2tiff -c none -w "$h" -l "$w" -d short ramp_short_page1.raw ramp_short_rotated.tif
tiffcp ramp_short_page0.tif ramp_short_rotated.tif mismatched_pages.tif
