#!/usr/bin/env bash
# Round 9's floor experiment (README.md beside it), about a minute on the
# GPU machine: rect-bench --small against this tree's library (lib) and the
# same library with floor.patch (floor: a small blocking rect or image write
# goes to the driver without identifying the pool), alternating, PROCS
# processes each.
#   OUTDIR=build/floor PROCS=3 docs/benchmarks/h100/round9/call-floor.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
cd "$root" || exit 1
OUTDIR=${OUTDIR:-build/floor}
PROCS=${PROCS:-3}
PLATFORM=${PLATFORM:-NVIDIA}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=ci/nvidia-icd.sh
source ci/nvidia-icd.sh
src=$(mktemp -d)
tar --exclude=./build --exclude=./.deb --exclude=./.ab --exclude=./.git -cf - . | tar -x -C "$src"
(cd "$src" && patch -p1 -s <"$here/floor.patch") || exit 1
opts=(-DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF)
cmake -S "$root" -B "$OUTDIR/lib" "${opts[@]}" -DCLPIN_BUILD_BENCH=ON >/dev/null &&
  cmake --build "$OUTDIR/lib" --target clpin rect-bench -j "$(nproc)" >/dev/null || exit 1
cmake -S "$src" -B "$OUTDIR/floor" "${opts[@]}" >/dev/null &&
  cmake --build "$OUTDIR/floor" --target clpin -j "$(nproc)" >/dev/null || exit 1
for p in $(seq "$PROCS"); do
  for v in lib floor; do
    LD_LIBRARY_PATH="$OUTDIR/$v" "$OUTDIR/lib/bench/rect-bench" --platform "$PLATFORM" --small \
      --runs 7 >"$OUTDIR/small-$v-$p.txt" 2>&1
  done
done
for v in lib floor; do
  echo "== $v"
  grep -hE 'write.*(clpin / plain|A/A|per call)' "$OUTDIR"/small-"$v"-[0-9]*.txt
done >"$OUTDIR/small-summary.txt"
rm -rf "$src"
exit 0
