# SPDX-License-Identifier: Apache-2.0
# The bad-input table: docs/BAD_INPUT.md, one test per row (tests/check_badinput.c).
clpin_check_test(check_badinput LABELS unit TIMEOUT 300)
target_compile_definitions(check_badinput PRIVATE
  CLPIN_BAD_INPUT_DOC="${PROJECT_SOURCE_DIR}/docs/BAD_INPUT.md")
# Row BI-82: a bad value in every option variable; the defaults must be kept.
add_test(NAME check_badinput_env COMMAND check_badinput env)
set_tests_properties(check_badinput_env PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT
  "CLPIN_PINNED_H2D=yes;CLPIN_MAX_CACHED=lots;CLPIN_CHUNK=1K;CLPIN_THREADS=0;CLPIN_DEBUG=3;CLPIN_LAYER_MIN=1X")
