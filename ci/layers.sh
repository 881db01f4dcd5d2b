#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layer map of src/ and src/mpi/ (docs/DESIGN.md, "The layer map"),
# checked: every file of src/ and src/mpi/ has a level, and no file includes
# a header of a higher level or calls a function (or uses a variable)
# defined in a file of a higher level. Files of one level may use each other.
#
# Two maps: the core's (src/) and libclpin-mpi's (src/mpi/, an add-on). Every
# level of the add-on is above the core's highest, so the add-on may use the
# core's files of any level (those it compiles in itself: cmake/mpi.cmake)
# and the core never includes (clpin_mpi.h, src/mpi/ headers) or calls into
# it. Inside src/mpi/ the same rule holds: nothing upward.
#
# Includes are read from the sources (#include "..."); calls from the object
# files: each file is compiled (-O0, so no call is inlined away; src/mpi/ by
# mpicc), and every undefined clpin symbol of an object is resolved to the
# object that defines it (nm). A private header (pool_impl.h, mpi/wire.h) may
# be included only by the files of its own module.
#
#   ci/layers.sh               check src/ and src/mpi/ (build in build/layers)
#   ci/layers.sh --self-test   plant upward includes and calls in a copy of
#                              src/ (the core's map, the add-on's, and the
#                              core calling the add-on) and show that the
#                              check fails
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- the maps: level, then the files (stems of src/*.c and src/*.h) ------
MAP='
0  internal size vstruct options errors fork lock arena
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
# libclpin-mpi: stems of src/mpi/*.c and src/mpi/*.h; clpin_mpi is its
# public header (include/clpin_mpi.h), at its lowest level so that the core
# cannot include it. Its error table (include/clpin_mpi_errors.h) is in
# neither map: clpin.h includes it by rule (docs/DESIGN.md, "Error codes").
MPI_MAP='
12 clpin_mpi mpi_internal wire fail reduce
13 vet wait segment self reduce_threads turn
14 cache
15 coll
16 p2p allreduce bcast
17 request
'
# Private headers: header=the files that may include it (keys: a core stem,
# mpi/<stem> for src/mpi/).
PRIVATE='pool_impl=pool,pool_impl,pool_blocks,pool_hostmem,pool_handle mpi/wire=mpi/p2p,mpi/wire'

declare -A level
core_top=0
while read -r lv files; do
  [ -n "$lv" ] || continue
  for f in $files; do level[$f]=$lv; done
  ((lv > core_top)) && core_top=$lv
done <<<"$MAP"
while read -r lv files; do
  [ -n "$lv" ] || continue
  if ((lv <= core_top)); then
    echo "layers: the mpi map's level $lv is not above the core's highest ($core_top)"
    exit 1
  fi
  for f in $files; do
    if [ "$f" = clpin_mpi ]; then level[$f]=$lv; else level[mpi/$f]=$lv; fi
  done
done <<<"$MPI_MAP"

# The key of a file: its stem, mpi/<stem> under src/mpi/.
key_of() { # $1: the file, $2: the source dir
  local k=${1#"$2"/}
  echo "${k%.*}"
}
# The key of an include "$2" in the file of key $1 (src dir $3): a header
# beside an src/mpi/ file is the add-on's, "../x.h" and the rest the core's.
inc_key() {
  local inc=${2%.h}
  case $inc in
  clpin_mpi) echo clpin_mpi ;;
  ../*) echo "${inc#../}" ;;
  mpi/*) echo "$inc" ;;
  *) if [[ $1 == mpi/* ]] && [ -e "$3/mpi/$2" ]; then echo "mpi/$inc"; else echo "$inc"; fi ;;
  esac
}

check() { # $1: source dir, $2: object dir
  local src=$1 obj=$2 bad=0 f k inc target users
  local files=("$src"/*.c "$src"/*.h "$src"/mpi/*.c "$src"/mpi/*.h)
  # Every file has a level.
  for f in "${files[@]}"; do
    [ -e "$f" ] || continue
    k=$(key_of "$f" "$src")
    if [ -z "${level[$k]:-}" ]; then
      echo "layers: $f has no level: add it to the map in ci/layers.sh and docs/DESIGN.md"
      bad=1
    fi
  done
  # Includes.
  for f in "${files[@]}"; do
    [ -e "$f" ] || continue
    k=$(key_of "$f" "$src")
    [ -n "${level[$k]:-}" ] || continue
    while read -r inc; do
      target=$(inc_key "$k" "$inc" "$src")
      [ -n "${level[$target]:-}" ] || continue # a header outside both maps (clpin.h)
      if ((level[$target] > level[$k])); then
        echo "layers: $k.${f##*.} (level ${level[$k]}) includes $inc (level ${level[$target]})"
        bad=1
      fi
      for p in $PRIVATE; do
        users=",${p#*=},"
        if [ "${p%%=*}" = "$target" ] && [[ $users != *",$k,"* ]]; then
          echo "layers: $k.${f##*.} includes $inc, private to ${p#*=}"
          bad=1
        fi
      done
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done
  # Calls: every clpin symbol an object uses, resolved to its definer.
  declare -A def=()
  local o sym objs=("$obj"/*.o "$obj"/mpi/*.o)
  for o in "${objs[@]}"; do
    [ -e "$o" ] || continue
    k=$(key_of "$o" "$obj")
    while read -r sym; do def[$sym]=$k; done < <(nm --defined-only -g "$o" | awk '$3 ~ /^clpin/ {print $3}')
  done
  for o in "${objs[@]}"; do
    [ -e "$o" ] || continue
    k=$(key_of "$o" "$obj")
    [ -n "${level[$k]:-}" ] || continue
    while read -r sym; do
      target=${def[$sym]:-}
      [ -n "$target" ] && [ -n "${level[$target]:-}" ] || continue
      if ((level[$target] > level[$k])); then
        echo "layers: $k.c (level ${level[$k]}) uses $sym of $target.c (level ${level[$target]})"
        bad=1
      fi
    done < <(nm -u "$o" | awk '$2 ~ /^clpin/ {print $2}')
  done
  return $bad
}

build() { # $1: source dir, $2: object dir
  local mpicc=${MPICC:-mpicc} f
  command -v "$mpicc" >/dev/null ||
    { echo "layers: no $mpicc to compile src/mpi/ (ci/deps.sh installs libopenmpi-dev)"; exit 1; }
  mkdir -p "$2/mpi"
  rm -f "$2"/*.o "$2"/mpi/*.o
  {
    for f in "$1"/*.c; do echo "cc $f $2/$(basename "$f" .c).o $1"; done
    for f in "$1"/mpi/*.c; do echo "$mpicc $f $2/mpi/$(basename "$f" .c).o $1"; done
  } | xargs -P "${JOBS:-2}" -L1 sh -c \
    '"$0" -std=c11 -O0 -c -I"$3" -Iinclude -DCL_TARGET_OPENCL_VERSION=120 -DCLPIN_BUILDING \
       -D_GNU_SOURCE -w "$1" -o "$2"'
}

if [ "${1:-}" = "--self-test" ]; then
  tmp=build/layers-selftest
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp -r src "$tmp/src"
  # An upward include and an upward call, in the lowest file of the core.
  printf '#include "staging.h"\nvoid clpin__planted(void);\nvoid clpin__planted(void) { clpin__staged(0); }\n' >>"$tmp/src/lock.c"
  # The core calling the add-on, and including its public header (read as
  # text: #if 0 keeps cc, which has no mpi.h, from compiling it).
  printf '#if 0\n#include "clpin_mpi.h"\n#endif\nint clpin__mpi_fail();\nvoid clpin__planted2(void);\nvoid clpin__planted2(void) { clpin__mpi_fail(); }\n' >>"$tmp/src/size.c"
  # Inside the add-on: an upward include and an upward call (the circle
  # request.c <-> allreduce.c once was), in its lowest file.
  printf '#include "p2p.h"\nvoid clpin__mpi_planted(void);\nvoid clpin__mpi_planted(void) { clpin__mpi_turn_end(0); }\n' >>"$tmp/src/mpi/fail.c"
  printf '/* planted */\n' >"$tmp/src/mpi/p2p.h"
  build "$tmp/src" "$tmp/obj"
  if out=$(check "$tmp/src" "$tmp/obj"); then
    echo "layers: self-test FAILED: the planted upward includes and calls passed"
    exit 1
  fi
  echo "$out"
  for want in 'lock.c (level 0) includes staging.h' 'lock.c (level 0) uses clpin__staged of staging.c' \
    'size.c (level 0) includes clpin_mpi.h' 'size.c (level 0) uses clpin__mpi_fail of mpi/fail.c' \
    'mpi/fail.c (level 12) includes p2p.h' 'mpi/fail.c (level 12) uses clpin__mpi_turn_end of mpi/turn.c'; do
    grep -qF "$want" <<<"$out" || {
      echo "layers: self-test FAILED: the planted \"$want\" went unreported"
      exit 1
    }
  done
  echo "layers: self-test passed (the planted upward includes and calls were caught: in the core, from the core into src/mpi, and inside src/mpi)"
  exit 0
fi

build src build/layers
check src build/layers
echo "layers: src/ and src/mpi/ follow the layer maps ($(ls src/*.c | wc -l) and $(ls src/mpi/*.c | wc -l) .c files)"
