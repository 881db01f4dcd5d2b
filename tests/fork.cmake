# Fork safety (issue 23): 1000 forks while four threads use clpin, each child
# reaped within 5 s; what a child's calls answer. Labelled stress, not unit:
# valgrind (which runs the unit label, with CK_FORK=no) would take long over
# 1000 forks. Under TSan fewer forks (each costs TSan tens of ms).
set(FORK_ENV "")
if(CLPIN_SANITIZE MATCHES "thread")
  set(FORK_ENV "FORK_ROUNDS=300")
endif()
clpin_check_test(check_fork LABELS stress TIMEOUT 900 ENV "${FORK_ENV}")
