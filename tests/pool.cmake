# SPDX-License-Identifier: Apache-2.0
# The pool core: pool, registry, options, errors.
clpin_check_test(check_pool LABELS unit)
clpin_check_test(check_registry LABELS unit)
clpin_check_test(check_errors LABELS unit)
clpin_check_test(check_options LABELS unit
  ENV "CK_RUN_CASE=options;CLPIN_MAX_CACHED=512M;CLPIN_CHUNK=12 apples;CLPIN_THREADS=3;CLPIN_PINNED_H2D=maybe")
add_test(NAME check_options_env COMMAND check_options)
set_tests_properties(check_options_env PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT
  "CK_DEFAULT_TIMEOUT=120;CK_RUN_CASE=env;CLPIN_CHUNK=2G;CLPIN_PINNED_H2D=auto;CLPIN_MAX_CACHED=unlimited;CLPIN_LAYER_MIN=64K;CLPIN_THREADS=5;CLPIN_DEBUG=1;CLPIN_NUMA=0;CLPIN_ROUND_MAX=1G")

# A program that forgets clpin_pool_release_context: with CLPIN_DEBUG=1 clpin
# names the pool at exit, and what it still holds.
add_executable(forgotten_pool forgotten_pool.c)
target_link_libraries(forgotten_pool PRIVATE clpin)
add_test(NAME forgotten_pool_is_reported COMMAND forgotten_pool)
set_tests_properties(forgotten_pool_is_reported PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT "CLPIN_DEBUG=1"
  PASS_REGULAR_EXPRESSION "was never released \\(clpin_pool_release_context\\): it holds the context and 1048576 pinned bytes in 1 blocks \\(1 in use\\)")
