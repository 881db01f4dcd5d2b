#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clpin on a host with several GPUs (docs/BENCHMARKS.md, "Several GPUs"): every kind of host
# memory against CUDA pinned memory on the same N GPUs at once, and staged
# transfers against the host's measured memcpy bound.
#
# For every GPU count N the machine has (1, 2, 4, ... and the count itself),
# bench/multigpu-bench moves 256 MiB per stream on N GPUs at once, H2D, D2H and
# duplex, from pool memory (clpin_host_alloc), registered memory
# (clpin_host_register) and malloc memory staged by clpin, with one context
# per GPU and with one context for all N, against cudaMemcpyAsync from
# cudaHostAlloc memory on the same N GPUs (matched to the OpenCL devices by
# their whole PCI address: the map is printed first). Each figure is
# measured RUNS times in each of PROCS processes; the summary pools the runs
# of all processes by figure and prints the median, the spread and in how
# many runs each of these targets held:
#   pool / registered, N GPUs        >= 0.95x CUDA pinned on the same N GPUs
#   staged malloc, N GPUs            >= 0.9x min(host memcpy on all cores,
#                                            CUDA pinned on the N GPUs), both
#                                            measured in the same run
#   one context for all / per GPU    >= 0.95x, the two layouts measured in
#                                            turn within each run
#
#   bench/gpu-multi.sh [extra multigpu-bench options...]
#
# Environment: OUT (the run's output folder: summary.txt, machine.txt and
# raw.tar.gz with every log; else OUTDIR, default build/gpu-multi, keeps the
# logs unpacked), BUILD_DIR (default build/gpu), PROCS (default 2), RUNS
# (default 5), COUNTS (default: every count the machine has), PLATFORM
# (default NVIDIA), SKIP_BUILD=1.
# About 4-6 minutes on 4x H100 (64 cores). Without CUDA (libcudart not found,
# or POCL for a dry run) the CUDA figures and their targets are left out and
# the summary says so.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build/gpu}
PROCS=${PROCS:-2}
RUNS=${RUNS:-5}
PLATFORM=${PLATFORM:-NVIDIA}
start=$(date +%s)
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_pack_begin gpu-multi
export CUDA_DEVICE_ORDER=PCI_BUS_ID

{
  bench_machine
  echo "--- nvidia-smi topo -m"
  nvidia-smi topo -m 2>/dev/null || echo "(not available)"
  echo "--- NUMA node of each NVIDIA PCI device (sysfs)"
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
    case "$(cat "$d/class")" in 0x03*) ;; *) continue ;; esac
    echo "$(basename "$d") node $(cat "$d/numa_node")"
  done
  echo "--- nodes"
  for n in /sys/devices/system/node/node*; do
    [ -d "$n" ] && echo "$(basename "$n") cpus $(cat "$n/cpulist")"
  done
} >"$OUTDIR/machine.txt" 2>&1
[ "${SKIP_BUILD:-0}" = 1 ] || bench_build "$BUILD_DIR" multigpu-bench
bench="$BUILD_DIR/bench/multigpu-bench"

# The devices and the OpenCL-to-CUDA map by PCI address.
"$bench" --platform "$PLATFORM" --list "$@" 2>&1 | tee "$OUTDIR/devices.txt" | tee -a "$OUTDIR/machine.txt"
ngpu=$(sed -n 's/^devices: //p' "$OUTDIR/devices.txt")
[ -n "$ngpu" ] && [ "$ngpu" -ge 1 ] || { echo "gpu-multi: no device" >&2; exit 1; }
COUNTS=${COUNTS:-$(gpu_counts "$ngpu")}
echo "gpu-multi: $ngpu device(s), counts $COUNTS, $PROCS process(es) x $RUNS runs, $(nproc) cores" |
  tee -a "$OUTDIR/machine.txt"

# The main processes: the memcpy bound and the layouts,
# each process on its own (nothing else runs meanwhile).
for p in $(seq 1 "$PROCS"); do
  echo "=== process $p: memcpy + layout ($(($(date +%s) - start)) s)"
  "$bench" --platform "$PLATFORM" --case memcpy,layout --counts "$COUNTS" \
    --runs "$RUNS" "$@" >"$OUTDIR/layout-$p.log" 2>&1 || {
    echo "gpu-multi: multigpu-bench failed in process $p:" >&2
    tail -n 20 "$OUTDIR/layout-$p.log" >&2
    exit 1
  }
  grep -E '^(CUDA baseline|layout:|  TARGET)' "$OUTDIR/layout-$p.log" | grep -E 'CUDA|layout|MISSED' || true
done

# ---- summary: every figure pooled over the main processes ------------------
mains=()
for p in $(seq 1 "$PROCS"); do mains+=("$OUTDIR/layout-$p.log"); done
{
  echo "gpu-multi summary: $ngpu device(s), counts $COUNTS, $PROCS process(es) x $RUNS runs pooled"
  echo "(names: Nx ctxs = one context per GPU, Nx 1ctx = one context for all N; rates are aggregate GB/s)"
  grep -h -A$((ngpu + 2)) '^CUDA baseline' "$OUTDIR/devices.txt" | head -n $((ngpu + 4)) || true
  if grep -q '^CUDA baseline: none' "$OUTDIR/devices.txt"; then
    echo "no CUDA: the CUDA pinned figures and the targets against them were not measured;"
    echo "staged rows are held against host memcpy alone"
  fi
  echo
  bench_pool GB/s "${mains[@]}"
  echo
  echo "elapsed: $(($(date +%s) - start)) s"
} >"$OUTDIR/summary.txt"
cat "$OUTDIR/summary.txt"
bench_pack_end
