#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole CTest suite built with ThreadSanitizer. POCL is not instrumented,
# but it synchronises through pthread mutexes and condition variables, which
# TSan intercepts, so the happens-before edges of event callbacks run on
# POCL's threads are seen (checked: docs/RELIABILITY.md).
set -euo pipefail
root=$PWD
cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DCLPIN_SANITIZE=thread \
  -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build build/tsan -j "${JOBS:-2}"
# One suppression file for every TSan run: a lock-order inversion between
# two of POCL's own mutexes (tests/suppressions/tsan.supp says where). The
# tests set no TSAN_OPTIONS of their own, so these apply to all of them.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/suppressions/tsan.supp:${TSAN_OPTIONS:-}"
# What TSan adds is races, not more of the same paths: the fault sweeps
# fault a sample of each entry's calls (the first two, the last, every third;
# every call in 10-unit and 20-asan), check_fork forks 300 times (1000 in
# 10-unit), and the benchmarks' smoke runs (label bench: a bench's own paths,
# through library calls the suites cover) stay in 10-unit and 20-asan.
# Each suite runs its cases in one process (CK_FORK=no, as 20-asan and
# 22-valgrind do; 10-unit keeps Check's process a case): a fork under TSan
# costs about a second, most of this stage's time when every case forked.
# The fault sweeps fork all the same (tests/faults.cmake says why).
# check_topo's footprint rounds (blocks of up to 1 GiB) run 50 times, not
# 200, here and in 20-asan: a sanitizer's cost grows with the bytes.
export CLPIN_FAULTS_EVERY=3 FORK_ROUNDS=300 CK_FORK=no TOPO_ROUNDS=50
status=0
ctest --test-dir build/tsan --output-on-failure -j "${JOBS:-2}" --timeout 900 -LE '^bench$' ||
  status=$?
bash ci/ctest-summary.sh 21-tsan build/tsan/Testing/Temporary/LastTest.log
exit $status
