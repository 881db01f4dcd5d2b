# SPDX-License-Identifier: Apache-2.0
# examples/zero_copy.c: kernels using host memory in place on a host-unified
# device (a CLPIN_ZERO_COPY tensor, a tensor filled through host_data,
# clpin_host_alloc memory through clpin_host_buffer), each result checked.
add_executable(zero_copy ${CMAKE_CURRENT_LIST_DIR}/zero_copy.c)
target_link_libraries(zero_copy PRIVATE clpin::clpin)
target_compile_options(zero_copy PRIVATE ${CLPIN_WARNINGS})
add_test(NAME example_zero_copy COMMAND zero_copy --n 262144)
set_tests_properties(example_zero_copy PROPERTIES LABELS examples TIMEOUT 120)
