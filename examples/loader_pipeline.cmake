# SPDX-License-Identifier: Apache-2.0
# examples/loader_pipeline.c: the data-loader experiment (serial pageable,
# serial pinned, clpin's loader), checking every batch.
add_executable(loader_pipeline ${CMAKE_CURRENT_SOURCE_DIR}/loader_pipeline.c)
target_link_libraries(loader_pipeline PRIVATE clpin::clpin)
# Optimised in every build type: its timings are the point of running it.
target_compile_options(loader_pipeline PRIVATE -Wall -Wextra -Wpedantic -O2)
# Small batches: the test proves the three paths move the right bytes, not speed.
add_test(NAME example_loader_pipeline
  COMMAND loader_pipeline --batch-kib 1024 --batches 6 --work-ms 2)
# The data check must catch a corrupted batch: with one byte flipped after its
# checksum was taken, every mode has to report the batch (and exit 1).
add_test(NAME example_loader_pipeline_detects_corruption
  COMMAND loader_pipeline --batch-kib 256 --batches 4 --work-ms 1 --inject-error)
set_tests_properties(example_loader_pipeline example_loader_pipeline_detects_corruption
  PROPERTIES LABELS examples TIMEOUT 120)
set_tests_properties(example_loader_pipeline_detects_corruption PROPERTIES PASS_REGULAR_EXPRESSION
  "serial pageable: batch 2: device saw.*serial pinned: batch 2: device saw.*loader pipeline: batch 2: device saw")
