# SPDX-License-Identifier: Apache-2.0
# Shared by the host-side bench scripts (bench/pocl-*.sh): source it after
# setting OUTDIR and BUILD_DIR, then call host_bench_setup TARGET: OUTDIR
# made absolute, the machine recorded in $OUTDIR/machine.txt, and TARGET
# built in BUILD_DIR (Release, bench only).
host_bench_setup() {
  mkdir -p "$OUTDIR"
  OUTDIR=$(cd "$OUTDIR" && pwd)
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    uname -srm
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|NUMA)' || true
    echo "nproc: $(nproc)"
  } 2>&1 | tee "$OUTDIR/machine.txt"
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
    -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
  cmake --build "$BUILD_DIR" --target "$1" -j "$(nproc)" >/dev/null
}
