#!/usr/bin/env bash
# Round 8's last device call (README.md beside it), on this tree: rect-bench
# --small in SMALL_PROCS processes (clpin's small calls, the plain call and
# the A/A control), then ci/gpu-rect.sh (PARTS) for issue 20's targets.
#   OCL_ICD_DEB=$PWD/.deb/ocl-icd-libopencl1_2.3.1-1_amd64.deb \
#     OUTDIR=build/r8f docs/benchmarks/h100/round8/call-final.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
OUTDIR=${OUTDIR:-build/r8f}
SMALL_PROCS=${SMALL_PROCS:-3}
PARTS=${PARTS:-bench layer}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# gpu-rect.sh builds rect-bench (build/gpu) and registers NVIDIA's ICD.
PARTS=$PARTS PROCS=2 RUNS=5 OUTDIR="$OUTDIR/rect" ci/gpu-rect.sh >"$OUTDIR/rect.out" 2>&1
# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
for p in $(seq "$SMALL_PROCS"); do
  build/gpu/bench/rect-bench --platform NVIDIA --small --runs 7 >"$OUTDIR/small-$p.txt" 2>&1
done
grep -hE 'write.*(clpin / plain|A/A|per call)' "$OUTDIR"/small-*.txt >"$OUTDIR/small-summary.txt"
exit 0
