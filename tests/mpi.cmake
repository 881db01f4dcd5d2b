# SPDX-License-Identifier: Apache-2.0
# libclpin-mpi's tests (tests/mpi/): plain programs run under mpirun
# (MPIEXEC_EXECUTABLE, with cmake/mpi.cmake's CLPIN_MPIEXEC_FLAGS for its
# MPI; the OMPI_* variables are Open MPI's, MPICH ignores them), since
# Check's fork does not survive MPI. Built wherever libclpin-mpi is; run by
# CTest (label mpi) only with CLPIN_MPI_TESTS=ON, which ci/stages/47-mpi.sh
# sets: the other stages' CTest runs stay MPI-free (Open MPI's own leaks
# would fail 20-asan's leak checking, and its ranks double 10-unit's time).
option(CLPIN_MPI_TESTS "Register the MPI tests (mpirun -np 2 and 3) with CTest" OFF)
if(TARGET clpin_mpi)
  add_executable(test_mpi mpi/test_mpi.c)
  target_link_libraries(test_mpi PRIVATE clpin_mpi)
  # src/mpi/wire.h: the header p2p.c sends, sized against as it is.
  target_include_directories(test_mpi PRIVATE ${PROJECT_SOURCE_DIR}/src/mpi)
  target_compile_definitions(test_mpi PRIVATE _GNU_SOURCE CL_TARGET_OPENCL_VERSION=120)
  target_compile_options(test_mpi PRIVATE ${CLPIN_WARNINGS})
  target_link_libraries(test_mpi PRIVATE ${CMAKE_DL_LIBS})
  # Preloaded on every rank but 0 by mpi_segments_refused: opens of
  # /proc/<pid>/fd/<n> fail there, as between containers or users.
  add_library(clpin_noprocfd MODULE mpi/noprocfd.c)
  target_compile_options(clpin_noprocfd PRIVATE ${CLPIN_WARNINGS})
  target_link_libraries(clpin_noprocfd PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(test_mpi clpin_noprocfd)
  if(CLPIN_MPI_TESTS)
    # MPMD: rank 0 as it is, ranks 1 and 2 with the library preloaded.
    add_test(NAME mpi_segments_refused COMMAND ${MPIEXEC_EXECUTABLE} ${CLPIN_MPIEXEC_FLAGS}
      ${MPIEXEC_NUMPROC_FLAG} 1 ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_mpi> --segments-refused :
      ${MPIEXEC_NUMPROC_FLAG} 2 env LD_PRELOAD=$<TARGET_FILE:clpin_noprocfd>
      $<TARGET_FILE:test_mpi> --segments-refused)
    set_tests_properties(mpi_segments_refused PROPERTIES LABELS mpi TIMEOUT 300
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    # MPI_Init, not MPI_Init_thread(MPI_THREAD_MULTIPLE): requests refused.
    add_test(NAME mpi_thread_single COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
      ${CLPIN_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_mpi> --thread-single)
    set_tests_properties(mpi_thread_single PROPERTIES LABELS mpi TIMEOUT 300
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    # Messages to oneself on a single rank (a halo exchange on one rank).
    add_test(NAME mpi_self_np1 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1
      ${CLPIN_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_mpi> --self)
    set_tests_properties(mpi_self_np1 PROPERTIES LABELS mpi TIMEOUT 120
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    foreach(np 2 3 4)
      add_test(NAME mpi_np${np} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np}
        ${CLPIN_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_mpi> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(mpi_np${np} PROPERTIES LABELS mpi TIMEOUT 300
        ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    endforeach()
  endif()
endif()
