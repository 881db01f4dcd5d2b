# SPDX-License-Identifier: Apache-2.0
# examples/mpi_loader.c: the loader across MPI ranks (shards, one shuffled
# order, an allreduce of a gradient per step). Built where libclpin-mpi is;
# run under MPIEXEC_EXECUTABLE on 2 and 3 ranks by CTest (label mpi) with
# CLPIN_MPI_TESTS=ON (ci/stages/47-mpi.sh), for batch counts that do and do
# not divide among the ranks.
if(TARGET clpin_mpi)
  add_executable(mpi_loader ${CMAKE_CURRENT_SOURCE_DIR}/mpi_loader.c)
  target_link_libraries(mpi_loader PRIVATE clpin::mpi)
  target_compile_options(mpi_loader PRIVATE -Wall -Wextra -Wpedantic -O2)
  if(CLPIN_MPI_TESTS)
    foreach(np 2 3)
      foreach(nb 12 13)
        add_test(NAME example_mpi_loader_np${np}_b${nb} COMMAND ${MPIEXEC_EXECUTABLE}
          ${MPIEXEC_NUMPROC_FLAG} ${np} ${CLPIN_MPIEXEC_FLAGS} $<TARGET_FILE:mpi_loader>
          --batches ${nb} --kib 128 --grad-kib 96 --epochs 3)
        set_tests_properties(example_mpi_loader_np${np}_b${nb} PROPERTIES LABELS mpi TIMEOUT 120
          PASS_REGULAR_EXPRESSION "all checks OK"
          ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
      endforeach()
    endforeach()
  endif()
endif()
