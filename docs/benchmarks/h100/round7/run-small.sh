#!/usr/bin/env bash
# Round 7's small-read runs (README.md beside this file): small-read.c
# against the library of this tree, and against it plus small-trace.patch
# (small_read's phases timed), PROCS processes each, alternating.
#   PROCS=2 OUTDIR=build/small docs/benchmarks/h100/round7/run-small.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
cd "$root" || exit 1
OUTDIR=${OUTDIR:-build/small}
PROCS=${PROCS:-2}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
src=$(mktemp -d)
tar --exclude=./build --exclude=./.deb --exclude=./.ab --exclude=./.git -cf - . | tar -x -C "$src"
(cd "$src" && { patch -p1 -s <"$here/small-trace.patch" || git apply "$here/small-trace.patch"; }) ||
  exit 1
opts=(-DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF)
for v in lib trace; do
  s=$root
  [ "$v" = trace ] && s=$src
  cmake -S "$s" -B "$OUTDIR/$v" "${opts[@]}" >/dev/null &&
    cmake --build "$OUTDIR/$v" --target clpin -j "$(nproc)" >/dev/null || exit 1
done
gcc -O2 -I"$root/include" "$here/small-read.c" -o "$OUTDIR/small-read" -L"$OUTDIR/lib" -lclpin \
  -lOpenCL || exit 1
for p in $(seq "$PROCS"); do
  for v in lib trace; do
    echo "== process $p, library $v"
    LD_LIBRARY_PATH="$OUTDIR/$v" "$OUTDIR/small-read" NVIDIA 2>&1
  done
done | tee "$OUTDIR/small-read.txt"
