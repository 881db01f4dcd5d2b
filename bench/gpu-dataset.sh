#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clpin.DatasetLoader against torch.utils.data.DataLoader on one GPU (the
# H200 rows of issue 47), and Loader(fields=) against the one-array Loader:
#
#   1. Debian's Python 3.11 with pyopencl and PIL from .deb files
#      (bench/debroot.sh), NVIDIA's OpenCL and the library built (Release)
#      by bench/lib.sh; the machine's own python3 has torch with CUDA and
#      no pyopencl;
#   2. PASSES times: bench/dataset_bench.py --impl clpin (the same Dataset
#      classes through clpin.DatasetLoader, and the fields case) under
#      Debian's python, then --impl baseline (DataLoader(pin_memory=True) +
#      .to("cuda", non_blocking=True)) under the machine's python; one
#      process each, RUNS timed epochs a column;
#   3. the summary over every pass: medians (min-max), the ratio clpin /
#      baseline per run (run r of pass p against run r of pass p) and in
#      how many runs each target held (summary.txt).
#
#   bash bench/debroot.sh download      # here, once: the .deb files into .debs
#   bash bench/gpu-dataset.sh           # there, with .debs carried along
#
# Environment: OUT (default build/gpu-dataset-out; the device tool sets it),
# BUILD_DIR (default build/gpu-dataset), DEBS (the .deb folder, default
# .debs), WORKERS (W, default 16), RUNS (default 5), PASSES (default
# "1 2"), SCALE (batches an epoch x this, default 4), CASES (default
# python,jpeg,numpy,fields), DEVICE (an OpenCL platform or device name,
# default NVIDIA when the machine has it), LIMIT (seconds a step, 240).
# Files in $OUT: machine.txt, build.log, clpin-P.log, baseline-P.log,
# summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-build/gpu-dataset-out}
BUILD_DIR=${BUILD_DIR:-build/gpu-dataset}
WORKERS=${WORKERS:-16}
RUNS=${RUNS:-5}
PASSES=${PASSES:-1 2}
SCALE=${SCALE:-4}
CASES=${CASES:-python,jpeg,numpy,fields}
LIMIT=${LIMIT:-240}

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_outdir OUT
bench_python_setup pyopencl

args=(--procs 1 --runs "$RUNS" --workers "$WORKERS" --scale "$SCALE" --cases "$CASES")
status=0
# One (column, pass) step: one process, its log, its own time limit. The
# process is named "pP-1" in both columns, so the summary pairs run r of
# pass P of clpin with run r of pass P of the baseline.
step() {
  local impl=$1 p=$2 py=$3 what=$4
  say "pass $p: $what"
  timeout "$LIMIT" "$py" bench/dataset_bench.py --impl "$impl" --tag "p$p-" "${args[@]}" 2>&1 |
    tee "$OUT/$impl-$p.log" | grep -v '^RESULT'
  [ "${PIPESTATUS[0]}" = 0 ] || { status=1; say "$impl pass $p failed or timed out ($impl-$p.log)"; }
}
for p in $PASSES; do
  step clpin "$p" "$PY311" "clpin.DatasetLoader and the fields case under Debian's python"
  step baseline "$p" "$HOST_PY" "DataLoader(pin_memory=True) + .to(\"cuda\", non_blocking=True) under the machine's python"
done

say "summary"
"$PY311" bench/dataset_bench.py --summary "$OUT"/clpin-*.log "$OUT"/baseline-*.log | tee "$OUT/summary.txt"
say "done (status $status)"
exit $status
