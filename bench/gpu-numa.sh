#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# NUMA placement on a GPU machine (issue 24): whether clpin finds the GPU's
# node there, and whether its placed blocks (memory clpin maps, binds with
# mbind and hands to the driver as CL_MEM_USE_HOST_PTR) move data as fast as
# the driver's own CL_MEM_ALLOC_HOST_PTR blocks. CLPIN_NUMA=1 places even on
# a one-node host, so this runs on the H100 machine; CLPIN_NUMA=0 is the
# unplaced pool. clpin-bench's `transfer` case (NUMA_ARGS): pool memory
# against the driver's pinned buffer and CUDA pinned, staged malloc against
# both, its targets table; alternating processes, RUNS pairs.
#
#   RUNS=3 OUTDIR=build/gpu-numa bench/gpu-numa.sh
#
# Output: $OUTDIR/node.log (the CLPIN_DEBUG lines naming each device's
# node), numa-{0,1}-K.log and summary.txt (every target line by side).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUTDIR=${OUTDIR:-build/gpu-numa}
RUNS=${RUNS:-3}
ARGS=${NUMA_ARGS:---platform NVIDIA --case transfer}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=bench/nvidia-icd.sh
source bench/nvidia-icd.sh
cmake -S . -B build/gpu-numa -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null &&
  cmake --build build/gpu-numa --target clpin clpin-bench -j "$(nproc)" >/dev/null || exit 1
bench=build/gpu-numa/bench/clpin-bench
{
  echo "numa nodes: $(cat /sys/devices/system/node/online 2>/dev/null)"
  CLPIN_NUMA=1 CLPIN_DEBUG=1 "$bench" --platform NVIDIA --case pool --quick --no-cuda 2>&1 |
    grep -E "NUMA|bind" | sort -u | head -20
} | tee "$OUTDIR/node.log"
status=0
for run in $(seq "$RUNS"); do
  for n in 0 1; do
    # shellcheck disable=SC2086 # ARGS is a list of options
    CLPIN_NUMA=$n "$bench" $ARGS >"$OUTDIR/numa-$n-$run.log" 2>&1 || status=1
  done
done
{
  for n in 0 1; do
    echo "== CLPIN_NUMA=$n"
    for run in $(seq "$RUNS"); do
      grep -E ' (met|MISSED)$' "$OUTDIR/numa-$n-$run.log" | sed "s/^/  run $run: /"
    done
  done
} | tee "$OUTDIR/summary.txt"
exit $status
