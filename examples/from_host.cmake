# SPDX-License-Identifier: Apache-2.0
# examples/from_host.c: a tensor up, a kernel, a tensor back (checked).
add_executable(from_host ${CMAKE_CURRENT_SOURCE_DIR}/from_host.c)
target_link_libraries(from_host PRIVATE clpin::clpin)
target_compile_options(from_host PRIVATE -Wall -Wextra -Wpedantic)
add_test(NAME example_from_host COMMAND from_host --rows 64 --cols 48)
set_tests_properties(example_from_host PROPERTIES LABELS examples TIMEOUT 120)
