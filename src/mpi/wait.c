/* SPDX-License-Identifier: Apache-2.0 */
/* Waiting for OpenCL events without starving MPI. Open MPI (and MPICH's
 * default build) advance transfers only inside MPI calls of the process; a
 * rank parked in clWaitForEvents would hold up its peers' rendezvous
 * messages and non-blocking barriers. So the waits poll: the event's status,
 * then MPI's progress engine (MPI_Iprobe is the cheapest call that drives
 * it), then a short pause. */
#include "mpi_internal.h"

#include <sched.h>
#include <time.h>

void clpin__mpi_pause(unsigned *spins) {
  if (++*spins < 64) {
    sched_yield();
    return;
  }
  /* Long waits (a slow device, a peer still busy): sleep a little, so ranks
   * oversubscribed on few cores leave their peers the CPU. */
  struct timespec ts = {0, *spins < 1024 ? 2000 : 50000};
  nanosleep(&ts, NULL);
}

bool clpin__mpi_event_done(cl_event ev, cl_int *status) {
  cl_int st = CL_QUEUED;
  cl_int err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  if (err != CL_SUCCESS) {
    *status = err;
    return true;
  }
  *status = st;
  return st <= CL_COMPLETE;
}

static void drive_mpi(void) {
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

void clpin__mpi_idle(bool moved, unsigned *spins) {
  if (moved) {
    *spins = 0;
    return;
  }
  drive_mpi();
  clpin__mpi_pause(spins);
}

bool clpin__mpi_chunk_ended(const char *func, const char *what, cl_event *ev, size_t k,
                            cl_int *failed) {
  cl_int st = CL_COMPLETE;
  if (*ev && !clpin__mpi_event_done(*ev, &st))
    return false;
  if (*ev) {
    clReleaseEvent(*ev);
    *ev = NULL;
  }
  if (st != CL_COMPLETE && *failed == CL_SUCCESS)
    *failed = clpin__mpi_fail(func, st < 0 ? st : CL_OUT_OF_RESOURCES, "%s chunk %zu: %s", what, k,
                              clpin_strerror(st));
  return true;
}

cl_int clpin__mpi_wait_event(cl_event ev) {
  cl_int st;
  unsigned spins = 0;
  while (!clpin__mpi_event_done(ev, &st)) {
    drive_mpi();
    clpin__mpi_pause(&spins);
  }
  return st;
}

int clpin__mpi_wait_req(MPI_Request *req, MPI_Status *st) {
  unsigned spins = 0;
  for (;;) {
    int flag = 0;
    int e = MPI_Test(req, &flag, st);
    if (e != MPI_SUCCESS || flag)
      return e;
    clpin__mpi_pause(&spins);
  }
}
