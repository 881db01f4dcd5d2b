#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install what is missing, then run each stage of ci/stages/ in name order:
# the format check, the plain build with every test through CTest, then
# sanitizers, valgrind, Oclgrind, fuzzing, packaging, docs.
# CLPIN_STAGES="10-unit 20-asan" limits the run to the named stages;
# CLPIN_NO_DEPS=1 skips ci/deps.sh (no apt-get, no sudo) on a machine that
# has the packages already.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${CLPIN_NO_DEPS:-0}" = 1 ]; then
  echo "ci/test.sh: CLPIN_NO_DEPS=1: ci/deps.sh skipped, the packages it names must be installed"
else
  bash ci/deps.sh
fi
export JOBS=${JOBS:-$(nproc)}
# Every stage runs on POCL unless it names another implementation (30-oclgrind,
# 32-rusticl): the ICD loader is shown POCL's .icd alone, so nothing runs on
# whichever platform the system lists first, and Mesa's libraries
# (mesa-opencl-icd) are never loaded where they are not under test: under
# AddressSanitizer Clover's aborts a C program at load (its C++ exception
# meets ASan's __cxa_throw interceptor unresolved) and rusticl's leaks 72
# bytes (tests/suppressions/lsan.supp). The tests pick POCL by name too.
if [ -z "${OCL_ICD_VENDORS:-}" ] && [ -e /etc/OpenCL/vendors/pocl.icd ]; then
  mkdir -p build/icd-pocl
  cp /etc/OpenCL/vendors/pocl.icd build/icd-pocl/
  export OCL_ICD_VENDORS=$PWD/build/icd-pocl
fi
export CLPIN_TEST_PLATFORM=${CLPIN_TEST_PLATFORM:-Portable Computing Language}
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/build/pocl-cache}
mkdir -p "$POCL_CACHE_DIR"
failed=()
for stage in ci/stages/*.sh; do
  name=$(basename "$stage" .sh)
  if [ -n "${CLPIN_STAGES:-}" ] && [[ " $CLPIN_STAGES " != *" $name "* ]]; then continue; fi
  echo "=== stage $name"
  start=$SECONDS
  if bash "$stage"; then
    echo "=== stage $name passed ($((SECONDS - start)) s)"
  else
    echo "=== stage $name FAILED ($((SECONDS - start)) s)"
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "ci/test.sh: failed stages: ${failed[*]}"
  exit 1
fi
echo "ci/test.sh: all stages passed"
