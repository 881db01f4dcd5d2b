#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layer maps (docs/DESIGN.md): no file of src/ or layer/ includes or
# calls a file above it, and src/ never the layer. Compiles src/*.c and
# layer/*.c once at -O0 into build/layers (seconds), then shows that the
# check catches planted upward includes and calls in both.
set -euo pipefail
bash ci/layers.sh
bash ci/layers.sh --self-test
