#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The plain build (warnings as errors) and every CTest suite on POCL.
set -euo pipefail
cmake -S . -B build/unit -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build build/unit -j "$JOBS"
status=0
ctest --test-dir build/unit --output-on-failure -j "$JOBS" --timeout 600 || status=$?
bash ci/ctest-summary.sh 10-unit build/unit/Testing/Temporary/LastTest.log
exit $status
