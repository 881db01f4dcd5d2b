#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Measure clpin on a real GPU: build clpin-bench (Release), run every case,
# engine-bench and the PyTorch cross-check, and leave the figures (log,
# CSV, JSON, machine description) in $OUTDIR. The numbers in
# docs/BENCHMARKS.md come from this script; bench/plot.sh draws the plot.
#
#   bench/gpu-bench.sh [extra clpin-bench options...]
#
# Environment: OUTDIR (default build/gpu-bench), BENCH_CASES (default all),
# ENGINE_ARGS (engine-bench options, e.g. --platform NVIDIA --runs 7), SKIP_ENGINE=1,
# BUILD_DIR (default build/gpu), SKIP_TORCH=1. The loader (and
# examples/loader_pipeline): bench/gpu-loader.sh; clpeak under the layer:
# bench/gpu-layer.sh.
# Needs cmake, a C compiler, OpenCL headers and an ICD loader; the CUDA
# baseline needs libcudart where the dynamic loader finds it (or
# CLPIN_BENCH_CUDART=/path/libcudart.so).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/gpu-bench}
BUILD_DIR=${BUILD_DIR:-build/gpu}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_outdir OUTDIR
{
  bench_machine
  clinfo -l 2>/dev/null || true
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || true
} | tee "$OUTDIR/machine.txt"
bench_build "$BUILD_DIR" clpin-bench engine-bench

set +e
"$BUILD_DIR/bench/clpin-bench" --case "${BENCH_CASES:-all}" --strict \
  --csv "$OUTDIR/bench.csv" --json "$OUTDIR/bench.json" "$@" 2>&1 | tee "$OUTDIR/bench.log"
status=${PIPESTATUS[0]}
set -e

# engine-bench: the engine as programs use it (non-blocking calls, duplex,
# several writers at once), public API only.
if [ "${SKIP_ENGINE:-0}" != 1 ]; then
  echo "=== engine-bench"
  # shellcheck disable=SC2086 # ENGINE_ARGS is a list of options
  "$BUILD_DIR/bench/engine-bench" ${ENGINE_ARGS:-} 2>&1 | tee "$OUTDIR/engine.log" || status=1
fi

if [ "${SKIP_TORCH:-0}" != 1 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "=== PyTorch cross-check"
  python3 bench/torch_baseline.py | tee "$OUTDIR/torch.csv"
fi

exit "$status"
