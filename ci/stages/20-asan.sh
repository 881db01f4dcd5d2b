#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole CTest suite built with AddressSanitizer + UndefinedBehaviorSanitizer
# (Debug, so idle pool blocks are poisoned and check_poison runs).
# POCL and LLVM are not instrumented; see docs/RELIABILITY.md for what that
# means and for the leak suppressions (POCL's and rusticl's own libraries).
set -euo pipefail
root=$PWD
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DCLPIN_SANITIZE=address,undefined \
  -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build build/asan -j "${JOBS:-2}"
# Leak checking stays on (the default on Linux); any report makes the test
# process exit non-zero, so the Check test fails.
# Each suite runs its cases in one process (CK_FORK=no; 10-unit keeps
# Check's process a case, and the fault sweeps always fork: tests/faults.cmake),
# so state one case leaves behind meets the next under the sanitizers;
# check_fork forks 300 times (1000 in 10-unit) and check_topo's footprint
# rounds run 50 times, not 200 (blocks of up to 1 GiB: the sanitizer's cost
# grows with the bytes).
export CK_FORK=no FORK_ROUNDS=300 TOPO_ROUNDS=50
export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_string_checks=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$root/tests/suppressions/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
status=0
ctest --test-dir build/asan --output-on-failure -j "${JOBS:-2}" --timeout 900 || status=$?
bash ci/ctest-summary.sh 20-asan build/asan/Testing/Temporary/LastTest.log
exit $status
