# SPDX-License-Identifier: Apache-2.0
# Rect and image transfers (src/rect.c), byte-exact against the driver's own
# calls. CI stage 30-oclgrind runs it on Oclgrind too.
clpin_check_test(check_rect LABELS unit TIMEOUT 600 ENV "CK_EXCLUDE_TAGS=fallback")

# Under the fault layer (tests/faultlayer/, defined in tests/faults.cmake):
# the pool cannot allocate (the out-of-memory fallback), and a chunk's
# device-side call fails mid-pipeline. The suite links the layer, as
# check_staging does, so its control calls reach the instance ocl-icd loaded.
target_link_libraries(check_rect PRIVATE clpin_faultlayer)
add_test(NAME check_rect_faults COMMAND check_rect)
set_tests_properties(check_rect_faults PROPERTIES LABELS "unit;faults" TIMEOUT 300
  ENVIRONMENT "CK_DEFAULT_TIMEOUT=120;CK_INCLUDE_TAGS=fallback;OPENCL_LAYERS=$<TARGET_FILE:clpin_faultlayer>")
