#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Rect and image transfers on a GPU (docs/BENCHMARKS.md), in PROCS processes (default
# 2), results in $OUTDIR:
#
#   bench   bench/rect-bench: clpin_write_rect / read_rect / write_image /
#           read_image against the plain and the pinned call, RUNS (default
#           5) runs per process, 64 MiB each and small ones (rect-bench-*.txt;
#           rect-targets.txt: every target line of every process, then the
#           held counts summed over the processes)
#   layer   bench/layer-image, an unmodified image pipeline, without and with
#           libclpin-layer.so, FRAMES (default 7) frames per process, 64 MiB
#           per transfer, and from pinned memory without the layer (the bus)
#           (layer-image-{plain,layer,pinned}-*.txt; layer-targets.txt:
#           per operation, with / without, the ratio of the medians in each
#           process pair, in how many frames of the layer's runs the rate
#           was at least the target times the plain run's median, and the
#           layer's median against the pinned run's)
#
# PARTS (default "bench layer") picks parts; PLATFORM (default NVIDIA)
# names the platform. The layer needs a loader with layer support (ocl-icd
# >= 2.3.0): OCL_ICD_DEB=/path/ocl-icd-libopencl1_*.deb is unpacked and put
# first on LD_LIBRARY_PATH where the machine's is older. Runs in about a
# minute on the H100; tested on POCL with PLATFORM=Portable SIDE=1024
# (where every ratio is meaningless: host-unified memory).
#
#   bench/gpu-rect.sh        (or: OCL_ICD_DEB=... PROCS=2 RUNS=5 bench/gpu-rect.sh)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PROCS=${PROCS:-2}
RUNS=${RUNS:-5}
FRAMES=${FRAMES:-7}
SIDE=${SIDE:-4096}
PARTS=${PARTS:-bench layer}
PLATFORM=${PLATFORM:-NVIDIA}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_start build/gpu-rect

ocl_icd_from_deb "$build"
bench_build "$BUILD_DIR" -DCLPIN_BUILD_LAYER=ON clpin-layer rect-bench layer-image || exit 1
layer=$build/layer/libclpin-layer.so

# ---- rect-bench -------------------------------------------------------------------
if want bench; then
  bench_procs rect-bench "$build/bench/rect-bench" --platform "$PLATFORM" --runs "$RUNS" \
    --rows $((SIDE * SIDE * 4 / 16384)) --row 16K --side "$SIDE"
  {
    echo "rect-bench: $PROCS processes x $RUNS runs; every target line, then held counts summed"
    for p in $(seq "$PROCS"); do
      echo "process $p:"
      awk '/^[a-z]/ { geo = $0; sub(/:.*/, "", geo) }
        /target >=/ { sub(/^ +/, ""); print "  " ($0 ~ /^(small|tiny)/ ? "" : geo ": ") $0 }' \
        "$OUTDIR/rect-bench-$p.txt"
    done
    echo "summed:"
    cat "$OUTDIR"/rect-bench-*.txt | awk '
      /^[a-z]/ { geo = $0; sub(/:.*/, "", geo) }
      /target >=/ {
        name = $0; sub(/^ +/, "", name); sub(/ +median.*/, "", name)
        key = name ~ /^(small|tiny)/ ? name : geo ": " name
        match($0, /held in [0-9]+\/[0-9]+/); split(substr($0, RSTART + 8, RLENGTH - 8), hn, "/")
        held[key] += hn[1]; n[key] += hn[2]
        match($0, /target >= [0-9.]+/); goal[key] = substr($0, RSTART + 10, RLENGTH - 10)
        if (!(key in order)) { order[key] = ++k; keys[k] = key }
      }
      END { for (i = 1; i <= k; i++) printf "  %-70s >= %sx held in %d/%d runs\n", keys[i], goal[keys[i]], held[keys[i]], n[keys[i]] }'
  } | tee "$OUTDIR/rect-targets.txt"
fi

# ---- layer-image: the layer on an unmodified program --------------------------------
if want layer; then
  image=("$build/bench/layer-image" --platform "$PLATFORM" --side "$SIDE" --frames "$FRAMES")
  for p in $(seq "$PROCS"); do # the three runs in turn in each process pair
    "${image[@]}" >"$OUTDIR/layer-image-plain-$p.txt" 2>&1 || status=1
    OPENCL_LAYERS=$layer CLPIN_LAYER_STATS=1 "${image[@]}" >"$OUTDIR/layer-image-layer-$p.txt" 2>&1 ||
      status=1
    "${image[@]}" --pinned 1 >"$OUTDIR/layer-image-pinned-$p.txt" 2>&1 || status=1
  done
  {
    echo "layer-image: $PROCS process pairs x $FRAMES frames, $SIDE x $SIDE RGBA8; with the layer / without"
    col=0
    for op in "upload rect" "upload image" "download rect" "download image"; do
      col=$((col + 1))
      goal=3
      [[ $op == upload* ]] && goal=4
      held=0 total=0 ratios=""
      for p in $(seq "$PROCS"); do
        pm=$(grep "^  $op " "$OUTDIR/layer-image-plain-$p.txt" | sed -E 's/.*median +([0-9.]+).*/\1/')
        lm=$(grep "^  $op " "$OUTDIR/layer-image-layer-$p.txt" | sed -E 's/.*median +([0-9.]+).*/\1/')
        [ -n "$pm" ] && [ -n "$lm" ] || continue
        ratios+=" $(awk -v a="$lm" -v b="$pm" 'BEGIN { printf "%.2f", a / b }')"
        # Held: the layer's frames whose rate is at least goal x the plain
        # run's median in the same process pair.
        read -r h t < <(awk -v c="$col" -v b="$pm" -v g="$goal" '
          /^  frame [0-9]+:/ { n++; if ($(c + 2) >= g * b) h++ } END { print h + 0, n + 0 }' \
          "$OUTDIR/layer-image-layer-$p.txt")
        held=$((held + h)) total=$((total + t))
      done
      printf "  %-16s ratios of medians:%s  target >= %sx: held in %d/%d frames\n" \
        "$op" "$ratios" "$goal" "$held" "$total"
    done
    # The layer against the same program from pinned memory (the bus).
    for op in "upload rect" "upload image" "download rect" "download image"; do
      ratios=""
      for p in $(seq "$PROCS"); do
        lm=$(grep "^  $op " "$OUTDIR/layer-image-layer-$p.txt" | sed -E 's/.*median +([0-9.]+).*/\1/')
        bm=$(grep "^  $op " "$OUTDIR/layer-image-pinned-$p.txt" | sed -E 's/.*median +([0-9.]+).*/\1/')
        [ -n "$lm" ] && [ -n "$bm" ] || continue
        ratios+=" $(awk -v a="$lm" -v b="$bm" 'BEGIN { printf "%.2f (%.1f GB/s)", a / b, b }')"
      done
      printf "  %-16s with the layer / from pinned memory:%s\n" "$op" "$ratios"
    done
    for f in "$OUTDIR"/layer-image-*.txt; do
      printf "  %-24s %s\n" "$(basename "$f" .txt):" "$(grep 'frame (ms)' "$f" | sed 's/^ *//')"
    done
    grep -h 'clpin-layer: stats' "$OUTDIR"/layer-image-layer-*.txt | sed 's/^/  /' | head -n 8
  } | tee "$OUTDIR/layer-targets.txt"
fi

exit $status
