# SPDX-License-Identifier: Apache-2.0
# The statistics and report lines behind every bench's figures. (The
# benches' own smoke runs on POCL are registered in bench/CMakeLists.txt,
# next to their targets.)
clpin_check_test(check_benchstat LABELS unit SOURCES ${PROJECT_SOURCE_DIR}/bench/benchstat.c
                 ${PROJECT_SOURCE_DIR}/src/size.c)
target_include_directories(check_benchstat PRIVATE ${PROJECT_SOURCE_DIR}/bench)
target_link_libraries(check_benchstat PRIVATE m)

# How every bench picks its platform and devices (bench/benchcl.c).
clpin_check_test(check_benchcl LABELS unit SOURCES ${PROJECT_SOURCE_DIR}/bench/benchcl.c
                 ENV "POCL_DEVICES=pthread pthread")
target_include_directories(check_benchcl PRIVATE ${PROJECT_SOURCE_DIR}/bench)
