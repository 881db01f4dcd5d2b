#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real client's own test suite under the layer: CLBlast's test programs
# (Debian's clblast-tests) on POCL, each run without and then with
# libclpin-layer.so, staging forced on (CLPIN_PINNED_H2D=1 and the minimums
# low) so their transfers go through clpin. Each program must report the
# same passed/skipped/failed counts in both runs, and the layer's stats
# (CLPIN_LAYER_STATS=1) must show the transfers it routed through clpin.
# The subset: CLBLAST_TESTS (default: xaxpy xcopy xdot xgemv xtrsv xgemm),
# at the programs' default sizes (they have no option to shrink them).
# Time on 2 cores: about 2 minutes with a warm POCL cache
# (build/clblast/pocl-cache), about 7 the first time, when POCL compiles
# CLBlast's kernels (xgemm's alone take 4-5 minutes, once).
set -euo pipefail
JOBS=${JOBS:-2}
build=build/clblast
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-Werror" \
  -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$JOBS" --target clpin-layer >/dev/null
layer=$PWD/$build/layer/libclpin-layer.so
logs=$PWD/$build/logs
rm -rf "$logs"
mkdir -p "$logs"
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/$build/pocl-cache}
read -r -a tests <<<"${CLBLAST_TESTS:-xaxpy xcopy xdot xgemv xtrsv xgemm}"
fail() { echo "37-clblast-layer: $*" >&2; status=1; }
status=0 routed_total=0 passed_total=0
# counts LOG: "passed skipped failed", summed over the program's routines.
counts() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
    /test\(s\) passed/ { p += $1 } /test\(s\) skipped/ { s += $1 } /test\(s\) failed/ { f += $1 }
    END { printf "%d %d %d\n", p, s, f }'
}
start=$SECONDS
for t in "${tests[@]}"; do
  prog=$(command -v "clblast_test_$t") || { fail "clblast_test_$t not found (ci/deps.sh installs clblast-tests)"; continue; }
  t0=$SECONDS
  rc_plain=0
  timeout 900 "$prog" >"$logs/$t.plain.log" 2>&1 || rc_plain=$?
  t1=$SECONDS
  rc_layer=0
  env OPENCL_LAYERS="$layer" CLPIN_LAYER_STATS=1 CLPIN_PINNED_H2D=1 CLPIN_LAYER_MIN=1 \
    CLPIN_STAGE_MIN=0 CLPIN_STAGE_MIN_H2D=0 timeout 900 "$prog" >"$logs/$t.layer.log" 2>&1 || rc_layer=$?
  t2=$SECONDS
  plain=$(counts "$logs/$t.plain.log") layered=$(counts "$logs/$t.layer.log")
  routed=$(sed -n 's/^clpin-layer: stats: \(write\|read \) through clpin *\([0-9]*\) calls.*/\2/p' \
    "$logs/$t.layer.log" | awk '{n += $1} END {print n + 0}')
  line="$t: passed/skipped/failed $(echo "$plain" | tr ' ' /) without the layer ($((t1 - t0)) s)," \
  line+=" $(echo "$layered" | tr ' ' /) with it ($((t2 - t1)) s), $routed transfers through clpin"
  echo "37-clblast-layer: $line"
  # The layer's own count, the rows with calls in them.
  grep '^clpin-layer: stats' "$logs/$t.layer.log" | grep -v ' 0 calls' | sed 's/^/    /' || true
  if [ "$rc_plain" != "$rc_layer" ]; then
    fail "$t exits $rc_plain without the layer, $rc_layer with it"
  fi
  if [ "$plain" != "$layered" ]; then
    fail "$t: the counts differ"
  fi
  [ "${plain%% *}" -gt 0 ] || fail "$t passed no test"
  ((routed > 0)) || { fail "$t: the layer routed nothing through clpin"; grep '^clpin-layer: stats' "$logs/$t.layer.log" >&2 || true; }
  routed_total=$((routed_total + routed))
  passed_total=$((passed_total + ${plain%% *}))
done
[ $status = 0 ] || exit 1
echo "37-clblast-layer: summary: ${#tests[@]} CLBlast test programs, $passed_total tests passed without and with the layer (same counts), $routed_total transfers through clpin; $((SECONDS - start)) s"
