#!/usr/bin/env bash
# copy-after-dma.c (README.md beside this file) against the library of this
# tree, PROCS processes, on the platform named PLATFORM (default NVIDIA).
#   PROCS=3 OUTDIR=build/copy docs/benchmarks/h100/round8/run-copy.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
cd "$root" || exit 1
OUTDIR=${OUTDIR:-build/copy}
PROCS=${PROCS:-3}
PLATFORM=${PLATFORM:-NVIDIA}
# PROG_SRC: another probe built and run the same way (round9/run-probe.sh).
src=${PROG_SRC:-$here/copy-after-dma.c}
prog=$(basename "$src" .c)
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
# LIB: a folder with this tree's libclpin.so already built (call-next.sh
# passes its own); otherwise it is built here.
lib=${LIB:-$OUTDIR/lib}
if [ -z "${LIB:-}" ]; then
  cmake -S "$root" -B "$lib" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
    -DCLPIN_BUILD_EXAMPLES=OFF >/dev/null &&
    cmake --build "$lib" --target clpin -j "$(nproc)" >/dev/null || exit 1
fi
gcc -O2 -I"$root/include" -I"$root/bench" -I"$root/src" -o "$OUTDIR/$prog" \
  "$src" "$root/bench/benchcl.c" "$root/bench/benchstat.c" "$root/src/size.c" \
  -L"$lib" -lclpin -lOpenCL -lm || exit 1
for p in $(seq "$PROCS"); do
  echo "== process $p"
  LD_LIBRARY_PATH="$lib" "$OUTDIR/$prog" "$PLATFORM" 2>&1
done | tee "$OUTDIR/$prog.txt"
