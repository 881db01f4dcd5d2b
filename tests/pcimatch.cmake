# SPDX-License-Identifier: Apache-2.0
# multigpu-bench's PCI matching of OpenCL to CUDA devices (bench/pcimatch.c),
# on made-up device lists.
clpin_check_test(check_pcimatch LABELS unit SOURCES ${PROJECT_SOURCE_DIR}/bench/pcimatch.c)
target_include_directories(check_pcimatch PRIVATE ${PROJECT_SOURCE_DIR}/bench)
