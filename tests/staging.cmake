# Staging transfers (clpin_write / clpin_read) and the copy workers.
# Under ThreadSanitizer (ci/stages/21-tsan.sh) a POCL-internal lock-order
# report is suppressed (see the file); the stage's options are kept.
set(STAGING_TSAN "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/staging-tsan.supp")
clpin_check_test(check_staging LABELS unit TIMEOUT 300 ENV "CK_EXCLUDE_TAGS=fallback;${STAGING_TSAN}")

# The out-of-memory fallback: the same suite's "fallback" case, with an
# OpenCL layer that fails pinned allocations on demand.
add_library(staging_fault_layer MODULE staging_fault_layer.c)
set_target_properties(staging_fault_layer PROPERTIES PREFIX "" C_VISIBILITY_PRESET default
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
target_compile_definitions(staging_fault_layer PRIVATE CL_TARGET_OPENCL_VERSION=300)
target_include_directories(staging_fault_layer PRIVATE ${OpenCL_INCLUDE_DIRS})
add_dependencies(check_staging staging_fault_layer)
add_test(NAME check_staging_fallback COMMAND check_staging)
set_tests_properties(check_staging_fallback PROPERTIES LABELS "unit;faults" TIMEOUT 120
  ENVIRONMENT "CK_INCLUDE_TAGS=fallback;OPENCL_LAYERS=${CMAKE_CURRENT_BINARY_DIR}/staging_fault_layer.so;${STAGING_TSAN}")
