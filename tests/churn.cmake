# SPDX-License-Identifier: Apache-2.0
# Context churn: released pools' memory is reused, stale handles
# keep their codes. CI runs 20 000 cycles (the full 100 000-cycle run is in
# docs/RELIABILITY.md); the sanitizer builds run the stale-handle case over
# 3 000 cycles, without the memory soak (shadow memory and the sanitizer's
# allocator are not the library's).
set(CHURN_ENV "CHURN_CYCLES=20000")
if(CLPIN_SANITIZE)
  set(CHURN_ENV "CHURN_CYCLES=3000;CK_EXCLUDE_TAGS=soak")
endif()
clpin_check_test(check_churn LABELS stress TIMEOUT 1800 ENV "${CHURN_ENV}")
