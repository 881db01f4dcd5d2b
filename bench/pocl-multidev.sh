#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 24's aggregate target on POCL's two CPU devices of one context
# (POCL_DEVICES="pthread pthread", CLPIN_PINNED_H2D=1): bench/context-devices-bench
# in PROCS processes of RUNS runs each, on whatever host runs it. On a CPU
# device every "DMA" is a memcpy by POCL's own threads, so the two devices'
# transfers can overlap only where there are cores to spare for both: run it
# on a many-core host (the 2-core CI container cannot show it, see
# docs/BENCHMARKS.md, "Several devices of one context").
#
#   bench/pocl-multidev.sh [extra context-devices-bench options...]
#
# Environment: OUTDIR (default build/pocl-multidev), BUILD_DIR (default
# build/pocl-multidev-build), PROCS (default 3), RUNS (default 7).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/pocl-multidev}
BUILD_DIR=${BUILD_DIR:-build/pocl-multidev-build}
PROCS=${PROCS:-3}
RUNS=${RUNS:-7}
# shellcheck source=bench/host-bench.sh
source bench/host-bench.sh
host_bench_setup context-devices-bench
export POCL_DEVICES="pthread pthread" CLPIN_PINNED_H2D=1
for p in $(seq 1 "$PROCS"); do
  echo "=== process $p"
  "$BUILD_DIR/bench/context-devices-bench" --platform Portable --devices 2 --runs "$RUNS" "$@" 2>&1 |
    tee "$OUTDIR/multidev-$p.log"
done
grep -h 'TARGET' "$OUTDIR"/multidev-*.log | tee "$OUTDIR/summary.txt"
echo "results in $OUTDIR"
