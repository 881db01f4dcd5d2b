#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Error details are words (docs/BAD_INPUT.md): no argument check of the core
# (src/ but src/mpi) may write its C condition into clpin_last_error_detail().
# Fails naming each line that uses the old stringifying CLPIN__CHECK(cond,
# code) or FAIL_IF(cond, code), or a macro that turns its condition into
# text (#cond). Checks take words: CLPIN__CHECK_WHY, _FMT, _IN, _FORK,
# _CL and CLPIN__PASS (src/internal.h). Run by CI stage 05-format.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(git ls-files 'src/*.c' 'src/*.h' | grep -v '^src/mpi/' |
  xargs grep -nE '\bCLPIN__CHECK\(|\bFAIL_IF\(|#[[:space:]]*cond\b' || true)
if [ -n "$hits" ]; then
  echo "ci/details.sh: a check that writes its condition as C (use CLPIN__CHECK_WHY/_FMT/_IN, src/internal.h):" >&2
  echo "$hits" >&2
  exit 1
fi
echo "ci/details.sh: every check of src/ (but src/mpi) says why in words"
