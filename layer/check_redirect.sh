#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proof that the layer's copy of clpin never calls back into the layer:
#  1. every OpenCL function called in src/ (cl[A-Z]\w+\() is redirected by
#     layer/cl_redirect.h to the next dispatch stage;
#  2. cl_redirect.h is what gen_redirect.sh makes from the installed headers;
#  3. the built layer exports exactly the ICD loader's three entry points and
#     needs no cl* symbol from anywhere (it does not link libOpenCL).
# Usage: layer/check_redirect.sh <libclpin-layer.so>
set -euo pipefail
cd "$(dirname "$0")/.."
so=$1
fail=0
mapfile -t called < <(grep -rhoE '\bcl[A-Z][A-Za-z0-9_]*[[:space:]]*\(' src/ | sed -E 's/[[:space:]]*\($//' | sort -u)
missing=()
for f in "${called[@]}"; do
  grep -q "^#define $f(\.\.\.) (clpin__layer_next\.$f(" layer/cl_redirect.h || missing+=("$f")
done
if ((${#missing[@]})); then
  echo "check_redirect: src/ calls OpenCL functions cl_redirect.h does not redirect: ${missing[*]}"
  fail=1
fi
if ! diff -q <(layer/gen_redirect.sh) layer/cl_redirect.h >/dev/null; then
  echo "check_redirect: layer/cl_redirect.h is stale: run layer/gen_redirect.sh > layer/cl_redirect.h"
  fail=1
fi
exports=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort | tr '\n' ' ')
if [ "$exports" != "clGetLayerInfo clInitLayer clInitLayerWithProperties " ]; then
  echo "check_redirect: $so exports more than the layer entry points: $exports"
  fail=1
fi
undef=$(nm -D --undefined-only "$so" | awk '{print $2}' | grep -E '^cl[A-Z]' || true)
if [ -n "$undef" ]; then
  echo "check_redirect: $so needs OpenCL symbols from elsewhere: $undef"
  fail=1
fi
if readelf -d "$so" | grep -q 'libOpenCL'; then
  echo "check_redirect: $so links libOpenCL"
  fail=1
fi
((fail == 0)) && echo "check_redirect: ${#called[@]} OpenCL functions called in src/, all redirected; 3 exports; no cl* imports"
exit $fail
