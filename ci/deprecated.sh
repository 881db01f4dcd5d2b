#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clpin's own code uses no deprecated or removed name. Deprecated: every
# name include/*.h marks CLPIN_DEPRECATED (an enumerator `NAME
# CLPIN_DEPRECATED(...)`, or the function declared on the line after
# `CLPIN_DEPRECATED(...)`). Removed: the names in REMOVED below, which
# CHANGELOG says are gone (C and Python alike). Neither may appear in src/,
# layer/, bench/, examples/ or python/clpin; the headers keep the deprecated
# ones for old callers, tests/ may assert they still work (tests/compat
# builds 0.2's and 0.3's unchanged headers). Fails naming each line.
# `ci/deprecated.sh --self-test` plants a use and shows that the check
# fails. Run by CI stage 05-format.
set -euo pipefail
cd "$(dirname "$0")/.."

# Gone (CHANGELOG, "Removed"): 0.2's old names of clpin_host_lend /
# clpin_host_reclaim, and the Python package's.
REMOVED="clpin_host_to_device clpin_host_to_host host_to_device host_to_host"
DIRS="src layer bench examples python/clpin"

deprecated=$(cat include/*.h | awk '
  after { if (match($0, /[A-Za-z_][A-Za-z_0-9]*[[:space:]]*\(/)) {
            s = substr($0, RSTART, RLENGTH); sub(/[[:space:]]*\($/, "", s); print s }
          after = 0; next }
  /^#[[:space:]]*define[[:space:]]+CLPIN_DEPRECATED/ { next }
  /^[[:space:]]*CLPIN_DEPRECATED\(/ { after = 1; next }
  match($0, /^[[:space:]]*[A-Za-z_][A-Za-z_0-9]*[[:space:]]+CLPIN_DEPRECATED\(/) {
    s = $0; sub(/^[[:space:]]*/, "", s); sub(/[[:space:]].*/, "", s); print s }')
# A function line such as "static inline cl_int name(" gives its last word.
deprecated=$(echo "$deprecated" | awk 'NF { print $NF }')

check() { # $1: root of the tree to check
  local names pattern hits
  names=$(echo $deprecated $REMOVED | tr ' ' '\n' | sed '/^$/d' | sort -u)
  pattern=$(echo "$names" | paste -sd'|')
  hits=$(cd "$1" && for d in $DIRS; do [ -d "$d" ] && echo "$d"; done |
    xargs -r grep -rnwE --include='*.c' --include='*.h' --include='*.py' \
      --include='*.sh' --include='*.cpp' "$pattern" || true)
  if [ -n "$hits" ]; then
    echo "ci/deprecated.sh: deprecated or removed names used (new names: include/clpin.h, CHANGELOG.md):" >&2
    echo "$hits" >&2
    return 1
  fi
  echo "ci/deprecated.sh: no deprecated or removed name in $DIRS ($(echo "$names" | wc -l) names:" \
    "$(echo "$names" | paste -sd' '))"
}

if [ "${1:-}" = --self-test ]; then
  [ -n "$deprecated" ] || { echo "ci/deprecated.sh: found no CLPIN_DEPRECATED name in include/" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for name in $deprecated host_to_device; do
    rm -rf "${tmp:?}"/*
    mkdir -p "$tmp/layer"
    printf 'static int x(void) { return %s; }\n' "$name" >"$tmp/layer/planted.c"
    if check "$tmp" 2>/dev/null; then
      echo "ci/deprecated.sh --self-test: a planted $name was not caught" >&2
      exit 1
    fi
  done
  echo "ci/deprecated.sh --self-test: planted uses of $deprecated host_to_device caught"
  exit 0
fi
check .
