#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clpin.Loader's worker processes on a GPU, in about 11 minutes on
# one H200 with 16 cores, 5-7 a pass (each step has a time limit):
#
#   1. Debian's Python 3.11 with pyopencl from .deb files (bench/debroot.sh),
#      NVIDIA's OpenCL and the library built (Release) by bench/lib.sh;
#   2. twice (2 processes each): bench/dataset_bench.py --mode fills (before
#      commit "bench: workers_bench.py folds into dataset_bench.py --mode
#      fills", bench/workers_bench.py) --impl clpin (threads and processes)
#      under Debian's python, --impl baseline (DataLoader, pin_memory,
#      non_blocking; the log keeps the name torch) under the machine's own
#      python (torch's), --impl bare (the fill alone on W processes);
#   3. a summary: medians of every run of both passes, the issue's ratios
#      and targets (summary.txt).
#
#   bash bench/gpu-workers.sh
#
# Environment: OUT (default build/gpu-workers-out; the device tool sets it),
# BUILD_DIR (default build/gpu-workers), DEBS (the .deb folder, default
# .debs), RUNS (default 3), WORKERS (default 1,4,8,16), FILLS (default
# python,jpeg,numpy), DEVICE (an OpenCL platform or device name, default
# NVIDIA when the machine has it), METHODS (thread,process), IMPLS
# (clpin,torch,bare), PASSES (the pass numbers, default "1 2"), PER_WORKER
# (batches an epoch per worker, 16), WARM_EPOCHS (whole epochs before the
# timed ones, default 1: every worker has touched its data).
# Files in $OUT: machine.txt, build.log, clpin-1.log, torch-1.log,
# bare-1.log, clpin-2.log, torch-2.log, bare-2.log, summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-build/gpu-workers-out}
BUILD_DIR=${BUILD_DIR:-build/gpu-workers}
RUNS=${RUNS:-3}
WORKERS=${WORKERS:-1,4,8,16}
FILLS=${FILLS:-python,jpeg,numpy}
PER_WORKER=${PER_WORKER:-16}
METHODS=${METHODS:-thread,process}
IMPLS=${IMPLS:-clpin,torch,bare}
PASSES=${PASSES:-1 2}

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_outdir OUT
bench_python_setup

args=(--mode fills --procs 1 --cases "$FILLS" --workers "$WORKERS" --runs "$RUNS" --per-worker "$PER_WORKER" --methods "$METHODS"
  --warm-epochs "${WARM_EPOCHS:-1}")
status=0
# One (impl, pass) step: its log, its own time limit.
step() {
  local impl=$1 p=$2 limit=$3 py=$4 what=$5
  say "pass $p: $what"
  timeout "$limit" "$py" bench/dataset_bench.py --impl "${impl/torch/baseline}" --tag "p$p-" "${args[@]}" 2>&1 |
    tee "$OUT/$impl-$p.log" | grep -v -e '^RESULT' -e '^THREADS'
  [ "${PIPESTATUS[0]}" = 0 ] || { status=1; say "$impl pass $p failed or timed out ($impl-$p.log)"; }
}
for p in $PASSES; do
  for impl in ${IMPLS//,/ }; do
    case $impl in
    clpin) step clpin "$p" "${LIMIT_CLPIN:-300}" "$PY311" "clpin ($METHODS) under Debian's python" ;;
    torch) step torch "$p" "${LIMIT_TORCH:-200}" "$HOST_PY" "PyTorch's DataLoader under $("$HOST_PY" -c 'import sys; print(sys.executable)' 2>/dev/null)" ;;
    bare) step bare "$p" "${LIMIT_BARE:-120}" "$PY311" "the fills alone on W processes" ;;
    esac
  done
done

say "summary"
"$PY311" bench/dataset_bench.py --summary "$OUT"/*-[0-9]*.log | tee "$OUT/summary.txt"
say "done (status $status)"
exit $status
