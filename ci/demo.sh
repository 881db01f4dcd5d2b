#!/usr/bin/env bash
# Install what is missing, build clpin (Release), and run clpin-bench on the
# default OpenCL device: the first platform with a GPU, else the first one
# (POCL's CPU device on a machine without a GPU). Every figure is a median of
# repeated runs, each clpin path beside its baseline (docs/BENCHMARKS.md).
# Arguments go to clpin-bench instead of the modest default run below, e.g.
#   ci/demo.sh --case all            the full set, as in docs/BENCHMARKS.md
#   ci/demo.sh --list                the platforms and devices it can use
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/demo -j "$(nproc)" --target clpin-bench >/dev/null
if [ $# -eq 0 ]; then
  set -- --case transfer,pool,threads --sizes 16M,64M,256M --reps 5 --warmup 1 \
    --thread-ops 50000
fi
exec build/demo/bench/clpin-bench "$@"
