#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file names its licence in an SPDX line near its top: C and
# headers, Python, shell, CMake (and CMakeLists.txt), the .in templates,
# Makefiles, the Debian maintainer scripts. `ci/spdx.sh --fix` adds the line
# where it is missing (after a #! line); without it, lists the files that
# lack one and fails. Exempt: tests/compat/clpin-0.2.h, an unchanged copy
# of the 0.2.0 header (the compatibility test needs it byte for byte).
set -euo pipefail
cd "$(dirname "$0")/.."
id='SPDX-License-Identifier: Apache-2.0'
fix=0
[ "${1:-}" = --fix ] && fix=1
missing=()
while IFS= read -r f; do
  [ -f "$f" ] || continue
  case $f in tests/compat/clpin-0.2.h) continue ;; esac
  head -n 5 "$f" | grep -q "SPDX-License-Identifier:" && continue
  if ((fix)); then
    case $f in
      *.c | *.h) line="/* $id */" ;;
      *.pc.in) line="# $id" ;;
      *) line="# $id" ;;
    esac
    if head -n 1 "$f" | grep -q '^#!'; then
      { head -n 1 "$f"; echo "$line"; tail -n +2 "$f"; } >"$f.spdx"
    else
      { echo "$line"; cat "$f"; } >"$f.spdx"
    fi
    chmod --reference="$f" "$f.spdx"
    mv "$f.spdx" "$f"
  else
    missing+=("$f")
  fi
done < <(git ls-files -- '*.c' '*.h' '*.py' '*.sh' '*.cmake' '*CMakeLists.txt' '*.in' \
  '*Makefile' '.ci/run' 'cmake/deb/*/postinst' 'cmake/deb/*/prerm' 'cmake/deb/*/triggers' |
  grep -v '^cmake/deb/copyright.in$')
if ((${#missing[@]})); then
  printf 'ci/spdx.sh: no SPDX-License-Identifier line in %s\n' "${missing[@]}" >&2
  echo "ci/spdx.sh: ${#missing[@]} files lack it (ci/spdx.sh --fix adds it)" >&2
  exit 1
fi
echo "ci/spdx.sh: every source file names its licence"
