#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of the shared library: clpin-bench of this tree, run alternately
# against this tree's libclpin.so (B) and against one built from another
# source tree (A: OLD_SRC, e.g. `git archive <rev> | tar -x -C .ab/old`),
# RUNS processes each, so a change to the library is compared on one machine
# in one session. The benches use only the public API, so any libclpin.so
# of the same ABI serves.
#
#   OLD_SRC=.ab/old RUNS=3 AB_ARGS="--platform NVIDIA --case transfer --sizes 64M,1G" \
#     OUTDIR=build/gpu-ab bench/gpu-ab.sh
#
# AB_ARGS defaults to the staged transfer figures (`--case transfer --sizes
# 64M,1G`, its targets table). AB_BENCH=engine-bench (non-blocking, duplex,
# several writers) or rect-bench runs that bench instead (public API only
# too); AB_GREP (default: clpin-bench's target rows " met|MISSED" at the
# end, engine-bench's "TARGET", rect-bench's "target >=|per call") picks the
# summary's lines.
#
# Output: $OUTDIR/ab-{A,B}-K.log and ab-summary.txt, each picked line of
# every run under its side.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUTDIR=${OUTDIR:-build/gpu-ab}
RUNS=${RUNS:-3}
AB_BENCH=${AB_BENCH:-clpin-bench}
case $AB_BENCH in
clpin-bench) AB_GREP=${AB_GREP:- (met|MISSED)$} AB_ARGS=${AB_ARGS:---case transfer --sizes 64M,1G} ;;
engine-bench) AB_GREP=${AB_GREP:-TARGET} AB_ARGS=${AB_ARGS:---runs 5} ;;
rect-bench) AB_GREP=${AB_GREP:-target >=|per call} AB_ARGS=${AB_ARGS:---runs 5} ;;
*)
  echo "gpu-ab: AB_BENCH must be clpin-bench, engine-bench or rect-bench" >&2
  exit 2
  ;;
esac
: "${OLD_SRC:?OLD_SRC names the source tree of side A}"
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_outdir OUTDIR
# Side A is the library alone, built from its own tree.
cmake -S "$OLD_SRC" -B build/ab-A -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF >/dev/null &&
  cmake --build build/ab-A --target clpin -j "$(nproc)" >/dev/null || exit 1
bench_build build/ab-B clpin "$AB_BENCH" || exit 1
bench=build/ab-B/bench/$AB_BENCH
libA=$(cd build/ab-A && pwd) libB=$(cd build/ab-B && pwd)
# Across a SONAME change (0.2's libclpin.so.0, 0.3's libclpin.so.0.3) the
# bench asks for B's name: side A answers it with A's library.
sonameA=$(readelf -d "$libA/libclpin.so" | sed -nE 's/.*SONAME.*\[(.*)\]/\1/p')
sonameB=$(readelf -d "$libB/libclpin.so" | sed -nE 's/.*SONAME.*\[(.*)\]/\1/p')
[ "$sonameA" = "$sonameB" ] || ln -sf "$sonameA" "$libA/$sonameB"
# Which library each side really loads (LD_LIBRARY_PATH must beat the
# bench's RUNPATH).
for side in A B; do
  dir=libA
  [ "$side" = B ] && dir=libB
  echo "side $side: $(LD_LIBRARY_PATH=${!dir} ldd "$bench" | grep libclpin)"
done | tee "$OUTDIR/ab-summary.txt"
status=0
for run in $(seq "$RUNS"); do
  # shellcheck disable=SC2086 # AB_ARGS is a list of options
  LD_LIBRARY_PATH=$libA "$bench" $AB_ARGS >"$OUTDIR/ab-A-$run.log" 2>&1 || status=1
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH=$libB "$bench" $AB_ARGS >"$OUTDIR/ab-B-$run.log" 2>&1 || status=1
done
{
  for side in A B; do
    echo "== side $side"
    for run in $(seq "$RUNS"); do
      grep -E "$AB_GREP" "$OUTDIR/ab-$side-$run.log" | sed "s/^/  run $run: /"
    done
  done
} | tee -a "$OUTDIR/ab-summary.txt"
exit $status
