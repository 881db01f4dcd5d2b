#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The staging and tensor suites on Oclgrind, a second OpenCL implementation
# that reports no host-unified memory: there the staged and pipelined paths
# are the default ones (POCL, host-unified, mostly exercises the other side
# of CLPIN_PINNED_H2D). Oclgrind is registered through a private vendors
# directory, so the system's ICD list is left alone.
set -euo pipefail
icd=/usr/lib/oclgrind/liboclgrind-rt-icd.so
if [ ! -e "$icd" ]; then
  echo "30-oclgrind: $icd is missing (ci/deps.sh installs oclgrind)" >&2
  exit 1
fi
build=build/oclgrind
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" \
  -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >/dev/null
targets=(check_staging check_tensor check_register check_unified check_rect)
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}" clpin_faultlayer
vendors=$(mktemp -d)
trap 'rm -rf "$vendors"' EXIT
echo "$icd" >"$vendors/oclgrind.icd"
export OCL_ICD_VENDORS="$vendors"
export CLPIN_TEST_PLATFORM=Oclgrind
# Oclgrind runs event callbacks only when clFinish returns and its runtime
# is not thread-safe, so clpin's non-blocking pipelines (driven by DMA
# completion callbacks and worker threads) cannot run there: of the staging
# suite, the "blocking" case (every path, blocking) and the fallback case
# run; the tensor suite runs whole. Of the register suite, the "transfers"
# case runs (every place and flag, edges, bad input, tensors); its
# "lifecycle" case sets user events from other threads, which Oclgrind's
# runtime does not support.
status=0
logs=()
run() {
  ctest --test-dir "$build" --output-on-failure --timeout 600 -R "^$1\$" || status=1
  logs+=("$vendors/$1.${#logs[@]}.log")
  cp "$build/Testing/Temporary/LastTest.log" "${logs[-1]}"
}
for t in "${targets[@]}"; do
  case $t in
    check_staging)
      CK_RUN_CASE=blocking run check_staging
      run check_staging_fallback ;;
    check_register)
      CK_RUN_CASE=transfers run check_register ;;
    check_unified)
      # The zero-copy paths (map/unmap, USE_HOST_PTR) on a second
      # implementation: Oclgrind reports no host-unified memory, so the test
      # seam applies POCL's rule (USE_HOST_PTR) and Arm Mali's (ALLOC_HOST_PTR)
      # to it (those paths are correct OpenCL on any device). The handoff
      # protocol (clpin_host_lend / clpin_host_reclaim) and the
      # host_buffer cases run too; the threaded handoff case does not
      # (Oclgrind's runtime is not thread-safe).
      CK_RUN_CASE=rules run check_unified
      # The probe of unnamed host-unified devices (the seam makes Oclgrind
      # one): it must find "probed-use-host", and the tensors run under it.
      CLPIN__TEST_UNIFIED=probe CK_RUN_CASE=probe run check_unified
      CLPIN__TEST_UNIFIED=probe CK_RUN_CASE=tensors run check_unified
      CLPIN__TEST_UNIFIED=pocl CK_RUN_CASE=tensors run check_unified
      CLPIN__TEST_UNIFIED=arm-mali CK_RUN_CASE=tensors run check_unified
      CLPIN__TEST_UNIFIED=pocl CK_RUN_CASE=handoff run check_unified
      CLPIN__TEST_UNIFIED=arm-mali CK_RUN_CASE=handoff run check_unified
      CLPIN__TEST_UNIFIED=pocl CK_RUN_CASE=host_buffer run check_unified ;;
    check_rect)
      # Rect and image transfers, blocking on every path, and bad input
      # (its "nonblocking" case runs the engine's threads).
      CK_RUN_CASE=exact run check_rect
      CK_RUN_CASE=small run check_rect
      CK_RUN_CASE=errors run check_rect
      # A small write from memory handed to the device: Oclgrind hands
      # memory over only as a host-unified device (the seam, as above).
      CLPIN__TEST_UNIFIED=pocl CK_RUN_CASE=handoff run check_rect
      run check_rect_faults ;;
    *) run "$t" ;;
  esac
done
bash ci/ctest-summary.sh 30-oclgrind "${logs[@]}"
exit $status
