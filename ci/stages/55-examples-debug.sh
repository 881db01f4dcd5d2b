#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every example (each CTest test labelled "examples") run with CLPIN_DEBUG=2:
# prints every path decision and pool event a user can see, and checks that
# the log says what the examples do (quickstart: a pool miss, then a hit for
# the same size; a transfer from pinned memory taking the direct path).
set -euo pipefail
JOBS=${JOBS:-2}
build=build/unit # the same configuration as stage 10-unit: reused when built
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build "$build" -j "$JOBS"
logs=$build/examples-debug
rm -rf "$logs"
mkdir -p "$logs"
fail() { echo "55-examples-debug: $*" >&2; exit 1; }

mapfile -t tests < <(ctest --test-dir "$build" -N -L '^examples$' | sed -nE 's/^ *Test +#[0-9]+: +(.*)$/\1/p')
((${#tests[@]})) || fail "no CTest test is labelled examples"
for t in "${tests[@]}"; do
  echo "--- $t (CLPIN_DEBUG=2)"
  # CLPIN_PINNED_H2D=1 and CLPIN_STAGE_MIN=0: stage on POCL too and at the
  # examples' small sizes (by default neither stages), so the logs show the
  # staged paths.
  if ! CLPIN_DEBUG=2 CLPIN_PINNED_H2D=1 CLPIN_STAGE_MIN=0 CLPIN_STAGE_MIN_H2D=0 ctest --test-dir "$build" -R "^$t\$" -V --timeout 600 >"$logs/$t.full" 2>&1; then
    cat "$logs/$t.full"
    fail "$t failed with CLPIN_DEBUG=2"
  fi
  # ctest -V prefixes the test's own output with "<number>: ".
  sed -nE 's/^[0-9]+: (.*)$/\1/p' "$logs/$t.full" | grep -v -E '^Test command:|^Environment variables:|^Test timeout' >"$logs/$t.log" || true
  grep '^clpin: ' "$logs/$t.log" >"$logs/$t.clpin" || fail "$t printed no clpin: debug line"
  total=$(wc -l <"$logs/$t.clpin")
  # What a user sees: the first lines in order, then how often each kind of
  # line occurred (numbers stripped so repeated decisions group together).
  head -n 25 "$logs/$t.clpin"
  ((total <= 25)) || echo "    ... $((total - 25)) more"
  echo "    summary of $total lines:"
  sed -E 's/0x[0-9a-f]+/PTR/g; s/[0-9]+/N/g' "$logs/$t.clpin" | sort | uniq -c | sort -rn | head -n 12
done

# The quickstart's story, in its log: the first acquire of a size misses,
# the same size again hits; sending from a block is the direct path.
# (The patterns follow the wording of clpin__log in pool.c and staging.c.)
q=$logs/example_quickstart.clpin
[ -s "$q" ] || fail "example_quickstart did not run"
miss=$(grep -n -i -m1 -E 'miss' "$q" | cut -d: -f1 || true)
hit=$(grep -n -i -E '\bhit\b' "$q" | tail -n1 | cut -d: -f1 || true)
[ -n "$miss" ] || fail "quickstart's log shows no pool miss"
[ -n "$hit" ] || fail "quickstart's log shows no pool hit"
((miss < hit)) || fail "quickstart's log shows no miss before a hit"
grep -q -i -E 'already pinned|straight to DMA|pinned.direct' "$q" || fail "quickstart's log shows no transfer from already pinned memory"
# CLBlast's inputs: A (malloc'ed) is staged through the pool, C comes back
# into clpin_host_alloc memory without a host copy.
c=$logs/example_clblast_gemm.clpin
if [ -e "$c" ]; then
  grep -q -E '^clpin: write [0-9]+ bytes: (staged|pipelined)' "$c" || fail "clblast_gemm's log shows no staged write"
  grep -q -E '^clpin: read [0-9]+ bytes: already pinned' "$c" || fail "clblast_gemm's log shows no direct read into pinned memory"
fi
echo "55-examples-debug: ${#tests[@]} examples ran with CLPIN_DEBUG=2; logs in $logs"
