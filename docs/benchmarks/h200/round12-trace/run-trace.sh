#!/usr/bin/env bash
set -uo pipefail
mkdir -p "$OUT"
source bench/nvidia-icd.sh
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
cmake --build build/gpu --target multigpu-bench -j16 >/dev/null
S=("CLPIN_XDEMOTE=0" "CLPIN_XDEMOTE=1" "CLPIN_XSLOTS=8 CLPIN_XLAG=2" "CLPIN_XDEMOTE=3")
for rep in 1 2; do for i in 0 1 2 3; do
  env CLPIN_XTRACE=1 ${S[$i]} timeout 60 build/gpu/bench/multigpu-bench --platform NVIDIA --case layout --counts 1 --kinds staged,cuda --runs 5 >"$OUT/s$i-r$rep.log" 2>&1
done; done
for i in 0 1 2 3; do
  echo "--- ${S[$i]}"
  for f in "$OUT"/s$i-r*.log; do
    grep XTRACE "$f" | grep 268435456 | head -12 | awk '{t+=$6; c+=$9; d+=$11; f+=$13; n++} END {printf "  H2D alone: n=%d mean total %.0f us, copy-wait %.0f, dma-wait %.0f, finish %.0f\n", n, t/n, c/n, d/n, f/n}'
    grep XTRACE "$f" | grep 268435456 | tail -12 | awk '{t+=$6; c+=$9; d+=$11; f+=$13; n++} END {printf "  duplex:    n=%d mean total %.0f us, copy-wait %.0f, dma-wait %.0f, finish %.0f\n", n, t/n, c/n, d/n, f/n}'
    grep -E "H2D staged malloc, aggregate" "$f" | grep -v RAW
  done
done | tee "$OUT/summary.txt"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls s*.log) && rm -f "$OUT"/s*.log
