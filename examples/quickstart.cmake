# SPDX-License-Identifier: Apache-2.0
# quickstart: the first example to read (pool, blocks, transfers, stats).
add_executable(quickstart ${CMAKE_CURRENT_LIST_DIR}/quickstart.c)
target_link_libraries(quickstart PRIVATE clpin::clpin)
target_compile_options(quickstart PRIVATE ${CLPIN_WARNINGS})
add_test(NAME example_quickstart COMMAND quickstart)
set_tests_properties(example_quickstart PROPERTIES LABELS examples TIMEOUT 120)
