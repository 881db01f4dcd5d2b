#!/usr/bin/env bash
# Round 7's read-pipeline trace (docs/benchmarks/h100/round7/README.md): the
# library built from this tree plus trace.patch in variants (-D flags of the
# patch: NSLOTS, the staging slots; SPIN_NS, how long an idle copy thread
# polls before it sleeps), and pipe-trace.c's staged 64 MiB reads under
# CLPIN_CHUNK settings, the variants alternating, ROUNDS times.
#
#   VARIANTS="base:  spin2ms:-DSPIN_NS=2000000 slots8:-DNSLOTS=8" CHUNKS="2M 8M" \
#     SIZES="64 256" ROUNDS=2 RUNS=3 OUTDIR=build/trace docs/benchmarks/h100/round7/run-trace.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
cd "$root" || exit 1
OUTDIR=${OUTDIR:-build/trace}
VARIANTS=${VARIANTS:-base: spin2ms:-DSPIN_NS=2000000 slots8:-DNSLOTS=8}
CHUNKS=${CHUNKS:-2M 8M}
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-3}
SIZES=${SIZES:-64}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
src=$(mktemp -d)
tar --exclude=./build --exclude=./.deb --exclude=./.ab --exclude=./.git -cf - . | tar -x -C "$src"
(cd "$src" && { patch -p1 -s <"$here/trace.patch" || git apply "$here/trace.patch"; }) || exit 1
for v in $VARIANTS; do
  name=${v%%:*} flags=${v#*:}
  cmake -S "$src" -B "$OUTDIR/lib-$name" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
    -DCLPIN_BUILD_EXAMPLES=OFF -DCMAKE_C_FLAGS="$flags" >/dev/null &&
    cmake --build "$OUTDIR/lib-$name" --target clpin -j "$(nproc)" >/dev/null || exit 1
done
first=${VARIANTS%%:*}
gcc -O2 -I"$root/include" "$here/pipe-trace.c" -o "$OUTDIR/pipe-trace" \
  -L"$OUTDIR/lib-$first" -lclpin -lOpenCL || exit 1
for round in $(seq "$ROUNDS"); do
  for c in $CHUNKS; do
    for v in $VARIANTS; do
      name=${v%%:*}
      for mib in $SIZES; do
        echo "== round $round CLPIN_CHUNK=$c variant $name $mib MiB"
        CLPIN_CHUNK=$c LD_LIBRARY_PATH="$OUTDIR/lib-$name" "$OUTDIR/pipe-trace" "$RUNS" "$mib" 2>&1
      done
    done
  done
done | tee "$OUTDIR/trace.txt"
