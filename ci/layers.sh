#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layer map of src/ (docs/DESIGN.md, "The layer map"), checked: every
# file of src/ has a level, and no file includes a header of a higher level
# or calls a function (or uses a variable) defined in a file of a higher
# level. Files of one level may use each other.
#
# Includes are read from the sources (#include "..."); calls from the object
# files: each src/*.c is compiled (-O0, so no call is inlined away), and
# every undefined clpin symbol of an object is resolved to the object that
# defines it (nm). A private header (pool_impl.h) may be included only by
# the files of its own module.
#
#   ci/layers.sh               check src/ (build in build/layers)
#   ci/layers.sh --self-test   plant an upward include and an upward call in
#                              a copy of src/ and show that the check fails
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- the map: level, then the files (stems of src/*.c and src/*.h) --------
MAP='
0  internal size options errors fork lock arena
1  events topo streamcopy workers zc fileio
2  handoff
3  pool pool_impl pool_blocks pool_hostmem pool_handle
4  registry
5  register
6  shape
7  staging
8  engine
9  transfer
10 rect tensor unified files
11 loader
'
# Private headers: header=the files that may include it.
PRIVATE='pool_impl=pool,pool_impl,pool_blocks,pool_hostmem,pool_handle'

declare -A level
while read -r lv files; do
  [ -n "$lv" ] || continue
  for f in $files; do level[$f]=$lv; done
done <<<"$MAP"

check() { # $1: source dir, $2: object dir
  local src=$1 obj=$2 bad=0 f stem inc target users
  # Every file has a level.
  for f in "$src"/*.c "$src"/*.h; do
    stem=$(basename "${f%.*}")
    if [ -z "${level[$stem]:-}" ]; then
      echo "layers: $f has no level: add it to the map in ci/layers.sh and docs/DESIGN.md"
      bad=1
    fi
  done
  # Includes.
  for f in "$src"/*.c "$src"/*.h; do
    stem=$(basename "${f%.*}")
    [ -n "${level[$stem]:-}" ] || continue
    while read -r inc; do
      target=${inc%.h}
      [ -n "${level[$target]:-}" ] || continue # a header outside src/ (clpin.h)
      if ((level[$target] > level[$stem])); then
        echo "layers: $(basename "$f") (level ${level[$stem]}) includes $inc (level ${level[$target]})"
        bad=1
      fi
      for p in $PRIVATE; do
        users=",${p#*=},"
        if [ "${p%%=*}" = "$target" ] && [[ $users != *",$stem,"* ]]; then
          echo "layers: $(basename "$f") includes $inc, private to ${p#*=}"
          bad=1
        fi
      done
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done
  # Calls: every clpin symbol an object uses, resolved to its definer.
  declare -A def=()
  local o sym
  for o in "$obj"/*.o; do
    stem=$(basename "$o" .o)
    while read -r sym; do def[$sym]=$stem; done < <(nm --defined-only -g "$o" | awk '$3 ~ /^clpin/ {print $3}')
  done
  for o in "$obj"/*.o; do
    stem=$(basename "$o" .o)
    [ -n "${level[$stem]:-}" ] || continue
    while read -r sym; do
      target=${def[$sym]:-}
      [ -n "$target" ] && [ -n "${level[$target]:-}" ] || continue
      if ((level[$target] > level[$stem])); then
        echo "layers: $stem.c (level ${level[$stem]}) uses $sym of $target.c (level ${level[$target]})"
        bad=1
      fi
    done < <(nm -u "$o" | awk '$2 ~ /^clpin/ {print $2}')
  done
  return $bad
}

build() { # $1: source dir, $2: object dir
  mkdir -p "$2"
  rm -f "$2"/*.o
  printf '%s\n' "$1"/*.c | xargs -P "${JOBS:-2}" -I{} sh -c \
    'cc -std=c11 -O0 -c -I"$2" -Iinclude -DCL_TARGET_OPENCL_VERSION=120 -DCLPIN_BUILDING \
       -D_GNU_SOURCE -w "$1" -o "$3/$(basename "$1" .c).o"' sh {} "$1" "$2"
}

if [ "${1:-}" = "--self-test" ]; then
  tmp=build/layers-selftest
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp -r src "$tmp/src"
  # An upward include and an upward call, in the lowest file.
  printf '#include "staging.h"\nvoid clpin__planted(void);\nvoid clpin__planted(void) { clpin__staged(0); }\n' >>"$tmp/src/lock.c"
  build "$tmp/src" "$tmp/obj"
  if out=$(check "$tmp/src" "$tmp/obj"); then
    echo "layers: self-test FAILED: a planted upward include and call passed"
    exit 1
  fi
  echo "$out"
  grep -q 'lock.c (level 0) includes staging.h' <<<"$out" &&
    grep -q 'lock.c (level 0) uses clpin__staged of staging.c' <<<"$out" || {
    echo "layers: self-test FAILED: the planted include or call went unreported"
    exit 1
  }
  echo "layers: self-test passed (the planted upward include and call were caught)"
  exit 0
fi

build src build/layers
check src build/layers
echo "layers: src/ follows the layer map ($(ls src/*.c | wc -l) .c files)"
