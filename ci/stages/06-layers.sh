#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layer maps (docs/DESIGN.md): no file of src/, src/mpi/ or layer/
# includes or calls a file above it, src/ never an add-on, and neither
# add-on the other. Compiles src/*.c, src/mpi/*.c and layer/*.c once at -O0
# into build/layers, then shows that the check catches planted upward
# includes and calls in all three.
set -euo pipefail
bash ci/layers.sh
bash ci/layers.sh --self-test
