#!/usr/bin/env bash
# Round 9's last device call (README.md beside it), on this tree:
# ci/gpu-rect.sh (PARTS) for issue 20's targets, rect-bench --small in
# SMALL_PROCS processes (small writes take their host buffers in turn),
# then small-probe (run-probe.sh) in PROBE_PROCS processes.
#   OCL_ICD_DEB=$PWD/.deb/ocl-icd-libopencl1_2.3.1-1_amd64.deb \
#     OUTDIR=build/r9f docs/benchmarks/h100/round9/call-final.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.." || exit 1
OUTDIR=${OUTDIR:-build/r9f}
SMALL_PROCS=${SMALL_PROCS:-4}
PROBE_PROCS=${PROBE_PROCS:-3}
PARTS=${PARTS:-bench layer}
PLATFORM=${PLATFORM:-NVIDIA}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# gpu-rect.sh builds rect-bench and the library (build/gpu) and registers
# NVIDIA's ICD.
PLATFORM=$PLATFORM PARTS=$PARTS PROCS=2 RUNS=5 OUTDIR="$OUTDIR/rect" ci/gpu-rect.sh \
  >"$OUTDIR/rect.out" 2>&1
# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
for p in $(seq "$SMALL_PROCS"); do
  build/gpu/bench/rect-bench --platform "$PLATFORM" --small --runs 7 >"$OUTDIR/small-$p.txt" 2>&1
done
grep -hE 'write.*(clpin / plain|A/A|per call)' "$OUTDIR"/small-[0-9]*.txt \
  >"$OUTDIR/small-summary.txt"
LIB=$PWD/build/gpu PLATFORM=$PLATFORM PROCS=$PROBE_PROCS OUTDIR="$OUTDIR/probe" \
  "$here/run-probe.sh" >"$OUTDIR/probe.out" 2>&1
exit 0
