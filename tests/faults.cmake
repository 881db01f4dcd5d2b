# SPDX-License-Identifier: Apache-2.0
# Fault injection: the OpenCL layer tests/faultlayer/ and the suite
# check_faults that drives it. ocl-icd loads the layer from OPENCL_LAYERS; the
# suite also links it, so both share one copy (the dynamic loader maps the
# file once) and the test calls the layer's control API directly.
add_library(clpin_faultlayer SHARED faultlayer/faultlayer.c)
target_include_directories(clpin_faultlayer PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/faultlayer
  PRIVATE $<TARGET_PROPERTY:OpenCL::OpenCL,INTERFACE_INCLUDE_DIRECTORIES>)
# The layer fills a dispatch table of every entry point the headers know.
target_compile_definitions(clpin_faultlayer PRIVATE CL_TARGET_OPENCL_VERSION=300 _GNU_SOURCE)
target_compile_options(clpin_faultlayer PRIVATE ${CLPIN_WARNINGS})
target_link_libraries(clpin_faultlayer PRIVATE Threads::Threads)

# One CTest test per scenario group, so a failure names its area. A sweep
# counts an entry's OpenCL calls in a fresh process, then fails each in turn
# in another fresh one: it needs Check's fork mode (CK_FORK=yes), also where
# a stage runs the other suites in one process (CK_FORK=no: 20-asan,
# 21-tsan, 22-valgrind).
set(CLPIN_FAULTS_ENV "OPENCL_LAYERS=$<TARGET_FILE:clpin_faultlayer>;CK_FORK=yes")
# forkwatch.c: under TSan its children exit without TSan's 1 s sleep
# (forkwatch.c says why); a sweep forks hundreds of them.
clpin_check_test(check_faults LABELS faults TIMEOUT 900 SOURCES forkwatch.c
  ENV "${CLPIN_FAULTS_ENV};CLPIN_FAULTS_GROUP=pool")
target_link_libraries(check_faults PRIVATE clpin_faultlayer)
foreach(area staging tensor zerocopy)
  add_test(NAME check_faults_${area} COMMAND check_faults)
  set_tests_properties(check_faults_${area} PROPERTIES LABELS faults TIMEOUT 900
    ENVIRONMENT "${CLPIN_FAULTS_ENV};CLPIN_FAULTS_GROUP=${area}")
endforeach()

# Debug builds poison idle blocks (CLPIN_POISON_IDLE) and, under
# AddressSanitizer, the suite's "poison" case proves that a use after
# clpin_release is caught. It means nothing without both, so it is compiled
# only where both are on (the asan stage).
target_compile_definitions(check_faults PRIVATE $<$<CONFIG:Debug>:CLPIN_TEST_POISON=1>)

# Slow checkers (valgrind runs a suite 20-50 times slower) need longer limits
# than the suites set for themselves: -DCLPIN_TEST_TIMEOUT=<s> replaces every
# test's TIMEOUT, once all fragments have registered their tests.
set(CLPIN_TEST_TIMEOUT "" CACHE STRING "Override every test's timeout (seconds), for slow checkers")
if(CLPIN_TEST_TIMEOUT)
  function(clpin__override_test_timeouts)
    get_property(all_tests DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
    if(all_tests)
      set_tests_properties(${all_tests} PROPERTIES TIMEOUT ${CLPIN_TEST_TIMEOUT})
    endif()
  endfunction()
  cmake_language(DEFER CALL clpin__override_test_timeouts)
endif()

# The loader under the same layer: creating calls and uploads fail in turn
# (tests/check_loader_faults.c).
clpin_check_test(check_loader_faults LABELS faults TIMEOUT 600
  ENV "OPENCL_LAYERS=$<TARGET_FILE:clpin_faultlayer>")
target_link_libraries(check_loader_faults PRIVATE clpin_faultlayer)
