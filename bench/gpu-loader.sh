#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The loader's targets (docs/LOADER.md) on a GPU, in one run of about 4 minutes on
# one H100 with 16 cores (each step has a time limit: under 7 minutes in all):
#
#   1. build the library, loader-bench and examples/loader_pipeline (Release);
#   2. loader-bench, every regime, --runs 5, in 2 separate processes;
#   3. examples/loader_pipeline once (serial plain, serial pinned, loader);
#   4. a summary: clpin's ratio to its ideal per regime and process.
#
#   bash bench/gpu-loader.sh
#
# Environment: OUT (default build/gpu-loader-out; the device tool sets it),
# BUILD_DIR (default build/gpu-loader), RUNS (default 5), DEVICE (the
# platform or device name, default NVIDIA when clinfo or the ICD shows it),
# LOADER_ARGS (more loader-bench options, e.g. "--devices 2").
# Files in $OUT: machine.txt, build.log, loader-1.log, loader-2.log,
# example.log, summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-build/gpu-loader-out}
BUILD_DIR=${BUILD_DIR:-build/gpu-loader}
RUNS=${RUNS:-5}

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_outdir OUT
bench_device
devopt=()
[ -z "$DEVICE" ] || devopt=(--device-name "$DEVICE")

say "machine"
bench_machine | tee "$OUT/machine.txt"

say "build (Release)"
if ! bench_build "$BUILD_DIR" loader-bench >"$OUT/build.log" 2>&1; then
  tail -n 30 "$OUT/build.log"
  say "build failed (build.log)"
  exit 1
fi
# The example, against the shared library just built.
cc -O2 -std=c11 -D_GNU_SOURCE -DCL_TARGET_OPENCL_VERSION=120 -Iinclude \
  examples/loader_pipeline.c -L"$BUILD_DIR" -Wl,-rpath,"$(cd "$BUILD_DIR" && pwd)" -lclpin \
  -lOpenCL -lpthread -lm -o "$BUILD_DIR/loader_pipeline" >>"$OUT/build.log" 2>&1 ||
  echo "(the example did not build: build.log)"
tail -n 3 "$OUT/build.log"

status=0
for p in 1 2; do
  say "loader-bench process $p/2: every regime, --runs $RUNS"
  # shellcheck disable=SC2086 # LOADER_ARGS is a list of options
  timeout 130 "$BUILD_DIR/bench/loader-bench" --regime all --runs "$RUNS" "${devopt[@]}" \
    ${LOADER_ARGS:-} 2>&1 | tee "$OUT/loader-$p.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { status=1; say "loader-bench process $p failed or timed out"; }
done

say "examples/loader_pipeline: 160 MiB, 20 batches, 2 ms work, 4 workers"
if [ -x "$BUILD_DIR/loader_pipeline" ]; then
  plat=()
  [ -z "$DEVICE" ] || plat=(--platform "$DEVICE")
  timeout 45 "$BUILD_DIR/loader_pipeline" "${plat[@]}" --batch-mib 160 --batches 20 --work-ms 2 \
    --workers 4 2>&1 | tee "$OUT/example.log" || status=1
fi

say "summary"
python3 - "$OUT" >"$OUT/summary.txt" <<'EOF'
import re, sys
out = sys.argv[1]

def results(path):
    rows = {}
    try:
        text = open(path).read()
    except OSError:
        return rows
    for line in text.splitlines():
        if not line.startswith("RESULT regime="):
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        rows[kv["regime"]] = kv
    return rows

procs = [results(f"{out}/loader-{p}.log") for p in (1, 2)]
names = [n for n in ("compute", "prep4", "prep8", "small32", "small4", "xfer256", "xfer1g")
         if any(n in p for p in procs)]
print("clpin's loader (loader-bench), per process: median ratio, runs held")
print(f"{'regime':8} {'target':>8} {'proc 1':>16} {'proc 2':>16} {'held':>7}  ideal ms/b, loader ms/b")
for n in names:
    got = [p[n] for p in procs if n in p]
    t = float(got[0]["target"])
    sign = ">=" if n.startswith("xfer") else "<="
    cells = [f"{float(g['ratio']):.3f}x" if float(g["ratio"]) > 0 else "no CUDA" for g in got]
    held = sum(int(g["held"]) for g in got)
    runs = sum(int(g["runs"]) for g in got)
    heldtxt = f"{held}/{runs}" if any(float(g["ratio"]) > 0 for g in got) else "n/a"
    print(f"{n:8} {sign + format(t, '.2f') + 'x':>8} " + " ".join(f"{c:>16}" for c in cells)
          + f" {heldtxt:>7}  " + ", ".join(f"{float(g['ideal_ms']):.2f}/{float(g['loader_ms']):.2f}" for g in got))
print()
print("the same, with prepare measured on W threads at once (what this host's cores give W fill threads):")
print(f"{'regime':8} {'target':>8} {'proc 1':>16} {'proc 2':>16} {'held':>7}  W-thread prepare ms/b")
for n in names:
    got = [p[n] for p in procs if n in p and float(p[n].get("par_ms", 0)) > 0]
    if not got:
        continue
    t = float(got[0]["target"])
    cells = [f"{float(g['ratio_par']):.3f}x ({float(g['ratio_par_min']):.2f}-{float(g['ratio_par_max']):.2f})" for g in got]
    print(f"{n:8} {'<=' + format(t, '.2f') + 'x':>8} " + " ".join(f"{c:>16}" for c in cells)
          + "  " + ", ".join(f"{float(g['par_ms']):.2f}" for g in got))
EOF
cat "$OUT/summary.txt"
say "done (status $status); files in $OUT"
exit $status
