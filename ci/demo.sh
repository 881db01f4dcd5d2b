#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What clpin does on this machine, told plainly: install what is missing of
# the few packages it needs (ci/deps.sh --demo, not the whole CI toolchain),
# build clpin-bench (Release), run it on the default OpenCL device (the
# first platform with a GPU, else the first one: POCL's CPU device on a
# machine without a GPU), and print one table of verdicts judged only
# against baselines that mean something on that device (bench/demo_report.py
# says how), then one line to act on. On a device that shares memory with
# the host it also runs clpin-bench's `unified` case (zero copy against
# plain OpenCL) when the bench has it. The raw output stays in build/demo/run/.
# Arguments go straight to clpin-bench instead, e.g.
#   ci/demo.sh --case all            the full set, as in docs/BENCHMARKS.md
#   ci/demo.sh --list                the platforms and devices it can use
# CLPIN_DEMO_DEPS=0 skips ci/deps.sh (a machine with no package mirror,
# such as the GPU machine, which has the build tools and python3).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${CLPIN_DEMO_DEPS:-1}" = 0 ] || bash ci/deps.sh --demo
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_build build/demo clpin-bench
bench=${CLPIN_DEMO_BENCH:-build/demo/bench/clpin-bench}
[ $# -eq 0 ] || exec "$bench" "$@"
out=build/demo/run
rm -rf "$out"
mkdir -p "$out"
cores=$(nproc)
threads=$((cores > 16 ? 16 : cores))
echo "ci/demo.sh: measuring (about a minute; raw output in $out/) ..."
"$bench" --case transfer,pool,threads --sizes 16M,64M,256M --reps 5 --warmup 1 \
  --threads "$threads" --thread-ops 50000 --json "$out/main.json" >"$out/main.log" 2>&1 ||
  { cat "$out/main.log" >&2; echo "ci/demo.sh: clpin-bench failed (above)" >&2; exit 1; }
unified=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["host_unified_memory"]))' "$out/main.json")
if [ "$unified" = 1 ] && "$bench" --help 2>&1 | grep -q 'unified'; then
  "$bench" --case unified --reps 21 --warmup 1 --max-size 64M >"$out/unified.log" 2>&1 ||
    { cat "$out/unified.log" >&2; echo "ci/demo.sh: clpin-bench --case unified failed (above)" >&2; exit 1; }
fi
echo
exec python3 bench/demo_report.py "$out/main.json" "$out/unified.log"
