#!/usr/bin/env bash
# Copy-thread settings for staged transfers on a host with one or more GPUs
# (docs/STAGING.md, "Copy threads"): multigpu-bench's staged malloc rows and CUDA pinned on the same
# GPUs, for every GPU count the machine has, under each setting of
# CLPIN_THREADS (the process's budget), CLPIN_TRANSFER_THREADS (the most one
# transfer copies with) and CLPIN_CHUNK. The settings run in turn, REPS
# rounds, each setting a process of its own per round, so a drift of the
# machine spreads over all of them. The summary pools each setting's runs
# and prints, per GPU count and direction, the staged rate and its ratio to
# min(host memcpy on all cores, CUDA pinned on the same GPUs) (the staged
# target of docs/BENCHMARKS.md, "Several GPUs": >= 0.9), with the runs it held in.
#
#   bench/gpu-threads.sh [extra multigpu-bench options...]
#
# Environment: OUT (output folder: summary.txt, machine.txt, raw.tar.gz;
# default build/gpu-threads, logs unpacked), BUILD_DIR (default build/gpu),
# REPS (default 2), RUNS (default 5), COUNTS (default: 1, 2, 4 ... and the
# machine's count), PLATFORM (default NVIDIA), SETTINGS (a ';'-separated
# list of settings, each a space-separated list of VAR=value; default below),
# SKIP_BUILD=1. About 15 s a setting and round on 4x H100.
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-build/gpu-threads}
BUILD_DIR=${BUILD_DIR:-build/gpu}
REPS=${REPS:-2}
RUNS=${RUNS:-5}
PLATFORM=${PLATFORM:-NVIDIA}
cores=$(nproc)
big=$((cores * 3 / 4))
SETTINGS=${SETTINGS:-"CLPIN_THREADS=16 CLPIN_TRANSFER_THREADS=16;CLPIN_THREADS=$big CLPIN_TRANSFER_THREADS=16;CLPIN_THREADS=$big CLPIN_TRANSFER_THREADS=8;CLPIN_THREADS=$big CLPIN_TRANSFER_THREADS=12;CLPIN_THREADS=$big CLPIN_TRANSFER_THREADS=24;CLPIN_THREADS=$big CLPIN_TRANSFER_THREADS=16 CLPIN_CHUNK=4M;CLPIN_THREADS=$big CLPIN_TRANSFER_THREADS=16 CLPIN_CHUNK=16M"}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_outdir OUTDIR
export CUDA_DEVICE_ORDER=PCI_BUS_ID
[ "${SKIP_BUILD:-0}" = 1 ] || bench_build "$BUILD_DIR" multigpu-bench
bench="$BUILD_DIR/bench/multigpu-bench"
{
  bench_machine
  "$bench" --platform "$PLATFORM" --list "$@" 2>&1
} >"$OUTDIR/machine.txt"
ngpu=$(sed -n 's/^devices: //p' "$OUTDIR/machine.txt")
[ -n "$ngpu" ] && [ "$ngpu" -ge 1 ] || { echo "gpu-threads: no device" >&2; exit 1; }
COUNTS=${COUNTS:-$(gpu_counts "$ngpu")}

IFS=';' read -r -a settings <<<"$SETTINGS"
start=$(date +%s)
for rep in $(seq 1 "$REPS"); do
  for i in "${!settings[@]}"; do
    s=${settings[$i]}
    echo "=== round $rep, setting $i: $s ($(($(date +%s) - start)) s)"
    # shellcheck disable=SC2086
    env $s "$bench" --platform "$PLATFORM" --case memcpy,layout --counts "$COUNTS" \
      --kinds staged,cuda --memcpy-threads 16,"$big" --runs "$RUNS" "$@" \
      >"$OUTDIR/setting$i-round$rep.log" 2>&1 || {
      echo "gpu-threads: setting '$s' failed:" >&2
      tail -n 20 "$OUTDIR/setting$i-round$rep.log" >&2
      exit 1
    }
  done
done

{
  echo "gpu-threads summary: $ngpu GPU(s), counts $COUNTS, $REPS round(s) x $RUNS runs per setting, $cores cores"
  echo "(staged malloc against min(memcpy on all cores, CUDA pinned on the same GPUs), both of the same run;"
  echo " target >= 0.9; Nx ctxs: one context per GPU; Nx 1ctx: one context for all; 1ctx / per-GPU ctxs:"
  echo " the two layouts in turn within each run, >= 0.95)"
  for i in "${!settings[@]}"; do
    echo
    echo "--- setting $i: ${settings[$i]}"
    cat "$OUTDIR"/setting"$i"-round*.log | awk -F'\t' '
      function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      $1 == "RAW" && ($2 ~ /memcpy|staged/) {
        name = $2
        if (!(name in goal)) { order[++nn] = name; goal[name] = $3 }
        m = split($4, v, ",")
        for (i = 1; i <= m; i++) vals[name, ++cnt[name]] = v[i]
      }
      END {
        for (k = 1; k <= nn; k++) {
          name = order[k]; n = cnt[name]; held = 0
          for (i = 1; i <= n; i++) { a[i] = vals[name, i]; if (goal[name] > 0 && a[i] >= goal[name]) held++ }
          md = med(a, n)
          if (goal[name] > 0)
            printf "  %-52s %.3f [%.3f .. %.3f] held %d/%d\n", name, md, a[1], a[n], held, n
          else
            printf "  %-52s %7.2f GB/s [%.2f .. %.2f]\n", name, md, a[1], a[n]
        }
      }'
  done
  echo
  echo "elapsed: $(($(date +%s) - start)) s"
} >"$OUTDIR/summary.txt"
cat "$OUTDIR/summary.txt"
if [ -n "${OUT:-}" ]; then
  (cd "$OUTDIR" && tar -czf raw.tar.gz setting*.log && rm -f setting*.log)
fi
