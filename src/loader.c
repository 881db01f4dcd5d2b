/* SPDX-License-Identifier: Apache-2.0 */
/* The loader (clpin_loader_*), one state machine under one lock: fill
 * threads write batches straight into pinned slots, each
 * filled slot is uploaded into a device buffer on a queue of the loader's
 * own, and next() hands the buffer out with the upload's event.
 *
 * Objects, all made at create (steady state makes nothing):
 *  - slots: pinned pool blocks, or the caller's slot memory cut in
 *    batch_bytes pieces (desc.slot_memory), workers + streams of them. A slot goes back
 *    to the free FIFO as soon as its upload is enqueued, keeping the upload's
 *    event; the worker that takes it next waits for that event before fill
 *    writes into it (never a wrong byte on the device).
 *  - streams: one per caller queue, each with depth + 1 device buffers
 *    (depth ready ahead, one held by the caller) and an upload queue. A
 *    buffer's release names `done` events; the next upload into it waits for
 *    them (in its wait list; on the host when of another context).
 *  - batches: records of one claimed index, slots + streams x buffers of
 *    them, so every index between the next to deliver and the last claimed
 *    has one.
 *
 * One mutex guards all loader state; no OpenCL call and no fill runs under
 * it, and no pool lock is taken under it. Sequence numbers: seq s is the
 * s-th batch of this process in the epoch, index shard + s * nshards, on
 * stream s % nstreams. In order mode a stream uploads its seqs in order, so
 * the batch next() waits for always finds a buffer once the caller has
 * released the ones it held.
 *
 * Pool lifetime: a worker enters the slot's pool (clpin__pool_enter) for the
 * fill and until the upload's event completes (a callback leaves, or, with
 * CLPIN_LOADER_WAIT_UPLOADS, the worker once it waited for it), so a
 * clpin_pool_release_context racing the loader waits for those uploads and
 * later fills of that slot fail with CLPIN_ERR_POOL_RELEASED, delivered as
 * batch errors; nothing writes freed memory. */
#include "events.h"
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { B_FREE, B_FILLING, B_READY, B_HELD, B_END };

typedef struct slot {
  clpin_block *block;
  void *host;
  clpin_pool *pool; /* handle of the block's pool */
  cl_context ctx;   /* its context: the slot serves that context's streams */
  cl_event upload;  /* last upload from it, or NULL */
  struct slot *next;
} slot;

typedef struct devbuf {
  cl_mem mem;
  cl_event *done; /* the last release's done events, retained */
  cl_uint ndone, capdone;
  bool host_wait; /* some done event is of another context */
  bool busy;
} devbuf;

typedef struct stream {
  cl_command_queue queue;  /* the caller's */
  cl_command_queue upload; /* the loader's, same device, profiling on */
  cl_context ctx;
  clpin_pool *pool;
  devbuf *bufs;
  unsigned nbufs, held;
  uint64_t upload_seq; /* ordered: the next seq of this stream to upload */
} stream;

struct clpin_batch {
  clpin_loader *L;
  uint64_t seq, index, epoch;
  int state;
  cl_int status;
  size_t used;
  stream *st;
  devbuf *buf;
  cl_event event; /* the upload, retained for the batch */
};

struct clpin_loader {
  clpin_loader_desc d;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* workers: a slot, a record, a buffer, a turn, or stop */
  pthread_cond_t next_cv; /* callers of next(): a batch ready, or cancel */
  pthread_cond_t idle_cv; /* reset: a worker left its batch */
  unsigned nstreams, nworkers, nslots, nrecs;
  stream *streams;
  slot *slots;
  slot *free_head, *free_tail;
  clpin_batch *recs;
  pthread_t *threads;
  unsigned nthreads;
  uint64_t epoch;
  uint64_t next_seq;    /* next to claim */
  uint64_t deliver_seq; /* ordered: next to deliver */
  uint64_t end_seq;     /* first seq past the epoch (UINT64_MAX: not known) */
  uint64_t limit_seq;   /* seqs of the epoch when `batches` is set, else UINT64_MAX */
  uint64_t delivered;   /* unordered: batches delivered this epoch (records left) */
  unsigned busy;        /* workers between claim and the end of their batch */
  bool cancelled, stop;
  bool resetting; /* reset() is draining: no claims */
  struct clpin_loader_stats s;
};

static uint64_t now_ns(void) { return clpin__now_ns(); }

/* ---- slots ---------------------------------------------------------------- */

/* From one slot to the next (desc.slot_stride: pool blocks are slots of their own). */
static size_t slot_stride(const clpin_loader *L) {
  return L->d.slot_stride ? L->d.slot_stride : L->d.batch_bytes;
}

static void slot_push(clpin_loader *L, slot *sl) {
  sl->next = NULL;
  if (L->free_tail)
    L->free_tail->next = sl;
  else
    L->free_head = sl;
  L->free_tail = sl;
}

/* The oldest free slot of ctx (its upload most likely done), or NULL. */
static slot *slot_find(clpin_loader *L, cl_context ctx, slot **prev) {
  slot *p = NULL;
  for (slot *sl = L->free_head; sl; p = sl, sl = sl->next)
    if (sl->ctx == ctx) {
      if (prev)
        *prev = p;
      return sl;
    }
  return NULL;
}

static slot *slot_pop(clpin_loader *L, cl_context ctx) {
  slot *prev = NULL, *sl = slot_find(L, ctx, &prev);
  if (sl) {
    if (prev)
      prev->next = sl->next;
    else
      L->free_head = sl->next;
    if (L->free_tail == sl)
      L->free_tail = prev;
  }
  return sl;
}

static clpin_batch *rec_take(clpin_loader *L) {
  for (unsigned i = 0; i < L->nrecs; i++)
    if (L->recs[i].state == B_FREE)
      return &L->recs[i];
  return NULL;
}

/* The upload's event completed: the pool may be released now. */
static void CL_CALLBACK left_pool(cl_event ev, cl_int status, void *pool) {
  (void)ev;
  (void)status;
  clpin__pool_leave((clpin_pool *)pool);
}

/* Nanoseconds the upload ran, by profiling; 0 when unknown. */
static uint64_t upload_ns_of(cl_event ev) {
  cl_ulong a = 0, b = 0;
  if (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL) != CL_SUCCESS ||
      clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL) != CL_SUCCESS ||
      b < a)
    return 0;
  return (uint64_t)(b - a);
}

/* ---- workers -------------------------------------------------------------- */

/* The record of a seq the worker gives up (cancel, reset, end): free, and
 * the stream's turn moves on. Under the lock. */
static void drop_rec(clpin_loader *L, clpin_batch *b) {
  stream *st = b->st;
  if (st->upload_seq == b->seq)
    st->upload_seq += L->nstreams;
  b->state = B_FREE;
}

/* Whether the worker with record b (epoch e) must give it up. */
static bool stale(clpin_loader *L, const clpin_batch *b, uint64_t e) {
  return L->stop || L->cancelled || L->epoch != e || b->seq >= L->end_seq;
}

/* Upload one filled slot into a buffer of its stream. Returns the code. */
static cl_int upload(slot *sl, clpin_batch *b, devbuf *buf) {
  stream *st = b->st;
  if (buf->host_wait && buf->ndone) {
    clpin__events_settle(buf->ndone, buf->done); /* a failed one still ended */
  }
  cl_event ev = NULL;
  /* No wait list at all when there is nothing to wait for (a non-NULL list
   * of 0 events is CL_INVALID_EVENT_WAIT_LIST). */
  cl_uint nwait = buf->host_wait ? 0 : buf->ndone;
  cl_int err = clEnqueueWriteBuffer(st->upload, buf->mem, CL_FALSE, 0, b->used, sl->host, nwait,
                                    nwait ? buf->done : NULL, &ev);
  if (err == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST && buf->ndone) {
    /* A done event failed: it ended all the same, so the buffer is free. */
    err = clEnqueueWriteBuffer(st->upload, buf->mem, CL_FALSE, 0, b->used, sl->host, 0, NULL, &ev);
  }
  for (cl_uint i = 0; i < buf->ndone; i++)
    clReleaseEvent(buf->done[i]);
  buf->ndone = 0;
  buf->host_wait = false;
  if (err != CL_SUCCESS) {
    return err;
  }
  clFlush(st->upload);
  sl->upload = ev;
  err = clRetainEvent(ev);
  if (err != CL_SUCCESS) {
    /* No reference for the batch: it fails, once the DMA has read the slot
     * (the caller leaves the pool right after). */
    clpin__event_settle(ev);
    return err;
  }
  b->event = ev;
  return CL_SUCCESS;
}

/* One batch on its way through a worker: what each step below hands on. */
typedef struct {
  clpin_batch *b;
  slot *sl;
  uint64_t epoch;   /* the epoch it was claimed in */
  clpin_pool *pool; /* the slot's pool, entered while `entered` */
  bool entered;
  cl_int rc;        /* the fill's code, then the upload's */
  devbuf *buf;      /* the buffer uploaded into, or NULL */
  cl_event wait_ev; /* CLPIN_LOADER_WAIT_UPLOADS: the upload to wait for */
} job;

/* Claim a seq, a slot and a record, waiting until there are. Under the
 * lock; false when the loader stops. */
static bool claim(clpin_loader *L, job *j) {
  uint64_t t0 = now_ns();
  bool waited = false;
  while (!L->stop &&
         (L->cancelled || L->resetting || L->next_seq >= L->end_seq ||
          L->next_seq >= L->limit_seq ||
          !slot_find(L, L->streams[L->next_seq % L->nstreams].ctx, NULL) || !rec_take(L))) {
    if (!L->cancelled && !L->resetting && L->next_seq < L->end_seq && L->next_seq < L->limit_seq)
      waited = true; /* work to do, but no slot or record */
    pthread_cond_wait(&L->work_cv, &L->mu);
  }
  if (L->stop)
    return false;
  if (waited)
    L->s.slot_wait_ns += now_ns() - t0;
  uint64_t e = L->epoch;
  clpin_batch *b = rec_take(L);
  slot *sl = slot_pop(L, L->streams[L->next_seq % L->nstreams].ctx);
  b->seq = L->next_seq++;
  b->index = (uint64_t)L->d.shard + b->seq * (L->d.nshards > 1 ? L->d.nshards : 1);
  b->epoch = e;
  b->st = &L->streams[b->seq % L->nstreams];
  b->state = B_FILLING;
  b->status = CL_SUCCESS;
  b->buf = NULL;
  b->event = NULL;
  L->busy++;
  *j = (job){.b = b, .sl = sl, .epoch = e, .pool = sl->pool};
  return true;
}

/* Fill the slot, inside its pool, once its last upload has ended. Without
 * the lock (taken only to count the upload's time); returns the fill's time. */
static uint64_t fill(clpin_loader *L, job *j) {
  slot *sl = j->sl;
  j->rc = clpin__pool_enter(&j->pool);
  j->entered = j->rc == CL_SUCCESS;
  if (sl->upload) {
    clpin__event_settle(sl->upload); /* ended, completed or failed */
    uint64_t up = upload_ns_of(sl->upload);
    clReleaseEvent(sl->upload);
    sl->upload = NULL;
    pthread_mutex_lock(&L->mu);
    L->s.upload_ns += up;
    pthread_mutex_unlock(&L->mu);
  }
  size_t used = L->d.batch_bytes;
  uint64_t f0 = now_ns();
  if (j->entered) {
    j->rc = L->d.fill(L->d.user, j->b->index, sl->host, L->d.batch_bytes, &used);
    if (j->rc == CL_SUCCESS && (used > L->d.batch_bytes || !used)) {
      clpin__fail("clpin_loader fill", CLPIN_ERR_INVALID_SIZE,
                  used ? "fill set *used above the batch capacity" : "fill set *used to 0");
      j->rc = CLPIN_ERR_INVALID_SIZE;
    }
  }
  uint64_t f1 = now_ns();
  j->b->used = used;
  return f1 - f0;
}

/* Wait for the stream's turn (ordered; a failed batch too, so that the turn
 * moves past it in order) and, to upload, a free buffer, marked busy. Under
 * the lock; NULL for a batch that ended, failed or went stale. */
static devbuf *take_buffer(clpin_loader *L, job *j) {
  devbuf *buf = NULL;
  if (j->rc == CLPIN_END || stale(L, j->b, j->epoch))
    return NULL;
  stream *st = j->b->st;
  uint64_t w0 = now_ns();
  bool bw = false;
  for (;;) {
    if (stale(L, j->b, j->epoch))
      break;
    bool turn = (L->d.flags & CLPIN_LOADER_UNORDERED) || st->upload_seq == j->b->seq;
    if (turn && j->rc != CL_SUCCESS)
      break;
    if (turn) {
      for (unsigned i = 0; i < st->nbufs && !buf; i++)
        if (!st->bufs[i].busy)
          buf = &st->bufs[i];
      if (buf)
        break;
    }
    bw = true;
    pthread_cond_wait(&L->work_cv, &L->mu);
  }
  if (bw)
    L->s.buffer_wait_ns += now_ns() - w0;
  if (buf)
    buf->busy = true;
  return buf;
}

/* Upload the slot into j->buf, and leave the slot's pool: once the DMA has
 * read the slot (an event callback), after the batch is handed over
 * (CLPIN_LOADER_WAIT_UPLOADS: j->wait_ev), or now when nothing was
 * uploaded. Called and returns under the lock, let go meanwhile. */
static void send(clpin_loader *L, job *j) {
  if (j->buf) {
    pthread_mutex_unlock(&L->mu);
    j->rc = upload(j->sl, j->b, j->buf);
    if (j->rc != CL_SUCCESS && j->entered) {
      clpin__pool_leave(j->pool);
      j->entered = false;
    } else if (j->rc == CL_SUCCESS && j->entered && (L->d.flags & CLPIN_LOADER_WAIT_UPLOADS) &&
               clRetainEvent(j->sl->upload) == CL_SUCCESS) {
      /* Waited for once the batch is handed over, then left. */
      j->wait_ev = j->sl->upload; /* pool is left after it */
      j->entered = false;
    } else if (j->rc == CL_SUCCESS && j->entered) {
      /* Leave the pool once the DMA has read the slot (inline on POCL when
       * already complete: no lock is held here). */
      if (clSetEventCallback(j->sl->upload, CL_COMPLETE, left_pool, j->pool) != CL_SUCCESS) {
        clpin__events_settle(1, &j->sl->upload);
        clpin__pool_leave(j->pool);
      }
      j->entered = false;
    }
    pthread_mutex_lock(&L->mu);
    if (j->rc != CL_SUCCESS) {
      j->buf->busy = false;
      j->buf = NULL;
    }
  } else if (j->entered) {
    pthread_mutex_unlock(&L->mu);
    clpin__pool_leave(j->pool);
    j->entered = false;
    pthread_mutex_lock(&L->mu);
  }
}

/* Hand the batch on: ready for next(), or given up (cancel, reset, past the
 * end); the slot back to the free FIFO. Under the lock. Returns an upload
 * event nobody will take, to release without the lock. */
static cl_event finish(clpin_loader *L, job *j) {
  clpin_batch *b = j->b;
  slot_push(L, j->sl);
  L->busy--;
  cl_event unused = NULL;
  if (stale(L, b, j->epoch)) {
    /* Cancelled, reset or past the end: nobody will take it. */
    if (j->buf)
      j->buf->busy = false;
    unused = b->event;
    b->event = NULL;
    if (L->epoch == j->epoch)
      drop_rec(L, b);
    else
      b->state = B_FREE;
  } else if (j->rc == CLPIN_END) {
    if (b->seq < L->end_seq)
      L->end_seq = b->seq;
    drop_rec(L, b);
  } else {
    b->status = j->rc;
    b->buf = j->buf;
    if (b->st->upload_seq == b->seq)
      b->st->upload_seq += L->nstreams;
    b->state = B_READY;
  }
  pthread_cond_broadcast(&L->work_cv);
  pthread_cond_broadcast(&L->next_cv);
  pthread_cond_broadcast(&L->idle_cv);
  return unused;
}

/* A fill thread: claim, fill, take a buffer, upload, hand on; the lock held
 * but across the fill, the OpenCL calls and the waits for events. */
static void *worker(void *arg) {
  clpin_loader *L = arg;
  pthread_setname_np(pthread_self(), "clpin-loader"); /* top -H, gdb, /proc */
  pthread_mutex_lock(&L->mu);
  job j;
  while (claim(L, &j)) {
    pthread_mutex_unlock(&L->mu);
    uint64_t fill_ns = fill(L, &j);
    pthread_mutex_lock(&L->mu);
    L->s.fill_ns += fill_ns;
    j.buf = take_buffer(L, &j);
    send(L, &j);
    cl_event unused = finish(L, &j);
    if (unused || j.wait_ev) {
      pthread_mutex_unlock(&L->mu);
      if (unused)
        clReleaseEvent(unused);
      if (j.wait_ev) { /* CLPIN_LOADER_WAIT_UPLOADS: the batch is out, its DMA ends */
        clpin__events_settle(1, &j.wait_ev);
        clReleaseEvent(j.wait_ev);
        clpin__pool_leave(j.pool);
      }
      pthread_mutex_lock(&L->mu);
    }
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

/* ---- create and destroy --------------------------------------------------- */

static unsigned default_workers(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1)
    n = 1;
  return n < 4 ? (unsigned)n : 4u;
}

/* Slots per loader: per stream its share of the workers filling, plus one
 * uploading. */
static unsigned slots_of(unsigned num_queues, unsigned workers) {
  if (!workers)
    workers = default_workers();
  return ((workers + num_queues - 1) / num_queues + 1) * num_queues;
}

cl_int clpin_loader_slots(cl_uint num_queues, const clpin_loader_desc *desc, size_t *slots) {
  CLPIN__CHECK_WHY(!desc || !slots, CLPIN_ERR_INVALID_ARGUMENT, "desc or slots is NULL");
  *slots = 0;
  clpin_loader_desc d = {0};
  cl_int err = clpin__struct_in(__func__, "desc", &d, sizeof d, desc, CLPIN_LOADER_DESC_SIZE_V0_2);
  if (err != CL_SUCCESS)
    return err;
  CLPIN__CHECK_WHY(!num_queues || num_queues > 1024 || d.workers > 256, CLPIN_ERR_INVALID_ARGUMENT,
                   "num_queues is 0 or above 1024, or workers above 256");
  *slots = slots_of(num_queues, d.workers);
  return CL_SUCCESS;
}

/* Everything the loader holds; L's threads are joined already. */
static void free_all(clpin_loader *L) {
  for (unsigned i = 0; i < L->nstreams; i++) {
    stream *st = &L->streams[i];
    if (st->upload)
      clFinish(st->upload);
  }
  for (unsigned i = 0; i < L->nrecs; i++)
    if (L->recs && L->recs[i].event)
      clReleaseEvent(L->recs[i].event);
  for (unsigned i = 0; L->slots && i < L->nslots; i++) {
    slot *sl = &L->slots[i];
    if (sl->upload) {
      clpin__events_settle(1, &sl->upload);
      clReleaseEvent(sl->upload);
    }
    if (sl->block)
      clpin_release(sl->block, NULL); /* caller slot memory: nothing to free */
  }
  for (unsigned i = 0; L->streams && i < L->nstreams; i++) {
    stream *st = &L->streams[i];
    for (unsigned j = 0; st->bufs && j < st->nbufs; j++) {
      devbuf *bf = &st->bufs[j];
      if (bf->ndone)
        clpin__events_settle(bf->ndone, bf->done);
      for (cl_uint k = 0; k < bf->ndone; k++)
        clReleaseEvent(bf->done[k]);
      free(bf->done);
      if (bf->mem)
        clReleaseMemObject(bf->mem);
    }
    free(st->bufs);
    if (st->upload)
      clReleaseCommandQueue(st->upload);
    if (st->queue)
      clReleaseCommandQueue(st->queue);
    if (st->ctx)
      clReleaseContext(st->ctx);
  }
  free(L->streams);
  free(L->slots);
  free(L->recs);
  free(L->threads);
  pthread_cond_destroy(&L->work_cv);
  pthread_cond_destroy(&L->next_cv);
  pthread_cond_destroy(&L->idle_cv);
  pthread_mutex_destroy(&L->mu);
  free(L);
}

static cl_int make_stream(clpin_loader *L, stream *st, cl_command_queue q) {
  cl_device_id dev = NULL;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof st->ctx, &st->ctx, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err != CL_SUCCESS) {
    st->ctx = NULL;
    clpin__fail("clpin_loader_create", err, "a queue cannot be queried");
    return err;
  }
  clRetainContext(st->ctx);
  clRetainCommandQueue(q);
  st->queue = q;
  cl_ulong max_alloc = 0;
  err = clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
  if (err != CL_SUCCESS)
    return err;
  if ((cl_ulong)L->d.batch_bytes > max_alloc) {
    clpin__fail("clpin_loader_create", CLPIN_ERR_INVALID_SIZE,
                "batch_bytes is above the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE");
    return CLPIN_ERR_INVALID_SIZE;
  }
  err = clpin_pool_get(q, &st->pool);
  if (err != CL_SUCCESS)
    return err;
  st->upload = clCreateCommandQueue(st->ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err != CL_SUCCESS) {
    st->upload = NULL;
    return err;
  }
  st->nbufs = L->d.depth + 1;
  st->bufs = calloc(st->nbufs, sizeof *st->bufs);
  if (!st->bufs)
    return CL_OUT_OF_HOST_MEMORY;
  for (unsigned j = 0; j < st->nbufs; j++) {
    st->bufs[j].mem = clCreateBuffer(st->ctx, CL_MEM_READ_WRITE, L->d.batch_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
      st->bufs[j].mem = NULL;
      return err;
    }
    L->s.buffers_created++;
  }
  return CL_SUCCESS;
}

cl_int clpin_loader_create(cl_uint num_queues, const cl_command_queue *queues,
                           const clpin_loader_desc *desc, clpin_loader **loader) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!loader, CLPIN_ERR_INVALID_ARGUMENT, "loader is NULL");
  *loader = NULL;
  CLPIN__CHECK_WHY(!desc, CLPIN_ERR_INVALID_ARGUMENT, "desc is NULL");
  clpin_loader_desc d = {0};
  cl_int rc = clpin__struct_in(__func__, "desc", &d, sizeof d, desc, CLPIN_LOADER_DESC_SIZE_V0_2);
  if (rc != CL_SUCCESS)
    return rc;
  /* A caller built against 0.2's clpin.h has 0.2's desc and 0.2's
   * CLPIN_LOADER_UNORDERED, bit 0 (now CLPIN_PIN_MEMORY's): it keeps its
   * meaning there, through 0.3 (CHANGELOG, 0.3.0). */
  if (desc->struct_size <= CLPIN_LOADER_DESC_SIZE_V0_2 && (d.flags & 1u))
    d.flags = (d.flags & ~1u) | CLPIN_LOADER_UNORDERED;
  desc = &d;
  CLPIN__CHECK_WHY(!num_queues || !queues, CL_INVALID_COMMAND_QUEUE,
                   "no queue: num_queues is 0 or queues is NULL");
  for (cl_uint i = 0; i < num_queues; i++)
    CLPIN__CHECK_WHY(!queues[i], CL_INVALID_COMMAND_QUEUE, "a queue in queues is NULL");
  CLPIN__CHECK_WHY(!desc->fill, CLPIN_ERR_INVALID_ARGUMENT, "desc.fill is NULL");
  CLPIN__CHECK_WHY(!desc->batch_bytes, CLPIN_ERR_INVALID_SIZE, "desc.batch_bytes is 0");
  rc = CLPIN__CHECK_FLAGS(__func__, "desc.flags", desc->flags, LOADER);
  if (rc != CL_SUCCESS)
    return rc;
  CLPIN__CHECK_WHY(desc->nshards > 1 && desc->shard >= desc->nshards, CLPIN_ERR_INVALID_ARGUMENT,
                   "desc.shard is not below desc.nshards");
  CLPIN__CHECK_WHY(desc->nshards <= 1 && desc->shard != 0, CLPIN_ERR_INVALID_ARGUMENT,
                   "desc.shard is set but desc.nshards is 0 or 1");
  CLPIN__CHECK_WHY(desc->depth > 64 || desc->workers > 256 || num_queues > 1024,
                   CLPIN_ERR_INVALID_ARGUMENT,
                   "depth above 64, workers above 256 or more than 1024 queues");
  CLPIN__CHECK_WHY(!desc->slot_memory && desc->slot_memory_bytes, CLPIN_ERR_INVALID_ARGUMENT,
                   "desc.slot_memory_bytes is set but desc.slot_memory is NULL");
  CLPIN__CHECK_WHY(!desc->slot_memory && desc->slot_stride, CLPIN_ERR_INVALID_ARGUMENT,
                   "desc.slot_stride is set but desc.slot_memory is NULL");
  CLPIN__CHECK_WHY(desc->slot_stride && desc->slot_stride < desc->batch_bytes,
                   CLPIN_ERR_INVALID_ARGUMENT,
                   "desc.slot_stride is below desc.batch_bytes: the slots would overlap");
  if (desc->slot_memory) {
    size_t n = slots_of(num_queues, desc->workers);
    size_t stride = desc->slot_stride ? desc->slot_stride : desc->batch_bytes;
    CLPIN__CHECK_WHY(stride > (SIZE_MAX - desc->batch_bytes) / (n - 1) ||
                         desc->slot_memory_bytes < (n - 1) * stride + desc->batch_bytes,
                     CLPIN_ERR_INVALID_SIZE,
                     "desc.slot_memory_bytes is below what the slots span: (clpin_loader_slots() "
                     "- 1) x slot_stride (or batch_bytes) + batch_bytes");
  }

  clpin_loader *L = calloc(1, sizeof *L);
  if (!L)
    return CL_OUT_OF_HOST_MEMORY;
  L->d = *desc;
  L->d.struct_size = sizeof L->d;
  if (!L->d.depth)
    L->d.depth = 2;
  if (!L->d.workers)
    L->d.workers = default_workers();
  if (L->d.nshards <= 1) {
    L->d.nshards = 1;
    L->d.shard = 0;
  }
  L->nstreams = num_queues;
  L->nworkers = L->d.workers;
  L->nslots = slots_of(L->nstreams, L->nworkers);
  L->end_seq = UINT64_MAX;
  L->limit_seq = UINT64_MAX;
  if (L->d.batches) {
    uint64_t n = L->d.batches, k = L->d.nshards, r = L->d.shard;
    L->limit_seq = n > r ? (n - r + k - 1) / k : 0;
  }
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->work_cv, NULL);
  pthread_cond_init(&L->next_cv, NULL);
  pthread_cond_init(&L->idle_cv, NULL);
  L->s.struct_size = sizeof L->s;

  cl_int err = CL_SUCCESS;
  L->streams = calloc(L->nstreams, sizeof *L->streams);
  L->slots = calloc(L->nslots, sizeof *L->slots);
  L->threads = calloc(L->nworkers, sizeof *L->threads);
  if (!L->streams || !L->slots || !L->threads)
    err = CL_OUT_OF_HOST_MEMORY;
  for (unsigned i = 0; err == CL_SUCCESS && i < L->nstreams; i++) {
    err = make_stream(L, &L->streams[i], queues[i]);
    L->streams[i].upload_seq = i;
  }
  if (err == CL_SUCCESS) {
    L->nrecs = L->nslots;
    for (unsigned i = 0; i < L->nstreams; i++)
      L->nrecs += L->streams[i].nbufs;
    L->recs = calloc(L->nrecs, sizeof *L->recs);
    if (!L->recs)
      err = CL_OUT_OF_HOST_MEMORY;
    for (unsigned i = 0; L->recs && i < L->nrecs; i++)
      L->recs[i].L = L;
  }
  /* Slots: on the pools of the streams in turn; a slot serves every stream
   * of its context. */
  for (unsigned i = 0; err == CL_SUCCESS && i < L->nslots; i++) {
    slot *sl = &L->slots[i];
    sl->pool = L->streams[i % L->nstreams].pool;
    sl->ctx = L->streams[i % L->nstreams].ctx;
    if (L->d.slot_memory) {
      sl->host = (unsigned char *)L->d.slot_memory + (size_t)i * slot_stride(L);
      slot_push(L, sl);
      continue;
    }
    err = clpin_acquire(sl->pool, L->d.batch_bytes, &sl->block);
    if (err == CL_SUCCESS) {
      sl->host = clpin_block_host(sl->block);
      L->s.pinned_allocations++;
      slot_push(L, sl);
    } else {
      sl->block = NULL;
    }
  }
  for (unsigned i = 0; err == CL_SUCCESS && i < L->nworkers; i++) {
    if (pthread_create(&L->threads[i], NULL, worker, L) != 0) {
      clpin__fail("clpin_loader_create", CLPIN_ERR_THREAD, "a worker thread cannot be started");
      err = CLPIN_ERR_THREAD;
      break;
    }
    L->nthreads++;
  }
  if (err != CL_SUCCESS) {
    pthread_mutex_lock(&L->mu);
    L->stop = true;
    pthread_cond_broadcast(&L->work_cv);
    pthread_mutex_unlock(&L->mu);
    for (unsigned i = 0; i < L->nthreads; i++)
      pthread_join(L->threads[i], NULL);
    free_all(L);
    return err;
  }
  *loader = L;
  return CL_SUCCESS;
}

cl_int clpin_loader_destroy(clpin_loader *L) {
  if (!L)
    return CL_SUCCESS;
  pthread_mutex_lock(&L->mu);
  L->stop = true;
  L->cancelled = true;
  pthread_cond_broadcast(&L->work_cv);
  pthread_cond_broadcast(&L->next_cv);
  pthread_mutex_unlock(&L->mu);
  for (unsigned i = 0; i < L->nthreads; i++)
    pthread_join(L->threads[i], NULL);
  free_all(L);
  return CL_SUCCESS;
}

cl_int clpin_loader_cancel(clpin_loader *L) {
  CLPIN__CHECK_WHY(!L, CLPIN_ERR_INVALID_ARGUMENT, "loader is NULL");
  pthread_mutex_lock(&L->mu);
  L->cancelled = true;
  pthread_cond_broadcast(&L->work_cv);
  pthread_cond_broadcast(&L->next_cv);
  pthread_mutex_unlock(&L->mu);
  return CL_SUCCESS;
}

cl_int clpin_loader_reset(clpin_loader *L) {
  CLPIN__CHECK_WHY(!L, CLPIN_ERR_INVALID_ARGUMENT, "loader is NULL");
  pthread_mutex_lock(&L->mu);
  /* Stop claiming, and wait until no worker holds a batch of this epoch. */
  L->epoch++;
  L->resetting = true;
  pthread_cond_broadcast(&L->work_cv);
  while (L->busy)
    pthread_cond_wait(&L->idle_cv, &L->mu);
  L->resetting = false;
  /* Drop what was not delivered (uploads in flight into those buffers are
   * followed by any later upload on the same in-order queue). */
  cl_event drop[64];
  unsigned ndrop = 0;
  for (unsigned i = 0; i < L->nrecs; i++) {
    clpin_batch *b = &L->recs[i];
    if (b->state != B_READY)
      continue;
    if (b->buf)
      b->buf->busy = false;
    if (b->event) {
      if (ndrop == 64) {
        for (unsigned k = 0; k < ndrop; k++)
          clReleaseEvent(drop[k]);
        ndrop = 0;
      }
      drop[ndrop++] = b->event;
    }
    b->event = NULL;
    b->state = B_FREE;
  }
  L->next_seq = L->deliver_seq = 0;
  L->end_seq = UINT64_MAX;
  L->delivered = 0;
  for (unsigned i = 0; i < L->nstreams; i++)
    L->streams[i].upload_seq = i;
  L->cancelled = false;
  pthread_cond_broadcast(&L->work_cv);
  pthread_mutex_unlock(&L->mu);
  for (unsigned k = 0; k < ndrop; k++)
    clReleaseEvent(drop[k]);
  return CL_SUCCESS;
}

/* ---- next and release ------------------------------------------------------ */

/* The ready batch next() may deliver now, or NULL. Under the lock. */
static clpin_batch *ready_one(clpin_loader *L) {
  bool any = L->d.flags & CLPIN_LOADER_UNORDERED;
  for (unsigned i = 0; i < L->nrecs; i++) {
    clpin_batch *b = &L->recs[i];
    if (b->state == B_READY && b->epoch == L->epoch && (any || b->seq == L->deliver_seq))
      return b;
  }
  return NULL;
}

/* Whether the epoch is over for next(): every seq before its end delivered. */
static bool epoch_over(clpin_loader *L) {
  uint64_t end = L->end_seq < L->limit_seq ? L->end_seq : L->limit_seq;
  if (end == UINT64_MAX)
    return false;
  if (!(L->d.flags & CLPIN_LOADER_UNORDERED))
    return L->deliver_seq >= end;
  if (L->delivered < end)
    return false;
  return true;
}

/* The deadline timeout_ns from now on pthread_cond_timedwait's clock
 * (CLOCK_REALTIME: next_cv has the default attributes). */
static struct timespec deadline_in(uint64_t timeout_ns) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  uint64_t ns = (uint64_t)t.tv_nsec + timeout_ns % 1000000000u;
  uint64_t s = timeout_ns / 1000000000u + ns / 1000000000u;
  t.tv_nsec = (long)(ns % 1000000000u);
  t.tv_sec += (time_t)s; /* at most 585 years from now: within a 64-bit time_t */
  return t;
}

static cl_int next_until(clpin_loader *L, clpin_batch **batch, const struct timespec *until);

cl_int clpin_loader_next(clpin_loader *L, clpin_batch **batch) {
  CLPIN__CHECK_WHY(!batch, CLPIN_ERR_INVALID_ARGUMENT, "batch is NULL");
  *batch = NULL;
  CLPIN__CHECK_WHY(!L, CLPIN_ERR_INVALID_ARGUMENT, "loader is NULL");
  return next_until(L, batch, NULL);
}

cl_int clpin_loader_next_timed(clpin_loader *L, clpin_batch **batch, uint64_t timeout_ns) {
  CLPIN__CHECK_WHY(!batch, CLPIN_ERR_INVALID_ARGUMENT, "batch is NULL");
  *batch = NULL;
  CLPIN__CHECK_WHY(!L, CLPIN_ERR_INVALID_ARGUMENT, "loader is NULL");
  struct timespec until = deadline_in(timeout_ns);
  return next_until(L, batch, &until);
}

/* clpin_loader_next(); with `until`, CL_SUCCESS and no batch once it passes. */
static cl_int next_until(clpin_loader *L, clpin_batch **batch, const struct timespec *until) {
  uint64_t t0 = now_ns();
  pthread_mutex_lock(&L->mu);
  clpin_batch *b = NULL;
  cl_int rc = CL_SUCCESS;
  for (;;) {
    if (L->cancelled) {
      rc = CLPIN_ERR_CANCELLED;
      break;
    }
    if ((b = ready_one(L)))
      break;
    if (epoch_over(L)) {
      rc = CLPIN_END;
      break;
    }
    /* Ordered: the caller holding every buffer of the next batch's stream
     * would wait forever. */
    if (!(L->d.flags & CLPIN_LOADER_UNORDERED)) {
      stream *st = &L->streams[L->deliver_seq % L->nstreams];
      if (st->held == st->nbufs) {
        pthread_mutex_unlock(&L->mu);
        clpin__fail("clpin_loader_next", CLPIN_ERR_INVALID_ARGUMENT,
                    "the caller holds every device buffer of the next batch's queue: release a "
                    "batch first (clpin_batch_release)");
        return CLPIN_ERR_INVALID_ARGUMENT;
      }
    }
    if (!until)
      pthread_cond_wait(&L->next_cv, &L->mu);
    else if (pthread_cond_timedwait(&L->next_cv, &L->mu, until) == ETIMEDOUT)
      break; /* b is NULL, rc CL_SUCCESS: nothing taken */
  }
  if (b) {
    b->state = B_HELD;
    if (b->buf)
      b->st->held++;
    L->deliver_seq = b->seq + 1 > L->deliver_seq ? b->seq + 1 : L->deliver_seq;
    L->delivered++;
    if (b->status == CL_SUCCESS) {
      L->s.batches++;
      L->s.bytes += b->used;
    } else {
      L->s.failed++;
    }
    rc = b->status;
  }
  L->s.wait_ns += now_ns() - t0;
  pthread_mutex_unlock(&L->mu);
  if (b && rc == CL_SUCCESS && b->event) {
    /* An upload that already failed is this batch's error. */
    cl_int st = clpin__event_status(b->event);
    if (st < 0 && st != CLPIN__STATUS_UNKNOWN)
      rc = st;
  }
  *batch = b;
  /* Said here, on the caller's thread: a fill's own refusal was recorded on
   * the worker's. */
  if (rc == CLPIN_ERR_CANCELLED)
    clpin__fail("clpin_loader_next", rc, "the loader was cancelled (clpin_loader_cancel)");
  else if (rc != CL_SUCCESS && rc != CLPIN_END && b)
    clpin__failf("clpin_loader_next", rc, "batch %llu failed: its fill or its upload returned this",
                 (unsigned long long)b->index);
  return rc;
}

cl_mem clpin_batch_buffer(const clpin_batch *b) { return b && b->buf ? b->buf->mem : NULL; }
cl_event clpin_batch_event(const clpin_batch *b) { return b ? b->event : NULL; }
cl_command_queue clpin_batch_queue(const clpin_batch *b) { return b ? b->st->queue : NULL; }
size_t clpin_batch_bytes(const clpin_batch *b) { return b ? b->used : 0; }
uint64_t clpin_batch_index(const clpin_batch *b) { return b ? b->index : UINT64_MAX; }

cl_int clpin_batch_release(clpin_batch *b, cl_uint num_done, const cl_event *done) {
  if (!b)
    return CL_SUCCESS;
  CLPIN__CHECK_FMT(num_done && !done, CLPIN_ERR_INVALID_ARGUMENT, "num_done is %u but done is NULL",
                   num_done);
  for (cl_uint i = 0; i < num_done; i++)
    CLPIN__CHECK_WHY(!done[i], CLPIN_ERR_INVALID_ARGUMENT, "an event in done is NULL");
  clpin_loader *L = b->L;
  CLPIN__CHECK_WHY(!L, CLPIN_ERR_INVALID_ARGUMENT, "not a batch of a loader");
  pthread_mutex_lock(&L->mu);
  bool ok = b >= L->recs && b < L->recs + L->nrecs && b->state == B_HELD;
  if (ok)
    b->state = B_END; /* ours now; no other release can take it */
  pthread_mutex_unlock(&L->mu);
  CLPIN__CHECK_WHY(!ok, CLPIN_ERR_INVALID_ARGUMENT,
                   "the batch is not held by the caller (released twice?)");
  devbuf *buf = b->buf;
  cl_int err = CL_SUCCESS;
  if (buf && num_done) {
    /* Only this thread touches buf->done now: the buffer is busy until the
     * state change below. Grow once; steady state reuses the array. */
    if (buf->capdone < num_done) {
      cl_event *nd = realloc(buf->done, num_done * sizeof *nd);
      if (nd) {
        buf->done = nd;
        buf->capdone = num_done;
      }
    }
    if (buf->capdone < num_done) {
      clpin__events_settle(num_done, done);
    } else {
      for (cl_uint i = 0; i < num_done; i++) {
        cl_context c = NULL;
        cl_int e = clRetainEvent(done[i]);
        if (e != CL_SUCCESS) {
          err = e;
          break;
        }
        buf->done[buf->ndone++] = done[i];
        /* Another context's event cannot be a wait list here; and with
         * CLPIN_LOADER_HOST_DONE the caller asked for host waits (clpin.h). */
        if ((L->d.flags & CLPIN_LOADER_HOST_DONE) ||
            clGetEventInfo(done[i], CL_EVENT_CONTEXT, sizeof c, &c, NULL) != CL_SUCCESS ||
            c != b->st->ctx)
          buf->host_wait = true;
      }
      if (err != CL_SUCCESS) {
        /* A bad event: wait for the rest on the host, keep none. */
        clpin__events_settle(buf->ndone, buf->done);
        for (cl_uint i = 0; i < buf->ndone; i++)
          clReleaseEvent(buf->done[i]);
        buf->ndone = 0;
        buf->host_wait = false;
      }
    }
  }
  /* The done events may be commands of the caller's queue not yet flushed
   * (a marker): the upload waiting for them must not wait for a flush. */
  if (num_done)
    clFlush(b->st->queue);
  cl_event ev = b->event;
  pthread_mutex_lock(&L->mu);
  b->event = NULL;
  if (buf) {
    buf->busy = false;
    b->st->held--;
  }
  b->buf = NULL;
  b->state = B_FREE;
  pthread_cond_broadcast(&L->work_cv);
  pthread_cond_broadcast(&L->next_cv);
  pthread_mutex_unlock(&L->mu);
  if (ev)
    clReleaseEvent(ev);
  return err;
}

cl_int clpin_loader_stats(const clpin_loader *L, struct clpin_loader_stats *stats) {
  CLPIN__CHECK_WHY(!L || !stats, CLPIN_ERR_INVALID_ARGUMENT, "loader or stats is NULL");
  clpin_loader *M = (clpin_loader *)L;
  struct clpin_loader_stats s;
  pthread_mutex_lock(&M->mu);
  s = M->s;
  pthread_mutex_unlock(&M->mu);
  s.slots = M->nslots;
  s.buffers = M->nrecs - M->nslots;
  s.workers = M->nthreads;
  s.slot_bytes = (uint64_t)M->nslots * slot_stride(M);
  s.struct_size = sizeof s;
  return clpin__struct_out(__func__, "stats", stats, &s, sizeof s, CLPIN_LOADER_STATS_SIZE_V0_2);
}
