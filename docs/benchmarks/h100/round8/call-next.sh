#!/usr/bin/env bash
# For the next round's device call (README.md beside this file), about a
# minute on the GPU machine: copy-after-dma (run-copy.sh), then rect-bench
# --small against three libraries, alternating, PROCS processes each:
#   lib     this tree
#   sw      this tree + small-write.patch (blocking writes of 16 KiB to
#           256 KiB through one pool block, rows copied by memcpy)
#   sw-nt   the same library with CLPIN_STREAM_MIN=4K (rows copied with
#           streaming stores)
#   OUTDIR=build/next PROCS=3 docs/benchmarks/h100/round8/call-next.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
cd "$root" || exit 1
OUTDIR=${OUTDIR:-build/next}
PROCS=${PROCS:-3}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
src=$(mktemp -d)
tar --exclude=./build --exclude=./.deb --exclude=./.ab --exclude=./.git -cf - . | tar -x -C "$src"
(cd "$src" && patch -p1 -s <"$here/small-write.patch") || exit 1
opts=(-DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF)
cmake -S "$root" -B "$OUTDIR/lib" "${opts[@]}" -DCLPIN_BUILD_BENCH=ON >/dev/null &&
  cmake --build "$OUTDIR/lib" --target clpin rect-bench -j "$(nproc)" >/dev/null || exit 1
cmake -S "$src" -B "$OUTDIR/sw" "${opts[@]}" >/dev/null &&
  cmake --build "$OUTDIR/sw" --target clpin -j "$(nproc)" >/dev/null || exit 1
bench=$OUTDIR/lib/bench/rect-bench
LIB=$OUTDIR/lib PROCS=2 OUTDIR="$OUTDIR/copy" "$here/run-copy.sh" >"$OUTDIR/copy.out" 2>&1
for p in $(seq "$PROCS"); do
  for v in lib sw sw-nt; do
    lib=$OUTDIR/${v%-nt}
    env=()
    [ "$v" = sw-nt ] && env=(CLPIN_STREAM_MIN=4K)
    env "${env[@]}" LD_LIBRARY_PATH="$lib" "$bench" --platform NVIDIA --small --runs 7 \
      >"$OUTDIR/small-$v-$p.txt" 2>&1
  done
done
for v in lib sw sw-nt; do
  echo "== $v"
  grep -hE 'write.*(clpin / plain|A/A|per call)' "$OUTDIR"/small-"$v"-[0-9]*.txt
done >"$OUTDIR/small-summary.txt"
exit 0
