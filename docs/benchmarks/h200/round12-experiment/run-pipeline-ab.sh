#!/usr/bin/env bash
set -uo pipefail
mkdir -p "$OUT/logs"
source bench/nvidia-icd.sh
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
cmake --build build/gpu --target multigpu-bench -j16 >/dev/null
SETTINGS=("CLPIN_XDEMOTE=0" "CLPIN_XDEMOTE=1" "CLPIN_XDEMOTE=2" "CLPIN_XDEMOTE=3" "CLPIN_XDEMOTE=1 CLPIN_XSLOTS=8 CLPIN_XLAG=2")
start=$(date +%s)
for rep in 1 2 3 4; do
  for i in "${!SETTINGS[@]}"; do
    [ $(( $(date +%s) - start )) -gt 250 ] && break 2
    env ${SETTINGS[$i]} timeout 60 build/gpu/bench/multigpu-bench --platform NVIDIA --case layout --counts 1 --kinds staged,cuda --runs 5 >"$OUT/logs/s$i-r$rep.log" 2>&1
  done
done
for v in 0 1; do CLPIN_XDEMOTE=$v timeout 60 build/gpu/bench/multigpu-bench --platform NVIDIA --case contend --counts 1 --runs 5 >"$OUT/logs/contend-x$v.log" 2>&1; done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
