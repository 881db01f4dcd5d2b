#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/ stays within three quarters of src/'s lines (issue 51): the lines of
# bench/'s tracked files (results/ archives aside) against src/'s .c and .h
# files (the core and src/mpi). Prints both counts; exits 1 when bench/ is
# over both that rule and LIMIT. LIMIT is bench/'s count after its shared
# code was folded (the option parser, lib.sh's process loop and pooling,
# pybench.py): what is over three quarters is benchmarks that alone make a
# figure docs/ quotes today, kept so each figure's command still runs.
# Lower LIMIT as cuts land; bench/ never grows.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=10978
count() { git ls-files "$@" | xargs -r cat | wc -l; }
bench=$(git ls-files bench | grep -v '^bench/results/' | xargs -r cat | wc -l)
src=$(count 'src/*.c' 'src/*.h')
rule=$((src * 3 / 4))
echo "bench-size: bench/ $bench lines, src/ $src lines (three quarters: $rule)"
if [ "$bench" -gt "$rule" ]; then
  echo "bench-size: bench/ is over three quarters of src/ by $((bench - rule)) lines" >&2
  if [ "$bench" -gt "$LIMIT" ]; then
    echo "bench-size: and over its interim ceiling of $LIMIT lines: cut bench/ (issue 51, item 9)" >&2
    exit 1
  fi
fi
