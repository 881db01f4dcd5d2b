# SPDX-License-Identifier: Apache-2.0
# Lazy submission: the OpenCL specification guarantees a command reaches
# the device only after clFlush on its queue (or a blocking call); POCL and
# NVIDIA submit at once, Mesa's rusticl does not. The fault layer's hold
# mode (FAULTLAYER_HOLD=1, tests/faultlayer/) holds every command until its
# queue is flushed, so on POCL a wait for a command clpin never flushed
# hangs and the test's timeout names it. check_lazy proves the layer holds
# and that no path enqueues a marker with an empty wait list; the suites
# whose paths wait for events (non-blocking transfers, the engine, tensors,
# the loader, zero copy, budgets) run through the layer as well. Plain
# builds only: the order of commands is what is under test, which the
# sanitizers and valgrind add nothing to (and they run these suites
# already without the layer).
set(CLPIN_HELD_ENV "OPENCL_LAYERS=$<TARGET_FILE:clpin_faultlayer>;FAULTLAYER_HOLD=1;CK_DEFAULT_TIMEOUT=120")
clpin_check_test(check_lazy LABELS "faults;held" TIMEOUT 120 ENV "${CLPIN_HELD_ENV}")
target_link_libraries(check_lazy PRIVATE clpin_faultlayer)
if(NOT CLPIN_SANITIZE AND NOT CMAKE_CROSSCOMPILING_EMULATOR)
  # suite, CK_RUN_CASE ("" = every case), timeout
  set(held_runs
    "check_tensor||300" "check_staging|nonblocking|300" "check_engine|nonblocking|300"
    "check_engine|threads|300" "check_engine|paths|300" "check_budget||300"
    "check_loader||300" "check_unified||300" "check_register|lifecycle|300")
  foreach(run ${held_runs})
    string(REPLACE "|" ";" parts "${run}")
    list(GET parts 0 suite)
    list(GET parts 1 tcase)
    list(GET parts 2 limit)
    set(name ${suite}_held)
    set(env "${CLPIN_HELD_ENV}")
    if(tcase) # an empty CK_RUN_CASE would run no case at all
      set(name ${suite}_${tcase}_held)
      list(APPEND env "CK_RUN_CASE=${tcase}")
    endif()
    add_test(NAME ${name} COMMAND ${suite})
    set_tests_properties(${name} PROPERTIES LABELS "faults;held" TIMEOUT ${limit}
      ENVIRONMENT "${env}")
  endforeach()
endif()
