#!/usr/bin/env bash
# clpin's own cost per small write, with the driver's call taken out
# (README.md beside it): builds null-driver.c (a layer whose
# clEnqueueWriteBufferRect does nothing) and small-cost.c against the
# libclpin.so in LIB (default build/rel, made here from the tree), and runs
# small-cost warm and with EVICT bytes written before each call. Needs a
# loader with layer support (ocl-icd >= 2.3.0) and any OpenCL device.
#   LIB=build/rel EVICT="4194304" docs/benchmarks/h100/round8/null-driver.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
LIB=${LIB:-build/rel}
EVICT=${EVICT:-4194304}
if [ ! -e "$LIB/libclpin.so" ]; then
  cmake -S . -B "$LIB" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
    -DCLPIN_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$LIB" --target clpin -j "$(nproc)" >/dev/null
fi
lib=$(cd "$LIB" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -shared -fPIC -o "$out/libnull-driver.so" "$here/null-driver.c"
cc -O2 -o "$out/small-cost" "$here/small-cost.c" -Iinclude -L"$lib" -lclpin -lOpenCL
for e in 0 $EVICT; do
  OPENCL_LAYERS=$out/libnull-driver.so LD_LIBRARY_PATH=$lib "$out/small-cost" "$e" 20000
done
# CALLGRIND=1: the same program under callgrind's cache model (4 MiB written
# between calls, 300 calls a round), per call: instructions and data cache
# lines missed in clpin_write_rect (inclusive: the loader's part counted in
# it) and in the loader's clEnqueueWriteBufferRect alone.
if [ "${CALLGRIND:-0}" = 1 ]; then
  OPENCL_LAYERS=$out/libnull-driver.so LD_LIBRARY_PATH=$lib valgrind --tool=callgrind \
    --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=2097152,16,64 \
    --callgrind-out-file="$out/cg.out" "$out/small-cost" 4194304 300 >/dev/null 2>&1
  callgrind_annotate --inclusive=yes --threshold=100 "$out/cg.out" |
    grep -E ':clpin_write_rect \[|:clEnqueueWriteBufferRect \[' | sed 's/([^)]*)//g; s/,//g' |
    awk '{printf "%s per call: %.0f instructions, %.1f data lines missed (LL)\n",
                 ($NF ~ /clpin/ ? "clpin_write_rect" : "loader"), $1 / 900, ($8 + $9) / 900}'
fi
