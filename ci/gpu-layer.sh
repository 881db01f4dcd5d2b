#!/usr/bin/env bash
# The OpenCL layer on a GPU: clpeak --transfer-bandwidth, unmodified, without
# and with libclpin-layer.so, alternating, RUNS times each; then the layer's
# differential test (tests/layer/diff.sh) on the GPU's platform. Results in
# $OUTDIR (clpeak-*.txt, layer-diff.txt).
#
# Needs a loader with layer support (ocl-icd >= 2.3.0). Where the machine's
# libOpenCL is older or not ocl-icd, OCL_ICD_DEB=/path/ocl-icd-libopencl1_*.deb
# is unpacked and put first on LD_LIBRARY_PATH; CLPEAK_DEB likewise for clpeak.
# PLATFORM (default NVIDIA) names the platform for the differential test.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUTDIR:-build/gpu-bench}
BUILD_DIR=${BUILD_DIR:-build/gpu}
RUNS=${RUNS:-3}
mkdir -p "$OUTDIR" "$BUILD_DIR"
if [ -n "${OCL_ICD_DEB:-}" ]; then
  dpkg-deb -x "$OCL_ICD_DEB" "$BUILD_DIR/ocl-icd"
  export LD_LIBRARY_PATH=$PWD/$BUILD_DIR/ocl-icd/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
clpeak=$(command -v clpeak || true)
if [ -z "$clpeak" ] && [ -n "${CLPEAK_DEB:-}" ]; then
  dpkg-deb -x "$CLPEAK_DEB" "$BUILD_DIR/clpeak-deb"
  clpeak=$BUILD_DIR/clpeak-deb/usr/bin/clpeak
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_LAYER=ON >/dev/null
cmake --build "$BUILD_DIR" --target clpin-layer -j "$(nproc)" >/dev/null || exit 1
layer=$(cd "$BUILD_DIR/layer" && pwd)/libclpin-layer.so
ldd "$clpeak" | grep -i opencl | tee "$OUTDIR/clpeak-loader.txt"
status=0
for run in $(seq "$RUNS"); do
  "$clpeak" --transfer-bandwidth >"$OUTDIR/clpeak-plain-$run.txt" 2>&1 || status=1
  OPENCL_LAYERS=$layer CLPIN_LAYER_STATS=1 "$clpeak" --transfer-bandwidth \
    >"$OUTDIR/clpeak-layer-$run.txt" 2>&1 || status=1
done
OPENCL_LAYERS=$layer CLPIN_DEBUG=1 "$clpeak" --transfer-bandwidth 2>&1 >/dev/null |
  grep '^clpin-layer:' | sed -E 's/[0-9]+ bytes/N bytes/; s/0x[0-9a-f]+/PTR/g' | sort | uniq -c |
  sort -rn | head -n 20 >"$OUTDIR/clpeak-decisions.txt"
# The differential test, plain OpenCL against the layer, on this platform.
cc -O2 -std=gnu11 -DCL_TARGET_OPENCL_VERSION=300 tests/layer/transcript.c -o "$BUILD_DIR/transcript" \
  -lOpenCL -lpthread && CLPIN_TEST_PLATFORM=${PLATFORM:-NVIDIA} LAYER_DIFF_DIR=$OUTDIR/diff \
  bash tests/layer/diff.sh "$BUILD_DIR/transcript" "$layer" all 5 >"$OUTDIR/layer-diff.txt" 2>&1 ||
  status=1
exit $status
