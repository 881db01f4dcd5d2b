#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Draw the unified case: clpin against its hand-written baseline, per row and
# size (median ms of the run), from clpin-bench's CSV.
#   bench/plot-unified.sh unified.csv docs/benchmarks-unified.png ["title"]
# Needs gnuplot (with the pngcairo or png terminal).
set -euo pipefail
csv=$1 png=$2 title=${3:-clpin-bench --case unified}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# row label, clpin path, baseline path
rows=("round-trip clpin-tensor cl-plain" "zero-copy clpin-zero-copy cl-use-host-ptr"
  "create+fill clpin-create-fill cl-alloc-host-ptr")
for r in "${rows[@]}"; do
  set -- $r
  for mib in 64 256; do
    bytes=$((mib << 20))
    c=$(awk -F, -v p="$2" -v b="$bytes" '$1=="unified" && $2==p && $4==b {print $10}' "$csv")
    base=$(awk -F, -v p="$3" -v b="$bytes" '$1=="unified" && $2==p && $4==b {print $10}' "$csv")
    [ -n "$c" ] && [ -n "$base" ] && echo "\"$1 $mib MiB\" $c $base" >>"$tmp/rows.dat"
  done
done
[ -s "$tmp/rows.dat" ] || { echo "plot-unified.sh: no unified rows in $csv" >&2; exit 1; }
term=pngcairo
gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo || term=png
gnuplot <<GP
set terminal $term size 1000,520 font ",10" noenhanced
set output '$png'
set title "$title"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set logscale y
set ylabel 'median ms per round trip (log scale, lower is better)'
set xtics rotate by -20
plot '$tmp/rows.dat' using 2:xtic(1) title 'clpin', '' using 3 title 'hand-written OpenCL baseline'
GP
