#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The docs' code runs as written: every ```python block of README.md and
# docs/*.md, and every ```c block that is a whole program (has `int
# main(`), against the library installed to a clean prefix, the Python
# blocks through the module that install put there (as docs/PYTHON.md tells
# a user), on POCL. A block that is a fragment by design is skipped only
# when the line before it says `<!-- doc-blocks: skip: REASON -->`.
# The ```sh blocks of README.md and docs/INSTALL.md (build, install, the
# variables of a prefix, building a program against it) run as a reader
# copies them: each document's blocks in order in one bash, in a copy of
# the tree, with HOME a fresh directory (so $HOME/opt/clpin is a temporary
# prefix), no clpin variable set, and README's C program as app.c. Blocks
# that need sudo or the system's /usr/local carry the skip mark; what those
# install is checked by 50-package and 52-deb.
set -euo pipefail
JOBS=${JOBS:-2}
build=build/package # 50-package's configuration: reused when built
prefix=$PWD/build/doc-blocks/prefix
work=$PWD/build/doc-blocks
rm -rf "$work"
mkdir -p "$work"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-Werror" \
  -DCMAKE_INSTALL_PREFIX=/nonexistent/configure-time-prefix \
  -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$JOBS" >/dev/null
cmake --install "$build" --prefix "$prefix" >/dev/null
pydir=$(sed -n 's/^CLPIN_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
py=/usr/bin/python3
[ -x "$py" ] || py=python3
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$work/pocl-cache}
fail() { echo "62-doc-blocks: $*" >&2; status=1; }
status=0 ran=0 skipped=0

# extract FILE LANG: one file per block, $work/blocks/<file>-<line>.<lang>,
# and "skip" files for blocks marked as fragments.
extract() {
  awk -v lang="$2" -v dir="$work/blocks" -v tag="$(echo "$1" | tr / _)" '
    /^```/ && on { on = 0; close(out); next }
    $0 == "```" lang && !on { on = 1; out = dir "/" tag "-" NR "." lang;
                              if (prev ~ /<!-- doc-blocks: skip/) { print prev > (out ".skip") }
                              printf "" > out; next }
    on { print > out }
    { prev = $0 }' "$1"
}
mkdir -p "$work/blocks"
for md in README.md docs/*.md; do
  extract "$md" python
  extract "$md" c
done
extract README.md sh
extract docs/INSTALL.md sh
for f in "$work"/blocks/*.python "$work"/blocks/*.c; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  if [ -e "$f.skip" ]; then
    skipped=$((skipped + 1))
    echo "62-doc-blocks: $name skipped: $(sed -E 's/.*skip: *(.*) *-->.*/\1/' "$f.skip")"
    continue
  fi
  case $f in
    *.python)
      if ! (cd "$work" && env -u CLPIN_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$prefix/$pydir" \
        PYTHONDONTWRITEBYTECODE=1 timeout 300 "$py" "$f") >"$f.log" 2>&1; then
        cat "$f.log" >&2
        fail "$name does not run as written"
      else
        ran=$((ran + 1))
        echo "62-doc-blocks: $name ran: $(tail -n 1 "$f.log")"
      fi
      ;;
    *.c)
      grep -q 'int main(' "$f" || continue
      # shellcheck disable=SC2046
      if ! cc -std=c11 -Wall -Wextra -Werror -x c -o "$f.bin" "$f" \
        $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs clpin) 2>"$f.log" ||
        ! LD_LIBRARY_PATH="$prefix/lib" timeout 300 "$f.bin" >>"$f.log" 2>&1; then
        cat "$f.log" >&2
        fail "$name does not compile or run as written"
      else
        ran=$((ran + 1))
        echo "62-doc-blocks: $name ran: $(tail -n 1 "$f.log")"
      fi
      ;;
  esac
done
((ran > 0)) || fail "no code block found"

# The shell blocks: a copy of the tree (tracked and new files, as a clone
# after the change would hold them), a fresh HOME, README's C program as app.c.
sandbox=$work/sh
mkdir -p "$sandbox/home" "$sandbox/tree"
git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$sandbox/tree" -xf -
app=$(grep -l 'int main(' "$work"/blocks/README.md-*.c | head -n 1)
[ -n "$app" ] || fail "README.md has no C program to build as app.c"
cp "$app" "$sandbox/tree/app.c"
sh_ran=0 sh_skipped=0
for md in README.md docs/INSTALL.md; do
  tag=$(echo "$md" | tr / _)
  script=$work/$tag.sh
  : >"$script"
  n=0
  for f in $(cd "$work/blocks" && ls "$tag"-*.sh 2>/dev/null | sort -t- -k2 -n); do
    f=$work/blocks/$f
    if [ -e "$f.skip" ]; then
      sh_skipped=$((sh_skipped + 1))
      echo "62-doc-blocks: $(basename "$f") skipped: $(sed -E 's/.*skip: *(.*) *-->.*/\1/' "$f.skip")"
      continue
    fi
    n=$((n + 1))
    echo "# --- $(basename "$f")" >>"$script"
    cat "$f" >>"$script"
  done
  ((n > 0)) || { fail "$md has no shell block to run"; continue; }
  # PATH: /usr/bin first, as on the Debian machine the docs address (its
  # python3 is the one with Debian's numpy and pyopencl, as above).
  if (cd "$sandbox/tree" && env -u CLPIN_LIBRARY -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH -u CMAKE_PREFIX_PATH \
    -u PYTHONPATH HOME="$sandbox/home" PATH="/usr/bin:/bin:$PATH" PYTHONDONTWRITEBYTECODE=1 \
    timeout 900 bash -e -x "$script") \
    >"$script.log" 2>&1; then
    sh_ran=$((sh_ran + n))
    echo "62-doc-blocks: $md: $n shell blocks ran as written: $(tail -n 1 "$script.log")"
  else
    tail -n 40 "$script.log" >&2
    fail "$md's shell blocks do not run as written (all of it: $script.log)"
  fi
done
# README's ```cmake block, as written, in a consumer project of README's C
# program, against the installed prefix: the find_package line a reader
# copies (its version among them) must find this package.
extract README.md cmake
cm=$(ls "$work"/blocks/README.md-*.cmake 2>/dev/null | head -n 1)
if [ -z "$cm" ] || [ -z "$app" ]; then
  fail "README.md has no cmake block (or no C program) to build"
else
  consumer=$work/cmake-consumer
  mkdir -p "$consumer"
  cp "$app" "$consumer/app.c"
  { printf 'cmake_minimum_required(VERSION 3.16)\nproject(app C)\nadd_executable(app app.c)\n'
    cat "$cm"; } >"$consumer/CMakeLists.txt"
  if cmake -S "$consumer" -B "$consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >"$consumer.log" 2>&1 &&
    cmake --build "$consumer/build" >>"$consumer.log" 2>&1 &&
    LD_LIBRARY_PATH="$prefix/lib" timeout 300 "$consumer/build/app" >>"$consumer.log" 2>&1; then
    echo "62-doc-blocks: README.md's cmake block builds README's program: $(grep -m1 find_package "$cm")"
  else
    tail -n 30 "$consumer.log" >&2
    fail "README.md's cmake block does not build README's program as written"
  fi
fi
# README's "ctest -L examples" in a build without the test suite (the
# build a user makes): it must list the examples.
ex=$work/examples-only
if cmake -S . -B "$ex" -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=ON >"$ex.log" 2>&1 &&
  n=$(cd "$ex" && ctest -N -L examples | sed -nE 's/^Total Tests: ([0-9]+)/\1/p') && [ "${n:-0}" -gt 0 ]; then
  echo "62-doc-blocks: ctest -L examples lists $n examples with CLPIN_BUILD_TESTS=OFF"
else
  tail -n 20 "$ex.log" >&2
  fail "ctest -L examples finds no example in a build with CLPIN_BUILD_TESTS=OFF"
fi
[ $status = 0 ] || exit 1
echo "62-doc-blocks: summary: $ran code blocks of README.md and docs/*.md ran as written," \
  "$sh_ran shell blocks of README.md and docs/INSTALL.md ran as a reader copies them, $skipped marked fragments" \
  "and $sh_skipped shell blocks marked (sudo, /usr/local) skipped"
