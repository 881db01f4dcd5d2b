#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The zero-copy targets (docs/ZERO_COPY.md) on POCL's CPU device on whatever host runs it:
# `clpin-bench --case unified` (zero copy against hand-written OpenCL,
# side by side in one process) RUNS times, each its own process, with the
# verdict lines gathered. docs/BENCHMARKS.md, "Host-unified devices (POCL)",
# has the 2-core figures; this runs them on a quieter, larger host.
#
#   bench/pocl-unified.sh
#
# Environment: OUTDIR (default build/pocl-unified), BUILD_DIR (default
# build/pocl-unified-build), RUNS (default 5), REPS (default 7).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/pocl-unified}
BUILD_DIR=${BUILD_DIR:-build/pocl-unified-build}
RUNS=${RUNS:-5}
REPS=${REPS:-7}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_outdir OUTDIR
bench_machine | tee "$OUTDIR/machine.txt"
bench_build "$BUILD_DIR" clpin-bench
for r in $(seq 1 "$RUNS"); do
  "$BUILD_DIR/bench/clpin-bench" --platform Portable --case unified --reps "$REPS" --warmup 1 \
    --csv "$OUTDIR/unified-$r.csv" >"$OUTDIR/unified-$r.log" 2>&1
  echo "=== run $r"
  grep -E '^  (round trip|ZERO_COPY|create\+fill)' "$OUTDIR/unified-$r.log"
  echo "sweep rows met: $(grep -cE '^  (write|read) PIN_MEMORY.* met$' "$OUTDIR/unified-$r.log") of $(grep -cE '^  (write|read) PIN_MEMORY' "$OUTDIR/unified-$r.log")"
done 2>&1 | tee "$OUTDIR/summary.txt"
echo "results in $OUTDIR"
