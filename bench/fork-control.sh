#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Is a hang of a forked child in the sanitizer's allocator the runtime's or
# clpin's? (issue 23; docs/BENCHMARKS.md, "Fork under the sanitizers".)
# Runs, in the AddressSanitizer and ThreadSanitizer builds of the asan and
# tsan stages, RUNS alternating runs of FORKS forks each of
#   check_fork  (forks_while_busy: four threads use clpin), and
#   fork_control (the same fork pattern, no clpin: tests/fork_control.c),
# and prints per run and in total: forks, children hung, how many of them
# in the sanitizer runtime's allocator, children that exited late (after
# 5 s, by themselves: slow, not hung), and each hang's frames.
# Usage: bench/fork-control.sh        RUNS=5 FORKS=1000 BUILDS="asan tsan"
# FORK_CONTROL_SMALL=k (the environment) makes the control's thread 0 also
# allocate and free k tiny blocks at once per round (tests/fork_control.c).
# The raw output of every run goes to build/fork-control/.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
RUNS=${RUNS:-5}
FORKS=${FORKS:-1000}
BUILDS=${BUILDS:-asan tsan}
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$root/build/pocl-cache}
mkdir -p "$POCL_CACHE_DIR" build/fork-control
# The options of ci/stages/20-asan.sh and 21-tsan.sh.
export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_string_checks=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$root/tests/suppressions/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/suppressions/tsan.supp:${TSAN_OPTIONS:-}"
command -v gdb >/dev/null || echo "fork-control: no gdb: hangs cannot be told apart" >&2

for build in $BUILDS; do
  case $build in
  asan) san=address,undefined ;;
  tsan) san=thread ;;
  *) echo "fork-control: unknown build $build" >&2; exit 2 ;;
  esac
  cmake -S . -B "build/$build" -DCMAKE_BUILD_TYPE=Debug -DCLPIN_SANITIZE=$san \
    -DCMAKE_C_FLAGS="-Werror" >/dev/null || exit 2
  cmake --build "build/$build" -j "${JOBS:-2}" --target check_fork fork_control >/dev/null || exit 2
done

declare -A forks hung rt late
for build in $BUILDS; do
  for prog in check_fork fork_control; do
    forks[$build.$prog]=0 hung[$build.$prog]=0 rt[$build.$prog]=0 late[$build.$prog]=0
  done
done
printf '%-5s %-12s %4s %6s %5s %9s %5s %7s\n' build program run forks hung allocator late seconds
for ((r = 1; r <= RUNS; r++)); do
  for build in $BUILDS; do
    for prog in check_fork fork_control; do
      log=build/fork-control/$build-$prog-$r.log
      start=$SECONDS
      if [ $prog = check_fork ]; then
        FORK_ROUNDS=$FORKS CK_RUN_CASE=busy "build/$build/tests/check_fork" >"$log" 2>&1
        line=$(grep -a '^fork: ' "$log" | tail -1)
        # "fork: N forks ... : H hung, F failed, ...; R hung in the sanitizer ..."
        h=$(sed -n 's/.*: \([0-9]*\) hung, .*/\1/p' <<<"$line")
        a=$(sed -n 's/.*; \([0-9]*\) hung in the sanitizer.*/\1/p' <<<"$line")
        h=$((${h:-0} + ${a:-0}))
      else
        "build/$build/tests/fork_control" "$FORKS" >"$log" 2>&1
        line=$(grep -a '^fork_control: [0-9]* forks' "$log" | tail -1)
        h=$(sed -n 's/.*: \([0-9]*\) hung (.*/\1/p' <<<"$line")
        a=$(sed -n 's/.*hung (\([0-9]*\) in the sanitizer.*/\1/p' <<<"$line")
      fi
      l=$(sed -n 's/.* \([0-9]*\) exited late.*/\1/p' <<<"$line")
      if [ -z "$line" ]; then
        echo "fork-control: $prog ($build) run $r printed no summary: see $log" >&2
        continue
      fi
      forks[$build.$prog]=$((forks[$build.$prog] + FORKS))
      hung[$build.$prog]=$((hung[$build.$prog] + h))
      rt[$build.$prog]=$((rt[$build.$prog] + ${a:-0}))
      late[$build.$prog]=$((late[$build.$prog] + ${l:-0}))
      printf '%-5s %-12s %4d %6d %5d %9d %5d %7d\n' "$build" "$prog" "$r" "$FORKS" "$h" "${a:-0}" \
        "${l:-0}" $((SECONDS - start))
      grep -a 'hung in ' "$log" | grep -v '^fork: [0-9]* forks' | sed 's/^/      /'
    done
  done
done
echo "total:"
for build in $BUILDS; do
  for prog in check_fork fork_control; do
    printf '%-5s %-12s forks %6d  hung %4d  in the allocator %4d  late %4d\n' "$build" "$prog" \
      "${forks[$build.$prog]}" "${hung[$build.$prog]}" "${rt[$build.$prog]}" "${late[$build.$prog]}"
  done
done
