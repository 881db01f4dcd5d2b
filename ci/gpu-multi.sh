#!/usr/bin/env bash
# Measure clpin on a host with several GPUs (issue 22): the machine (GPUs,
# PCIe links, NUMA nodes, which node each GPU hangs off), then
# bench/multi-bench: the host's memory bandwidth per node; N = 1, 2, 4, 8
# GPUs at once with one context per GPU and with one context for all, pool /
# registered / staged memory against CUDA pinned; each GPU fed from each
# node. The layout case runs in alternating processes with CLPIN_NUMA=$NUMA_ON
# (default auto) and CLPIN_NUMA=0, and the summary compares their medians.
# NUMA_ON=1 on a one-node host places even a GPU that names no node (a VM's)
# on that node: pool blocks are then clpin's own memory bound with mbind and
# handed to the driver as CL_MEM_USE_HOST_PTR, measured against the unplaced
# pool's CL_MEM_ALLOC_HOST_PTR blocks.
#
#   ci/gpu-multi.sh [extra multi-bench options...]
#
# Environment: OUTDIR (default build/gpu-multi), BUILD_DIR (default
# build/gpu), PROCS (processes per CLPIN_NUMA setting, default 2),
# PLATFORM (default NVIDIA).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/gpu-multi}
BUILD_DIR=${BUILD_DIR:-build/gpu}
PROCS=${PROCS:-2}
PLATFORM=${PLATFORM:-NVIDIA}
NUMA_ON=${NUMA_ON:-auto}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
if [ -z "${CLPIN_BENCH_CUDART:-}" ] && ! ldconfig -p | grep -q 'libcudart\.so'; then
  f=$(find /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name 'libcudart.so*' 2>/dev/null | head -n 1)
  [ -z "$f" ] || export CLPIN_BENCH_CUDART=$f
fi
export CUDA_DEVICE_ORDER=PCI_BUS_ID

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  uname -srm
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|NUMA)' || true
  grep MemTotal /proc/meminfo || true
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv 2>/dev/null || true
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
} 2>&1 | tee "$OUTDIR/machine.txt"

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" --target multi-bench -j "$(nproc)" >/dev/null
bench="$BUILD_DIR/bench/multi-bench"

"$bench" --platform "$PLATFORM" --case memcpy,numa "$@" 2>&1 | tee "$OUTDIR/memcpy-numa.log"
for p in $(seq 1 "$PROCS"); do
  for numa in "$NUMA_ON" 0; do
    echo "=== layout, CLPIN_NUMA=$numa, process $p"
    CLPIN_NUMA=$numa "$bench" --platform "$PLATFORM" --case memcpy,layout "$@" 2>&1 |
      tee "$OUTDIR/layout-numa-$numa-$p.log"
  done
done

# Issue 24's aggregate target on real devices: staged transfers to two
# devices of one context at once against one after the other.
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ]; then
  cmake --build "$BUILD_DIR" --target multidev-bench -j "$(nproc)" >/dev/null
  "$BUILD_DIR/bench/multidev-bench" --platform "$PLATFORM" --devices 2 --runs 7 2>&1 |
    tee "$OUTDIR/multidev.log"
fi

# CLPIN_NUMA=$NUMA_ON against 0: the ratio of each aggregate line's medians,
# process by process.
echo "=== CLPIN_NUMA=$NUMA_ON / CLPIN_NUMA=0, aggregate medians" | tee "$OUTDIR/summary.txt"
for p in $(seq 1 "$PROCS"); do
  paste -d'|' <(grep -E '^(layout|  .*aggregate)' "$OUTDIR/layout-numa-$NUMA_ON-$p.log") \
    <(grep -E '^(layout|  .*aggregate)' "$OUTDIR/layout-numa-0-$p.log") |
    awk -F'|' -v p="$p" '/^layout/ { split($1, a, ","); hdr = a[1] "," a[2]; next }
      { n = split($1, x, " "); m = split($2, y, " ");
        for (i = 1; i <= n; i++) if (x[i] == "GB/s") va = x[i-1];
        for (i = 1; i <= m; i++) if (y[i] == "GB/s") vb = y[i-1];
        sub(/ +[0-9.]+ GB\/s.*/, "", $1);
        printf "process %s %-40s %-34s on/0 %.3f\n", p, hdr, $1, va / vb }'
done | tee -a "$OUTDIR/summary.txt"
grep -h TARGET "$OUTDIR"/layout-numa-"$NUMA_ON"-*.log | sort | uniq -c | sort -k1,1nr >"$OUTDIR/targets.txt" || true
echo "results in $OUTDIR"
