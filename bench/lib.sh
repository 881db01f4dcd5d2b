# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by every bench script (bench/gpu-*.sh, bench/pocl-unified.sh) from
# the repository root. It brings bench/nvidia-icd.sh (the ICD, the CUDA
# runtime, gpu_counts, ocl_icd_from_deb) and:
#   bench_build DIR [-DOPTION=VALUE...] TARGET...
#       configure DIR as a Release build of the benches (tests and examples
#       off, the options given added) and build TARGET... on every core
#   bench_machine
#       the machine's facts on stdout, for a run's machine.txt: date, commit,
#       kernel, CPUs, memory, compiler, GPUs and the CUDA runtime found
#   bench_outdir VAR
#       make the folder named by $VAR, and set VAR to its absolute path
# shellcheck source=bench/nvidia-icd.sh
source bench/nvidia-icd.sh

bench_build() {
  local dir=$1 opts=() targets=()
  shift
  for a in "$@"; do
    case $a in
      -D*) opts+=("$a") ;;
      *) targets+=("$a") ;;
    esac
  done
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
    -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON "${opts[@]}" >/dev/null &&
    cmake --build "$dir" --target "${targets[@]}" -j "$(nproc)" >/dev/null
}

bench_machine() {
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  uname -srm
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|NUMA)' || true
  echo "nproc: $(nproc)"
  grep MemTotal /proc/meminfo || true
  cc --version 2>/dev/null | head -n 1
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks.sm,clocks.mem \
    --format=csv 2>/dev/null || true
  echo "CUDA runtime for the baselines: ${CLPIN_BENCH_CUDART:-found by the dynamic loader}"
}

bench_outdir() {
  mkdir -p "${!1}"
  printf -v "$1" '%s' "$(cd "${!1}" && pwd)"
}
