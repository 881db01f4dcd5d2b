#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Valgrind memcheck on the `unit` suites. Every test runs under valgrind
# through CMake's test emulator hook (CMAKE_CROSSCOMPILING_EMULATOR is
# prepended to each test command; CMake < 3.28 and policy CMP0158 OLD apply
# it also when not cross-compiling), in one process (CK_FORK=no), so
# valgrind sees the test bodies. Any memcheck error or definite/indirect leak
# exits 99 and fails the test. "Possibly lost" blocks are printed but not
# counted: at exit they are the thread-local storage of threads still running
# (POCL's device threads, LLVM's TLS in them, clpin's copy threads when a
# suite does not call clpin_shutdown), not leaks.
set -euo pipefail
root=$PWD
vg="valgrind;--error-exitcode=99;--leak-check=full;--show-leak-kinds=definite,indirect,possible"
vg+=";--errors-for-leak-kinds=definite,indirect"
vg+=";--suppressions=$root/tests/suppressions/valgrind.supp;--num-callers=40;--gen-suppressions=all"
cmake -S . -B build/valgrind -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" \
  -DCLPIN_BUILD_BENCH=OFF -DCLPIN_TEST_TIMEOUT=1500 "-DCMAKE_CROSSCOMPILING_EMULATOR=$vg" >/dev/null
cmake --build build/valgrind -j "${JOBS:-2}"
export CK_FORK=no
# POCL compiles a kernel in ~20 s under valgrind: keep the kernel cache warm.
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$root/build/pocl-cache}
# Suites run 20-50x slower under memcheck: CLPIN_TEST_TIMEOUT (tests/faults.cmake)
# lifts every test's own limit for this build only.
status=0
ctest --test-dir build/valgrind -L unit --output-on-failure -j "${JOBS:-2}" || status=$?
bash ci/ctest-summary.sh 22-valgrind build/valgrind/Testing/Temporary/LastTest.log
exit $status
