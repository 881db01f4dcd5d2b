#!/usr/bin/env bash
# Issue 24's aggregate target on POCL's two CPU devices of one context
# (POCL_DEVICES="pthread pthread", CLPIN_PINNED_H2D=1): bench/multidev-bench
# in PROCS processes of RUNS runs each, on whatever host runs it. On a CPU
# device every "DMA" is a memcpy by POCL's own threads, so the two devices'
# transfers can overlap only where there are cores to spare for both: run it
# on a many-core host (the 2-core CI container cannot show it, see
# docs/BENCHMARKS.md, "Several devices of one context").
#
#   ci/pocl-multidev.sh [extra multidev-bench options...]
#
# Environment: OUTDIR (default build/pocl-multidev), BUILD_DIR (default
# build/pocl-multidev-build), PROCS (default 3), RUNS (default 7).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/pocl-multidev}
BUILD_DIR=${BUILD_DIR:-build/pocl-multidev-build}
PROCS=${PROCS:-3}
RUNS=${RUNS:-7}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  uname -srm
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|NUMA)' || true
  echo "nproc: $(nproc)"
} 2>&1 | tee "$OUTDIR/machine.txt"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" --target multidev-bench -j "$(nproc)" >/dev/null
export POCL_DEVICES="pthread pthread" CLPIN_PINNED_H2D=1
for p in $(seq 1 "$PROCS"); do
  echo "=== process $p"
  "$BUILD_DIR/bench/multidev-bench" --platform Portable --devices 2 --runs "$RUNS" "$@" 2>&1 |
    tee "$OUTDIR/multidev-$p.log"
done
grep -h '^ratio' "$OUTDIR"/multidev-*.log | tee "$OUTDIR/summary.txt"
echo "results in $OUTDIR"
