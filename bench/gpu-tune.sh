#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tuning runs on a GPU for the staged figures at other CLPIN_THREADS /
# CLPIN_CHUNK values than the defaults: clpin-bench's transfer case at 64 MiB
# and 1 GiB (CLPIN_PIN_MEMORY from malloc against pageable and pinned, its
# targets table), each setting a separate process, all in one machine
# session. Results in $OUTDIR/tune-*.log. (clpin-bench --case tune sweeps a
# chunk x threads grid inside one process.)
#   bench/gpu-tune.sh [clpin-bench options...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/gpu-bench}
BUILD_DIR=${BUILD_DIR:-build/gpu}
mkdir -p "$OUTDIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" --target clpin-bench -j "$(nproc)" >/dev/null
for setting in "CLPIN_THREADS=16" "CLPIN_CHUNK=4M" "CLPIN_CHUNK=16M" "CLPIN_CHUNK=4M CLPIN_THREADS=16"; do
  name=$(echo "$setting" | tr ' =' '__')
  echo "=== $setting"
  env $setting "$BUILD_DIR/bench/clpin-bench" --case transfer --sizes 64M,1G \
    --paths pageable,cl-pinned,clpin-pin,cuda-pinned "$@" 2>&1 | tee "$OUTDIR/tune-$name.log"
done
