# SPDX-License-Identifier: Apache-2.0
# A program written against 0.2.0's clpin.h (tests/compat/clpin-0.2.h, kept
# unchanged), linked against today's shared library: it runs unchanged.
add_executable(compat_v02 compat/old_caller.c)
target_include_directories(compat_v02 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/compat)
target_link_libraries(compat_v02 PRIVATE clpin)
add_test(NAME compat_v02 COMMAND compat_v02)
set_tests_properties(compat_v02 PROPERTIES LABELS unit TIMEOUT 300)
