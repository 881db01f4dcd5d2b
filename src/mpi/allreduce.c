/* SPDX-License-Identifier: Apache-2.0 */
/* clpin_mpi_allreduce. Three paths, chosen alike on every rank:
 * - small (at most SMALL_BYTES, 64 KiB, fixed: part of CLPIN__MPI_WIRE),
 *   or a communicator of one rank: one pinned block, one
 *   MPI_Allreduce in place, one write: latency is what counts there.
 * - shm (every rank on one host): chunk by chunk, each rank's device reads
 *   its chunk into its region of the shared segment; rank k reduces slice k
 *   of the chunk over all regions (every rank a slice, at once); every
 *   device writes the chunk back from the reduced slices. Non-blocking
 *   barriers step the chunks, so reads, reductions and writes of successive
 *   chunks overlap; the bytes never pass through MPI.
 * - ring (anything else: several hosts, CLPIN_MPI_SHM=0): the buffer read
 *   into pinned memory, a ring reduce-scatter and allgather over MPI, each
 *   segment written back to the device as soon as it is final. */
#include "mpi_internal.h"

#include <string.h>

enum { SMALL_BYTES = 64 << 10 };
/* The ring's tags: the top of the range every MPI allows (MPI_TAG_UB is at
 * least 32767); docs/MPI.md asks callers to keep them free during a call. */
enum { TAG_RS = 32766, TAG_AG = 32767 };

typedef struct {
  cl_command_queue q;
  cl_mem buf;
  size_t count, esize;
  clpin__mpi_rtype t;
  clpin__mpi_rop op;
  MPI_Datatype mt;
  MPI_Op mop;
  MPI_Comm comm;
  int rank, size;
  cl_uint nw;
  const cl_event *wl;
} job;

static const char *fn = "clpin_mpi_allreduce";

static cl_int marker(const job *j, cl_uint n, const cl_event *evs, cl_event *event) {
  return clpin__mpi_give_event(fn, j->q, n, evs, event);
}

static cl_int read_all(const job *j, void *host, size_t n) {
  cl_event ev = NULL;
  cl_int err = clEnqueueReadBuffer(j->q, j->buf, CL_FALSE, 0, n, host, j->nw, j->wl, &ev);
  if (err != CL_SUCCESS)
    return clpin__mpi_fail(fn, err, "clEnqueueReadBuffer");
  clFlush(j->q);
  return clpin__mpi_wait_cl(fn, &ev, "reading", 0);
}

static cl_int small_path(const job *j, cl_event *event) {
  size_t n = j->count * j->esize;
  clpin_pool *pool;
  clpin_block *b = NULL;
  cl_int err = clpin_pool_get(j->q, &pool);
  if (err == CL_SUCCESS)
    err = clpin_acquire(pool, n, &b);
  if (err != CL_SUCCESS)
    return clpin__mpi_from_clpin(fn, err, "clpin_acquire");
  void *h = clpin_block_host(b);
  err = read_all(j, h, n);
  /* Every rank enters MPI_Allreduce even after a local failure: the others
   * would wait for it. */
  int bad = err != CL_SUCCESS, anybad = 0;
  int e = MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, j->comm);
  if (err == CL_SUCCESS && (err = clpin__mpi_check(fn, e, "MPI_Allreduce")) == CL_SUCCESS && anybad)
    err = clpin__mpi_fail(fn, CLPIN_ERR_PEER, "another rank failed to read its buffer");
  if (err == CL_SUCCESS)
    err = clpin__mpi_check(
        fn, MPI_Allreduce(MPI_IN_PLACE, h, (int)j->count, j->mt, j->mop, j->comm), "MPI_Allreduce");
  cl_event ev = NULL;
  if (err == CL_SUCCESS) {
    err = clEnqueueWriteBuffer(j->q, j->buf, CL_FALSE, 0, n, h, 0, NULL, &ev);
    if (err != CL_SUCCESS)
      err = clpin__mpi_fail(fn, err, "clEnqueueWriteBuffer");
    else
      clFlush(j->q);
  }
  clpin_release(b, ev);
  if (err == CL_SUCCESS) {
    clpin__mpi_count(ST_AR_SMALL, 1);
    if (event)
      *event = ev;
    else
      clReleaseEvent(ev);
  }
  return err;
}

/* ------------------------------------------------------------------ shm -- */

static cl_int shm_path(const job *j, clpin__mpi_comm *st, cl_event *event) {
  const size_t P = (size_t)j->size, S = (size_t)st->coll_nslots;
  /* Whole elements in every rank's slice of a chunk. */
  const size_t chunk = st->coll_slot - st->coll_slot % (j->esize * P);
  const size_t n = j->count * j->esize, nch = clpin__mpi_nchunks(n, chunk);
  const size_t me = (size_t)j->rank;
  enum { MAXS = 8 };
  cl_event rev[MAXS] = {0}, wev[MAXS] = {0};
  MPI_Request b1[MAXS], b2[MAXS], b3[MAXS];
  for (size_t i = 0; i < MAXS; i++)
    b1[i] = b2[i] = b3[i] = MPI_REQUEST_NULL;
  /* A device failure is this rank's: it keeps taking part in every barrier
   * (doing no more device work), so no rank waits for it, and the agreement
   * at the end tells every rank. An MPI failure ends the call at once. */
  cl_int err = CL_SUCCESS, dev_err = CL_SUCCESS;
  size_t written_lo = n, written_hi = 0;
  const int threads = clpin__mpi_reduce_threads(j->size);
  /* Reads on a second queue, after everything before on the caller's
   * (clpin__mpi_give_event: a marker of the wait list, or a barrier);
   * writes on the caller's. */
  cl_command_queue rq = clpin__mpi_aux_queue(st, j->q);
  cl_event start = NULL;
  cl_uint rnw = j->nw;
  const cl_event *rwl = j->wl;
  if (rq != j->q) {
    cl_int e = clpin__mpi_give_event(fn, j->q, j->nw, j->wl, &start);
    if (e != CL_SUCCESS)
      dev_err = e;
    clFlush(j->q);
    rnw = 1;
    rwl = &start;
  }
  /* Iteration t runs, in this order on every rank (the barriers are matched
   * by order): B3 of chunk t-4 (its writes done), the writes of t-3, the
   * reduction of t-2, B1 of t-1 (its read done), the read of t. */
  for (size_t t = 0; t < nch + 4; t++) {
    if (t >= 4 && t - 4 < nch) {
      size_t c = t - 4, s = c % S;
      cl_int e = clpin__mpi_wait_cl(fn, &wev[s], "writing", c);
      if (e != CL_SUCCESS && dev_err == CL_SUCCESS)
        dev_err = e;
      if ((err = clpin__mpi_ibarrier(fn, j->comm, &b3[s])) != CL_SUCCESS)
        goto fail;
    }
    if (t >= 3 && t - 3 < nch) {
      size_t c = t - 3, s = c % S, len = clpin__mpi_chunk_len(n, chunk, c);
      size_t nel = len / j->esize;
      if ((err = clpin__mpi_wait_barrier(fn, &b2[s])) != CL_SUCCESS)
        goto fail;
      /* Slice k of the chunk is final in rank k's region. */
      cl_event evs[64];
      cl_uint ne = 0;
      cl_int e = CL_SUCCESS;
      for (size_t k = 0; k < P && e == CL_SUCCESS && dev_err == CL_SUCCESS; k++) {
        size_t lo = nel * k / P * j->esize, hi = nel * (k + 1) / P * j->esize;
        if (hi == lo)
          continue;
        e = clEnqueueWriteBuffer(j->q, j->buf, CL_FALSE, c * chunk + lo, hi - lo,
                                 clpin__mpi_coll_slot(st, (int)k, s) + lo, 0, NULL, &evs[ne]);
        if (e == CL_SUCCESS) {
          ne++;
          written_lo = c * chunk < written_lo ? c * chunk : written_lo;
          written_hi = c * chunk + len;
        }
      }
      if (e == CL_SUCCESS && ne)
        e = clEnqueueMarkerWithWaitList(j->q, ne, evs, &wev[s]);
      for (cl_uint i = 0; i < ne; i++)
        clReleaseEvent(evs[i]);
      if (e != CL_SUCCESS) {
        wev[s] = NULL;
        if (dev_err == CL_SUCCESS)
          dev_err = clpin__mpi_fail(fn, e, "clEnqueueWriteBuffer of chunk %zu", c);
      }
      clFlush(j->q);
    }
    if (t >= 2 && t - 2 < nch) {
      size_t c = t - 2, s = c % S, len = clpin__mpi_chunk_len(n, chunk, c);
      size_t nel = len / j->esize;
      if ((err = clpin__mpi_wait_barrier(fn, &b1[s])) != CL_SUCCESS)
        goto fail;
      size_t lo = nel * me / P, hi = nel * (me + 1) / P;
      clpin__mpi_rjob rj = {j->t, j->op, clpin__mpi_coll_slot(st, j->rank, s) + lo * j->esize,
                            {0},  0,     hi - lo};
      for (size_t k = 0; k < P && rj.nsrc < 64; k++)
        if (k != me)
          rj.src[rj.nsrc++] = clpin__mpi_coll_slot(st, (int)k, s) + lo * j->esize;
      clpin__mpi_reduce_many(&rj, threads);
      if ((err = clpin__mpi_ibarrier(fn, j->comm, &b2[s])) != CL_SUCCESS)
        goto fail;
    }
    if (t >= 1 && t - 1 < nch) {
      size_t c = t - 1, s = c % S;
      cl_int e = clpin__mpi_wait_cl(fn, &rev[s], "reading", c);
      if (e != CL_SUCCESS && dev_err == CL_SUCCESS)
        dev_err = e;
      if ((err = clpin__mpi_ibarrier(fn, j->comm, &b1[s])) != CL_SUCCESS)
        goto fail;
    }
    if (t < nch) {
      size_t c = t, s = c % S, len = clpin__mpi_chunk_len(n, chunk, c);
      if ((err = clpin__mpi_wait_barrier(fn, &b3[s])) != CL_SUCCESS) /* slot s free everywhere */
        goto fail;
      if (dev_err == CL_SUCCESS) {
        cl_int e = clEnqueueReadBuffer(rq, j->buf, CL_FALSE, c * chunk, len,
                                       clpin__mpi_coll_slot(st, j->rank, s), rnw, rwl, &rev[s]);
        if (e != CL_SUCCESS) {
          rev[s] = NULL;
          dev_err = clpin__mpi_fail(fn, e, "clEnqueueReadBuffer of chunk %zu", c);
        }
        clFlush(rq);
      }
    }
  }
  for (size_t s = 0; s < MAXS; s++)
    if ((err = clpin__mpi_wait_barrier(fn, &b3[s])) != CL_SUCCESS)
      goto fail;
  if ((err = clpin__mpi_settle(fn, j->comm, dev_err)) != CL_SUCCESS)
    goto fail;
  clpin__mpi_count(ST_AR_SHM, 1);
  if (start)
    clReleaseEvent(start);
  return marker(j, 0, NULL, event);
fail:
  if (start) {
    clWaitForEvents(1, &start);
    clReleaseEvent(start);
  }
  if (written_hi > written_lo)
    clpin__mpi_partial(written_lo, written_hi);
  /* MPI failed: its outstanding barriers are abandoned (waiting for them
   * could wait for ever); the device's copies are waited for. */
  clpin__mpi_drain(NULL, 0, rev, MAXS);
  clpin__mpi_drain(NULL, 0, wev, MAXS);
  return err;
}

/* ----------------------------------------------------------------- ring -- */

/* The ring's state, shared by its steps. Segment k of the buffer is
 * [seg_lo(k), seg_hi(k)); each step moves a segment in pieces of at most
 * tcap bytes. */
enum { MAXR = 64 }; /* segments' read events tracked one by one up to this many ranks */
typedef struct {
  const job *j;
  size_t P, r, n, nel;
  int right, left;
  size_t tcap, npieces;
  clpin_block *all, *tmp;
  char *h, *tb[2];
  cl_event rdev[MAXR], wev[MAXR];
  cl_uint nwev;
  cl_int dev_err;                /* a device failure: the ring goes on, the agreement fails */
  size_t lo_written, hi_written; /* what reached the device, for the partial detail */
} ring;

static size_t seg_lo(const ring *g, size_t k) { return g->nel * k / g->P * g->j->esize; }
static size_t seg_hi(const ring *g, size_t k) { return g->nel * (k + 1) / g->P * g->j->esize; }

/* The pinned memory: the whole buffer and two pieces (one arrives while one
 * is summed). Without it a rank cannot take part: every rank learns it
 * first. chunk: the one every rank agreed on (the pieces' sizes on the
 * wire); every rank steps through the same number of pieces per segment
 * (the same tcap everywhere), so each send meets its partner's receive. */
static cl_int ring_start(ring *g, size_t chunk) {
  const job *j = g->j;
  size_t maxseg = (g->nel + g->P - 1) / g->P * j->esize;
  g->tcap = maxseg < chunk ? maxseg : chunk - chunk % j->esize;
  g->npieces = (maxseg + g->tcap - 1) / g->tcap;
  clpin_pool *pool;
  cl_int err = clpin_pool_get(j->q, &pool);
  if (err == CL_SUCCESS)
    err = clpin_acquire(pool, g->n, &g->all);
  if (err == CL_SUCCESS)
    err = clpin_acquire(pool, 2 * g->tcap, &g->tmp);
  if (err != CL_SUCCESS)
    err = clpin__mpi_from_clpin(fn, err, "clpin_acquire");
  int bad = err != CL_SUCCESS, anybad = 0;
  int e0 = MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, j->comm);
  if (err == CL_SUCCESS && (err = clpin__mpi_check(fn, e0, "MPI_Allreduce")) == CL_SUCCESS &&
      anybad)
    err = clpin__mpi_fail(fn, CLPIN_ERR_PEER, "another rank could not get pinned memory");
  if (err != CL_SUCCESS)
    return err;
  g->h = clpin_block_host(g->all);
  g->tb[0] = clpin_block_host(g->tmp);
  g->tb[1] = g->tb[0] + g->tcap;
  return CL_SUCCESS;
}

/* The segments' reads, in the order the ring needs them (r, r-1, ...), so
 * the first steps start while later segments are still read; beyond MAXR
 * ranks one read of the whole buffer. A device failure keeps the rank in
 * the ring (its bytes then are garbage) and the agreement at the end fails
 * every rank. */
static void ring_read(ring *g) {
  const job *j = g->j;
  bool each = g->P <= MAXR;
  for (size_t k = 0; k < (each ? g->P : 1) && g->dev_err == CL_SUCCESS; k++) {
    size_t s = each ? (g->r + g->P - k) % g->P : 0;
    size_t lo = each ? seg_lo(g, s) : 0, hi = each ? seg_hi(g, s) : g->n;
    if (hi == lo)
      continue;
    cl_int e = clEnqueueReadBuffer(j->q, j->buf, CL_FALSE, lo, hi - lo, g->h + lo, j->nw, j->wl,
                                   &g->rdev[s]);
    if (e != CL_SUCCESS)
      g->dev_err = clpin__mpi_fail(fn, e, "clEnqueueReadBuffer");
  }
  clFlush(j->q);
}

/* Segment k is in host memory (its read waited for; a failure noted). */
static void ring_need(ring *g, size_t k) {
  cl_int e = clpin__mpi_wait_cl(fn, &g->rdev[g->P <= MAXR ? k : 0], "reading", 0);
  if (e != CL_SUCCESS && g->dev_err == CL_SUCCESS)
    g->dev_err = e;
}

/* The bytes of piece pc of a segment [lo, hi). */
static size_t piece_len(const ring *g, size_t lo, size_t hi, size_t pc) {
  size_t off = pc * g->tcap;
  return off < hi - lo ? (hi - lo - off < g->tcap ? hi - lo - off : g->tcap) : 0;
}

/* Reduce-scatter step i: send segment ss to the right, receive segment rs
 * from the left and sum it in, piece pc+1 travelling while piece pc is
 * summed. */
static cl_int ring_scatter_step(ring *g, size_t i) {
  const job *j = g->j;
  size_t ss = (g->r + g->P - i) % g->P, rs = (g->r + 2 * g->P - i - 1) % g->P;
  size_t slo = seg_lo(g, ss), shi = seg_hi(g, ss), rlo = seg_lo(g, rs), rhi = seg_hi(g, rs);
  ring_need(g, ss);
  ring_need(g, rs);
  MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Request sq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  cl_int err = CL_SUCCESS;
  for (size_t pc = 0; pc <= g->npieces && err == CL_SUCCESS; pc++) {
    if (pc < g->npieces) { /* post piece pc */
      size_t off = pc * g->tcap;
      int e = MPI_Irecv(g->tb[pc % 2], (int)piece_len(g, rlo, rhi, pc), MPI_BYTE, g->left, TAG_RS,
                        j->comm, &rq[pc % 2]);
      if (e == MPI_SUCCESS)
        e = MPI_Isend(g->h + slo + off, (int)piece_len(g, slo, shi, pc), MPI_BYTE, g->right, TAG_RS,
                      j->comm, &sq[pc % 2]);
      if ((err = clpin__mpi_check(fn, e, "MPI_Irecv/MPI_Isend (reduce-scatter)")) != CL_SUCCESS)
        break;
    }
    if (pc > 0) { /* sum piece pc-1 while piece pc travels */
      size_t q = pc - 1;
      int e = MPI_Wait(&rq[q % 2], MPI_STATUS_IGNORE);
      if (e == MPI_SUCCESS)
        e = MPI_Wait(&sq[q % 2], MPI_STATUS_IGNORE);
      if ((err = clpin__mpi_check(fn, e, "MPI_Wait (reduce-scatter)")) != CL_SUCCESS)
        break;
      clpin__mpi_reduce(j->t, j->op, g->h + rlo + q * g->tcap, g->tb[q % 2],
                        piece_len(g, rlo, rhi, q) / j->esize);
    }
  }
  return err;
}

/* A final segment [lo, hi) to the device at once (a write failure noted). */
static void ring_write(ring *g, size_t lo, size_t hi) {
  const job *j = g->j;
  if (hi <= lo || g->dev_err != CL_SUCCESS)
    return;
  cl_event ev = NULL;
  cl_int e = clEnqueueWriteBuffer(j->q, j->buf, CL_FALSE, lo, hi - lo, g->h + lo, 0, NULL, &ev);
  if (e != CL_SUCCESS) {
    g->dev_err = clpin__mpi_fail(fn, e, "clEnqueueWriteBuffer");
    return;
  }
  clFlush(j->q);
  g->lo_written = lo < g->lo_written ? lo : g->lo_written;
  g->hi_written = hi > g->hi_written ? hi : g->hi_written;
  if (g->nwev < MAXR) {
    g->wev[g->nwev++] = ev;
  } else { /* beyond 64 ranks: wait now rather than track it */
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
  }
}

/* Reduce-scatter: after step i, segment (r - i - 1) holds i + 2 ranks'
 * contributions; after P - 1 steps rank r holds segment (r + 1) whole.
 * Allgather: final segments travel on round the ring; each goes to the
 * device as soon as it is here. */
static cl_int ring_steps(ring *g) {
  cl_int err = CL_SUCCESS;
  for (size_t i = 0; i + 1 < g->P && err == CL_SUCCESS; i++)
    err = ring_scatter_step(g, i);
  for (size_t k = 0; k < MAXR; k++) /* segments no step needed (P = 1) */
    if (g->rdev[k])
      ring_need(g, k);
  for (size_t i = 0; i < g->P && err == CL_SUCCESS; i++) {
    size_t fs = (g->r + 1 + g->P - i) % g->P; /* final here after step i - 1 */
    size_t flo = seg_lo(g, fs), fhi = seg_hi(g, fs);
    ring_write(g, flo, fhi);
    if (i + 1 == g->P)
      break;
    size_t rs = (g->r + g->P - i) % g->P;
    size_t rlo = seg_lo(g, rs), rhi = seg_hi(g, rs);
    int e =
        MPI_Sendrecv(g->h + flo, (int)(fhi - flo), MPI_BYTE, g->right, TAG_AG, g->h + rlo,
                     (int)(rhi - rlo), MPI_BYTE, g->left, TAG_AG, g->j->comm, MPI_STATUS_IGNORE);
    err = clpin__mpi_check(fn, e, "MPI_Sendrecv (allgather)");
  }
  return err;
}

/* The agreement, the caller's event (a marker behind the writes), and every
 * event and block let go. */
static cl_int ring_finish(ring *g, cl_int err, cl_event *event) {
  const job *j = g->j;
  if (err == CL_SUCCESS)
    err = clpin__mpi_settle(fn, j->comm, g->dev_err);
  cl_event done = NULL;
  if (err == CL_SUCCESS && g->nwev) {
    err = clEnqueueMarkerWithWaitList(j->q, g->nwev, g->wev, &done);
    if (err != CL_SUCCESS)
      err = clpin__mpi_fail(fn, err, "clEnqueueMarkerWithWaitList");
  }
  if (err != CL_SUCCESS) {
    clWaitForEvents(g->nwev, g->nwev ? g->wev : NULL);
    if (g->hi_written > g->lo_written)
      clpin__mpi_partial(g->lo_written, g->hi_written);
  }
  clpin__mpi_drain(NULL, 0, g->rdev, MAXR);
  for (cl_uint i = 0; i < g->nwev; i++)
    clReleaseEvent(g->wev[i]);
  clpin_release(g->all, done);
  clpin_release(g->tmp, NULL);
  if (err == CL_SUCCESS) {
    clpin__mpi_count(ST_AR_RING, 1);
    if (event)
      *event = done;
    else if (done)
      clReleaseEvent(done);
  }
  return err;
}

/* chunk: the one every rank agreed on (the pieces' sizes on the wire). */
static cl_int ring_path(const job *j, size_t chunk, cl_event *event) {
  ring g = {.j = j,
            .P = (size_t)j->size,
            .r = (size_t)j->rank,
            .n = j->count * j->esize,
            .nel = j->count,
            .right = (int)(((size_t)j->rank + 1) % (size_t)j->size),
            .left = (int)(((size_t)j->rank + (size_t)j->size - 1) % (size_t)j->size),
            .lo_written = j->count * j->esize};
  cl_int err = ring_start(&g, chunk);
  if (err != CL_SUCCESS) {
    clpin_release(g.all, NULL);
    clpin_release(g.tmp, NULL);
    return err;
  }
  ring_read(&g);
  return ring_finish(&g, ring_steps(&g), event);
}

cl_int clpin__mpi_allreduce_vet(cl_command_queue queue, cl_mem buffer, size_t count,
                                MPI_Datatype type, MPI_Op op, cl_uint nw, const cl_event *wl) {
  clpin__mpi_rtype t = clpin__mpi_rtype_of(type);
  if (t == RT__BAD)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT,
                           "type is not MPI_FLOAT, MPI_DOUBLE, MPI_INT or MPI_LONG_LONG");
  if (clpin__mpi_rop_of(op) == RO__BAD)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT, "op is not MPI_SUM, MPI_MAX or MPI_MIN");
  size_t esize = clpin__mpi_rtype_size(t);
  if (count > SIZE_MAX / esize || count > INT32_MAX)
    return clpin__mpi_fail(fn, CL_INVALID_VALUE, "count %zu is too large", count);
  return clpin__mpi_vet_buffer(fn, queue, buffer, 0, count * esize, nw, wl);
}

cl_int clpin__mpi_allreduce_run(cl_command_queue queue, cl_mem buffer, size_t count,
                                MPI_Datatype type, MPI_Op op, MPI_Comm comm, cl_uint nw,
                                const cl_event *wl, cl_int local, cl_event *event) {
  job j = {
      queue, buffer, count, 0, clpin__mpi_rtype_of(type), clpin__mpi_rop_of(op), type, op, comm,
      0,     0,      nw,    wl};
  cl_int err = clpin__mpi_vet_comm(fn, comm, &j.rank, &j.size);
  if (err != CL_SUCCESS)
    return err;
  clpin__mpi_guard g;
  clpin__mpi_guard_enter(&g, comm);
  j.esize = clpin__mpi_rtype_size(j.t);
  /* Read once: what every rank agrees on is what this call then uses. */
  const size_t chunk = clpin__mpi_chunk();
  const clpin__mpi_val vals[] = {{"count", (int64_t)count},
                                 {"type", j.t},
                                 {"op", j.op},
                                 {"the small path's size", SMALL_BYTES}};
  bool shm_ok = false;
  err = clpin__mpi_agree(fn, comm, local, vals, 4, chunk, &shm_ok);
  if (err != CL_SUCCESS)
    goto out;
  if (count == 0) {
    err = marker(&j, j.nw, j.wl, event);
    goto out;
  }
  if (j.size == 1 || count * j.esize <= SMALL_BYTES) {
    err = small_path(&j, event);
    goto out;
  }
  clpin__mpi_comm *st = NULL;
  err = clpin__mpi_coll_ready(fn, comm, queue, chunk, shm_ok, &st);
  if (st && (st->coll_slot < j.esize * (size_t)j.size || j.size > 64))
    st = NULL; /* more ranks than elements in a slot, or than one reduction takes: the ring */
  if (err != CL_SUCCESS)
    goto out;
  err = st ? shm_path(&j, st, event) : ring_path(&j, chunk, event);
out:
  clpin__mpi_guard_leave(&g);
  return err;
}

cl_int clpin_mpi_allreduce(cl_command_queue queue, cl_mem buffer, size_t count, MPI_Datatype type,
                           MPI_Op op, MPI_Comm comm, cl_uint num_events_in_wait_list,
                           const cl_event *event_wait_list, cl_event *event) {
  int rank, size;
  cl_int err = clpin__mpi_vet_comm(fn, comm, &rank, &size);
  if (err != CL_SUCCESS)
    return err;
  cl_int local = clpin__mpi_allreduce_vet(queue, buffer, count, type, op, num_events_in_wait_list,
                                          event_wait_list);
  /* After the collective requests made before it on comm (request.c). */
  clpin__mpi_turn *turn = clpin__mpi_turn_take(comm);
  err = clpin__mpi_allreduce_run(queue, buffer, count, type, op, comm, num_events_in_wait_list,
                                 event_wait_list, local, event);
  clpin__mpi_turn_end(turn);
  return err;
}
