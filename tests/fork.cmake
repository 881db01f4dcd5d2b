# SPDX-License-Identifier: Apache-2.0
# Fork safety: 1000 forks while four threads use clpin, each child
# reaped within 5 s; what a child's calls answer. Labelled stress, not unit:
# valgrind (which runs the unit label, with CK_FORK=no) would take long over
# 1000 forks. Under TSan also 1000: tests/forkwatch.c turns off TSan's sleep
# at exit, which made each fork cost 1 s there.
clpin_check_test(check_fork LABELS stress TIMEOUT 900 SOURCES forkwatch.c)
# The children turn LeakSanitizer off through __lsan_is_turned_off()
# (tests/forkwatch.h says why), and forkwatch.c sets TSan's default options:
# the sanitizer runtime finds both only among the executable's exported
# symbols.
set_target_properties(check_fork PROPERTIES ENABLE_EXPORTS ON)
# Where clpin's sources are: a hung child's stack frame there is clpin's.
target_compile_definitions(check_fork PRIVATE CLPIN_SRC_DIR="${PROJECT_SOURCE_DIR}/src/")
# The control for the hang exclusion: the same forks with no clpin at all
# (tests/fork_control.c). Not a CTest test: run by hand beside check_fork
# (docs/RELIABILITY.md, "Fork and context churn").
add_executable(fork_control fork_control.c forkwatch.c)
target_link_libraries(fork_control PRIVATE OpenCL::OpenCL Threads::Threads)
target_compile_definitions(fork_control PRIVATE _GNU_SOURCE)
set_target_properties(fork_control PROPERTIES ENABLE_EXPORTS ON)
