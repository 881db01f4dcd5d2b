#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The OpenCL layer on a GPU, unmodified programs without and with
# libclpin-layer.so, alternating, RUNS times each (results in $OUTDIR):
#
#   clpeak   clpeak --transfer-bandwidth (clpeak-*.txt, clpeak-decisions.txt)
#   sgemm    bench/layer-sgemm: CLBlast SGEMM, host matrices of SGEMM_MIB
#            (1 GiB) in all, SGEMM_RUNS runs per process; the end-to-end
#            target: time saved >= 0.5 x the transfers' time without the
#            layer (sgemm-*.txt, sgemm-target.txt)
#   latency  bench/layer-sgemm --latency: blocking 4, 16, 64 KiB transfers;
#            the target: with the layer <= 1.05 x without (latency-*.txt,
#            latency-target.txt)
#   diff     the differential test, tests/layer/diff.sh (layer-diff.txt); a
#            section the driver crashes in without the layer is left out of
#            both runs and named (LAYER_DIFF_SKIP_CRASHES=0 fails instead)
#
# PARTS (default "clpeak sgemm latency diff") picks parts; PLATFORM (default
# NVIDIA) names the platform for all but clpeak.
#
# Needs a loader with layer support (ocl-icd >= 2.3.0). Where the machine's
# libOpenCL is older or not ocl-icd, OCL_ICD_DEB=/path/ocl-icd-libopencl1_*.deb
# is unpacked and put first on LD_LIBRARY_PATH; CLPEAK_DEB likewise for clpeak.
# CLBLAST_DEB=/path/libclblast1_*.deb is unpacked for layer-sgemm, with
# libclblast-dev_*.deb from the same directory (or CLBLAST_DEV_DEB) for its
# header; without CLBLAST_DEB an installed CLBlast is used.
#
#   RUNS=5 OCL_ICD_DEB=... CLPEAK_DEB=... CLBLAST_DEB=... bench/gpu-layer.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RUNS=${RUNS:-3}
PARTS=${PARTS:-clpeak sgemm latency diff}
PLATFORM=${PLATFORM:-NVIDIA}
SGEMM_MIB=${SGEMM_MIB:-1024}
SGEMM_RUNS=${SGEMM_RUNS:-5}
LATENCY_RUNS=${LATENCY_RUNS:-5}
LATENCY_ITERS=${LATENCY_ITERS:-2000}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_start build/gpu-bench

ocl_icd_from_deb "$build"
bench_build "$BUILD_DIR" -DCLPIN_BUILD_LAYER=ON clpin-layer || exit 1
layer=$build/layer/libclpin-layer.so

# ---- clpeak ------------------------------------------------------------------
if want clpeak; then
  clpeak=$(command -v clpeak || true)
  if [ -z "$clpeak" ] && [ -n "${CLPEAK_DEB:-}" ]; then
    dpkg-deb -x "$CLPEAK_DEB" "$build/clpeak-deb"
    clpeak=$build/clpeak-deb/usr/bin/clpeak
  fi
  ldd "$clpeak" | grep -i opencl | tee "$OUTDIR/clpeak-loader.txt"
  for run in $(seq "$RUNS"); do
    "$clpeak" --transfer-bandwidth >"$OUTDIR/clpeak-plain-$run.txt" 2>&1 || status=1
    OPENCL_LAYERS=$layer CLPIN_LAYER_STATS=1 "$clpeak" --transfer-bandwidth \
      >"$OUTDIR/clpeak-layer-$run.txt" 2>&1 || status=1
  done
  OPENCL_LAYERS=$layer CLPIN_DEBUG=1 "$clpeak" --transfer-bandwidth 2>&1 >/dev/null |
    grep '^clpin-layer:' | sed -E 's/[0-9]+ bytes/N bytes/; s/0x[0-9a-f]+/PTR/g' | sort | uniq -c |
    sort -rn | head -n 20 >"$OUTDIR/clpeak-decisions.txt"
fi

# ---- layer-sgemm: build --------------------------------------------------------
# The program is built with CLBlast's own header (libclblast-dev, carried next
# to the runtime package) and linked to its library in the usual way, not
# declared by hand or dlopen'ed: the compiler checks the call against
# CLBlast's real prototype and enums, and the dynamic loader resolves
# CLBlastSgemm when the program starts. A copied declaration would repeat
# CLBlast's ABI by hand and fail silently if it ever drifted. It is built
# with cc rather than CMake so that no earlier configuration of $BUILD_DIR
# (made without CLBlast) stands in the way.
sgemm=$build/layer-sgemm
if want sgemm || want latency; then
  cflags=() libs=(-lclblast)
  if [ -n "${CLBLAST_DEB:-}" ]; then
    dev=${CLBLAST_DEV_DEB:-$(find "$(dirname "$CLBLAST_DEB")" -maxdepth 1 -name "libclblast-dev_*.deb" | sort | tail -n 1)}
    rm -rf "$build/clblast"
    dpkg-deb -x "$CLBLAST_DEB" "$build/clblast"
    if [ -n "$dev" ]; then
      dpkg-deb -x "$dev" "$build/clblast"
    else
      echo "gpu-layer: no libclblast-dev_*.deb next to $CLBLAST_DEB (or CLBLAST_DEV_DEB): no clblast_c.h" >&2
    fi
    cb=$build/clblast/usr
    export LD_LIBRARY_PATH=$cb/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    cflags=(-I"$cb/include") libs=(-L"$cb/lib/x86_64-linux-gnu" -l:libclblast.so.1)
  fi
  if cc -O2 -std=c11 -Wall -Wextra -D_GNU_SOURCE -Ibench -Isrc "${cflags[@]}" bench/layer-sgemm.c \
    bench/benchcl.c bench/benchstat.c src/size.c "${libs[@]}" -lOpenCL -lm -o "$sgemm"; then
    ldd "$sgemm" | grep -E 'clblast|OpenCL|not found' | tee "$OUTDIR/sgemm-loader.txt"
    if grep -q 'not found' "$OUTDIR/sgemm-loader.txt"; then
      echo "gpu-layer: layer-sgemm misses libraries (see above)" >&2
      sgemm="" status=1
    fi
  else
    echo "gpu-layer: layer-sgemm did not build (CLBLAST_DEB and libclblast-dev_*.deb?)" >&2
    sgemm="" status=1
  fi
fi

# The summary line's field $2 of file $1 ("layer-sgemm: summary: k=v ...").
field() { sed -n 's/^layer-sgemm: summary: //p' "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# Numbers on stdin -> "median min max".
stat3() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan nan nan"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }'
}
# fmt3 LIST: "median [min .. max]" of a list of numbers.
fmt3() { tr ' ' '\n' <<<"$1" | grep . | stat3 | awk '{ printf "%s [%s .. %s]", $1, $2, $3 }'; }
# target WHAT RATIOS GOAL ge|le HELD N: one line as engine-bench prints its targets.
target() {
  local med
  if [ -z "${2// /}" ]; then
    printf "  TARGET %-44s no data  held 0/%d  MISSED\n" "$1" "$6"
    return
  fi
  med=$(tr ' ' '\n' <<<"$2" | grep . | stat3 | cut -d' ' -f1)
  awk -v w="$1" -v s="$(fmt3 "$2")" -v g="$3" -v op="$4" -v h="$5" -v n="$6" -v m="$med" 'BEGIN {
    ok = op == "ge" ? m >= g : m <= g
    printf "  TARGET %-44s %s  %s %s  held %d/%d  %s\n", w, s, op == "ge" ? ">=" : "<=", g, h, n,
      ok ? "met" : "MISSED" }'
}

# ---- layer-sgemm: the end-to-end target ----------------------------------------
# Each run k is one process without the layer and one with it (CLPIN_LAYER_STATS
# shows the bytes it routed). From each process its median over SGEMM_RUNS
# runs: saved_k = total without - total with; the target holds in run k when
# saved_k >= 0.5 x (writes + read without the layer).
if want sgemm && [ -n "$sgemm" ]; then
  echo "=== layer-sgemm: CLBlast SGEMM, ${SGEMM_MIB} MiB of host matrices, $PLATFORM, $RUNS x 2 processes"
  args=(--platform "$PLATFORM" --mib "$SGEMM_MIB" --runs "$SGEMM_RUNS")
  for run in $(seq "$RUNS"); do
    "$sgemm" "${args[@]}" >"$OUTDIR/sgemm-plain-$run.txt" 2>"$OUTDIR/sgemm-plain-$run.err" || status=1
    OPENCL_LAYERS=$layer CLPIN_LAYER_STATS=1 "$sgemm" "${args[@]}" \
      >"$OUTDIR/sgemm-layer-$run.txt" 2>"$OUTDIR/sgemm-layer-$run.err" || status=1
  done
  {
    ratios="" saved="" xp="" xl="" tp="" tl="" gp="" gl="" wp="" wl="" held=0 ok=0
    for run in $(seq "$RUNS"); do
      p=$OUTDIR/sgemm-plain-$run.txt l=$OUTDIR/sgemm-layer-$run.txt
      T_p=$(field "$p" total_ms_med) X_p=$(field "$p" transfer_ms_med)
      T_l=$(field "$l" total_ms_med) X_l=$(field "$l" transfer_ms_med)
      routed=$(awk '/clpin-layer: stats: (write|read) +through clpin/ { b += $(NF - 1) } END { print b + 0 }' \
        "$OUTDIR/sgemm-layer-$run.err")
      if [ -z "$T_p" ] || [ -z "$T_l" ] || [ -z "$X_p" ] || [ -z "$X_l" ]; then
        echo "  run $run: a process failed or did not verify (sgemm-*-$run.txt/.err)"
        status=1
        continue
      fi
      if ((routed == 0)); then
        echo "  run $run: the layer routed nothing (not loaded? CLPIN_LAYER_STATS printed no bytes)"
        status=1
        continue
      fi
      ok=$((ok + 1))
      read -r s r h < <(awk -v tp="$T_p" -v tl="$T_l" -v xp="$X_p" 'BEGIN {
        s = tp - tl; r = s / xp; printf "%.3f %.4f %d\n", s, r, (r >= 0.5) }')
      held=$((held + h))
      saved+=" $s" ratios+=" $r" xp+=" $X_p" xl+=" $X_l" tp+=" $T_p" tl+=" $T_l"
      gp+=" $(field "$p" sgemm_ms_med)" gl+=" $(field "$l" sgemm_ms_med)"
      wp+=" $(field "$p" warmup_total_ms)" wl+=" $(field "$l" warmup_total_ms)"
      echo "  run $run: without the layer total $T_p ms (transfers $X_p), with it $T_l ms" \
        "(transfers $X_l; $routed bytes through clpin): saved $s ms = $r of the transfers"
    done
    echo "  medians over the runs' medians, [min .. max]:"
    echo "    transfers (writes + read), without the layer (ms)  $(fmt3 "$xp")"
    echo "    transfers (writes + read), with the layer (ms)     $(fmt3 "$xl")"
    echo "    SGEMM without / with the layer (ms)                $(fmt3 "$gp") / $(fmt3 "$gl")"
    echo "    end to end without the layer (ms)                  $(fmt3 "$tp")"
    echo "    end to end with the layer (ms)                     $(fmt3 "$tl")"
    echo "    time saved (ms)                                    $(fmt3 "$saved")"
    echo "    warm-up run, end to end without / with (ms; CLBlast's kernels, the layer's pool)"
    echo "                                                       $(fmt3 "$wp") / $(fmt3 "$wl")"
    target "SGEMM end to end: saved / transfers without" "$ratios" 0.5 ge "$held" "$RUNS"
    ((ok == RUNS)) || echo "  only $ok of $RUNS runs gave both figures"
  } >"$OUTDIR/sgemm-target.txt"
  cat "$OUTDIR/sgemm-target.txt"
fi

# ---- layer-sgemm --latency: small transfers ---------------------------------------
# Blocking 4, 16 and 64 KiB writes and reads, at the layer's defaults (they
# are below CLPIN_LAYER_MIN: the layer's cost is its pass-through). Run k is
# one process without and one with the layer; per size and direction the
# ratio of their medians must be <= 1.05.
if want latency && [ -n "$sgemm" ]; then
  echo "=== layer-sgemm --latency: blocking 4-64 KiB transfers, $PLATFORM, $RUNS x 2 processes"
  args=(--latency --platform "$PLATFORM" --runs "$LATENCY_RUNS" --iters "$LATENCY_ITERS")
  for run in $(seq "$RUNS"); do
    "$sgemm" "${args[@]}" >"$OUTDIR/latency-plain-$run.txt" 2>&1 || status=1
    OPENCL_LAYERS=$layer "$sgemm" "${args[@]}" >"$OUTDIR/latency-layer-$run.txt" 2>&1 || status=1
  done
  # The layer was there and left these calls to the driver (one short run).
  OPENCL_LAYERS=$layer CLPIN_DEBUG=1 "$sgemm" --latency --platform "$PLATFORM" --runs 1 --iters 1 \
    >/dev/null 2>"$OUTDIR/latency-decisions.txt" || status=1
  {
    if ! grep -q 'clpin-layer: loaded' "$OUTDIR/latency-decisions.txt" ||
      grep -q ': through clpin$' "$OUTDIR/latency-decisions.txt"; then
      echo "  the layer was not loaded, or routed a small transfer (latency-decisions.txt)"
      status=1
    fi
    echo "  host buffers: malloc; address mod 4096 (write source, read destination), per run:"
    for run in $(seq "$RUNS"); do
      echo "    run $run: without the layer $(field "$OUTDIR/latency-plain-$run.txt" up_mod4096)," \
        "$(field "$OUTDIR/latency-plain-$run.txt" down_mod4096); with it" \
        "$(field "$OUTDIR/latency-layer-$run.txt" up_mod4096), $(field "$OUTDIR/latency-layer-$run.txt" down_mod4096)"
    done
    for dir in write read; do
      for size in 4096 16384 65536; do
        key=${dir}_${size}_us_med plain="" with="" ratios="" held=0
        for run in $(seq "$RUNS"); do
          a=$(field "$OUTDIR/latency-plain-$run.txt" "$key") b=$(field "$OUTDIR/latency-layer-$run.txt" "$key")
          if [ -z "$a" ] || [ -z "$b" ]; then
            status=1
            continue
          fi
          r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b / a }')
          held=$((held + $(awk -v r="$r" 'BEGIN { print r <= 1.05 }')))
          plain+=" $a" with+=" $b" ratios+=" $r"
        done
        printf "  %-5s %2d KiB: without the layer %s us, with it %s us\n" "$dir" $((size / 1024)) \
          "$(fmt3 "$plain")" "$(fmt3 "$with")"
        target "$dir $((size / 1024)) KiB: with / without the layer" "$ratios" 1.05 le "$held" "$RUNS"
      done
    done
  } >"$OUTDIR/latency-target.txt"
  cat "$OUTDIR/latency-target.txt"
fi

# ---- the differential test, plain OpenCL against the layer, on this platform ----
if want diff; then
  cc -O2 -std=gnu11 -DCL_TARGET_OPENCL_VERSION=300 tests/layer/transcript.c -o "$build/transcript" \
    -lOpenCL -lpthread && CLPIN_TEST_PLATFORM=$PLATFORM LAYER_DIFF_DIR=$OUTDIR/diff \
    LAYER_DIFF_SKIP_CRASHES=${LAYER_DIFF_SKIP_CRASHES:-1} \
    bash tests/layer/diff.sh "$build/transcript" "$layer" all 5 >"$OUTDIR/layer-diff.txt" 2>&1 ||
    status=1
fi
exit $status
