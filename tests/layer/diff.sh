#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Differential test of libclpin-layer.so: run layer_transcript without and
# with the layer (OPENCL_LAYERS) and require identical transcripts, and
# require the layer's CLPIN_DEBUG log to show transfers that went through
# clpin (so the run proves something). Extra runs vary CLPIN_CHUNK so the
# pipelined paths are covered too.
# Usage: diff.sh <layer_transcript> <libclpin-layer.so> [all|blocking] [min-routed]
# Prints one line per run; exit status 1 on any difference.
set -uo pipefail
prog=$1 layer=$2 mode=${3:-all} want=${4:-10}
out=${LAYER_DIFF_DIR:-$(mktemp -d)}
mkdir -p "$out"
status=0
# LAYER_DIFF_SKIP_CRASHES=1 (for a driver that crashes on some invalid call
# by itself, without any layer): when the run without the layer dies of a
# signal, the section it died in (the transcript's last "transcript: NAME"
# line on stderr) is left out of every run, named in the output, and the run
# is made again; at most 8 sections. Without it any failure fails the test.
skip_crashes=${LAYER_DIFF_SKIP_CRASHES:-0}
export LAYER_TRANSCRIPT_SKIP=${LAYER_TRANSCRIPT_SKIP:-}
for attempt in $(seq 9); do
  timeout 300 "$prog" "$mode" >"$out/plain.txt" 2>"$out/plain.err"
  rc=$?
  ((rc == 0)) && break
  section=$(sed -n 's/^transcript: \([a-z_]*\)(.*/\1/p' "$out/plain.err" | tail -n 1)
  if [ "$skip_crashes" = 1 ] && ((rc > 128 && rc != 137 && attempt < 9)) && [ -n "$section" ]; then
    echo "layer-diff: the run without the layer died of signal $((rc - 128)) in $section(): left out of every run"
    cp "$out/plain.err" "$out/plain-crash-$section.err"
    LAYER_TRANSCRIPT_SKIP=${LAYER_TRANSCRIPT_SKIP:+$LAYER_TRANSCRIPT_SKIP,}$section
    continue
  fi
  echo "layer-diff: the run without the layer failed ($rc)"
  cat "$out/plain.err"
  exit 1
done
[ -z "$LAYER_TRANSCRIPT_SKIP" ] || echo "layer-diff: sections left out: $LAYER_TRANSCRIPT_SKIP"
for chunk in default 1M; do
  # Writes staged from the reads' threshold on (by default they stage only
  # from 16 MiB): the staged paths are what is under test.
  env=(OPENCL_LAYERS="$layer" CLPIN_DEBUG=2 CLPIN_STAGE_MIN_H2D="${LAYER_DIFF_STAGE_MIN_H2D:-0}")
  [ "$chunk" = default ] || env+=(CLPIN_CHUNK="$chunk")
  tag=layer-chunk-$chunk
  if ! env "${env[@]}" timeout 300 "$prog" "$mode" >"$out/$tag.txt" 2>"$out/$tag.err"; then
    echo "layer-diff: $mode, CLPIN_CHUNK=$chunk: the run with the layer failed"
    tail -n 20 "$out/$tag.err"
    status=1
    continue
  fi
  lines=$(wc -l <"$out/plain.txt")
  routed=$(grep -c 'clpin-layer: .*: through clpin' "$out/$tag.err" || true)
  passed=$(grep -c 'clpin-layer: .*: to the driver' "$out/$tag.err" || true)
  engine=$(grep -c -E '^clpin: (write|read) [0-9]+ bytes: (staged|pipelined)' "$out/$tag.err" || true)
  if ! diff -u "$out/plain.txt" "$out/$tag.txt" >"$out/$tag.diff"; then
    echo "layer-diff: $mode, CLPIN_CHUNK=$chunk: transcripts DIFFER ($lines lines)"
    cat "$out/$tag.diff"
    status=1
  elif ((routed < want || engine < want)); then
    echo "layer-diff: $mode, CLPIN_CHUNK=$chunk: only $routed transfers routed, $engine staged by clpin (want >= $want)"
    status=1
  else
    echo "layer-diff: $mode, CLPIN_CHUNK=$chunk: $lines transcript lines identical; $routed transfers through clpin ($engine staged/pipelined), $passed left to the driver"
  fi
done
exit $status
