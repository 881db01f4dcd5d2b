#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package (python/clpin) on POCL: builds the shared library, then
# runs the pytest suites of python/tests/ against it (CLPIN_LIBRARY names
# the file, so no installed clpin is picked up instead). Fails when any test
# fails, errors, or when pytest collects no test at all (exit code 5).
# CLPIN_PINNED_H2D=1: the path assertions need staging on POCL's
# host-unified CPU device (tests/conftest.py sets it too).
set -euo pipefail
build=build/python
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-Werror" \
  -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target clpin
lib=$(readlink -f "$build/libclpin.so")
export CLPIN_LIBRARY=$lib
export CLPIN_PINNED_H2D=1
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
# Once clpin.h declares clpin_host_register, its tests must run, not skip.
if grep -q 'clpin_host_register' include/clpin.h; then export CLPIN_REQUIRE_HOST_REGISTER=1; fi
junit=$build/pytest.xml
status=0
timeout 900 "$py" -m pytest -p no:cacheprovider -q -rs --junitxml="$junit" python/tests || status=$?
# One summary line from the JUnit report (pytest's own line varies by version).
if [ -s "$junit" ]; then
  "$py" - "$junit" <<'PY' || true
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
s = root if root.tag == "testsuite" else root.find("testsuite")
n = {k: int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
print(f"45-python: {passed} passed, {n['failures']} failed, {n['errors']} errors, "
      f"{n['skipped']} skipped of {n['tests']} ({s.get('time', '?')} s)")
PY
fi
case $status in
  0) ;;
  5) echo "45-python: pytest collected no tests" >&2; exit 1 ;;
  *) echo "45-python: pytest exited $status" >&2; exit 1 ;;
esac
