# SPDX-License-Identifier: Apache-2.0
# The transfer engine: non-blocking transfers, duplex and many
# queues, user events completed or failed later, the path choice. The large
# transfers are 256 MiB; 32 MiB under the sanitizers and valgrind.
set(ENGINE_ENV "")
if(CLPIN_SANITIZE OR CMAKE_CROSSCOMPILING_EMULATOR)
  set(ENGINE_ENV "CLPIN_TEST_BIG=33554432")
endif()
clpin_check_test(check_engine LABELS unit TIMEOUT 900 ENV "${ENGINE_ENV}")

# The engine against POCL's failure propagation with its windows held open
# (tests/failrace/failrace.c, preloaded): check_engine's case "failrace"
# alone. Not under the sanitizers or valgrind, whose runtimes must come
# first and intercept the same pthread call.
if(NOT CLPIN_SANITIZE AND NOT CMAKE_CROSSCOMPILING_EMULATOR)
  add_library(clpin_failrace SHARED failrace/failrace.c)
  target_compile_options(clpin_failrace PRIVATE ${CLPIN_WARNINGS})
  target_link_libraries(clpin_failrace PRIVATE OpenCL::OpenCL ${CMAKE_DL_LIBS})
  add_test(NAME check_engine_failrace COMMAND check_engine)
  set_tests_properties(check_engine_failrace PROPERTIES LABELS unit TIMEOUT 300
    ENVIRONMENT "CK_DEFAULT_TIMEOUT=120;CK_RUN_CASE=failrace;LD_PRELOAD=$<TARGET_FILE:clpin_failrace>")
endif()
