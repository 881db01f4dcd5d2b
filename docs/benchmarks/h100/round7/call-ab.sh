#!/usr/bin/env bash
# Round 7's A/B and target runs in one device call (README.md beside it):
# rect-bench A (.ab/old: the library before eight read slots) against B
# (this tree), alternating, AB_RUNS processes a side; engine-bench --case
# pinned the same way; then ci/gpu-rect.sh (PARTS) on this tree.
#   OCL_ICD_DEB=$PWD/.deb/ocl-icd-libopencl1_2.3.1-1_amd64.deb \
#     OUTDIR=build/r7 docs/benchmarks/h100/round7/call-ab.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
OUTDIR=${OUTDIR:-build/r7}
AB_RUNS=${AB_RUNS:-3}
PARTS=${PARTS:-bench layer diff}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
OLD_SRC=.ab/old RUNS=$AB_RUNS AB_BENCH=rect-bench \
  AB_GREP="target >=|per call|clpin from malloc \(|host copy alone|plain from malloc" \
  AB_ARGS="--platform NVIDIA --runs 5" OUTDIR="$OUTDIR/ab-rect" ci/gpu-ab.sh >"$OUTDIR/ab-rect.out" 2>&1
OLD_SRC=.ab/old RUNS=$AB_RUNS AB_ARGS="--platform NVIDIA --case pinned --runs 5" \
  OUTDIR="$OUTDIR/ab-eng" ci/gpu-ab.sh >"$OUTDIR/ab-eng.out" 2>&1
[ -n "$PARTS" ] && PARTS=$PARTS PROCS=2 RUNS=5 OUTDIR="$OUTDIR/rect" ci/gpu-rect.sh >"$OUTDIR/rect.out" 2>&1
exit 0
