#!/usr/bin/env bash
# Tuning runs on a GPU for the staged 64 MiB figures (engine-bench's "pinned"
# case) at other CLPIN_THREADS / CLPIN_CHUNK values than the defaults, each a
# separate process, all in one machine session. Results in $OUTDIR/tune-*.log.
#   bench/gpu-tune.sh [engine-bench options...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/gpu-bench}
BUILD_DIR=${BUILD_DIR:-build/gpu}
mkdir -p "$OUTDIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" --target engine-bench -j "$(nproc)" >/dev/null
for setting in "CLPIN_THREADS=16" "CLPIN_CHUNK=4M" "CLPIN_CHUNK=16M" "CLPIN_CHUNK=4M CLPIN_THREADS=16"; do
  name=$(echo "$setting" | tr ' =' '__')
  echo "=== $setting"
  env $setting "$BUILD_DIR/bench/engine-bench" --case pinned "$@" 2>&1 | tee "$OUTDIR/tune-$name.log"
done
