#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Formatting: every C source and header tracked by git (but the generated
# layer/cl_redirect.h) is laid out as clang-format 14 lays it out with
# .clang-format. Fails naming the files that differ; `ci/format.sh`
# reformats them in place. Also ci/details.sh: no argument check of src/
# writes its C condition into an error detail; ci/deprecated.sh: no
# deprecated or removed name in src/, layer/, bench/, examples/,
# python/clpin (with its self-test); ci/bench-size.sh: bench/ within three
# quarters of src/'s lines. Runs first: it needs no build and takes seconds.
set -euo pipefail
status=0
summary=$(bash ci/format.sh --check) || status=$?
echo "05-format: summary: ${summary:-no files checked}"
bash ci/spdx.sh || status=1
bash ci/details.sh || status=1
bash ci/deprecated.sh || status=1
bash ci/deprecated.sh --self-test || status=1
bash ci/bench-size.sh || status=1
exit $status
