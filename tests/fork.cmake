# Fork safety (issue 23): 1000 forks while four threads use clpin, each child
# reaped within 5 s; what a child's calls answer. Labelled stress, not unit:
# valgrind (which runs the unit label, with CK_FORK=no) would take long over
# 1000 forks. Under TSan fewer forks (each costs TSan tens of ms).
set(FORK_ENV "")
if(CLPIN_SANITIZE MATCHES "thread")
  set(FORK_ENV "FORK_ROUNDS=300")
endif()
clpin_check_test(check_fork LABELS stress TIMEOUT 900 ENV "${FORK_ENV}")
# The children turn LeakSanitizer off through __lsan_is_turned_off()
# (check_fork.c says why): the sanitizer runtime finds the test's definition
# only among the executable's exported symbols.
set_target_properties(check_fork PROPERTIES ENABLE_EXPORTS ON)
# Where clpin's sources are: a hung child's stack frame there is clpin's.
target_compile_definitions(check_fork PRIVATE CLPIN_SRC_DIR="${PROJECT_SOURCE_DIR}/src/")
