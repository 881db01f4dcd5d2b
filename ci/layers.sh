#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layer maps (docs/DESIGN.md, "The layer map"), checked: every file of
# src/, src/mpi/ and layer/ has a level, and no file includes a header of a
# higher level or calls a function (or uses a variable) defined in a file of
# a higher level. Files of one level may use each other. The add-ons,
# libclpin-mpi (src/mpi/) and the OpenCL layer (layer/), sit above the whole
# of src/: their files may use the core's, the core never uses theirs, and
# neither add-on uses the other's.
#
# Includes are read from the sources (#include "..."; a layer file's "x.h"
# is its own directory's, else src/'s, as its build finds them; "../x.h"
# src/'s; "clpin_mpi.h" the MPI add-on's public header); calls from the
# object files: each .c is compiled (-O0, so no call is inlined away; src/mpi/
# by mpicc), and every undefined clpin symbol of an object is resolved to
# the object that defines it (nm), across the directories. A private header
# (pool_impl.h, mpi/wire.h) may be included only by the files of its own
# module.
#
#   ci/layers.sh               check src/, src/mpi/ and layer/ (build in
#                              build/layers)
#   ci/layers.sh --self-test   plant upward includes and calls in a copy of
#                              the three (and calls from the core into each
#                              add-on) and show that the check fails
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- the maps: level, then the files (stems of the .c and .h files) -------
MAP_SRC='
0  internal size vstruct options errors fork lock arena
1  events topo streamcopy copythreads zc fileio
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
# libclpin-mpi: above every level of src/. clpin_mpi is its public header
# (include/clpin_mpi.h), at its lowest level so that the core cannot include
# it. Its error table (include/clpin_mpi_errors.h) is in no map: clpin.h
# includes it by rule (docs/DESIGN.md, "Error codes").
MAP_MPI='
12 clpin_mpi mpi_internal wire fail reduce
13 vet wait segment self reduce_threads turn
14 cache
15 coll
16 p2p allreduce bcast
17 request
'
# The layer: above every level of src/. cl_redirect.h includes nothing of
# ours: it is forced (-include) into the layer's copy of src/, whose OpenCL
# calls it sends through the table objects.c keeps (data, not a call up).
MAP_LAYER='
12 objects cl_redirect
13 route
14 layer
'
# Private headers: dir/header=the files that may include it.
PRIVATE='src/pool_impl=pool,pool_impl,pool_blocks,pool_hostmem,pool_handle src/mpi/wire=p2p,wire'

# level[dir/stem]
declare -A level
read_map() { # $1: directory, $2: map
  local lv files f
  while read -r lv files; do
    [ -n "$lv" ] || continue
    for f in $files; do level[$1/$f]=$lv; done
  done <<<"$2"
}
read_map src "$MAP_SRC"
read_map src/mpi "$MAP_MPI"
read_map layer "$MAP_LAYER"
# Every add-on level above the core's highest.
core_top=0
for k in "${!level[@]}"; do
  [[ $k == src/mpi/* ]] || [[ $k != src/* ]] || ((level[$k] <= core_top)) || core_top=${level[$k]}
done
for k in "${!level[@]}"; do
  if { [[ $k == src/mpi/* ]] || [[ $k != src/* ]]; } && ((level[$k] <= core_top)); then
    echo "layers: $k is at level ${level[$k]}, not above the core's highest ($core_top)"
    exit 1
  fi
done

# The key of a header "x.h" included by a file of directory $2 (checked
# tree $1): its own directory's, else src/'s; empty for one outside both
# (clpin.h, system headers).
header_key() { # $1: root, $2: directory, $3: header
  local stem=${3%.h}
  if [ "$3" = clpin_mpi.h ]; then
    echo src/mpi/clpin_mpi
  elif [[ $3 == ../* ]] && [ -e "$1/src/${3#../}" ]; then
    echo "src/${stem#../}"
  elif [ -e "$1/$2/$3" ]; then
    echo "$2/$stem"
  elif [ -e "$1/src/$3" ]; then
    echo "src/$stem"
  fi
}

# check ROOT OBJ DIR...: the files of ROOT/DIR... against the maps, calls
# from the objects in OBJ/DIR/.
check() {
  local root=$1 obj=$2 bad=0 d f stem key inc target users o sym p
  shift 2
  for d in "$@"; do
    # Every file has a level.
    for f in "$root/$d"/*.c "$root/$d"/*.h; do
      [ -e "$f" ] || continue
      stem=$(basename "${f%.*}")
      if [ -z "${level[$d/$stem]:-}" ]; then
        echo "layers: $d/$(basename "$f") has no level: add it to the map in ci/layers.sh and docs/DESIGN.md"
        bad=1
      fi
    done
    # Includes.
    for f in "$root/$d"/*.c "$root/$d"/*.h; do
      [ -e "$f" ] || continue
      key=$d/$(basename "${f%.*}")
      [ -n "${level[$key]:-}" ] || continue
      while read -r inc; do
        target=$(header_key "$root" "$d" "$inc")
        [ -n "$target" ] && [ -n "${level[$target]:-}" ] || continue
        if ((level[$target] > level[$key])); then
          echo "layers: $d/$(basename "$f") (level ${level[$key]}) includes $inc (level ${level[$target]})"
          bad=1
        elif [ "${target%/*}" != "$d" ] && [ "${target%/*}" != src ]; then
          echo "layers: $d/$(basename "$f") includes $inc of another add-on (${target%/*}/)"
          bad=1
        fi
        for p in $PRIVATE; do
          users=",${p#*=},"
          if [ "${p%%=*}" = "$target" ] && { [ "$d" != "${target%/*}" ] || [[ $users != *",$(basename "$key"),"* ]]; }; then
            echo "layers: $d/$(basename "$f") includes $inc, private to ${p#*=}"
            bad=1
          fi
        done
      done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
  done
  # Calls: every clpin symbol an object uses, resolved to its definer in
  # any of the directories.
  declare -A def=()
  for d in "$@"; do
    for o in "$obj/$d"/*.o; do
      key=$d/$(basename "$o" .o)
      while read -r sym; do def[$sym]=$key; done < <(nm --defined-only -g "$o" | awk '$3 ~ /^clpin/ {print $3}')
    done
  done
  for d in "$@"; do
    for o in "$obj/$d"/*.o; do
      key=$d/$(basename "$o" .o)
      [ -n "${level[$key]:-}" ] || continue
      while read -r sym; do
        target=${def[$sym]:-}
        [ -n "$target" ] && [ -n "${level[$target]:-}" ] || continue
        if ((level[$target] > level[$key])); then
          echo "layers: $key.c (level ${level[$key]}) uses $sym of $target.c (level ${level[$target]})"
          bad=1
        elif [ "${target%/*}" != "$d" ] && [ "${target%/*}" != src ]; then
          echo "layers: $key.c uses $sym of $target.c, another add-on's"
          bad=1
        fi
      done < <(nm -u "$o" | awk '$2 ~ /^clpin/ {print $2}')
    done
  done
  return $bad
}

# build ROOT OBJ DIR...: each ROOT/DIR/*.c into OBJ/DIR/*.o, with the flags
# of its own build (the core's, the layer's over src/, MPI's by mpicc).
build() {
  local root=$1 obj=$2 d flags cc
  shift 2
  for d in "$@"; do
    mkdir -p "$obj/$d"
    rm -f "$obj/$d"/*.o
    cc=cc
    case $d in
      layer) flags="-I$root/layer -I$root/src -Iinclude -DCL_TARGET_OPENCL_VERSION=300 -DCLPIN_STATIC_DEFINE" ;;
      src/mpi)
        cc=${MPICC:-mpicc}
        command -v "$cc" >/dev/null ||
          { echo "layers: no $cc to compile src/mpi/ (ci/deps.sh installs libopenmpi-dev)"; exit 1; }
        flags="-I$root/src/mpi -I$root/src -Iinclude -DCL_TARGET_OPENCL_VERSION=120 -DCLPIN_BUILDING" ;;
      *) flags="-I$root/$d -Iinclude -DCL_TARGET_OPENCL_VERSION=120 -DCLPIN_BUILDING" ;;
    esac
    printf '%s\n' "$root/$d"/*.c | xargs -P "${JOBS:-2}" -I{} sh -c \
      '"$4" -std=c11 -O0 -c $2 -D_GNU_SOURCE -w "$1" -o "$3/$(basename "$1" .c).o"' sh {} "$flags" "$obj/$d" "$cc"
  done
}

DIRS=(src src/mpi layer)

if [ "${1:-}" = "--self-test" ]; then
  tmp=build/layers-selftest
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp -r src layer "$tmp/"
  # An upward include and an upward call in the lowest file of each map,
  # and the core calling the layer.
  printf '#include "staging.h"\nvoid clpin__planted(void);\nvoid clpin__planted(void) { clpin__staged(0); }\n' >>"$tmp/src/lock.c"
  printf '#include "route.h"\nvoid clpin__layer_planted(void);\nvoid clpin__layer_planted(void) { clpin__layer_route_init(); }\n' >>"$tmp/layer/objects.c"
  printf '#include <stdbool.h>\nbool clpin__layer_host_claimed(const void *p, unsigned long n);\nbool clpin__planted_up(void);\nbool clpin__planted_up(void) { return clpin__layer_host_claimed(0, 0); }\n' >>"$tmp/src/size.c"
  # The core calling the MPI add-on and including its public header (read
  # as text: #if 0 keeps cc, which has no mpi.h, from compiling it); inside
  # the add-on an upward include and call (the circle request.c <->
  # allreduce.c once was), in its lowest file; the layer calling MPI.
  printf '#if 0\n#include "clpin_mpi.h"\n#endif\nint clpin__mpi_fail();\nvoid clpin__planted2(void);\nvoid clpin__planted2(void) { clpin__mpi_fail(); }\n' >>"$tmp/src/size.c"
  printf '#include "p2p.h"\nvoid clpin__mpi_planted(void);\nvoid clpin__mpi_planted(void) { clpin__mpi_turn_end(0); }\n' >>"$tmp/src/mpi/fail.c"
  printf '/* planted */\n' >"$tmp/src/mpi/p2p.h"
  printf 'int clpin__mpi_fail();\nvoid clpin__layer_planted2(void);\nvoid clpin__layer_planted2(void) { clpin__mpi_fail(); }\n' >>"$tmp/layer/route.c"
  build "$tmp" "$tmp/obj" "${DIRS[@]}"
  if out=$(check "$tmp" "$tmp/obj" "${DIRS[@]}"); then
    echo "layers: self-test FAILED: the planted upward includes and calls passed"
    exit 1
  fi
  echo "$out"
  for want in 'src/lock.c (level 0) includes staging.h' \
    'src/lock.c (level 0) uses clpin__staged of src/staging.c' \
    'layer/objects.c (level 12) includes route.h' \
    'layer/objects.c (level 12) uses clpin__layer_route_init of layer/route.c' \
    'src/size.c (level 0) uses clpin__layer_host_claimed of layer/objects.c' \
    'src/size.c (level 0) includes clpin_mpi.h' \
    'src/size.c (level 0) uses clpin__mpi_fail of src/mpi/fail.c' \
    'src/mpi/fail.c (level 12) includes p2p.h' \
    'src/mpi/fail.c (level 12) uses clpin__mpi_turn_end of src/mpi/turn.c' \
    'layer/route.c uses clpin__mpi_fail of src/mpi/fail.c, another add-on'"'"'s'; do
    grep -qF "$want" <<<"$out" || {
      echo "layers: self-test FAILED: not reported: $want"
      exit 1
    }
  done
  echo "layers: self-test passed (the planted upward includes and calls of src/, src/mpi/ and layer/, the core's calls into both add-ons and the layer's into MPI were caught)"
  exit 0
fi

build . build/layers "${DIRS[@]}"
check . build/layers "${DIRS[@]}"
echo "layers: src/, src/mpi/ and layer/ follow the layer maps ($(ls src/*.c | wc -l), $(ls src/mpi/*.c | wc -l) and $(ls layer/*.c | wc -l) .c files)"
