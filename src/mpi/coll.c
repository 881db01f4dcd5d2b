/* SPDX-License-Identifier: Apache-2.0 */
/* What the collectives share: the one-host segment (a region of slots per
 * rank, every rank mapping all of it) and the non-blocking barriers that
 * step the chunk pipelines. */
#include "mpi_internal.h"

#include <string.h>
#include <unistd.h>

enum { COLL_SLOTS = 6 }; /* slack: a slot is reused 6 chunks later */

/* Collective over comm, called with the same arguments on every rank once
 * they agreed: whether the collectives' segment is (or now becomes) usable.
 * Sets it up on the first call: every rank of comm on one host, rank 0
 * creates the memfd, the others open it, all agree it worked. */
cl_int clpin__mpi_coll_ready(const char *func, MPI_Comm comm, cl_command_queue q, size_t chunk,
                             bool shm_ok, clpin__mpi_comm **out) {
  clpin__mpi_comm *st = clpin__mpi_comm_state(comm);
  *out = NULL;
  int e, rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  /* A state that exists on some ranks only would split the ranks' paths:
   * they agree on having one (allocation fails nowhere in practice). */
  int have = st != NULL, all = 0;
  if ((e = MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, comm)) != MPI_SUCCESS)
    return clpin__mpi_check(func, e, "MPI_Allreduce");
  if (!all || !shm_ok || size < 2)
    return CL_SUCCESS;
  if (st->coll_state == 1 && st->coll_slot != chunk) { /* CLPIN_MPI_CHUNK changed */
    clpin__mpi_seg_free(&st->coll);
    st->coll_state = 0;
  }
  if (st->coll_state == 0) {
    MPI_Comm node;
    if ((e = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node)) !=
        MPI_SUCCESS)
      return clpin__mpi_check(func, e, "MPI_Comm_split_type");
    int nsize = 0;
    MPI_Comm_size(node, &nsize);
    MPI_Comm_free(&node);
    st->coll_state = -1;
    if (nsize == size) { /* every rank on this host (the same answer on all) */
      size_t bytes = (size_t)size * COLL_SLOTS * chunk;
      struct {
        int64_t pid, fd, id, ok;
      } m = {0, 0, 0, 0};
      if (rank == 0 && clpin__mpi_seg_create(func, bytes, &st->coll) == CL_SUCCESS) {
        m.pid = getpid();
        m.fd = st->coll.fd;
        m.id = (int64_t)st->coll.id;
        m.ok = 1;
      }
      if ((e = MPI_Bcast(&m, 4, MPI_INT64_T, 0, comm)) != MPI_SUCCESS)
        return clpin__mpi_check(func, e, "MPI_Bcast (segment)");
      int ok = (int)m.ok;
      if (rank != 0 && ok)
        ok = clpin__mpi_seg_open(func, (int)m.pid, (int)m.fd, bytes, (uint64_t)m.id, &st->coll) ==
             CL_SUCCESS;
      int allok = 0;
      if ((e = MPI_Allreduce(&ok, &allok, 1, MPI_INT, MPI_MIN, comm)) != MPI_SUCCESS)
        return clpin__mpi_check(func, e, "MPI_Allreduce (segment)");
      if (allok) {
        st->coll_state = 1;
        st->coll_slot = chunk;
        st->coll_nslots = COLL_SLOTS;
        clpin__mpi_count(ST_SEGMENTS, 1);
      } else {
        if (!ok)
          clpin__mpi_note("rank %d cannot share the collectives' segment (%s): allreduce and "
                          "bcast use MPI on this communicator",
                          rank, clpin_mpi_last_error_detail());
        clpin__mpi_seg_free(&st->coll);
      }
    }
  }
  if (st->coll_state == 1) {
    clpin__mpi_seg_register(func, &st->coll, q); /* best effort: speed, not correctness */
    *out = st;
  }
  return CL_SUCCESS;
}

cl_command_queue clpin__mpi_aux_queue(clpin__mpi_comm *st, cl_command_queue q) {
  cl_context ctx = NULL;
  cl_device_id dev = NULL;
  if (clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL) != CL_SUCCESS ||
      clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL) != CL_SUCCESS)
    return q;
  if (st->aux && st->aux_ctx == ctx && st->aux_dev == dev)
    return st->aux;
  if (st->aux) {
    clReleaseCommandQueue(st->aux);
    clReleaseContext(st->aux_ctx);
    st->aux = NULL;
  }
  cl_int err;
  cl_command_queue a = clCreateCommandQueue(ctx, dev, 0, &err);
  if (err != CL_SUCCESS || !a)
    return q;
  clRetainContext(ctx);
  st->aux = a;
  st->aux_ctx = ctx;
  st->aux_dev = dev;
  return a;
}

char *clpin__mpi_coll_slot(const clpin__mpi_comm *st, int rank, size_t slot) {
  return (char *)st->coll.base + ((size_t)rank * (size_t)st->coll_nslots + slot) * st->coll_slot;
}

/* A ring of outstanding non-blocking barriers, posted and completed in the
 * same order on every rank. */
cl_int clpin__mpi_ibarrier(const char *func, MPI_Comm comm, MPI_Request *req) {
  return clpin__mpi_check(func, MPI_Ibarrier(comm, req), "MPI_Ibarrier");
}

cl_int clpin__mpi_wait_barrier(const char *func, MPI_Request *req) {
  if (*req == MPI_REQUEST_NULL)
    return CL_SUCCESS;
  return clpin__mpi_check(func, clpin__mpi_wait_req(req, MPI_STATUS_IGNORE), "MPI_Ibarrier");
}

/* Wait for an event (polling MPI); its failure becomes a detail. */
cl_int clpin__mpi_wait_cl(const char *func, cl_event *ev, const char *what, size_t chunk) {
  if (!*ev)
    return CL_SUCCESS;
  cl_int st = clpin__mpi_wait_event(*ev);
  clReleaseEvent(*ev);
  *ev = NULL;
  if (st != CL_COMPLETE)
    return clpin__mpi_fail(func, st < 0 ? st : CL_OUT_OF_RESOURCES, "%s chunk %zu", what, chunk);
  return CL_SUCCESS;
}

/* The end of a collective whose ranks kept in step through a local device
 * failure: one MPI_Allreduce tells every rank whether any failed. Returns
 * CL_SUCCESS, the rank's own failure (its detail kept), CLPIN_ERR_PEER, or
 * CLPIN_ERR_MPI. */
cl_int clpin__mpi_settle(const char *func, MPI_Comm comm, cl_int local) {
  int bad = local != CL_SUCCESS, any = 0;
  int e = MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
  if (local != CL_SUCCESS)
    return local;
  if (e != MPI_SUCCESS)
    return clpin__mpi_check(func, e, "MPI_Allreduce (did every rank succeed)");
  if (any)
    return clpin__mpi_fail(func, CLPIN_ERR_PEER,
                           "another rank's device failed during the call: the result is not "
                           "valid");
  return CL_SUCCESS;
}

/* Leave nothing outstanding: wait for each request, then for each event
 * (NULLs skipped), which is released and set to NULL. */
void clpin__mpi_drain(MPI_Request *reqs, int n, cl_event *evs, int nev) {
  for (int i = 0; i < n; i++)
    if (reqs[i] != MPI_REQUEST_NULL)
      MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
  for (int i = 0; i < nev; i++)
    if (evs[i]) {
      clWaitForEvents(1, &evs[i]);
      clReleaseEvent(evs[i]);
      evs[i] = NULL;
    }
}

cl_int clpin__mpi_give_event(const char *func, cl_command_queue q, cl_uint n, const cl_event *evs,
                             cl_event *event) {
  if (!event)
    return CL_SUCCESS;
  const char *call = "clEnqueueMarkerWithWaitList";
  cl_command_queue_properties props = 0;
  cl_int err = CL_SUCCESS;
  if (n > 0) {
    err = clEnqueueMarkerWithWaitList(q, n, evs, event);
  } else if ((err = clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL)) !=
             CL_SUCCESS) {
    call = "clGetCommandQueueInfo";
  } else if (!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
    call = "clEnqueueBarrierWithWaitList";
    err = clEnqueueBarrierWithWaitList(q, 0, NULL, event);
  } else {
    cl_context ctx = NULL;
    call = "clCreateUserEvent";
    err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
    cl_event done = err == CL_SUCCESS ? clCreateUserEvent(ctx, &err) : NULL;
    if (done && (err = clSetUserEventStatus(done, CL_COMPLETE)) != CL_SUCCESS)
      clReleaseEvent(done);
    else
      *event = done;
  }
  if (err != CL_SUCCESS) {
    *event = NULL;
    return clpin__mpi_fail(func, err, "%s", call);
  }
  clFlush(q); /* a caller may poll the event: on a lazy implementation it needs a flush */
  return CL_SUCCESS;
}
