/* SPDX-License-Identifier: Apache-2.0 */
/* clpin_mpi_isend, clpin_mpi_irecv, clpin_mpi_wait, clpin_mpi_test.
 *
 * A request is the blocking call run on a thread of its own: its arguments
 * are checked on the caller's thread first (clpin__mpi_vet_p2p), so a bad
 * one is refused before any communication; the queue, the buffer and the
 * wait list's events are retained for the request's life. The thread keeps
 * the call's result and its error detail (thread-local) for the wait, which
 * joins it and hands both to the caller's thread. A send and a receive with
 * one peer can run at once because each direction of a pair has a segment
 * of its own (p2p.c), calls sharing a communicator share one swap of its
 * error handler (fail.c), and the communicator's state is made once
 * (cache.c); MPI itself must allow calls from several threads at once
 * (MPI_THREAD_MULTIPLE). */
#include "mpi_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct clpin_mpi_request {
  bool recv;
  cl_command_queue q;
  cl_mem buf;
  size_t off, n;
  int peer, tag;
  MPI_Comm comm;
  cl_uint nw;
  cl_event *wl;
  cl_event event; /* a receive's upload, once it succeeded */
  cl_int err;
  char detail[768];
  atomic_bool done;
  bool thread; /* a thread runs it (else it ended at once) */
  pthread_t th;
};

static void run_call(clpin_mpi_request *r) {
  r->err = r->recv ? clpin_mpi_recv(r->q, r->buf, r->off, r->n, r->peer, r->tag, r->comm, r->nw,
                                    r->nw ? r->wl : NULL, &r->event)
                   : clpin_mpi_send(r->q, r->buf, r->off, r->n, r->peer, r->tag, r->comm, r->nw,
                                    r->nw ? r->wl : NULL);
  if (r->err != CL_SUCCESS)
    snprintf(r->detail, sizeof r->detail, "%s", clpin_mpi_last_error_detail());
  atomic_store(&r->done, true);
}

static void *run(void *arg) {
  run_call(arg);
  return NULL;
}

static void request_free(clpin_mpi_request *r) {
  for (cl_uint i = 0; i < r->nw; i++)
    clReleaseEvent(r->wl[i]);
  free(r->wl);
  clReleaseMemObject(r->buf);
  clReleaseCommandQueue(r->q);
  free(r);
}

static cl_int start(const char *fn, bool recv, cl_command_queue q, cl_mem buf, size_t off, size_t n,
                    int peer, int tag, MPI_Comm comm, cl_uint nw, const cl_event *wl,
                    clpin_mpi_request **request) {
  if (!request)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT, "request is NULL");
  *request = NULL;
  cl_int err = clpin__mpi_vet_p2p(fn, recv, q, buf, off, n, peer, tag, comm, nw, wl);
  if (err != CL_SUCCESS)
    return err;
  int level = MPI_THREAD_SINGLE;
  if (MPI_Query_thread(&level) != MPI_SUCCESS || level < MPI_THREAD_MULTIPLE)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT,
                           "MPI was initialised below MPI_THREAD_MULTIPLE (level %d): a request "
                           "runs on a thread of its own; use MPI_Init_thread(..., "
                           "MPI_THREAD_MULTIPLE, ...) or the blocking call",
                           level);
  clpin_mpi_request *r = malloc(sizeof *r);
  cl_event *copy = nw ? malloc(nw * sizeof *wl) : NULL;
  if (!r || (nw && !copy)) {
    free(r);
    free(copy);
    return clpin__mpi_fail(fn, CL_OUT_OF_HOST_MEMORY, "no memory for the request");
  }
  *r = (clpin_mpi_request){.recv = recv,
                           .q = q,
                           .buf = buf,
                           .off = off,
                           .n = n,
                           .peer = peer,
                           .tag = tag,
                           .comm = comm,
                           .wl = copy};
  atomic_init(&r->done, false);
  clRetainCommandQueue(q);
  clRetainMemObject(buf);
  for (cl_uint i = 0; i < nw; i++) {
    r->wl[i] = wl[i];
    clRetainEvent(wl[i]);
  }
  r->nw = nw;
  if (peer == MPI_PROC_NULL) { /* nothing to wait for: done here */
    run_call(r);
    *request = r;
    return CL_SUCCESS;
  }
  if (pthread_create(&r->th, NULL, run, r) != 0) {
    request_free(r);
    return clpin__mpi_fail(fn, CLPIN_ERR_THREAD, "no thread for the request");
  }
  r->thread = true;
  *request = r;
  return CL_SUCCESS;
}

cl_int clpin_mpi_isend(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                       int dest, int tag, MPI_Comm comm, cl_uint num_events_in_wait_list,
                       const cl_event *event_wait_list, clpin_mpi_request **request) {
  return start("clpin_mpi_isend", false, queue, buffer, offset, nbytes, dest, tag, comm,
               num_events_in_wait_list, event_wait_list, request);
}

cl_int clpin_mpi_irecv(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                       int source, int tag, MPI_Comm comm, cl_uint num_events_in_wait_list,
                       const cl_event *event_wait_list, clpin_mpi_request **request) {
  return start("clpin_mpi_irecv", true, queue, buffer, offset, nbytes, source, tag, comm,
               num_events_in_wait_list, event_wait_list, request);
}

cl_int clpin_mpi_wait(clpin_mpi_request *request, cl_event *event) {
  if (event)
    *event = NULL;
  if (!request)
    return clpin__mpi_fail(__func__, CLPIN_ERR_INVALID_ARGUMENT, "request is NULL");
  if (request->thread)
    pthread_join(request->th, NULL);
  cl_int err = request->err;
  if (err != CL_SUCCESS)
    clpin__mpi_set_detail(request->detail);
  if (request->event) {
    if (event)
      *event = request->event;
    else
      clReleaseEvent(request->event);
  }
  request_free(request);
  return err;
}

cl_int clpin_mpi_test(clpin_mpi_request *request, int *done) {
  if (!request || !done)
    return clpin__mpi_fail(__func__, CLPIN_ERR_INVALID_ARGUMENT,
                           request ? "done is NULL" : "request is NULL");
  *done = atomic_load(&request->done) ? 1 : 0;
  return CL_SUCCESS;
}
