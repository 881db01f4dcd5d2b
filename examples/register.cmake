# SPDX-License-Identifier: Apache-2.0
# examples/register.c: a training loop's input array registered once and
# streamed every step, beside the plain and staged loops (rates printed).
add_executable(register ${CMAKE_CURRENT_LIST_DIR}/register.c)
target_link_libraries(register PRIVATE clpin::clpin)
target_compile_options(register PRIVATE ${CLPIN_WARNINGS})
# Small batches on POCL: the test proves the data and the path, not speed.
add_test(NAME example_register COMMAND register 4 4)
set_tests_properties(example_register PROPERTIES LABELS examples TIMEOUT 120)
