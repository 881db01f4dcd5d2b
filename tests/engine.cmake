# The transfer engine (issue 10): non-blocking transfers, duplex and many
# queues, user events completed or failed later, the path choice. The large
# transfers are 256 MiB; 32 MiB under the sanitizers and valgrind.
set(ENGINE_ENV "")
if(CLPIN_SANITIZE OR CMAKE_CROSSCOMPILING_EMULATOR)
  set(ENGINE_ENV "CLPIN_TEST_BIG=33554432")
endif()
clpin_check_test(check_engine LABELS unit TIMEOUT 900 ENV "${ENGINE_ENV}")
