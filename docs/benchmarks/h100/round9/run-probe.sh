#!/usr/bin/env bash
# small-probe.c (README.md beside this file) against the library of this
# tree, PROCS processes, on the platform named PLATFORM (default NVIDIA),
# built and run by round 8's run-copy.sh (LIB as there).
#   PROCS=3 OUTDIR=build/probe docs/benchmarks/h100/round9/run-probe.sh
here=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${OUTDIR:-build/probe} PROG_SRC=$here/small-probe.c exec "$here/../round8/run-copy.sh"
