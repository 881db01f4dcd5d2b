#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The loader's targets (docs/LOADER.md) on a GPU, in one run of about 5 minutes on
# one H100 with 16 cores (each step has a time limit: under 9 minutes in all):
#
#   1. build the library, loader-bench and examples/loader_pipeline (Release);
#   2. loader-bench, every regime, --runs 5, in 2 separate processes;
#   3. bench/torch_loader.py (PyTorch's DataLoader, pin_memory, non_blocking)
#      on the same regimes with the same workers, its fill calibrated to the
#      C fill's measured ms per MiB;
#   4. examples/loader_pipeline once (serial plain, serial pinned, loader);
#   5. a summary: clpin's ratio to its ideal against PyTorch's, and whether
#      clpin's is at most 1/3 of PyTorch's in the prepare-bound regimes.
#
#   bash bench/gpu-loader.sh
#
# Environment: OUT (default build/gpu-loader-out; the device tool sets it),
# BUILD_DIR (default build/gpu-loader), RUNS (default 5), DEVICE (the
# platform or device name, default NVIDIA when clinfo or the ICD shows it),
# LOADER_ARGS (more loader-bench options, e.g. "--devices 2").
# Files in $OUT: machine.txt, build.log, loader-1.log, loader-2.log,
# torch.log, example.log, summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-build/gpu-loader-out}
BUILD_DIR=${BUILD_DIR:-build/gpu-loader}
RUNS=${RUNS:-5}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
start=$(date +%s)
say() { echo "=== [$(($(date +%s) - start)) s] $*"; }

# shellcheck source=bench/lib.sh
source bench/lib.sh
DEVICE=${DEVICE:-}
if [ -z "$DEVICE" ] && { ldconfig -p | grep -q libnvidia-opencl || clinfo -l 2>/dev/null | grep -q NVIDIA; }; then
  DEVICE=NVIDIA
fi
devopt=()
[ -z "$DEVICE" ] || devopt=(--device-name "$DEVICE")

say "machine"
{
  bench_machine
  python3 -c 'import torch, numpy; print("torch", torch.__version__, "CUDA", torch.version.cuda, "numpy", numpy.__version__)' 2>&1 || true
} | tee "$OUT/machine.txt"

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

# The C fill's measured cost, for PyTorch's fill: prep4's prepare alone per MiB.
per_mib=$(awk '/^RESULT regime=prep4 /{for(i=1;i<=NF;i++){split($i,kv,"=");v[kv[1]]=kv[2]}
  if (v["bytes"] > 0) printf "%.4f\n", v["prep_ms"] / (v["bytes"] / 1048576); exit}' "$OUT/loader-1.log")
per_mib=${per_mib:-0.375}
say "PyTorch DataLoader: same regimes and workers, fill at $per_mib ms per MiB"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  timeout 150 python3 bench/torch_loader.py --regime prep4,prep8,small32,small4,compute \
    --runs "$RUNS" --prep-ms-per-mib "$per_mib" 2>&1 | tee "$OUT/torch.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { status=1; say "torch_loader failed or timed out"; }
else
  echo "no torch with CUDA: PyTorch's side not measured" | tee "$OUT/torch.log"
fi

say "examples/loader_pipeline: 160 MiB, 20 batches, 2 ms work, 4 workers"
if [ -x "$BUILD_DIR/loader_pipeline" ]; then
  plat=()
  [ -z "$DEVICE" ] || plat=(--platform "$DEVICE")
  timeout 45 "$BUILD_DIR/loader_pipeline" "${plat[@]}" --batch-mib 160 --batches 20 --work-ms 2 \
    --workers 4 2>&1 | tee "$OUT/example.log" || status=1
fi

say "summary"
python3 - "$OUT" >"$OUT/summary.txt" <<'EOF'
import re, statistics, sys
out = sys.argv[1]

def results(path, torch=False):
    rows = {}
    try:
        text = open(path).read()
    except OSError:
        return rows
    for line in text.splitlines():
        if not line.startswith("RESULT torch " if torch else "RESULT regime="):
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        rows[kv["regime"]] = kv
    return rows

procs = [results(f"{out}/loader-{p}.log") for p in (1, 2)]
torch = results(f"{out}/torch.log", torch=True)
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
print()
print("against PyTorch's DataLoader(pin_memory=True, num_workers=W) + non_blocking, same regimes:")
print(f"{'regime':8} {'W':>3} {'clpin ratio':>12} {'torch ratio':>12} {'clpin/torch':>12}  target <= 1/3")
for n in names:
    if n not in torch:
        continue
    c = statistics.median(float(p[n]["ratio"]) for p in procs if n in p)
    tr = float(torch[n]["ratio"])
    q = c / tr if tr > 0 else float("nan")
    verdict = ("held" if q <= 1 / 3 else "MISSED") if n.startswith(("prep", "small")) else "(not a target)"
    print(f"{n:8} {torch[n]['workers']:>3} {c:11.3f}x {tr:11.3f}x {q:12.3f}  {verdict}")
    first = next(p[n] for p in procs if n in p)
    print(f"{'':8}     clpin {float(first['loader_ms']):.2f} ms/b (ideal {float(first['ideal_ms']):.2f}, prepare {float(first['prep_ms']):.1f}); "
          f"torch {float(torch[n]['loader_ms']):.2f} ms/b (ideal {float(torch[n]['ideal_ms']):.2f}, prepare {float(torch[n]['prep_ms']):.1f})")
EOF
cat "$OUT/summary.txt"
say "done (status $status); files in $OUT"
exit $status
