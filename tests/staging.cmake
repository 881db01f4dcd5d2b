# SPDX-License-Identifier: Apache-2.0
# Staging transfers (clpin_write / clpin_read) and the copy workers.
# Under ThreadSanitizer, ci/stages/21-tsan.sh sets TSAN_OPTIONS with the one
# suppression file, tests/suppressions/tsan.supp.
clpin_check_test(check_staging LABELS unit TIMEOUT 300 ENV "CK_EXCLUDE_TAGS=fallback")

# The out-of-memory fallback: the same suite's "fallback" case under the
# fault layer (tests/faultlayer/, defined in tests/faults.cmake), which the
# case arms to fail clCreateBuffer. The suite links the layer, as
# check_faults does, so its control calls reach the instance ocl-icd loaded.
target_link_libraries(check_staging PRIVATE clpin_faultlayer)
add_test(NAME check_staging_fallback COMMAND check_staging)
set_tests_properties(check_staging_fallback PROPERTIES LABELS "unit;faults" TIMEOUT 120
  ENVIRONMENT "CK_DEFAULT_TIMEOUT=120;CK_INCLUDE_TAGS=fallback;OPENCL_LAYERS=$<TARGET_FILE:clpin_faultlayer>")
