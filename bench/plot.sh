#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Draw bandwidth against transfer size for every path of clpin-bench's sweep.
#   bench/plot.sh bench.csv docs/benchmarks.png ["title"]
# Needs gnuplot (with the pngcairo or png terminal).
set -euo pipefail
csv=$1 png=$2 title=${3:-clpin-bench sweep}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
paths="pageable cl-pinned clpin-host clpin-pin clpin-plain clpin-reg cuda-pinned cuda-pageable"
plots=()
for dir in H2D D2H; do
  cmd=""
  for p in $paths; do
    # section,path,dir,bytes,...,median is field 10
    awk -F, -v p="$p" -v d="$dir" '$1=="sweep" && $2==p && $3==d {print $4, $10}' "$csv" | sort -n >"$tmp/$dir-$p.dat"
    [ -s "$tmp/$dir-$p.dat" ] || continue
    cmd+="${cmd:+, }'$tmp/$dir-$p.dat' using 1:2 with linespoints title '$p'"
  done
  plots+=("$cmd")
done
[ -n "${plots[0]}" ] || { echo "plot.sh: no sweep rows in $csv" >&2; exit 1; }
term=pngcairo
gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo || term=png
gnuplot <<GP
set terminal $term size 1400,560 font ",10" noenhanced
set output '$png'
set multiplot layout 1,2 title "$title"
set logscale x 2
set grid
set key top left
set xlabel 'transfer size (bytes)'
set xrange [3000:1.4e9]
set ylabel 'GB/s (median, 1 GB = 1e9 B)'
set xtics ("4K" 4096, "16K" 16384, "64K" 65536, "256K" 262144, "1M" 1048576, "4M" 4194304, \
  "16M" 16777216, "64M" 67108864, "256M" 268435456, "1G" 1073741824, "4G" 4294967296)
set title 'host to device (H2D)'
plot ${plots[0]}
set title 'device to host (D2H)'
plot ${plots[1]}
unset multiplot
GP
echo "plot.sh: wrote $png"
