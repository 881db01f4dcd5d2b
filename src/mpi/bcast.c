/* SPDX-License-Identifier: Apache-2.0 */
/* clpin_mpi_bcast. Paths chosen alike on every rank:
 * - shm (every rank on one host, more than one chunk): the root's device
 *   reads each chunk into its region of the collectives' segment; after a
 *   non-blocking barrier every other device writes it from there; a second
 *   barrier frees the slot. No byte passes through MPI.
 * - p2p: chunks in pinned pool blocks, one MPI_Ibcast per chunk, the root's
 *   reads, the broadcasts and the others' writes overlapping. */
#include "mpi_internal.h"

#include <string.h>

static const char *fn = "clpin_mpi_bcast";
enum { SLOTS = 4, MAXS = 8 };

typedef struct {
  cl_command_queue q;
  cl_mem buf;
  size_t off, n;
  int root, rank;
  MPI_Comm comm;
  cl_uint nw;
  const cl_event *wl;
} job;

static cl_int marker(const job *j, cl_uint n, const cl_event *evs, cl_event *event) {
  return clpin__mpi_give_event(fn, j->q, n, evs, event);
}

static cl_int shm_path(const job *j, clpin__mpi_comm *st, cl_event *event) {
  const size_t chunk = st->coll_slot, S = (size_t)st->coll_nslots;
  const size_t nch = clpin__mpi_nchunks(j->n, chunk);
  const bool root = j->rank == j->root;
  cl_event ev[MAXS] = {0};
  MPI_Request b1[MAXS], b3[MAXS];
  for (int i = 0; i < MAXS; i++)
    b1[i] = b3[i] = MPI_REQUEST_NULL;
  /* As allreduce's: a device failure keeps the rank in step, without device
   * work, and the agreement at the end tells every rank. */
  cl_int err = CL_SUCCESS, dev_err = CL_SUCCESS;
  size_t wlo = j->n, whi = 0;
  /* Iteration t, in this order on every rank: B3 of chunk t-2 (written
   * everywhere), the writes of t-1 (after its B1), the read of t (after
   * B3 of t-S) and its B1. */
  for (size_t t = 0; t < nch + 2; t++) {
    if (t >= 2 && t - 2 < nch) {
      size_t c = t - 2, s = c % S;
      cl_int e = clpin__mpi_wait_cl(fn, &ev[s], "writing", c);
      if (e != CL_SUCCESS && dev_err == CL_SUCCESS)
        dev_err = e;
      if ((err = clpin__mpi_ibarrier(fn, j->comm, &b3[s])) != CL_SUCCESS)
        goto fail;
    }
    if (t >= 1 && t - 1 < nch) {
      size_t c = t - 1, s = c % S, len = clpin__mpi_chunk_len(j->n, chunk, c);
      if ((err = clpin__mpi_wait_barrier(fn, &b1[s])) != CL_SUCCESS)
        goto fail;
      if (!root && dev_err == CL_SUCCESS) {
        cl_int e = clEnqueueWriteBuffer(j->q, j->buf, CL_FALSE, j->off + c * chunk, len,
                                        clpin__mpi_coll_slot(st, j->root, s), j->nw, j->wl, &ev[s]);
        if (e != CL_SUCCESS) {
          ev[s] = NULL;
          dev_err = clpin__mpi_fail(fn, e, "clEnqueueWriteBuffer of chunk %zu", c);
        } else {
          clFlush(j->q);
          wlo = c * chunk < wlo ? c * chunk : wlo;
          whi = c * chunk + len;
        }
      }
    }
    if (t < nch) {
      size_t c = t, s = c % S, len = clpin__mpi_chunk_len(j->n, chunk, c);
      if ((err = clpin__mpi_wait_barrier(fn, &b3[s])) != CL_SUCCESS)
        goto fail;
      if (root && dev_err == CL_SUCCESS) {
        cl_int e = clEnqueueReadBuffer(j->q, j->buf, CL_FALSE, j->off + c * chunk, len,
                                       clpin__mpi_coll_slot(st, j->root, s), j->nw, j->wl, &ev[s]);
        if (e != CL_SUCCESS) {
          ev[s] = NULL;
          dev_err = clpin__mpi_fail(fn, e, "clEnqueueReadBuffer of chunk %zu", c);
        } else {
          clFlush(j->q);
          if ((e = clpin__mpi_wait_cl(fn, &ev[s], "reading", c)) != CL_SUCCESS)
            dev_err = e;
        }
      }
      if ((err = clpin__mpi_ibarrier(fn, j->comm, &b1[s])) != CL_SUCCESS)
        goto fail;
    }
  }
  for (int s = 0; s < MAXS; s++)
    if ((err = clpin__mpi_wait_barrier(fn, &b3[s])) != CL_SUCCESS)
      goto fail;
  if ((err = clpin__mpi_settle(fn, j->comm, dev_err)) != CL_SUCCESS)
    goto fail;
  clpin__mpi_count(ST_BC_SHM, 1);
  return marker(j, 0, NULL, event);
fail:
  if (whi > wlo)
    clpin__mpi_partial(j->off + wlo, j->off + whi);
  clpin__mpi_drain(NULL, 0, ev, MAXS); /* MPI's barriers are abandoned, as allreduce's */
  return err;
}

static cl_int p2p_path(const job *j, size_t chunk, cl_event *event) {
  const size_t nch = clpin__mpi_nchunks(j->n, chunk);
  const bool root = j->rank == j->root;
  clpin_block *blk[SLOTS] = {0};
  cl_event ev[SLOTS] = {0};
  MPI_Request req[SLOTS];
  for (int i = 0; i < SLOTS; i++)
    req[i] = MPI_REQUEST_NULL;
  clpin_pool *pool;
  cl_int err = clpin_pool_get(j->q, &pool);
  for (size_t i = 0; i < SLOTS && i < nch && err == CL_SUCCESS; i++)
    err = clpin_acquire(pool, chunk, &blk[i]);
  if (err != CL_SUCCESS) /* every rank must still take part: agree first */
    err = clpin__mpi_from_clpin(fn, err, "clpin_acquire");
  int bad = err != CL_SUCCESS, anybad = 0;
  int e = MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, j->comm);
  if (err == CL_SUCCESS && (err = clpin__mpi_check(fn, e, "MPI_Allreduce")) == CL_SUCCESS && anybad)
    err = clpin__mpi_fail(fn, CLPIN_ERR_PEER, "another rank could not get pinned memory");
  cl_int dev_err = CL_SUCCESS; /* the rank keeps in step after it, without device work */
  size_t wlo = j->n, whi = 0;
  /* Chunk c: (root) read into slot c%S, then MPI_Ibcast on every rank in
   * chunk order, then (others) write. A slot is reused when its previous
   * chunk's write (others) or broadcast (root) is over. */
  size_t posted = 0, done = 0, freed = 0;
  unsigned spins = 0;
  while (err == CL_SUCCESS && freed < nch) {
    bool moved = false;
    if (posted < nch && posted < freed + SLOTS) {
      size_t c = posted, s = c % SLOTS, len = clpin__mpi_chunk_len(j->n, chunk, c);
      if (root && dev_err == CL_SUCCESS) {
        cl_int ce = clEnqueueReadBuffer(j->q, j->buf, CL_FALSE, j->off + c * chunk, len,
                                        clpin_block_host(blk[s]), j->nw, j->wl, &ev[s]);
        if (ce != CL_SUCCESS) {
          ev[s] = NULL;
          dev_err = clpin__mpi_fail(fn, ce, "clEnqueueReadBuffer of chunk %zu", c);
        } else {
          clFlush(j->q);
          if ((ce = clpin__mpi_wait_cl(fn, &ev[s], "reading", c)) != CL_SUCCESS)
            dev_err = ce;
        }
      }
      e = MPI_Ibcast(clpin_block_host(blk[s]), (int)len, MPI_BYTE, j->root, j->comm, &req[s]);
      if ((err = clpin__mpi_check(fn, e, "MPI_Ibcast")) != CL_SUCCESS)
        break;
      posted++, moved = true;
    }
    while (done < posted) {
      size_t c = done, s = c % SLOTS, len = clpin__mpi_chunk_len(j->n, chunk, c);
      int flag = 0;
      e = MPI_Test(&req[s], &flag, MPI_STATUS_IGNORE);
      if ((err = clpin__mpi_check(fn, e, "MPI_Ibcast")) != CL_SUCCESS)
        break;
      if (!flag)
        break;
      if (!root && dev_err == CL_SUCCESS) {
        cl_int ce = clEnqueueWriteBuffer(j->q, j->buf, CL_FALSE, j->off + c * chunk, len,
                                         clpin_block_host(blk[s]), j->nw, j->wl, &ev[s]);
        if (ce != CL_SUCCESS) {
          ev[s] = NULL;
          dev_err = clpin__mpi_fail(fn, ce, "clEnqueueWriteBuffer of chunk %zu", c);
        } else {
          clFlush(j->q);
          wlo = c * chunk < wlo ? c * chunk : wlo;
          whi = c * chunk + len;
        }
      }
      done++, moved = true;
    }
    while (err == CL_SUCCESS && freed < done) {
      size_t s = freed % SLOTS;
      /* The last writes may still run at return. */
      if (ev[s] && freed + SLOTS < nch &&
          !clpin__mpi_chunk_ended(fn, "writing", &ev[s], freed, &dev_err))
        break;
      freed++, moved = true;
    }
    clpin__mpi_idle(moved, &spins);
  }
  if (err == CL_SUCCESS && !bad && !anybad)
    err = clpin__mpi_settle(fn, j->comm, dev_err);
  cl_event pend[SLOTS];
  cl_uint np = 0;
  for (int i = 0; i < SLOTS; i++)
    if (ev[i])
      pend[np++] = ev[i];
  if (err == CL_SUCCESS)
    err = marker(j, np, pend, event);
  else {
    if (whi > wlo)
      clpin__mpi_partial(j->off + wlo, j->off + whi);
    clWaitForEvents(np, np ? pend : NULL);
  }
  for (int i = 0; i < SLOTS; i++) {
    /* A request still here means MPI failed: it is abandoned (a collective
     * cannot be cancelled, and waiting could wait for ever), and so is its
     * block, which MPI may still write. */
    if (req[i] != MPI_REQUEST_NULL)
      continue;
    clpin_release(blk[i], ev[i]);
    if (ev[i])
      clReleaseEvent(ev[i]);
  }
  if (err == CL_SUCCESS)
    clpin__mpi_count(ST_BC_P2P, 1);
  return err;
}

cl_int clpin__mpi_bcast_vet(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                            int root, int size, cl_uint nw, const cl_event *wl) {
  if (root < 0 || root >= size)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT,
                           "root %d is not a rank of comm (0 ... %d)", root, size - 1);
  return clpin__mpi_vet_buffer(fn, queue, buffer, offset, nbytes, nw, wl);
}

cl_int clpin__mpi_bcast_run(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                            int root, MPI_Comm comm, cl_uint nw, const cl_event *wl, cl_int local,
                            cl_event *event) {
  job j = {queue, buffer, offset, nbytes, root, 0, comm, nw, wl};
  int size;
  cl_int err = clpin__mpi_vet_comm(fn, comm, &j.rank, &size);
  if (err != CL_SUCCESS)
    return err;
  clpin__mpi_guard g;
  clpin__mpi_guard_enter(&g, comm);
  /* Read once: what every rank agrees on is what this call then uses. */
  const size_t chunk = clpin__mpi_chunk();
  const clpin__mpi_val vals[] = {{"nbytes", (int64_t)nbytes}, {"root", root}};
  bool shm_ok = false;
  err = clpin__mpi_agree(fn, comm, local, vals, 2, chunk, &shm_ok);
  if (err != CL_SUCCESS)
    goto out;
  if (nbytes == 0 || size == 1) {
    err = marker(&j, j.nw, j.wl, event);
    goto out;
  }
  clpin__mpi_comm *st = NULL;
  if (nbytes > chunk) /* one chunk: a single MPI_Bcast costs less than two barriers */
    err = clpin__mpi_coll_ready(fn, comm, queue, chunk, shm_ok, &st);
  if (err == CL_SUCCESS)
    err = st ? shm_path(&j, st, event) : p2p_path(&j, chunk, event);
out:
  clpin__mpi_guard_leave(&g);
  return err;
}

cl_int clpin_mpi_bcast(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                       int root, MPI_Comm comm, cl_uint num_events_in_wait_list,
                       const cl_event *event_wait_list, cl_event *event) {
  int rank, size;
  cl_int err = clpin__mpi_vet_comm(fn, comm, &rank, &size);
  if (err != CL_SUCCESS)
    return err;
  cl_int local = clpin__mpi_bcast_vet(queue, buffer, offset, nbytes, root, size,
                                      num_events_in_wait_list, event_wait_list);
  /* After the collective requests made before it on comm (request.c). */
  clpin__mpi_turn *turn = clpin__mpi_turn_take(comm);
  err = clpin__mpi_bcast_run(queue, buffer, offset, nbytes, root, comm, num_events_in_wait_list,
                             event_wait_list, local, event);
  clpin__mpi_turn_end(turn);
  return err;
}
