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
