# SPDX-License-Identifier: Apache-2.0
# The API fuzzer (tests/fuzz/fuzz_api.c), included from tests/stress.cmake.
#
# fuzz_replay: the harness with a plain main() that replays the seed corpus
# and every regression input; built with any compiler, run by CTest (unit).
# fuzz_api: the libFuzzer binary, built only when the compiler is clang
# (ci/stages/40-fuzz.sh configures a separate clang build for it).
set(CLPIN_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
# Both link the Check suites' helpers (tests/testutil.c): one stats snapshot
# and one invariant check for every test program.
set(CLPIN_FUZZ_DEFS CL_TARGET_OPENCL_VERSION=120)

add_executable(fuzz_replay ${CLPIN_FUZZ_DIR}/fuzz_api.c ${CLPIN_FUZZ_DIR}/replay_main.c
  ${CMAKE_CURRENT_SOURCE_DIR}/testutil.c)
target_link_libraries(fuzz_replay PRIVATE clpin_static PkgConfig::CHECK)
target_include_directories(fuzz_replay PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(fuzz_replay PRIVATE _GNU_SOURCE ${CLPIN_FUZZ_DEFS})
target_compile_options(fuzz_replay PRIVATE ${CLPIN_WARNINGS})
add_test(NAME fuzz_replay COMMAND fuzz_replay ${CLPIN_FUZZ_DIR}/regressions ${CLPIN_FUZZ_DIR}/corpus)
set_tests_properties(fuzz_replay PROPERTIES LABELS unit TIMEOUT 300)

if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_api ${CLPIN_FUZZ_DIR}/fuzz_api.c ${CMAKE_CURRENT_SOURCE_DIR}/testutil.c)
  target_link_libraries(fuzz_api PRIVATE clpin_static PkgConfig::CHECK)
  target_include_directories(fuzz_api PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(fuzz_api PRIVATE _GNU_SOURCE ${CLPIN_FUZZ_DEFS})
  target_compile_options(fuzz_api PRIVATE ${CLPIN_WARNINGS} -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_api PRIVATE -fsanitize=fuzzer,address,undefined)
endif()
