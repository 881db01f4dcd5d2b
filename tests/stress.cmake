# SPDX-License-Identifier: Apache-2.0
# Stress: 16 threads x CLPIN_STRESS_OPS mixed pool operations (tests/check_stress.c).
# The CI size runs in a minute or two on 2 cores, also under TSan; the full
# run is in docs/RELIABILITY.md.
clpin_check_test(check_stress LABELS stress TIMEOUT 1800)
include(${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz.cmake)
