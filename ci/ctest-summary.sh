#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One summary line for a CI stage from CTest's full logs, which keep every
# test's output (--output-on-failure shows only the failures' on the
# console): tests run and passed, Check cases run and failed, and inputs
# replayed by fuzz_replay.
# Usage: ci/ctest-summary.sh STAGE LOG...   (LOG: <build>/Testing/Temporary/LastTest.log)
set -euo pipefail
stage=$1
shift
awk -v stage="$stage" '
  /^[0-9]+\/[0-9]+ Test: / { tests++ }
  /^Test Pass(ed\.| Reason:)/ { passed++ }
  /[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+/ {
    line = $0
    sub(/.*Checks: /, "", line); split(line, f, /[^0-9]+/)
    checks += f[1]; failures += f[2] + f[3]
  }
  /^fuzz_replay: .*\([0-9]+ bytes\)$/ { replayed++ }
  END {
    printf "%s: summary: %d tests, %d passed; %d Check cases, %d failed", stage, tests, passed, checks, failures
    if (replayed) printf "; %d fuzz inputs replayed", replayed
    printf "\n"
  }' "$@"
