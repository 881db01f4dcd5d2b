# SPDX-License-Identifier: Apache-2.0
# The lifecycle of a pool: release racing every call and every
# transfer path, release behind user events, the cap under racing releases,
# deferred-path errors, and the context-churn RSS soak. Labelled stress, not
# unit: valgrind (which runs the unit label) would take hours over its rounds.
# Under the sanitizers it runs fewer rounds, without the RSS soak (shadow
# memory is not the library's), and under TSan without the cases whose gate
# fails after the release (the "gatefail" tag): POCL 3.1 then reports a
# destroyed mutex inside its own event code (docs/RELIABILITY.md).
set(LIFECYCLE_ENV "")
if(CLPIN_SANITIZE MATCHES "thread")
  set(LIFECYCLE_ENV "LIFECYCLE_ROUNDS=15;CK_EXCLUDE_TAGS=soak gatefail")
elseif(CLPIN_SANITIZE)
  set(LIFECYCLE_ENV "LIFECYCLE_ROUNDS=20;CK_EXCLUDE_TAGS=soak")
endif()
clpin_check_test(check_lifecycle LABELS stress TIMEOUT 900 ENV "${LIFECYCLE_ENV}")
