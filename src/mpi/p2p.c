/* SPDX-License-Identifier: Apache-2.0 */
/* clpin_mpi_send and clpin_mpi_recv.
 *
 * A message of at most one chunk is one MPI message from a pinned block: no
 * handshake, so small messages cost what MPI costs. A larger one starts
 * with a header (size, chunk, host, the shared segment the sender knows) and
 * the receiver's answer, which refuses a size mismatch on both sides and
 * picks the path:
 * - shm (ranks of one host): the sender's device reads each chunk into a
 *   slot of the receiver's segment for that peer (made by the receiver,
 *   opened by the sender, both registered: segment.c); a zero-byte message
 *   says "chunk ready", the receiver's device writes from the slot and a
 *   zero-byte answer says "slot free". S slots keep the read of chunk k+1
 *   and the write of chunk k running at once. Each direction of a pair has
 *   its own segment, used by one message at a time: a send and a receive
 *   with one peer may run at once (clpin_mpi_isend, clpin_mpi_irecv), and a
 *   second message in one direction meanwhile takes p2p.
 * - p2p: chunks in S pinned pool blocks on each side, MPI_Isend/MPI_Irecv,
 *   the reads, the transfers and the writes overlapping.
 * All messages use the caller's comm and tag; MPI's ordering of messages
 * between one pair with one tag keeps chunks in order. */
#include "mpi_internal.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SLOTS = 4 };
enum { MODE_P2P = 0, MODE_SHM = 1, MODE_SHM_NEW = 2 };
typedef struct {
  int64_t status; /* CL_SUCCESS, or the receiver's refusal */
  int64_t mode;
  uint64_t nbytes; /* what the receiver expects */
  uint64_t seg_id, seg_size, slot;
  int32_t pid, fd, nslots, pad;
} answer;

static void host_name(char *out) {
  int len = 0;
  memset(out, 0, MPI_MAX_PROCESSOR_NAME + 1);
  if (MPI_Get_processor_name(out, &len) != MPI_SUCCESS)
    out[0] = 0;
}

/* ---------------------------------------------------------------- send -- */

/* One message of at most one chunk: read into a pinned block, MPI_Send. */
/* A one-message send that failed before its message: the receiver waits for
 * one, so it gets one of another size (it then fails with
 * CLPIN_ERR_MISMATCH, its buffer untouched) and no rank is left waiting. */
static cl_int send_small_failed(cl_int err, size_t n, int dest, int tag, MPI_Comm comm) {
  char one = 0;
  MPI_Send(&one, n == 0 ? 1 : 0, MPI_BYTE, dest, tag, comm);
  return err;
}

static cl_int send_small(cl_command_queue q, cl_mem buf, size_t off, size_t n, int dest, int tag,
                         MPI_Comm comm, cl_uint nw, const cl_event *wl) {
  static const char *fn = "clpin_mpi_send";
  if (n == 0) {
    if (nw) {
      cl_int err = clWaitForEvents(nw, wl);
      if (err != CL_SUCCESS)
        return send_small_failed(clpin__mpi_fail(fn, err, "waiting for the wait list"), n, dest,
                                 tag, comm);
    }
    return clpin__mpi_check(fn, MPI_Send(NULL, 0, MPI_BYTE, dest, tag, comm), "MPI_Send");
  }
  if (n <= CLPIN__MPI_TINY) { /* the plain path: pinned memory does not pay here */
    _Alignas(64) char tmp[CLPIN__MPI_TINY + 1];
    tmp[n] = 0; /* the byte clpin__mpi_wire_len may add */
    cl_int err = clEnqueueReadBuffer(q, buf, CL_TRUE, off, n, tmp, nw, wl, NULL);
    if (err != CL_SUCCESS)
      return send_small_failed(
          clpin__mpi_fail(fn, err, "reading the buffer: %s", clpin_strerror(err)), n, dest, tag,
          comm);
    err = clpin__mpi_check(
        fn, MPI_Send(tmp, (int)clpin__mpi_wire_len(n), MPI_BYTE, dest, tag, comm), "MPI_Send");
    if (err == CL_SUCCESS)
      clpin__mpi_count(ST_SENT_P2P, n);
    return err;
  }
  clpin_pool *pool;
  clpin_block *b = NULL;
  cl_int err = clpin_pool_get(q, &pool);
  if (err == CL_SUCCESS)
    err = clpin_acquire(pool, clpin__mpi_wire_len(n), &b);
  if (err != CL_SUCCESS)
    return send_small_failed(clpin__mpi_from_clpin(fn, err, "clpin_acquire"), n, dest, tag, comm);
  ((char *)clpin_block_host(b))[n] = 0; /* the byte clpin__mpi_wire_len adds */
  /* Blocking, as the plain path's read: nothing of MPI is outstanding yet,
   * and a small message's latency is the point. */
  err = clEnqueueReadBuffer(q, buf, CL_TRUE, off, n, clpin_block_host(b), nw, wl, NULL);
  if (err != CL_SUCCESS) {
    clpin_release(b, NULL);
    return send_small_failed(
        clpin__mpi_fail(fn, err, "reading the buffer: %s", clpin_strerror(err)), n, dest, tag,
        comm);
  }
  err = clpin__mpi_check(
      fn, MPI_Send(clpin_block_host(b), (int)clpin__mpi_wire_len(n), MPI_BYTE, dest, tag, comm),
      "MPI_Send");
  clpin_release(b, NULL);
  if (err == CL_SUCCESS)
    clpin__mpi_count(ST_SENT_P2P, n);
  return err;
}

typedef struct {
  cl_command_queue q;
  cl_mem buf;
  size_t off, n, chunk;
  cl_uint nw;
  const cl_event *wl;
  int peer, tag;
  MPI_Comm comm;
} xfer;

/* A device failure on the sender's side after the header: the receiver is
 * owed every chunk it waits for. The point-to-point sender sends each chunk
 * it could not read as an empty message (the receiver, finding it short,
 * takes the rest and fails with the sender's chunk in its detail); the shm
 * sender sends a one-byte "failed" notice instead of "ready" and stops. No
 * rank waits for ever, and no message is left behind for a later call. */
static cl_int send_p2p(const xfer *x) {
  static const char *fn = "clpin_mpi_send";
  size_t nch = clpin__mpi_nchunks(x->n, x->chunk);
  clpin_block *blk[SLOTS] = {0};
  cl_event ev[SLOTS] = {0};
  MPI_Request req[SLOTS];
  for (int i = 0; i < SLOTS; i++)
    req[i] = MPI_REQUEST_NULL;
  clpin_pool *pool;
  size_t rd = 0, sd = 0, fin = 0;
  bool mpi_broken = false;
  cl_int err = clpin_pool_get(x->q, &pool);
  for (int i = 0; i < SLOTS && err == CL_SUCCESS && (size_t)i < nch; i++)
    err = clpin_acquire(pool, x->chunk, &blk[i]);
  if (err != CL_SUCCESS) {
    err = clpin__mpi_from_clpin(fn, err, "clpin_acquire");
    goto owed;
  }
  unsigned spins = 0;
  while (fin < nch) {
    bool moved = false;
    while (fin < sd) { /* sends complete: their slots are free */
      int flag = 0;
      int e = MPI_Test(&req[fin % SLOTS], &flag, MPI_STATUS_IGNORE);
      if ((err = clpin__mpi_check(fn, e, "MPI_Isend of a chunk")) != CL_SUCCESS) {
        mpi_broken = true;
        goto out;
      }
      if (!flag)
        break;
      fin++, moved = true;
    }
    while (rd < nch && rd < fin + SLOTS) { /* device reads into free slots */
      size_t s = rd % SLOTS, len = clpin__mpi_chunk_len(x->n, x->chunk, rd);
      err = clEnqueueReadBuffer(x->q, x->buf, CL_FALSE, x->off + rd * x->chunk, len,
                                clpin_block_host(blk[s]), x->nw, x->wl, &ev[s]);
      if (err != CL_SUCCESS) {
        ev[s] = NULL;
        err = clpin__mpi_fail(fn, err, "clEnqueueReadBuffer of chunk %zu", rd);
        goto owed;
      }
      clFlush(x->q);
      rd++, moved = true;
    }
    while (sd < rd) { /* finished reads go out, in order */
      size_t s = sd % SLOTS;
      if (!clpin__mpi_chunk_ended(fn, "reading", &ev[s], sd, &err))
        break;
      if (err != CL_SUCCESS)
        goto owed;
      int e = MPI_Isend(clpin_block_host(blk[s]), (int)clpin__mpi_chunk_len(x->n, x->chunk, sd),
                        MPI_BYTE, x->peer, x->tag, x->comm, &req[s]);
      if ((err = clpin__mpi_check(fn, e, "MPI_Isend")) != CL_SUCCESS) {
        mpi_broken = true;
        goto out;
      }
      sd++, moved = true;
    }
    clpin__mpi_idle(moved, &spins);
  }
  clpin__mpi_count(ST_SENT_P2P, x->n);
  goto out;
owed: /* chunks sd ... nch-1 were not sent: empty messages in their place */
  clpin__mpi_drain(NULL, 0, ev, SLOTS);
  for (size_t c = sd; c < nch; c++)
    if (MPI_Send(NULL, 0, MPI_BYTE, x->peer, x->tag, x->comm) != MPI_SUCCESS) {
      mpi_broken = true;
      break;
    }
out:
  for (int i = 0; i < SLOTS; i++) {
    if (ev[i]) {
      clWaitForEvents(1, &ev[i]);
      clReleaseEvent(ev[i]);
    }
    /* A chunk still in flight reads its block: finish it before the block
     * goes back to the pool (unless MPI itself failed: then drop it). */
    if (req[i] != MPI_REQUEST_NULL) {
      if (mpi_broken)
        MPI_Request_free(&req[i]);
      else
        MPI_Wait(&req[i], MPI_STATUS_IGNORE);
    }
    clpin_release(blk[i], NULL);
  }
  return err;
}

static char *slot_at(const clpin__mpi_dir *d, size_t i) {
  return (char *)d->seg.base + i * d->slot;
}

/* Take direction d of pair p for one transfer: false when another transfer
 * uses it (that one keeps it; this one takes MPI's point-to-point) or the
 * pair cannot share memory. */
static bool claim(clpin__mpi_comm *st, clpin__mpi_pair *p, clpin__mpi_dir *d) {
  pthread_mutex_lock(&st->mu);
  bool ok = !p->no_shm && !d->busy;
  if (ok)
    d->busy = true;
  pthread_mutex_unlock(&st->mu);
  return ok;
}

/* Give d back; no_shm: the pair cannot share memory, from now on. */
static void unclaim(clpin__mpi_comm *st, clpin__mpi_pair *p, clpin__mpi_dir *d, bool no_shm) {
  pthread_mutex_lock(&st->mu);
  d->busy = false;
  if (no_shm)
    p->no_shm = true;
  pthread_mutex_unlock(&st->mu);
}

static cl_int send_shm(const xfer *x, clpin__mpi_dir *d) {
  static const char *fn = "clpin_mpi_send";
  size_t nch = clpin__mpi_nchunks(x->n, x->chunk), S = (size_t)d->nslots;
  cl_event ev[SLOTS] = {0};
  MPI_Request freq = MPI_REQUEST_NULL;
  cl_int err = CL_SUCCESS, failed = CL_SUCCESS;
  size_t rd = 0, nt = 0, fr = 0;
  unsigned spins = 0;
  /* Until every notified chunk is written (its slot freed); after a local
   * failure, only those. */
  while (fr < (failed == CL_SUCCESS ? nch : nt)) {
    bool moved = false;
    while (failed == CL_SUCCESS && rd < nch && rd < fr + S) {
      size_t s = rd % S, len = clpin__mpi_chunk_len(x->n, x->chunk, rd);
      cl_int e = clEnqueueReadBuffer(x->q, x->buf, CL_FALSE, x->off + rd * x->chunk, len,
                                     slot_at(d, s), x->nw, x->wl, &ev[s]);
      if (e != CL_SUCCESS) {
        ev[s] = NULL;
        failed = clpin__mpi_fail(fn, e, "clEnqueueReadBuffer of chunk %zu", rd);
        break;
      }
      clFlush(x->q);
      rd++, moved = true;
    }
    while (failed == CL_SUCCESS && nt < rd) {
      size_t s = nt % S;
      if (!clpin__mpi_chunk_ended(fn, "reading", &ev[s], nt, &failed) || failed != CL_SUCCESS)
        break;
      int e = MPI_Send(NULL, 0, MPI_BYTE, x->peer, x->tag, x->comm); /* "chunk nt is ready" */
      if ((err = clpin__mpi_check(fn, e, "MPI_Send (chunk ready)")) != CL_SUCCESS)
        goto out;
      nt++, moved = true;
    }
    if (failed != CL_SUCCESS && nt < nch) { /* "chunk nt failed": the last notice */
      char one = 1;
      int e = MPI_Send(&one, 1, MPI_BYTE, x->peer, x->tag, x->comm);
      if ((err = clpin__mpi_check(fn, e, "MPI_Send (chunk failed)")) != CL_SUCCESS)
        goto out;
      nch = nt; /* nothing more goes out */
      moved = true;
    }
    if (fr < nt) {
      if (freq == MPI_REQUEST_NULL) {
        int e = MPI_Irecv(NULL, 0, MPI_BYTE, x->peer, x->tag, x->comm, &freq);
        if ((err = clpin__mpi_check(fn, e, "MPI_Irecv (slot free)")) != CL_SUCCESS)
          goto out;
      }
      int flag = 0;
      int e = MPI_Test(&freq, &flag, MPI_STATUS_IGNORE);
      if ((err = clpin__mpi_check(fn, e, "MPI_Irecv (slot free)")) != CL_SUCCESS)
        goto out;
      if (flag)
        fr++, moved = true;
    }
    if (!moved)
      clpin__mpi_pause(&spins);
    else
      spins = 0;
  }
  if (failed != CL_SUCCESS)
    err = failed; /* its detail is the last one set */
  else
    clpin__mpi_count(ST_SENT_SHM, x->n);
out:
  clpin__mpi_drain(NULL, 0, ev, SLOTS);
  if (freq != MPI_REQUEST_NULL) {
    MPI_Cancel(&freq);
    MPI_Wait(&freq, MPI_STATUS_IGNORE);
  }
  return err;
}

/* The header, the receiver's answer and, for a new segment, whether it
 * could be opened: the path (MODE_P2P, or MODE_SHM with p->out holding the
 * receiver's segment), or a failure. *no_shm: the segment could not be
 * opened (the pair cannot share memory). */
static cl_int send_handshake(xfer *x, clpin__mpi_pair *p, bool shm, int *mode, bool *no_shm) {
  static const char *fn = "clpin_mpi_send";
  clpin__mpi_header h;
  memset(&h, 0, sizeof h);
  h.magic = CLPIN__MPI_MAGIC;
  h.nbytes = x->n;
  h.chunk = x->chunk;
  h.want_shm = shm;
  h.seg_id = shm && p->out.seg.base && p->out.slot == x->chunk ? p->out.seg.id : 0;
  h.pid = (int32_t)getpid();
  host_name(h.host);
  *mode = MODE_P2P;
  cl_int err = clpin__mpi_check(fn, MPI_Send(&h, (int)sizeof h, MPI_BYTE, x->peer, x->tag, x->comm),
                                "MPI_Send (header)");
  if (err != CL_SUCCESS)
    return err;
  answer a;
  err = clpin__mpi_check(
      fn, MPI_Recv(&a, (int)sizeof a, MPI_BYTE, x->peer, x->tag, x->comm, MPI_STATUS_IGNORE),
      "MPI_Recv (the receiver's answer)");
  if (err != CL_SUCCESS)
    return err;
  if (a.status != CL_SUCCESS)
    return clpin__mpi_fail(fn, (cl_int)a.status,
                           "rank %d refused the message: it expected %llu bytes, this call sends "
                           "%zu (chunk %zu)",
                           x->peer, (unsigned long long)a.nbytes, x->n, x->chunk);
  *mode = shm ? (int)a.mode : MODE_P2P; /* a receiver offers shm only when asked */
  if (*mode == MODE_SHM_NEW) {
    clpin__mpi_seg_free(&p->out.seg);
    /* The slots this side will write come from the answer: they must be
     * this message's chunks, no more slots than send_shm tracks, inside the
     * segment (seg_open checks the file holds seg_size). */
    bool sane = a.slot == x->chunk && a.nslots >= 1 && a.nslots <= SLOTS &&
                a.seg_size >= a.slot * (uint64_t)a.nslots;
    if (!sane)
      clpin__mpi_fail(fn, CLPIN_ERR_MISMATCH,
                      "rank %d offered %d slots of %llu bytes in a %llu-byte segment for chunks "
                      "of %zu",
                      x->peer, (int)a.nslots, (unsigned long long)a.slot,
                      (unsigned long long)a.seg_size, x->chunk);
    int64_t ok = sane && clpin__mpi_seg_open(fn, a.pid, a.fd, a.seg_size, a.seg_id, &p->out.seg) ==
                             CL_SUCCESS;
    if (ok) {
      p->out.slot = a.slot;
      p->out.nslots = a.nslots;
      clpin__mpi_count(ST_SEGMENTS, 1);
      *mode = MODE_SHM;
    } else {
      *no_shm = true; /* the peer is not on this host after all */
      *mode = MODE_P2P;
      clpin__mpi_note("cannot map rank %d's segment (%s): MPI point-to-point with it from now on",
                      x->peer, clpin_mpi_last_error_detail());
    }
    err = clpin__mpi_check(fn, MPI_Send(&ok, 1, MPI_INT64_T, x->peer, x->tag, x->comm),
                           "MPI_Send (segment opened)");
  }
  return err;
}

static cl_int send_large(xfer *x) {
  static const char *fn = "clpin_mpi_send";
  clpin__mpi_comm *st = clpin__mpi_comm_state(x->comm);
  clpin__mpi_pair *p = st ? &st->pairs[x->peer] : NULL;
  bool shm = p && clpin__mpi_shm_enabled() && claim(st, p, &p->out);
  int mode = MODE_P2P;
  bool no_shm = false;
  cl_int err = send_handshake(x, p, shm, &mode, &no_shm);
  if (err == CL_SUCCESS && mode == MODE_SHM) {
    /* Registration only makes the device's copies DMA at full speed: without
     * it they are still correct. */
    clpin__mpi_seg_register(fn, &p->out.seg, x->q);
    err = send_shm(x, &p->out);
  } else if (err == CL_SUCCESS) {
    err = send_p2p(x);
  }
  if (shm)
    unclaim(st, p, &p->out, no_shm);
  return err;
}

cl_int clpin__mpi_vet_p2p(const char *fn, bool recv, cl_command_queue queue, cl_mem buffer,
                          size_t offset, size_t nbytes, int peer, int tag, MPI_Comm comm,
                          cl_uint nw, const cl_event *wl) {
  int rank, size, ub_found = 0, *ub = NULL;
  cl_int err = clpin__mpi_vet_buffer(fn, queue, buffer, offset, nbytes, nw, wl);
  if (err == CL_SUCCESS)
    err = clpin__mpi_vet_comm(fn, comm, &rank, &size);
  if (err != CL_SUCCESS)
    return err;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &ub_found);
  const char *who = recv ? "source" : "dest";
  if (recv && peer == MPI_ANY_SOURCE)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT,
                           "source is MPI_ANY_SOURCE: a pipelined message needs a named sender");
  if (peer == MPI_ANY_SOURCE || (peer != MPI_PROC_NULL && (peer < 0 || peer >= size)))
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT,
                           "%s %d is not a rank of comm (0 ... %d) or MPI_PROC_NULL", who, peer,
                           size - 1);
  if (recv && tag == MPI_ANY_TAG)
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT,
                           "tag is MPI_ANY_TAG: a pipelined message needs its tag");
  if (tag < 0 || (ub_found && tag > *ub))
    return clpin__mpi_fail(fn, CLPIN_ERR_INVALID_ARGUMENT, "tag %d is outside 0 ... MPI_TAG_UB",
                           tag);
  return CL_SUCCESS;
}

cl_int clpin_mpi_send(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes, int dest,
                      int tag, MPI_Comm comm, cl_uint num_events_in_wait_list,
                      const cl_event *event_wait_list) {
  cl_int err = clpin__mpi_vet_p2p("clpin_mpi_send", false, queue, buffer, offset, nbytes, dest, tag,
                                  comm, num_events_in_wait_list, event_wait_list);
  if (err != CL_SUCCESS || dest == MPI_PROC_NULL)
    return err;
  int me = -1;
  MPI_Comm_rank(comm, &me);
  if (dest == me)
    return clpin__mpi_send_self(queue, buffer, offset, nbytes, tag, comm, num_events_in_wait_list,
                                event_wait_list);
  clpin__mpi_guard g;
  clpin__mpi_guard_enter(&g, comm);
  xfer x = {queue,           buffer, offset, nbytes, clpin__mpi_chunk(), num_events_in_wait_list,
            event_wait_list, dest,   tag,    comm};
  if (nbytes <= x.chunk)
    err = send_small(queue, buffer, offset, nbytes, dest, tag, comm, num_events_in_wait_list,
                     event_wait_list);
  else
    err = send_large(&x);
  clpin__mpi_guard_leave(&g);
  return err;
}

/* ---------------------------------------------------------------- recv -- */

/* A marker on q after the given events: the caller's *event. */
static cl_int give_event(cl_command_queue q, cl_uint n, const cl_event *evs, cl_event *event) {
  return clpin__mpi_give_event("clpin_mpi_recv", q, n, evs, event);
}

/* A message whose size is not what this call expects: take it (so nothing is
 * left pending), tell a large sender that waits for an answer, fail. */
static cl_int refuse(MPI_Message *msg, int count, size_t expected, size_t chunk, int source,
                     int tag, MPI_Comm comm) {
  static const char *fn = "clpin_mpi_recv";
  char *tmp = malloc(count > 0 ? (size_t)count : 1);
  if (!tmp)
    return clpin__mpi_fail(fn, CL_OUT_OF_HOST_MEMORY, "no memory to take a mismatched message");
  int e = MPI_Mrecv(tmp, count, MPI_BYTE, msg, MPI_STATUS_IGNORE);
  cl_int err = clpin__mpi_check(fn, e, "MPI_Mrecv");
  if (err != CL_SUCCESS) {
    free(tmp);
    return err;
  }
  clpin__mpi_header h;
  if ((size_t)count == sizeof h) {
    memcpy(&h, tmp, sizeof h);
    if (h.magic == CLPIN__MPI_MAGIC) {
      answer a;
      memset(&a, 0, sizeof a);
      a.status = CLPIN_ERR_MISMATCH;
      a.nbytes = expected;
      MPI_Send(&a, (int)sizeof a, MPI_BYTE, source, tag, comm);
      free(tmp);
      return clpin__mpi_fail(fn, CLPIN_ERR_MISMATCH,
                             "rank %d sends %llu bytes (chunk %llu), this call expects %zu "
                             "(chunk %zu); the buffer is untouched",
                             source, (unsigned long long)h.nbytes, (unsigned long long)h.chunk,
                             expected, chunk);
    }
  }
  free(tmp);
  return clpin__mpi_fail(fn, CLPIN_ERR_MISMATCH,
                         "rank %d sent %zu bytes, this call expects %zu (another size, or the "
                         "sender's call failed); the buffer is untouched",
                         source, (size_t)count < sizeof h ? (size_t)count : (size_t)count - 1,
                         expected);
}

static cl_int recv_small(const xfer *x, MPI_Message *msg, cl_event *event) {
  static const char *fn = "clpin_mpi_recv";
  if (x->n == 0) {
    cl_int err =
        clpin__mpi_check(fn, MPI_Mrecv(NULL, 0, MPI_BYTE, msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
    return err != CL_SUCCESS ? err : give_event(x->q, x->nw, x->wl, event);
  }
  if (x->n <= CLPIN__MPI_TINY) { /* the plain path: a blocking write from the stack */
    _Alignas(64) char tmp[CLPIN__MPI_TINY + 1];
    cl_int err = clpin__mpi_check(
        fn, MPI_Mrecv(tmp, (int)clpin__mpi_wire_len(x->n), MPI_BYTE, msg, MPI_STATUS_IGNORE),
        "MPI_Mrecv");
    cl_event ev = NULL;
    if (err == CL_SUCCESS &&
        (err = clEnqueueWriteBuffer(x->q, x->buf, CL_TRUE, x->off, x->n, tmp, x->nw, x->wl,
                                    event ? &ev : NULL)) != CL_SUCCESS)
      err = clpin__mpi_fail(fn, err, "clEnqueueWriteBuffer");
    if (err == CL_SUCCESS) {
      clpin__mpi_count(ST_RECV_P2P, x->n);
      if (event)
        *event = ev;
    }
    return err;
  }
  clpin_pool *pool;
  clpin_block *b = NULL;
  cl_int err = clpin_pool_get(x->q, &pool);
  if (err == CL_SUCCESS)
    err = clpin_acquire(pool, clpin__mpi_wire_len(x->n), &b);
  if (err != CL_SUCCESS) {
    /* Take the message anyway, so that it does not match a later receive. */
    void *tmp = malloc(clpin__mpi_wire_len(x->n));
    MPI_Mrecv(tmp, (int)clpin__mpi_wire_len(x->n), MPI_BYTE, msg, MPI_STATUS_IGNORE);
    free(tmp);
    return clpin__mpi_from_clpin(fn, err, "clpin_acquire");
  }
  err = clpin__mpi_check(fn,
                         MPI_Mrecv(clpin_block_host(b), (int)clpin__mpi_wire_len(x->n), MPI_BYTE,
                                   msg, MPI_STATUS_IGNORE),
                         "MPI_Mrecv");
  cl_event ev = NULL;
  if (err == CL_SUCCESS) {
    err = clEnqueueWriteBuffer(x->q, x->buf, CL_FALSE, x->off, x->n, clpin_block_host(b), x->nw,
                               x->wl, &ev);
    if (err != CL_SUCCESS)
      err = clpin__mpi_fail(fn, err, "clEnqueueWriteBuffer");
    else
      clFlush(x->q);
  }
  /* The pool reuses the block only once the write has read it. */
  clpin_release(b, ev);
  if (err == CL_SUCCESS) {
    clpin__mpi_count(ST_RECV_P2P, x->n);
    if (event)
      *event = ev;
    else
      clReleaseEvent(ev);
  }
  return err;
}

static cl_int recv_p2p(const xfer *x, cl_event *event) {
  static const char *fn = "clpin_mpi_recv";
  size_t nch = clpin__mpi_nchunks(x->n, x->chunk);
  clpin_block *blk[SLOTS] = {0};
  cl_event ev[SLOTS] = {0};
  MPI_Request req[SLOTS];
  for (int i = 0; i < SLOTS; i++)
    req[i] = MPI_REQUEST_NULL;
  clpin_pool *pool;
  size_t rv = 0, wr = 0, fin = 0, short_at = SIZE_MAX;
  cl_int failed = CL_SUCCESS; /* a local failure: the sender's chunks are still taken */
  char *host[SLOTS] = {0}, *spare = NULL;
  cl_int err = clpin_pool_get(x->q, &pool);
  for (int i = 0; i < SLOTS && err == CL_SUCCESS && (size_t)i < nch; i++)
    if ((err = clpin_acquire(pool, x->chunk, &blk[i])) == CL_SUCCESS)
      host[i] = clpin_block_host(blk[i]);
  if (err != CL_SUCCESS) {
    /* No pinned memory: the sender is already sending, so take its chunks
     * anyway, into pageable memory, and fail after. */
    failed = clpin__mpi_from_clpin(fn, err, "clpin_acquire");
    err = CL_SUCCESS;
    if (!(spare = malloc(SLOTS * x->chunk))) {
      err = clpin__mpi_fail(fn, CL_OUT_OF_HOST_MEMORY, "no memory to take the sender's chunks");
      goto out;
    }
    for (int i = 0; i < SLOTS; i++)
      host[i] = spare + (size_t)i * x->chunk;
  }
  unsigned spins = 0;
  while (wr < nch) {
    bool moved = false;
    while (rv < nch && rv < fin + SLOTS) { /* post receives into free slots */
      size_t s = rv % SLOTS;
      int e = MPI_Irecv(host[s], (int)clpin__mpi_chunk_len(x->n, x->chunk, rv), MPI_BYTE, x->peer,
                        x->tag, x->comm, &req[s]);
      if ((err = clpin__mpi_check(fn, e, "MPI_Irecv of a chunk")) != CL_SUCCESS)
        goto out;
      rv++, moved = true;
    }
    while (wr < rv) { /* arrived chunks go to the device */
      size_t s = wr % SLOTS, len = clpin__mpi_chunk_len(x->n, x->chunk, wr);
      int flag = 0, got = 0;
      MPI_Status stt;
      int e = MPI_Test(&req[s], &flag, &stt);
      if ((err = clpin__mpi_check(fn, e, "MPI_Irecv of a chunk")) != CL_SUCCESS)
        goto out;
      if (!flag)
        break;
      MPI_Get_count(&stt, MPI_BYTE, &got);
      if ((size_t)got != len && short_at == SIZE_MAX)
        short_at = wr; /* the sender failed from here on: take the rest, write nothing */
      if (short_at == SIZE_MAX && failed == CL_SUCCESS) {
        cl_int ce = clEnqueueWriteBuffer(x->q, x->buf, CL_FALSE, x->off + wr * x->chunk, len,
                                         host[s], x->nw, x->wl, &ev[s]);
        if (ce != CL_SUCCESS) {
          ev[s] = NULL;
          failed = clpin__mpi_fail(fn, ce, "clEnqueueWriteBuffer of chunk %zu", wr);
        } else
          clFlush(x->q);
      }
      wr++, moved = true;
    }
    while (fin < wr && rv < nch) { /* finished writes free their slots */
      if (!clpin__mpi_chunk_ended(fn, "writing", &ev[fin % SLOTS], fin, &failed))
        break;
      fin++, moved = true;
    }
    clpin__mpi_idle(moved, &spins);
  }
  if (short_at != SIZE_MAX)
    err = clpin__mpi_fail(fn, CLPIN_ERR_PEER,
                          "rank %d failed to read its buffer from chunk %zu on (its call "
                          "returned an error)",
                          x->peer, short_at);
  else if (failed != CL_SUCCESS)
    err = failed;
  if (err != CL_SUCCESS)
    goto out;
  /* The last writes may still run: the caller's event waits for them and the
   * pool keeps their blocks until they end. */
  cl_event pend[SLOTS];
  cl_uint np = 0;
  for (int i = 0; i < SLOTS; i++)
    if (ev[i])
      pend[np++] = ev[i];
  err = give_event(x->q, np, pend, event);
  if (err == CL_SUCCESS)
    clpin__mpi_count(ST_RECV_P2P, x->n);
out:
  if (err != CL_SUCCESS) {
    clpin__mpi_partial(x->off, x->off + x->n);
    for (int i = 0; i < SLOTS; i++)
      if (ev[i])
        clWaitForEvents(1, &ev[i]);
  }
  for (int i = 0; i < SLOTS; i++) {
    if (req[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(&req[i]);
      MPI_Wait(&req[i], MPI_STATUS_IGNORE);
    }
    clpin_release(blk[i], ev[i]);
    if (ev[i])
      clReleaseEvent(ev[i]);
  }
  free(spare);
  return err;
}

static cl_int recv_shm(const xfer *x, clpin__mpi_dir *d, cl_event *event) {
  static const char *fn = "clpin_mpi_recv";
  size_t nch = clpin__mpi_nchunks(x->n, x->chunk), S = (size_t)d->nslots;
  cl_event ev[SLOTS] = {0};
  MPI_Request nreq = MPI_REQUEST_NULL;
  cl_int err = CL_SUCCESS, failed = CL_SUCCESS;
  size_t nr = 0, fin = 0, failed_at = SIZE_MAX;
  char notice = 0;
  unsigned spins = 0;
  /* Until every announced chunk is written and its slot given back; a
   * "failed" notice ends the announcements. */
  while (fin < nch) {
    bool moved = false;
    if (nr < nch) { /* "chunk nr is ready" (0 bytes) or "failed" (1 byte) */
      if (nreq == MPI_REQUEST_NULL) {
        int e = MPI_Irecv(&notice, 1, MPI_BYTE, x->peer, x->tag, x->comm, &nreq);
        if ((err = clpin__mpi_check(fn, e, "MPI_Irecv (chunk ready)")) != CL_SUCCESS)
          goto out;
      }
      int flag = 0, got = 0;
      MPI_Status stt;
      int e = MPI_Test(&nreq, &flag, &stt);
      if ((err = clpin__mpi_check(fn, e, "MPI_Irecv (chunk ready)")) != CL_SUCCESS)
        goto out;
      if (flag) {
        MPI_Get_count(&stt, MPI_BYTE, &got);
        if (got != 0) { /* the sender failed at chunk nr: nothing more comes */
          failed_at = nr;
          nch = nr;
        } else {
          size_t s = nr % S, len = clpin__mpi_chunk_len(x->n, x->chunk, nr);
          cl_int ce = failed != CL_SUCCESS
                          ? CL_SUCCESS
                          : clEnqueueWriteBuffer(x->q, x->buf, CL_FALSE, x->off + nr * x->chunk,
                                                 len, slot_at(d, s), x->nw, x->wl, &ev[s]);
          if (ce != CL_SUCCESS) {
            ev[s] = NULL;
            failed = clpin__mpi_fail(fn, ce, "clEnqueueWriteBuffer of chunk %zu", nr);
          } else
            clFlush(x->q);
          nr++;
        }
        moved = true;
      }
    }
    while (fin < nr) {
      if (!clpin__mpi_chunk_ended(fn, "writing", &ev[fin % S], fin, &failed))
        break;
      int e = MPI_Send(NULL, 0, MPI_BYTE, x->peer, x->tag, x->comm); /* "slot free" */
      if ((err = clpin__mpi_check(fn, e, "MPI_Send (slot free)")) != CL_SUCCESS)
        goto out;
      fin++, moved = true;
    }
    if (!moved)
      clpin__mpi_pause(&spins);
    else
      spins = 0;
  }
  if (failed_at != SIZE_MAX)
    err = clpin__mpi_fail(fn, CLPIN_ERR_PEER,
                          "rank %d failed to read its buffer at chunk %zu (its call returned an "
                          "error)",
                          x->peer, failed_at);
  else if (failed != CL_SUCCESS)
    err = failed;
  if (err == CL_SUCCESS)
    err = give_event(x->q, 0, NULL, event);
  if (err == CL_SUCCESS)
    clpin__mpi_count(ST_RECV_SHM, x->n);
out:
  if (err != CL_SUCCESS)
    clpin__mpi_partial(x->off, x->off + x->n);
  clpin__mpi_drain(NULL, 0, ev, SLOTS);
  if (nreq != MPI_REQUEST_NULL) {
    MPI_Cancel(&nreq);
    MPI_Wait(&nreq, MPI_STATUS_IGNORE);
  }
  return err;
}

/* The answer to a large sender's header: the path, and a new segment when
 * none is shared yet. */
static cl_int recv_large(const xfer *x, MPI_Message *msg, cl_event *event) {
  static const char *fn = "clpin_mpi_recv";
  clpin__mpi_header h;
  cl_int err = clpin__mpi_check(fn, MPI_Mrecv(&h, (int)sizeof h, MPI_BYTE, msg, MPI_STATUS_IGNORE),
                                "MPI_Mrecv (header)");
  if (err != CL_SUCCESS)
    return err;
  if (h.magic != CLPIN__MPI_MAGIC) /* a one-message sender: it waits for nothing */
    return clpin__mpi_fail(fn, CLPIN_ERR_MISMATCH,
                           "rank %d sent %zu bytes in one message, this call expects %zu; the "
                           "buffer is untouched",
                           x->peer, sizeof h, x->n);
  answer a;
  memset(&a, 0, sizeof a);
  a.nbytes = x->n;
  if (h.nbytes != x->n || h.chunk != x->chunk) {
    a.status = CLPIN_ERR_MISMATCH;
    MPI_Send(&a, (int)sizeof a, MPI_BYTE, x->peer, x->tag, x->comm);
    return clpin__mpi_fail(fn, CLPIN_ERR_MISMATCH,
                           "rank %d sends %llu bytes (chunk %llu), this call expects %zu (chunk "
                           "%zu; CLPIN_MPI_CHUNK must match); the buffer is untouched",
                           x->peer, (unsigned long long)h.nbytes, (unsigned long long)h.chunk, x->n,
                           x->chunk);
  }
  clpin__mpi_comm *st = clpin__mpi_comm_state(x->comm);
  clpin__mpi_pair *p = st ? &st->pairs[x->peer] : NULL;
  char me[MPI_MAX_PROCESSOR_NAME + 1];
  host_name(me);
  h.host[MPI_MAX_PROCESSOR_NAME] = 0;
  a.mode = MODE_P2P;
  bool shm = p && h.want_shm && clpin__mpi_shm_enabled() && strcmp(me, h.host) == 0 &&
             claim(st, p, &p->in);
  bool no_shm = false; /* found now: the pair cannot share memory */
  if (shm) {
    if (p->in.seg.base && p->in.seg.id == h.seg_id && p->in.slot == x->chunk) {
      a.mode = MODE_SHM;
    } else {
      clpin__mpi_seg_free(&p->in.seg);
      size_t slot = x->chunk;
      if (clpin__mpi_seg_create(fn, SLOTS * slot, &p->in.seg) == CL_SUCCESS) {
        p->in.slot = slot;
        p->in.nslots = SLOTS;
        a.mode = MODE_SHM_NEW;
        a.pid = (int32_t)getpid();
        a.fd = p->in.seg.fd;
        a.seg_size = p->in.seg.size;
        a.seg_id = p->in.seg.id;
        a.slot = slot;
        a.nslots = SLOTS;
      } else {
        no_shm = true;
        clpin__mpi_note("no shared segment for rank %d (%s): MPI point-to-point with it", x->peer,
                        clpin_mpi_last_error_detail());
      }
    }
  }
  err = clpin__mpi_check(fn, MPI_Send(&a, (int)sizeof a, MPI_BYTE, x->peer, x->tag, x->comm),
                         "MPI_Send (answer)");
  if (err == CL_SUCCESS && a.mode == MODE_SHM_NEW) {
    int64_t ok = 0;
    err = clpin__mpi_check(
        fn, MPI_Recv(&ok, 1, MPI_INT64_T, x->peer, x->tag, x->comm, MPI_STATUS_IGNORE),
        "MPI_Recv (segment opened)");
    if (err == CL_SUCCESS && !ok) {
      clpin__mpi_seg_free(&p->in.seg);
      no_shm = true;
      a.mode = MODE_P2P;
    } else if (err == CL_SUCCESS)
      clpin__mpi_count(ST_SEGMENTS, 1);
  }
  if (err == CL_SUCCESS && a.mode == MODE_P2P) {
    err = recv_p2p(x, event);
  } else if (err == CL_SUCCESS) {
    clpin__mpi_seg_register(fn, &p->in.seg, x->q);
    err = recv_shm(x, &p->in, event);
  }
  if (shm)
    unclaim(st, p, &p->in, no_shm);
  return err;
}

cl_int clpin_mpi_recv(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                      int source, int tag, MPI_Comm comm, cl_uint num_events_in_wait_list,
                      const cl_event *event_wait_list, cl_event *event) {
  static const char *fn = "clpin_mpi_recv";
  cl_int err = clpin__mpi_vet_p2p(fn, true, queue, buffer, offset, nbytes, source, tag, comm,
                                  num_events_in_wait_list, event_wait_list);
  if (err != CL_SUCCESS)
    return err;
  if (source == MPI_PROC_NULL)
    return give_event(queue, num_events_in_wait_list, event_wait_list, event);
  int me = -1;
  MPI_Comm_rank(comm, &me);
  if (source == me)
    return clpin__mpi_recv_self(queue, buffer, offset, nbytes, me, tag, comm,
                                num_events_in_wait_list, event_wait_list, event);
  clpin__mpi_guard g;
  clpin__mpi_guard_enter(&g, comm);
  xfer x = {queue,           buffer, offset, nbytes, clpin__mpi_chunk(), num_events_in_wait_list,
            event_wait_list, source, tag,    comm};
  MPI_Message msg;
  MPI_Status stt;
  int count = 0;
  err = clpin__mpi_check(fn, MPI_Mprobe(source, tag, comm, &msg, &stt), "MPI_Mprobe");
  if (err == CL_SUCCESS)
    err = clpin__mpi_check(fn, MPI_Get_count(&stt, MPI_BYTE, &count), "MPI_Get_count");
  if (err == CL_SUCCESS) {
    bool small = nbytes <= x.chunk;
    clpin__mpi_header h;
    if (small && (size_t)count == clpin__mpi_wire_len(nbytes))
      err = recv_small(&x, &msg, event);
    else if (!small && (size_t)count == sizeof h)
      err = recv_large(&x, &msg, event);
    else
      err = refuse(&msg, count, nbytes, x.chunk, source, tag, comm);
  }
  clpin__mpi_guard_leave(&g);
  return err;
}
