# SPDX-License-Identifier: Apache-2.0
# The OpenCL layer: layer_transcript runs one sequence of OpenCL
# calls; tests/layer/diff.sh runs it without and with libclpin-layer.so and
# fails on any difference, or when the layer routed nothing.
# Not registered in the sanitizer stages' builds (20/21): stage 35-layer
# builds the layer and the transcript with ASan+UBSan and TSan itself.
if(TARGET clpin-layer AND NOT CLPIN_SANITIZE)
  add_executable(layer_transcript layer/transcript.c)
  target_link_libraries(layer_transcript PRIVATE OpenCL::OpenCL Threads::Threads)
  target_compile_options(layer_transcript PRIVATE ${CLPIN_WARNINGS})
  add_test(NAME layer_diff COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/layer/diff.sh
    $<TARGET_FILE:layer_transcript> $<TARGET_FILE:clpin-layer> all)
  set_tests_properties(layer_diff PROPERTIES LABELS layer TIMEOUT 600
    ENVIRONMENT "CLPIN_PINNED_H2D=1")
  # What the layer logs and counts at the defaults on POCL (host-unified).
  add_test(NAME layer_messages COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/layer/messages.sh
    $<TARGET_FILE:layer_transcript> $<TARGET_FILE:clpin-layer>)
  set_tests_properties(layer_messages PROPERTIES LABELS layer TIMEOUT 600)
  # The loader's side without a loader: entry points and the dispatch table.
  add_executable(layer_entry layer/entry.c)
  target_include_directories(layer_entry PRIVATE
    $<TARGET_PROPERTY:OpenCL::OpenCL,INTERFACE_INCLUDE_DIRECTORIES>)
  target_compile_options(layer_entry PRIVATE ${CLPIN_WARNINGS})
  target_link_libraries(layer_entry PRIVATE ${CMAKE_DL_LIBS})
  add_test(NAME layer_entry COMMAND layer_entry $<TARGET_FILE:clpin-layer>)
  set_tests_properties(layer_entry PROPERTIES LABELS layer TIMEOUT 60)
endif()
