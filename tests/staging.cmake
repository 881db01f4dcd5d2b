# Staging transfers (clpin_write / clpin_read) and the copy workers.
# Under ThreadSanitizer, ci/stages/21-tsan.sh sets TSAN_OPTIONS with the one
# suppression file, tests/suppressions/tsan.supp.
clpin_check_test(check_staging LABELS unit TIMEOUT 300 ENV "CK_EXCLUDE_TAGS=fallback")

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
  ENVIRONMENT "CK_INCLUDE_TAGS=fallback;OPENCL_LAYERS=${CMAKE_CURRENT_BINARY_DIR}/staging_fault_layer.so")
