#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke test of bench/layer-image.c (the unmodified image pipeline of issue
# 20) on POCL: without and with libclpin-layer.so, results verified in both
# (the program checks them), and under the layer its four rect and image
# transfers of every frame went through clpin and were staged (CLPIN_DEBUG).
# Speed is not checked (POCL is host-unified).
# Usage: image.sh <layer-image> <libclpin-layer.so>
set -uo pipefail
prog=$1 layer=$2
out=${LAYER_IMAGE_DIR:-$(mktemp -d)}
mkdir -p "$out"
side=512 frames=2
# 1 MiB per transfer: below the layer's and the engine's default minimums.
export CLPIN_PINNED_H2D=1
small=(CLPIN_LAYER_MIN=64K CLPIN_STAGE_MIN=64K CLPIN_STAGE_MIN_H2D=64K)
status=0
if ! timeout 300 "$prog" --side $side --frames $frames >"$out/plain.txt" 2>"$out/plain.err"; then
  echo "layer-image smoke: the run without the layer failed"
  cat "$out/plain.err"
  exit 1
fi
# Its host memory pinned (mapped ALLOC_HOST_PTR buffers): verified too.
if ! timeout 300 "$prog" --side $side --frames $frames --pinned 1 >"$out/pinned.txt" 2>"$out/pinned.err" ||
  ! grep -q 'pinned host memory, results verified' "$out/pinned.txt"; then
  echo "layer-image smoke: the run from pinned memory failed"
  cat "$out/pinned.err"
  status=1
fi
for chunk in default 64K; do
  env=(OPENCL_LAYERS="$layer" CLPIN_DEBUG=2 "${small[@]}")
  [ "$chunk" = default ] || env+=(CLPIN_CHUNK=$chunk)
  if ! env "${env[@]}" timeout 300 "$prog" --side $side --frames $frames \
    >"$out/layer-$chunk.txt" 2>"$out/layer-$chunk.err"; then
    echo "layer-image smoke: CLPIN_CHUNK=$chunk: the run with the layer failed"
    tail -n 20 "$out/layer-$chunk.err"
    status=1
    continue
  fi
  want=$((4 * (frames + 1)))
  routed=$(grep -c 'clpin-layer: .* 1048576 bytes .*: through clpin$' "$out/layer-$chunk.err" || true)
  staged=$(grep -c -E '^clpin: (write|read) 1048576 bytes: (staged|pipelined)' "$out/layer-$chunk.err" || true)
  if ((routed < want || staged < want)); then
    echo "layer-image smoke: CLPIN_CHUNK=$chunk: $routed transfers routed, $staged staged (want $want)"
    status=1
  else
    echo "layer-image smoke: CLPIN_CHUNK=$chunk: results verified; $routed rect/image transfers through clpin, $staged staged"
  fi
done
exit $status
