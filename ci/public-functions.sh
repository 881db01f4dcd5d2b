#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Print the public functions clpin.h declares (every CLPIN_API declaration),
# one name a line, sorted. Used by ci/stages/50-package.sh (exported symbols)
# and ci/stages/60-docs.sh (reference and docs/API.md).
# Usage: ci/public-functions.sh [header]   (default include/clpin.h)
set -euo pipefail
header=${1:-include/clpin.h}
# -fpreprocessed -dD: drop comments, keep macros unexpanded (CLPIN_API stays).
cc -fpreprocessed -dD -E -P "$header" 2>/dev/null | grep -v '^[[:space:]]*#' | tr '\n' ' ' |
  grep -oE 'CLPIN_API[^;(]*\(' | sed -E 's/[[:space:]]*\($//; s/.*[^A-Za-z0-9_]//' | sort -u
