/* SPDX-License-Identifier: Apache-2.0 */
/* clpin_mpi_isend, clpin_mpi_irecv, clpin_mpi_iallreduce, clpin_mpi_ibcast,
 * clpin_mpi_wait, clpin_mpi_test, and the order of collectives.
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
 * (MPI_THREAD_MULTIPLE).
 *
 * A collective request is checked on the caller's thread too, but a refusal
 * comes out of its wait: its thread still takes part in the collective's
 * agreement, so that the other ranks fail with CLPIN_ERR_PEER rather than
 * wait. MPI wants a communicator's collectives in the same order on every
 * rank; the caller makes them in that order, and each runs its turn
 * (turn.c): a ticket per call on comm, taken when the call is made,
 * blocking calls included. */
#include "mpi_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_SEND, K_RECV, K_ALLREDUCE, K_BCAST };

struct clpin_mpi_request {
  enum kind kind;
  cl_command_queue q;
  cl_mem buf;
  size_t off, n; /* allreduce: n is the count */
  int peer, tag; /* bcast: peer is the root */
  MPI_Datatype type;
  MPI_Op op;
  MPI_Comm comm;
  cl_uint nw;
  cl_event *wl;
  cl_int local; /* a collective's own checks, made when it was called */
  clpin__mpi_turn *turn;
  uint64_t ticket;
  cl_event event; /* a receive's or a collective's upload, once it succeeded */
  cl_int err;
  char detail[768];
  atomic_bool done;
  bool thread; /* a thread runs it (else it ended at once) */
  pthread_t th;
};

/* ------------------------------------------------------------- requests -- */

static void finish(clpin_mpi_request *r) {
  if (r->err != CL_SUCCESS)
    snprintf(r->detail, sizeof r->detail, "%s", clpin_mpi_last_error_detail());
  atomic_store(&r->done, true);
}

static void run_call(clpin_mpi_request *r) {
  const cl_event *wl = r->wl; /* NULL when nw is 0 */
  switch (r->kind) {
  case K_SEND:
    r->err = clpin_mpi_send(r->q, r->buf, r->off, r->n, r->peer, r->tag, r->comm, r->nw, wl);
    break;
  case K_RECV:
    r->err =
        clpin_mpi_recv(r->q, r->buf, r->off, r->n, r->peer, r->tag, r->comm, r->nw, wl, &r->event);
    break;
  case K_ALLREDUCE:
  case K_BCAST:
    clpin__mpi_turn_wait(r->turn, r->ticket);
    if (r->local != CL_SUCCESS) /* what the agreement keeps of this rank's refusal */
      clpin__mpi_set_detail(r->detail);
    r->err = r->kind == K_ALLREDUCE
                 ? clpin__mpi_allreduce_run(r->q, r->buf, r->n, r->type, r->op, r->comm, r->nw, wl,
                                            r->local, &r->event)
                 : clpin__mpi_bcast_run(r->q, r->buf, r->off, r->n, r->peer, r->comm, r->nw, wl,
                                        r->local, &r->event);
    /* Done before the next collective on comm may start. */
    finish(r);
    clpin__mpi_turn_end(r->turn);
    return;
  }
  finish(r);
}

static void *run(void *arg) {
  run_call(arg);
  return NULL;
}

static void request_free(clpin_mpi_request *r) {
  if (r->local == CL_SUCCESS) { /* a refused collective holds nothing */
    for (cl_uint i = 0; i < r->nw; i++)
      clReleaseEvent(r->wl[i]);
    clReleaseMemObject(r->buf);
    clReleaseCommandQueue(r->q);
  }
  free(r->wl);
  free(r);
}

static cl_int thread_level(const char *fn) {
  int level = MPI_THREAD_SINGLE;
  if (MPI_Query_thread(&level) != MPI_SUCCESS || level < MPI_THREAD_MULTIPLE)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT,
                           "MPI was initialised below MPI_THREAD_MULTIPLE (level %d): a request "
                           "runs on a thread of its own; use MPI_Init_thread(..., "
                           "MPI_THREAD_MULTIPLE, ...) or the blocking call",
                           level);
  return CL_SUCCESS;
}

/* A request as proto says, holding the queue, the buffer and a copy of the
 * wait list (retained) when its checks passed; a refused collective copies
 * and holds nothing (its thread only tells the other ranks). */
static cl_int make(const char *fn, const clpin_mpi_request *proto, const cl_event *wl,
                   clpin_mpi_request **out) {
  bool ok = proto->local == CL_SUCCESS;
  cl_uint nw = ok && wl ? proto->nw : 0;
  clpin_mpi_request *r = malloc(sizeof *r);
  cl_event *copy = nw ? malloc(nw * sizeof *wl) : NULL;
  if (!r || (nw && !copy)) {
    free(r);
    free(copy);
    return clpin__mpi_fail(fn, CL_OUT_OF_HOST_MEMORY, "no memory for the request");
  }
  *r = *proto;
  r->wl = copy;
  r->nw = nw;
  atomic_init(&r->done, false);
  if (ok) {
    clRetainCommandQueue(r->q);
    clRetainMemObject(r->buf);
    for (cl_uint i = 0; i < nw; i++) {
      r->wl[i] = wl[i];
      clRetainEvent(wl[i]);
    }
  } else {
    snprintf(r->detail, sizeof r->detail, "%s", clpin_mpi_last_error_detail());
  }
  *out = r;
  return CL_SUCCESS;
}

static cl_int start(const char *fn, bool recv, cl_command_queue q, cl_mem buf, size_t off, size_t n,
                    int peer, int tag, MPI_Comm comm, cl_uint nw, const cl_event *wl,
                    clpin_mpi_request **request) {
  if (!request)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT, "request is NULL");
  *request = NULL;
  cl_int err = clpin__mpi_vet_p2p(fn, recv, q, buf, off, n, peer, tag, comm, nw, wl);
  if (err == CL_SUCCESS)
    err = thread_level(fn);
  if (err != CL_SUCCESS)
    return err;
  clpin_mpi_request *r;
  clpin_mpi_request proto = {.kind = recv ? K_RECV : K_SEND,
                             .q = q,
                             .buf = buf,
                             .off = off,
                             .n = n,
                             .peer = peer,
                             .tag = tag,
                             .comm = comm,
                             .nw = nw};
  if ((err = make(fn, &proto, wl, &r)) != CL_SUCCESS)
    return err;
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

/* A collective request: refused at once only for what the blocking call
 * also fails alone on (comm) and for what no request can do (request NULL,
 * MPI's thread level); anything else runs, a refusal included, in its turn. */
static cl_int start_coll(const char *fn, clpin_mpi_request *proto, const cl_event *wl,
                         clpin_mpi_request **request) {
  if (!request)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT, "request is NULL");
  *request = NULL;
  int rank, size;
  cl_int err = clpin__mpi_vet_comm(fn, proto->comm, &rank, &size);
  if (err == CL_SUCCESS)
    err = thread_level(fn);
  if (err != CL_SUCCESS)
    return err;
  proto->local = proto->kind == K_ALLREDUCE
                     ? clpin__mpi_allreduce_vet(proto->q, proto->buf, proto->n, proto->type,
                                                proto->op, proto->nw, wl)
                     : clpin__mpi_bcast_vet(proto->q, proto->buf, proto->off, proto->n, proto->peer,
                                            size, proto->nw, wl);
  clpin_mpi_request *r;
  if ((err = make(fn, proto, wl, &r)) != CL_SUCCESS) {
    /* No request: this rank's refusal still reaches the others, here. */
    char why[768];
    snprintf(why, sizeof why, "%s", clpin_mpi_last_error_detail());
    clpin__mpi_turn *t = clpin__mpi_turn_take(proto->comm);
    if (proto->kind == K_ALLREDUCE)
      clpin__mpi_allreduce_run(NULL, NULL, 0, proto->type, proto->op, proto->comm, 0, NULL, err,
                               NULL);
    else
      clpin__mpi_bcast_run(NULL, NULL, 0, 0, proto->peer, proto->comm, 0, NULL, err, NULL);
    clpin__mpi_turn_end(t);
    clpin__mpi_set_detail(why);
    return err;
  }
  r->turn = clpin__mpi_turn_ticket(r->comm, &r->ticket);
  if (pthread_create(&r->th, NULL, run, r) == 0)
    r->thread = true;
  else /* no thread: run it here, so that this rank still takes its part */
    run_call(r);
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

cl_int clpin_mpi_iallreduce(cl_command_queue queue, cl_mem buffer, size_t count, MPI_Datatype type,
                            MPI_Op op, MPI_Comm comm, cl_uint num_events_in_wait_list,
                            const cl_event *event_wait_list, clpin_mpi_request **request) {
  clpin_mpi_request proto = {.kind = K_ALLREDUCE,
                             .q = queue,
                             .buf = buffer,
                             .n = count,
                             .type = type,
                             .op = op,
                             .comm = comm,
                             .nw = num_events_in_wait_list};
  return start_coll("clpin_mpi_iallreduce", &proto, event_wait_list, request);
}

cl_int clpin_mpi_ibcast(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                        int root, MPI_Comm comm, cl_uint num_events_in_wait_list,
                        const cl_event *event_wait_list, clpin_mpi_request **request) {
  clpin_mpi_request proto = {.kind = K_BCAST,
                             .q = queue,
                             .buf = buffer,
                             .off = offset,
                             .n = nbytes,
                             .peer = root,
                             .comm = comm,
                             .nw = num_events_in_wait_list};
  return start_coll("clpin_mpi_ibcast", &proto, event_wait_list, request);
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
