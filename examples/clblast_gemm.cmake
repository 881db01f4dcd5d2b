# SPDX-License-Identifier: Apache-2.0
# clblast_gemm: CLBlast's SGEMM fed and drained through clpin. CLBlast is
# required (Debian: libclblast-dev, installed by ci/deps.sh): a missing
# CLBlast fails the configure rather than silently dropping the example.
# CLPIN_EXAMPLE_CLBLAST=OFF leaves the example out on purpose.
option(CLPIN_EXAMPLE_CLBLAST "Build and test examples/clblast_gemm.c (needs CLBlast)" ON)
if(CLPIN_EXAMPLE_CLBLAST)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(CLBLAST IMPORTED_TARGET clblast)
  if(CLBLAST_FOUND)
    set(CLPIN_CLBLAST_TARGET PkgConfig::CLBLAST)
  else()
    find_package(CLBlast CONFIG)
    if(NOT CLBlast_FOUND)
      message(FATAL_ERROR "examples/clblast_gemm needs CLBlast (Debian: apt-get install "
        "libclblast-dev; ci/deps.sh installs it), or configure with -DCLPIN_EXAMPLE_CLBLAST=OFF")
    endif()
    set(CLPIN_CLBLAST_TARGET clblast)
  endif()
  add_executable(clblast_gemm ${CMAKE_CURRENT_LIST_DIR}/clblast_gemm.c)
  target_link_libraries(clblast_gemm PRIVATE clpin::clpin ${CLPIN_CLBLAST_TARGET} m)
  target_compile_options(clblast_gemm PRIVATE ${CLPIN_WARNINGS})
  add_test(NAME example_clblast_gemm COMMAND clblast_gemm)
  set_tests_properties(example_clblast_gemm PROPERTIES LABELS examples TIMEOUT 300)
endif()
