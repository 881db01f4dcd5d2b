#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# rusticl, Mesa's OpenCL (Debian's mesa-opencl-icd), on its llvmpipe CPU
# device: a third implementation, and the one that submits lazily (a
# command reaches the device only at a flush or a blocking call) and reports
# a command complete only once everything flushed with it has run. Also
# host-unified without being named by clpin's zero-copy table, so the probe
# of src/zc.c decides there. Selected by an OCL_ICD_VENDORS folder holding
# only rusticl's .icd and RUSTICL_ENABLE=llvmpipe; the tests pick it by name.
#
# What runs (stage 10's build, build/unit, reused): the suites whose paths
# wait for events or choose by device: tensors, the engine, budgets and
# zero copy whole; staging's non-blocking case, the loader's basic case
# and registered memory's transfers case; errors, options and the C examples; then seven files of the Python
# tests (the package on rusticl through the same library). The rest of the unit suites
# pass or are known to fail there (docs/RELIABILITY.md, "Implementations",
# lists both, with the times) but would take this stage past its few
# minutes: rusticl on llvmpipe is slower than POCL at every context, queue
# and small command.
set -euo pipefail
JOBS=${JOBS:-2}
icd=$(ls /usr/lib/*/libRusticlOpenCL.so.1 2>/dev/null | head -n 1 || true)
if [ -z "$icd" ]; then
  echo "32-rusticl: libRusticlOpenCL.so.1 is missing (ci/deps.sh installs mesa-opencl-icd)" >&2
  exit 1
fi
build=build/unit # the configuration of stages 10, 35 and 55: reused when built
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build "$build" -j "$JOBS"
vendors=$(mktemp -d)
trap 'rm -rf "$vendors"' EXIT
echo "$icd" >"$vendors/rusticl.icd"
export OCL_ICD_VENDORS=$vendors RUSTICL_ENABLE=llvmpipe CLPIN_TEST_PLATFORM=rusticl
# The suite must run on rusticl, not pass by finding no device.
python3 - <<'PY' || { echo "32-rusticl: no llvmpipe device on rusticl" >&2; exit 1; }
import ctypes
cl = ctypes.CDLL("libOpenCL.so.1")
n = ctypes.c_uint(0)
assert cl.clGetPlatformIDs(0, None, ctypes.byref(n)) == 0 and n.value == 1
PY
status=0
logs=()
# run CTEST-ARGS... : one ctest run, its full log kept for the summary.
# CK_RUN_CASE=<case> before it picks one case of a suite (unset: all; an
# empty value would run none).
run() {
  ctest --test-dir "$build" --output-on-failure --timeout 600 "$@" || status=1
  logs+=("$vendors/${#logs[@]}.log")
  cp "$build/Testing/Temporary/LastTest.log" "${logs[-1]}"
}
run -R '^(check_tensor|check_engine|check_budget|check_unified|check_errors|check_options)$' -j "$JOBS"
CK_RUN_CASE=nonblocking run -R '^check_staging$'
CK_RUN_CASE=basic run -R '^check_loader$'
CK_RUN_CASE=transfers run -R '^check_register$'
run -L '^examples$' -j "$JOBS"
bash ci/ctest-summary.sh 32-rusticl "${logs[@]}"
# The Python package on the same device, through the same build's library:
# transfers, tensors, events, zero copy, the loader, stats and pinned memory
# (302 tests, about 55 s measured).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
CLPIN_LIBRARY=$(readlink -f "$build/libclpin.so") CLPIN_PINNED_H2D=1 PYTHONPATH=$PWD/python \
  PYTHONDONTWRITEBYTECODE=1 timeout 600 "$py" -m pytest -p no:cacheprovider -q -rs \
  python/tests/test_transfer.py python/tests/test_tensor.py python/tests/test_events.py \
  python/tests/test_zero_copy.py python/tests/test_loader.py python/tests/test_stats.py \
  python/tests/test_pinned.py || status=1
exit $status
