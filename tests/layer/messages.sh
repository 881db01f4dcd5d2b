#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What the layer says and counts on a host-unified device (POCL) at the
# defaults: one line per decision, with the real reason (CLPIN_DEBUG=2: every
# one; CLPIN_DEBUG=1: each distinct line once, repeats counted, no pool
# events); the stats count what happened; the options line shows the
# layer's cap; bad layer options are reported as clpin's are.
# Usage: messages.sh <layer_transcript> <libclpin-layer.so>
set -uo pipefail
prog=$1 layer=$2
out=${LAYER_MESSAGES_DIR:-$(mktemp -d)}
mkdir -p "$out"
status=0
fail() { echo "layer-messages: $*"; status=1; }
unset CLPIN_PINNED_H2D CLPIN_LAYER_MIN CLPIN_STAGE_MIN CLPIN_STAGE_MIN_H2D CLPIN_MAX_CACHED
# The transcript's transfers are 3 MiB and 6 MiB: above CLPIN_LAYER_MIN (1M),
# writes below CLPIN_STAGE_MIN_H2D (16M), reads above CLPIN_STAGE_MIN (2M).
env OPENCL_LAYERS="$layer" CLPIN_DEBUG=2 CLPIN_LAYER_STATS=1 timeout 300 "$prog" blocking \
  >"$out/default.txt" 2>"$out/default.err" || fail "the transcript failed under the layer"
err=$out/default.err
grep -q '^clpin: options:.* CLPIN_MAX_CACHED=256M' "$err" ||
  fail "the options line does not show the layer's 256M cap"
# Nothing is both routed and sent plain: on POCL at the defaults clpin
# would not stage, so the layer leaves those transfers to the driver itself.
n_unified=$(grep -c 'clpin-layer: read [0-9]* bytes (blocking): to the driver (host-unified): host-unified device' "$err")
((n_unified > 0)) || fail "no read left to the driver for the host-unified device"
! grep -q 'bytes ([a-z-]*): through clpin' "$err" || fail "a transfer is logged 'through clpin' on POCL at the defaults"
! grep -q '^clpin: \(write\|read\) [0-9]* bytes: plain (host-unified device)' "$err" ||
  fail "clpin logged a plain transfer the layer had routed to it"
# A write of 3 MiB: above CLPIN_LAYER_MIN, below the write staging minimum.
grep -q 'clpin-layer: write 3145728 bytes (blocking): to the driver (small): below CLPIN_STAGE_MIN_H2D' "$err" ||
  fail "a 3 MiB write is not logged as below CLPIN_STAGE_MIN_H2D"
! grep -q 'write 3145728 bytes.*below CLPIN_LAYER_MIN' "$err" ||
  fail "a 3 MiB write is logged below CLPIN_LAYER_MIN (1M)"
# The stats: the same count as the log, and no estimate.
stat_unified=$(sed -n 's/^clpin-layer: stats: read  to the driver (host-unified) *\([0-9]*\) calls.*/\1/p' "$err")
[ "$stat_unified" = "$n_unified" ] || fail "stats count $stat_unified host-unified reads, the log $n_unified"
grep -q '^clpin-layer: stats: read  through clpin  *0 calls' "$err" || fail "stats count reads through clpin"
! grep -qi 'estimate\|saved\|H100' "$err" || fail "the stats print an estimate"
# Bad layer options: a warning in clpin's words, the default kept.
env OPENCL_LAYERS="$layer" CLPIN_LAYER_STATS=yes CLPIN_LAYER_MIN=0 CLPIN_DEBUG=1 timeout 300 "$prog" blocking \
  >/dev/null 2>"$out/bad.err" || fail "the transcript failed with bad layer options"
grep -q 'clpin: ignoring CLPIN_LAYER_STATS="yes": not a valid value; valid: 0 or 1; using the default 0' \
  "$out/bad.err" || fail "CLPIN_LAYER_STATS=yes is not reported"
! grep -q 'clpin-layer: stats' "$out/bad.err" || fail "CLPIN_LAYER_STATS=yes printed stats"
grep -q 'clpin: ignoring CLPIN_LAYER_MIN="0": below the minimum size' "$out/bad.err" ||
  fail "CLPIN_LAYER_MIN=0 is not reported"
grep -q '(CLPIN_LAYER_MIN 1048576,' "$out/bad.err" || fail "CLPIN_LAYER_MIN=0 did not keep the 1M default"
# Staging forced on: the same transfers go through clpin and are counted so.
env OPENCL_LAYERS="$layer" CLPIN_PINNED_H2D=1 CLPIN_STAGE_MIN_H2D=1M CLPIN_LAYER_STATS=1 CLPIN_DEBUG=2 \
  timeout 300 "$prog" blocking >"$out/forced.txt" 2>"$out/forced.err" || fail "the forced run failed"
n_through=$(grep -c 'clpin-layer: \(write\|read\) [0-9]* bytes (blocking): through clpin$' "$out/forced.err")
n_staged=$(grep -c '^clpin: \(write\|read\) [0-9]* bytes: \(staged\|pipelined\)' "$out/forced.err")
((n_through > 0 && n_through == n_staged)) ||
  fail "forced: $n_through transfers logged through clpin, $n_staged staged by clpin"
cmp -s "$out/default.txt" "$out/forced.txt" || fail "the transcripts of the two runs differ"
# CLPIN_DEBUG=1, staging forced on: each distinct line once, the repeats
# said in one line at exit, and no pool event.
env OPENCL_LAYERS="$layer" CLPIN_PINNED_H2D=1 CLPIN_STAGE_MIN_H2D=1M CLPIN_DEBUG=1 \
  timeout 300 "$prog" blocking >"$out/once.txt" 2>"$out/once.err" || fail "the CLPIN_DEBUG=1 run failed"
dups=$(grep -E '^clpin(-layer)?: ' "$out/once.err" | sort | uniq -d | head -n 3)
[ -z "$dups" ] || fail "CLPIN_DEBUG=1 wrote a line twice: $dups"
grep -q '^clpin-layer: .*: through clpin$' "$out/once.err" || fail "CLPIN_DEBUG=1 names no transfer through clpin"
grep -q '^clpin: [0-9]* repeats of [0-9]* debug lines above were not written again' "$out/once.err" ||
  fail "CLPIN_DEBUG=1 does not say at exit how many repeats it left out"
! grep -q '^clpin: pool [0-9a-fx]*: \(hit\|miss\|release [0-9]\|release over\|freed\|trim\)' "$out/once.err" ||
  fail "CLPIN_DEBUG=1 wrote pool events (CLPIN_DEBUG=2 only)"
once=$(grep -c -E '^clpin(-layer)?: ' "$out/once.err")
every=$(grep -c -E '^clpin(-layer)?: ' "$out/forced.err")
[ $status = 0 ] && echo "layer-messages: ok: $n_unified reads left to the driver on the host-unified device at the defaults, $n_through transfers staged when forced; bad options reported; $once debug lines at CLPIN_DEBUG=1, $every at 2"
exit $status
