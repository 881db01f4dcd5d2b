#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libclpin-layer.so: the redirect proof, the differential suite on
# POCL (staging forced on) and on Oclgrind, clpeak, the project's examples and
# bench/layer-sgemm (CLBlast) run under the layer. Ends with one summary
# line; fails on any difference.
set -euo pipefail
JOBS=${JOBS:-2}
build=build/unit # the configuration of stages 10 and 55: reused when built
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build "$build" -j "$JOBS"
layer=$PWD/$build/layer/libclpin-layer.so
transcript=$PWD/$build/tests/layer_transcript
logs=$PWD/$build/layer-logs
rm -rf "$logs"
mkdir -p "$logs"
export CLPIN_PINNED_H2D=1 # POCL is host-unified: without it clpin would not stage
failures=()
note() { echo "35-layer: $*"; }

# 1. clpin's OpenCL calls inside the layer go to the next stage.
if bash layer/check_redirect.sh "$layer"; then redirect=ok; else redirect=FAILED; failures+=(redirect); fi

# 1b. The entry points against a fake dispatch table (no loader), and
#     CLPIN_LAYER_MIN: a bad value is reported and the default kept; a
#     minimum above the transcript's largest transfer (6 MiB) routes none.
entry=ok
"$build/tests/layer_entry" "$layer" || { entry=FAILED; failures+=(entry); }
OPENCL_LAYERS=$layer CLPIN_DEBUG=1 CLPIN_LAYER_MIN=12Q "$transcript" blocking >/dev/null 2>"$logs/min-bad.err" || true
if ! grep -q 'ignoring CLPIN_LAYER_MIN="12Q"' "$logs/min-bad.err" ||
  ! grep -q "(CLPIN_LAYER_MIN 1048576," "$logs/min-bad.err" ||
  ! grep -q ': through clpin$' "$logs/min-bad.err"; then
  note "CLPIN_LAYER_MIN=12Q: no warning, or the 1 MiB default was not kept"
  failures+=(layer-min-bad)
fi
OPENCL_LAYERS=$layer CLPIN_DEBUG=1 CLPIN_LAYER_MIN=64M "$transcript" blocking >/dev/null 2>"$logs/min-64m.err" || true
if ! grep -q "(CLPIN_LAYER_MIN 67108864," "$logs/min-64m.err" ||
  grep -q ': through clpin' "$logs/min-64m.err"; then
  note "CLPIN_LAYER_MIN=64M: not applied"
  failures+=(layer-min)
fi

# 2. The differential suite: POCL, every case.
pocl_lines=0 pocl_routed=0
if LAYER_DIFF_DIR=$logs/pocl bash tests/layer/diff.sh "$transcript" "$layer" all 20 | tee "$logs/pocl.summary"; then
  pocl_lines=$(wc -l <"$logs/pocl/plain.txt")
  pocl_routed=$(grep -c 'through clpin' "$logs/pocl/layer-chunk-default.err" || true)
else
  failures+=(diff-pocl)
fi

# 3. The same on Oclgrind (a second implementation, no host-unified memory);
#    blocking cases only: Oclgrind runs event callbacks only inside clFinish.
ocl_lines=0
icd=/usr/lib/oclgrind/liboclgrind-rt-icd.so
if [ -e "$icd" ]; then
  vendors=$(mktemp -d)
  echo "$icd" >"$vendors/oclgrind.icd"
  if OCL_ICD_VENDORS=$vendors CLPIN_TEST_PLATFORM=Oclgrind LAYER_DIFF_DIR=$logs/oclgrind \
    bash tests/layer/diff.sh "$transcript" "$layer" blocking 5 | tee "$logs/oclgrind.summary"; then
    ocl_lines=$(wc -l <"$logs/oclgrind/plain.txt")
  else
    failures+=(diff-oclgrind)
  fi
  rm -rf "$vendors"
else
  note "$icd is missing (ci/deps.sh installs oclgrind)"
  failures+=(oclgrind-missing)
fi

# 4. clpeak, unmodified, under the layer: its transfers must go through clpin
#    (CLPIN_DEBUG=2, every line: they are counted) and it must report the
#    same tests as without the layer.
clpeak_routed=0
if command -v clpeak >/dev/null; then
  timeout 600 clpeak --transfer-bandwidth >"$logs/clpeak-plain.txt" 2>&1 || failures+=(clpeak-plain)
  if OPENCL_LAYERS=$layer CLPIN_DEBUG=2 CLPIN_LAYER_STATS=1 timeout 600 clpeak --transfer-bandwidth \
    >"$logs/clpeak-layer.txt" 2>"$logs/clpeak-layer.err"; then
    cat "$logs/clpeak-layer.txt"
    w=$(grep -c 'clpin-layer: write .*: through clpin' "$logs/clpeak-layer.err" || true)
    r=$(grep -c 'clpin-layer: read .*: through clpin' "$logs/clpeak-layer.err" || true)
    e=$(grep -c -E '^clpin: (write|read) [0-9]+ bytes: (staged|pipelined)' "$logs/clpeak-layer.err" || true)
    clpeak_routed=$((w + r))
    grep 'clpin-layer: stats' "$logs/clpeak-layer.err" || true
    tests_plain=$(grep -E '^ +enqueue' "$logs/clpeak-plain.txt" | sed -E 's/:.*//' | sort)
    tests_layer=$(grep -E '^ +enqueue' "$logs/clpeak-layer.txt" | sed -E 's/:.*//' | sort)
    if ((w == 0 || r == 0 || e < w + r)); then
      note "clpeak: $w writes and $r reads went through the layer, $e staged by clpin"
      failures+=(clpeak-routing)
    elif [ -z "$tests_layer" ] || [ "$tests_plain" != "$tests_layer" ]; then
      note "clpeak reports different tests under the layer"
      failures+=(clpeak-output)
    fi
  else
    tail -n 30 "$logs/clpeak-layer.err"
    failures+=(clpeak-layer)
  fi
else
  note "clpeak is missing (ci/deps.sh installs it)"
  failures+=(clpeak-missing)
fi

# 5. The project's examples (CTest label "examples") under the layer. They
#    call clpin themselves: their DMAs come from their own pool's mapped
#    blocks, which the layer must leave to the driver.
mapfile -t examples < <(ctest --test-dir "$build" -N -L '^examples$' | sed -nE 's/^ *Test +#[0-9]+: +(.*)$/\1/p')
ex_ok=0
for t in "${examples[@]}"; do
  if OPENCL_LAYERS=$layer CLPIN_DEBUG=1 ctest --test-dir "$build" -R "^$t\$" -V --timeout 600 >"$logs/$t.log" 2>&1 &&
    grep -q 'clpin-layer: loaded' "$logs/$t.log"; then
    ex_ok=$((ex_ok + 1))
  else
    tail -n 30 "$logs/$t.log"
    failures+=("$t")
  fi
done
((${#examples[@]})) || failures+=(no-examples)

# 6. The fault-injection sweep (staging group) with both layers stacked: the
#    fault layer outermost (ocl-icd puts the last listed layer next to the
#    application), libclpin-layer.so below it routing every transfer from
#    1 KiB. The sweep's own assertions must hold and the layer must have
#    routed transfers. (The other order, faults injected under the layer,
#    breaks the sweep's count of driver buffers against its pool's blocks:
#    the layer's pool buffers are counted too. docs/LAYER.md, "Limits".)
faults_routed=0
fl=$PWD/$build/tests/libclpin_faultlayer.so
if [ -x "$build/tests/check_faults" ] && [ -e "$fl" ]; then
  if OPENCL_LAYERS=$layer:$fl CLPIN_LAYER_MIN=1K CLPIN_STAGE_MIN=0 CLPIN_STAGE_MIN_H2D=0 CLPIN_DEBUG=2 CLPIN_FAULTS_GROUP=staging \
    CK_DEFAULT_TIMEOUT=300 timeout 900 "$build/tests/check_faults" >"$logs/faults.out" 2>"$logs/faults.err" &&
    grep -q '^100%: Checks: [1-9]' "$logs/faults.out"; then
    faults_routed=$(grep -c 'clpin-layer: .*: through clpin' "$logs/faults.err" || true)
    ((faults_routed > 0)) || failures+=(faults-not-routed)
  else
    tail -n 20 "$logs/faults.out"
    failures+=(faults-stacked)
  fi
else
  failures+=(faults-missing)
fi

# 7. The differential suite with the layer and the transcript built with
#    AddressSanitizer+UBSan and with ThreadSanitizer (leaks checked; the
#    project's suppressions for POCL).
sanitized=()
for san in address,undefined thread; do
  sb=build/layer-${san%%,*}
  cmake -S . -B "$sb" -DCMAKE_BUILD_TYPE=Debug -DCLPIN_SANITIZE=$san -DCMAKE_C_FLAGS="-Werror" \
    -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >/dev/null
  cmake --build "$sb" -j "$JOBS" --target clpin-layer >/dev/null
  cc -g -std=c11 -Wall -Werror -fsanitize=$san -fno-omit-frame-pointer tests/layer/transcript.c \
    -lOpenCL -lpthread -o "$sb/layer_transcript"
  if ASAN_OPTIONS=detect_leaks=1 \
    LSAN_OPTIONS="suppressions=$PWD/tests/suppressions/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/suppressions/tsan.supp" \
    LAYER_DIFF_DIR=$logs/$san bash tests/layer/diff.sh "$PWD/$sb/layer_transcript" \
    "$PWD/$sb/layer/libclpin-layer.so" all 20; then
    sanitized+=("$san")
  else
    failures+=("diff-$san")
  fi
done

# 8. bench/layer-sgemm (plain OpenCL and CLBlast's SGEMM, no clpin): small
#    sizes without and with the layer, C verified in every run, every matrix
#    transfer through clpin (staged, and pipelined with a small chunk); its
#    latency loop's small transfers left to the driver (tests/layer/sgemm.sh).
#    bench/gpu-layer.sh runs it at 1 GiB on the GPU.
sgemm_routed=0
if [ -x "$build/bench/layer-sgemm" ]; then
  if LAYER_SGEMM_DIR=$logs/sgemm bash tests/layer/sgemm.sh "$PWD/$build/bench/layer-sgemm" "$layer"; then
    sgemm_routed=$(cat "$logs"/sgemm/layer-chunk-*.err | grep -c 'clpin-layer: .*: through clpin' || true)
  else
    failures+=(layer-sgemm)
  fi
else
  note "$build/bench/layer-sgemm was not built (CLBlast missing? ci/deps.sh installs libclblast-dev)"
  failures+=(layer-sgemm-missing)
fi

summary="redirect $redirect; entry points $entry; POCL: $pocl_lines transcript lines identical, $pocl_routed transfers through clpin; Oclgrind: $ocl_lines lines identical; clpeak: $clpeak_routed transfers through clpin; examples under the layer: $ex_ok/${#examples[@]} passed; fault sweep stacked: $faults_routed transfers through clpin; layer-sgemm: C verified, $sgemm_routed transfers through clpin; identical under sanitizers: ${sanitized[*]:-none}"
if ((${#failures[@]})); then
  note "FAILED (${failures[*]}): $summary"
  exit 1
fi
note "$summary"
