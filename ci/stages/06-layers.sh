#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layer maps (docs/DESIGN.md): no file of src/ or src/mpi/ includes or calls a file
# above it. Compiles src/*.c and src/mpi/*.c once at -O0 into build/layers, then
# shows that the check catches a planted upward include and call.
set -euo pipefail
bash ci/layers.sh
bash ci/layers.sh --self-test
