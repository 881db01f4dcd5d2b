/* SPDX-License-Identifier: Apache-2.0 */
/* A program that knows libclpin-mpi only as an installed package: built by
 * tests/package/mpi (find_package(clpin) -> clpin::mpi) and through
 * pkg-config clpin-mpi against the tree `cmake --install` wrote, by
 * ci/stages/47-mpi.sh, and run under mpirun. It checks the library's
 * argument vetting and counters (no device needed) and prints one line. */
#include <clpin_mpi.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  struct clpin_mpi_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  cl_int a = clpin_mpi_stats(&s);
  cl_int b = clpin_mpi_send(NULL, NULL, 0, 0, 0, 0, MPI_COMM_WORLD, 0, NULL);
  int ok = a == CL_SUCCESS && b == CL_INVALID_COMMAND_QUEUE &&
           strstr(clpin_mpi_last_error_detail(), "queue") != NULL &&
           strstr(clpin_strerror(CLPIN_ERR_MPI), "CLPIN_ERR_MPI") != NULL;
  if (rank == 0)
    printf("consumer_mpi: clpin %s, libclpin-mpi %s\n", clpin_version_string(),
           ok ? "ok" : "FAILED");
  MPI_Finalize();
  return ok ? 0 : 1;
}
