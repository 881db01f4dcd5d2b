#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The options table of docs/API.md, generated from its one source: the
# `specs` table of src/options.c (each option's name, valid values, default
# and meaning).
#
#   ci/options-table.sh            print the Markdown table
#   ci/options-table.sh --check    fail when docs/API.md's table differs
#   ci/options-table.sh --write    replace docs/API.md's table with it
#
# docs/API.md holds the table between the lines
# `<!-- options-table: begin (ci/options-table.sh) -->` and
# `<!-- options-table: end -->`; no other file keeps a copy (README.md and
# include/clpin.h point to it). CI runs --check in 60-docs.
set -euo pipefail
cd "$(dirname "$0")/.."
src=src/options.c
doc=docs/API.md
begin='<!-- options-table: begin (ci/options-table.sh) -->'
end='<!-- options-table: end -->'

# Each entry of `specs` is `[CLPIN_OPT_X] = {...},`: its string literals, with
# adjacent literals joined as C joins them, are in order the variable, the
# valid values, the default and the meaning; the other fields hold none.
table() {
  awk '
    /^static const option_spec specs\[/ { on = 1; next }
    on && /^};/ { on = 0 }
    !on { next }
    /\[CLPIN_OPT_[A-Z0-9_]+\][[:space:]]*=/ { entry = ""; inside = 1 }
    inside { entry = entry "\n" $0 }
    inside && /\},[[:space:]]*$/ { inside = 0; emit(entry) }
    function emit(text,   i, c, n, instr, cur, have, f) {
      n = 0; instr = 0; cur = ""; have = 0
      for (i = 1; i <= length(text); i++) {
        c = substr(text, i, 1)
        if (instr) {
          if (c == "\\") { i++; cur = cur substr(text, i, 1) }
          else if (c == "\"") instr = 0
          else cur = cur c
        } else if (c == "\"") { instr = 1; have = 1 }
        else if (c == "," && have) { f[++n] = cur; cur = ""; have = 0 }
      }
      if (have) f[++n] = cur
      if (n != 4) { printf "options-table: an entry of specs has %d strings, want 4 (name, valid, default, meaning):%s\n", n, text > "/dev/stderr"; bad = 1; exit 1 }
      for (i = 1; i <= 4; i++)
        if (index(f[i], "|")) { printf "options-table: %s: a \"|\" would break the table\n", f[1] > "/dev/stderr"; bad = 1; exit 1 }
      rows++
      printf "| `%s` | %s | %s | %s |\n", f[1], f[4], f[2], f[3]
    }
    BEGIN { print "| variable | meaning | valid values | default |"; print "|---|---|---|---|" }
    END { if (!bad && rows == 0) { print "options-table: no entry found in specs" > "/dev/stderr"; exit 1 } }
  ' "$src"
}

current() { # the table between the markers of docs/API.md
  awk -v b="$begin" -v e="$end" '$0 == e { on = 0 } on { print } $0 == b { on = 1; n++ } END { exit n != 1 }' "$doc"
}

generated=$(table)
case ${1:-} in
  "") printf '%s\n' "$generated" ;;
  --check)
    have=$(current) || { echo "options-table: $doc has no single '$begin' ... '$end' block" >&2; exit 1; }
    if [ "$have" != "$generated" ]; then
      echo "options-table: $doc's options table differs from src/options.c's specs" \
        "(run ci/options-table.sh --write):" >&2
      diff <(printf '%s\n' "$have") <(printf '%s\n' "$generated") >&2 || true
      exit 1
    fi
    echo "options-table: $doc's table matches src/options.c ($(($(printf '%s\n' "$generated" | wc -l) - 2)) options)"
    ;;
  --write)
    current >/dev/null || { echo "options-table: $doc has no single '$begin' ... '$end' block" >&2; exit 1; }
    tmp=$(mktemp)
    printf '%s\n' "$generated" >"$tmp"
    awk -v b="$begin" -v e="$end" -v t="$tmp" '
      $0 == e { on = 0 }
      !on { print }
      $0 == b { on = 1; while ((getline line < t) > 0) print line }' "$doc" >"$doc.new"
    mv "$doc.new" "$doc"
    rm -f "$tmp"
    ;;
  *) echo "usage: ci/options-table.sh [--check | --write]" >&2; exit 2 ;;
esac
