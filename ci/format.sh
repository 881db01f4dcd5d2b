#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Lay out clpin's C sources and headers with clang-format and .clang-format.
# Usage: ci/format.sh [--check] [file...]
#   (no option)  reformat the files in place;
#   --check      change nothing; name each file that differs from
#                clang-format's output (with its count of differing lines)
#                on stderr and exit 1 if any does. CI stage 05-format.
# The files are every *.c and *.h tracked by git except the generated
# layer/cl_redirect.h (layer/gen_redirect.sh writes it), or the files named.
# clang-format-14 (Debian 12's) is used when installed, so that CI and
# developers agree; CLANG_FORMAT=/path/to/clang-format overrides the choice.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
case "${1:-}" in
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "ci/format.sh: unknown option $1 (usage: ci/format.sh [--check] [file...])" >&2; exit 2 ;;
esac

# Generated or not ours: never reformatted.
excluded=(layer/cl_redirect.h)

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  if command -v clang-format-14 >/dev/null; then
    cf=clang-format-14
  elif command -v clang-format >/dev/null; then
    cf=clang-format
  else
    echo "ci/format.sh: clang-format not found (Debian: apt-get install clang-format)" >&2
    exit 2
  fi
fi
command -v "$cf" >/dev/null || { echo "ci/format.sh: $cf: not found" >&2; exit 2; }
version=$("$cf" --version | sed -nE 's/.*clang-format version ([0-9][0-9.]*).*/\1/p')
case "$version" in
  14.*) ;;
  *) echo "ci/format.sh: warning: $cf is version ${version:-unknown}, not 14: its layout may differ from CI's" >&2 ;;
esac

if (($#)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- '*.c' '*.h' | grep -vxF -f <(printf '%s\n' "${excluded[@]}"))
  # A tracked file deleted in the work tree is not there to format.
  for i in "${!files[@]}"; do [ -f "${files[$i]}" ] || unset 'files[$i]'; done
  files=("${files[@]}")
fi

if ((!check)); then
  changed=0
  for f in "${files[@]}"; do
    before=$(cksum <"$f")
    "$cf" -i --style=file --fallback-style=none "$f"
    [ "$(cksum <"$f")" = "$before" ] || changed=$((changed + 1))
  done
  echo "ci/format.sh: ${#files[@]} files formatted with clang-format $version, $changed changed"
  exit 0
fi

differ=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file --fallback-style=none "$f" | cmp -s - "$f"; then
    lines=$(diff <("$cf" --style=file --fallback-style=none "$f") "$f" | grep -c '^[<>]' || true)
    echo "ci/format.sh: $f differs from clang-format's output ($lines lines)" >&2
    differ=$((differ + 1))
  fi
done
echo "${#files[@]} files checked with clang-format $version, $differ differ"
if ((differ)); then
  echo "ci/format.sh: run ci/format.sh to reformat them" >&2
  exit 1
fi
