#!/usr/bin/env bash
# Round 8's device call (README.md beside it): small rect and image
# transfers, A (.ab/old: the library before the per-thread pool lookup and
# the prefetch at a transfer's start) against B (this tree), alternating,
# AB_RUNS processes a side (rect-bench --small: clpin, the plain call and
# the A/A control); engine-bench --case pinned the same way (the size
# sweep's small calls, and that nothing else moved); then ci/gpu-rect.sh
# (PARTS) on this tree: issue 20's targets.
#   OCL_ICD_DEB=$PWD/.deb/ocl-icd-libopencl1_2.3.1-1_amd64.deb \
#     OUTDIR=build/r8 docs/benchmarks/h100/round8/call-small.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
OUTDIR=${OUTDIR:-build/r8}
AB_RUNS=${AB_RUNS:-4}
ENG_RUNS=${ENG_RUNS:-2}
PARTS=${PARTS:-bench layer diff}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
OLD_SRC=.ab/old RUNS=$AB_RUNS AB_BENCH=rect-bench AB_GREP="target >=|per call|A/A" \
  AB_ARGS="--platform NVIDIA --small --runs 7" OUTDIR="$OUTDIR/ab-small" ci/gpu-ab.sh \
  >"$OUTDIR/ab-small.out" 2>&1
if [ "$ENG_RUNS" -gt 0 ]; then
  OLD_SRC=.ab/old RUNS=$ENG_RUNS AB_ARGS="--platform NVIDIA --case pinned --runs 5" \
    OUTDIR="$OUTDIR/ab-eng" ci/gpu-ab.sh >"$OUTDIR/ab-eng.out" 2>&1
fi
[ -n "$PARTS" ] && PARTS=$PARTS PROCS=2 RUNS=5 OUTDIR="$OUTDIR/rect" ci/gpu-rect.sh >"$OUTDIR/rect.out" 2>&1
exit 0
