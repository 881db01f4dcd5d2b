#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The API fuzzer (tests/fuzz/fuzz_api.c): a clang build with libFuzzer, ASan
# and UBSan (the library itself built with coverage instrumentation), the
# regression inputs and the seed corpus replayed first, then a bounded fuzzing
# run from the seed corpus. A crash leaves its input in build/fuzz/artifacts/:
# copy it to tests/fuzz/regressions/ once fixed (docs/RELIABILITY.md).
# CLPIN_FUZZ_SECONDS (default 120) bounds the run.
set -euo pipefail
command -v clang >/dev/null || { echo "40-fuzz: clang is required (ci/deps.sh installs it)"; exit 1; }
build=build/fuzz
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCLPIN_SANITIZE=address,undefined \
  -DCMAKE_C_FLAGS="-Werror -fsanitize=fuzzer-no-link" \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target fuzz_api fuzz_replay
# POCL keeps allocations past exit that LeakSanitizer would report; the
# harness's own leaks are caught by its model (every buffer accounted for).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The replay's per-input lines and libFuzzer's progress output go to log
# files, printed only when the step fails; the stage ends with one summary.
replay_log=$build/replay.log fuzz_log=$build/fuzz.log
if ! "$build/tests/fuzz_replay" tests/fuzz/regressions tests/fuzz/corpus >"$replay_log" 2>&1; then
  cat "$replay_log"
  echo "40-fuzz: replaying the regression inputs and the seed corpus failed" >&2
  exit 1
fi
replayed=$(grep -c '^fuzz_replay: .* bytes)$' "$replay_log" || true)
corpus="$build/corpus"
mkdir -p "$corpus" "$build/artifacts"
cp tests/fuzz/corpus/* "$corpus/"
if ! "$build/tests/fuzz_api" -max_total_time="${CLPIN_FUZZ_SECONDS:-120}" -timeout=30 \
  -max_len=2048 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build/artifacts/" \
  "$corpus" >"$fuzz_log" 2>&1; then
  cat "$fuzz_log"
  echo "40-fuzz: the fuzzer found a failure; its input is in $build/artifacts/" >&2
  exit 1
fi
runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$fuzz_log" | tail -n1)
echo "40-fuzz: summary: $replayed inputs replayed, ${runs:-0} fuzz runs in ${CLPIN_FUZZ_SECONDS:-120} s," \
  "$(find "$corpus" -type f | wc -l) corpus inputs; logs: $replay_log, $fuzz_log"
