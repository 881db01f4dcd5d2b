#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The docs' code runs as written: every ```python block of README.md and
# docs/*.md, and every ```c block that is a whole program (has `int
# main(`), against the library installed to a clean prefix, the Python
# blocks through the module that install put there (as docs/PYTHON.md tells
# a user), on POCL. A block that is a fragment by design is skipped only
# when the line before it says `<!-- doc-blocks: skip: REASON -->`.
# Shell blocks are not run (they name sudo, /usr/local or an ./app of the
# reader's); what they install is checked by 50-package.
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
[ $status = 0 ] || exit 1
echo "62-doc-blocks: summary: $ran code blocks of README.md and docs/*.md ran as written, $skipped marked fragments skipped"
