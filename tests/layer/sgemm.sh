#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke test of bench/layer-sgemm.c (the unmodified CLBlast program of the
# layer's end-to-end target) on POCL: a small SGEMM and the small-transfer
# latency loop, each without and with libclpin-layer.so. C must verify in
# every run, and under the layer every write of A and B and every read of C
# must have gone through clpin (CLPIN_DEBUG), staged in one chunk and, with a
# small CLPIN_CHUNK, pipelined; the latency loop's small transfers must have
# been left to the driver. Speed is not checked (POCL is host-unified).
# Usage: sgemm.sh <layer-sgemm> <libclpin-layer.so>
# Logs go to LAYER_SGEMM_DIR (default: a temporary directory). Prints one
# line per run; exit status 1 on any failure.
set -uo pipefail
prog=$1 layer=$2
out=${LAYER_SGEMM_DIR:-$(mktemp -d)}
mkdir -p "$out"
n=256 runs=1
bytes=$((n * n * 4))
calls=$((runs + 1)) # the warm-up run transfers too
iters=5
# POCL is host-unified: without CLPIN_PINNED_H2D=1 clpin would not stage.
# A 256 KiB matrix is below the layer's and the engine's default minimums
# (CLPIN_LAYER_MIN 1M, CLPIN_STAGE_MIN 2M): lower both.
export CLPIN_PINNED_H2D=1
small=(CLPIN_LAYER_MIN=64K CLPIN_STAGE_MIN=64K CLPIN_STAGE_MIN_H2D=64K)
status=0
fail() {
  echo "layer-sgemm smoke: $*"
  status=1
}

# run TAG ENV... -- ARGS...: one run of the program, its summary checked.
run() {
  local tag=$1 env=()
  shift
  while [ "$1" != -- ]; do
    env+=("$1")
    shift
  done
  shift
  local rc=0
  env "${env[@]}" timeout 300 "$prog" "$@" >"$out/$tag.txt" 2>"$out/$tag.err" || rc=$?
  if ((rc)); then
    fail "$tag: exit status $rc ($*)"
    tail -n 20 "$out/$tag.err"
    return 1
  fi
  local want=verified=$runs/$runs
  [[ " $* " == *" --latency "* ]] && want=verified=yes
  if ! grep -q "^layer-sgemm: summary: .* $want\$" "$out/$tag.txt"; then
    fail "$tag: no summary line with $want"
    return 1
  fi
}

# routed TAG DIRECTION: transfers of the matrices' size through clpin.
routed() { grep -c "clpin-layer: $2 $bytes bytes (blocking): through clpin\$" "$out/$1.err"; }

run plain -- --n $n --runs $runs && echo "layer-sgemm smoke: plain: C verified ($runs run + warm-up)"
for chunk in default 64K; do
  tag=layer-chunk-$chunk env=(OPENCL_LAYERS="$layer" CLPIN_DEBUG=2 "${small[@]}")
  [ "$chunk" = default ] || env+=("CLPIN_CHUNK=$chunk")
  run "$tag" "${env[@]}" -- --n $n --runs $runs || continue
  w=$(routed "$tag" write) r=$(routed "$tag" read)
  mode=staged
  [ "$chunk" = default ] || mode=pipelined
  e=$(grep -c -E "^clpin: (write|read) $bytes bytes: $mode" "$out/$tag.err")
  if ! grep -q 'clpin-layer: loaded' "$out/$tag.err"; then
    fail "$tag: the layer was not loaded"
  elif ((w != 2 * calls || r != calls || e != 3 * calls)); then
    fail "$tag: $w writes and $r reads of $bytes bytes through clpin, $e $mode by clpin" \
      "(want $((2 * calls)), $calls, $((3 * calls)))"
  else
    echo "layer-sgemm smoke: CLPIN_CHUNK=$chunk: C verified; $w writes and $r reads through clpin, $mode"
  fi
done

# The latency loop (4 to 64 KiB) at the layer's defaults: every call below
# CLPIN_LAYER_MIN, left to the driver, data intact.
run latency-plain -- --latency --runs $runs --iters $iters
if run latency-layer OPENCL_LAYERS="$layer" CLPIN_DEBUG=2 -- --latency --runs $runs --iters $iters; then
  below=$(grep -c ': below CLPIN_LAYER_MIN$' "$out/latency-layer.err")
  through=$(grep -c ': through clpin$' "$out/latency-layer.err")
  want=$((2 * 3 * iters * calls))
  if ((below != want || through != 0)); then
    fail "latency: $below calls below CLPIN_LAYER_MIN, $through through clpin (want $want, 0)"
  else
    echo "layer-sgemm smoke: latency: $below small calls left to the driver, data intact"
  fi
fi
exit $status
