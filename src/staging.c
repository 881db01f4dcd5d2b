/* Staging transfers: clpin_write and clpin_read.
 *
 * Path choice (docs/STAGING.md has the long version):
 *   1. host range inside a live pool block      -> DMA straight from it
 *   2. no CLPIN_PIN_MEMORY                      -> plain transfer
 *   3. host-unified device and PINNED_H2D=0     -> plain transfer
 *   4. otherwise staged through pool blocks: one block up to CLPIN_CHUNK,
 *      above that a pipeline of chunks through NSLOTS blocks; if the pool
 *      cannot allocate, a plain transfer (counted as a fallback).
 *
 * The pipeline is driven by the calling thread: the copies run on the
 * workers, several chunks at once, while this thread enqueues a chunk's DMA
 * as soon as its copy is done and refills a slot as soon as its DMA is. A
 * non-blocking call that nothing holds back does the same; one whose wait
 * list is still pending defers the whole pipeline to a worker, started by
 * one callback (see async_pipeline). */
#include "internal.h"
#include "workers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Staging blocks per pipelined transfer: one being filled or drained by the
 * host, the rest queued for DMA. */
#define NSLOTS 4
/* A copy is split among threads only in shares of at least this much:
 * below it, waking a thread costs more than it saves. */
#define MIN_PART ((size_t)256 << 10)
#define PART_ALIGN ((size_t)4096)

typedef enum { H2D, D2H } direction;

typedef struct {
  cl_command_queue q;
  cl_mem mem;
  size_t offset;
  unsigned char *host; /* source of a write, destination of a read */
  size_t nbytes;
  unsigned flags;
  cl_uint num_wait;
  const cl_event *wait_list;
  cl_event *event;
  direction dir;
  clpin_pool *pool;
  bool in_order;
  size_t chunk, nchunks, nslots;
} xfer;

static const char *dir_name(direction d) { return d == H2D ? "write" : "read"; }

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* ---- parallel memcpy ------------------------------------------------------ */

typedef struct {
  unsigned char *dst;
  const unsigned char *src;
  size_t len, part;
} copy_job;

static void copy_part(copy_job *c, size_t p) {
  size_t o = p * c->part;
  memcpy(c->dst + o, c->src + o, min_size(c->part, c->len - o));
}

static size_t plan_copy(copy_job *c, void *dst, const void *src, size_t len) {
  c->dst = dst;
  c->src = src;
  c->len = len;
  size_t parts = min_size(len / MIN_PART, clpin__opt(CLPIN_OPT_THREADS));
  if (parts <= 1) {
    c->part = len ? len : 1;
    return 1;
  }
  size_t part = (len + parts - 1) / parts;
  c->part = (part + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN;
  return (len + c->part - 1) / c->part;
}

static void copy_task_run(void *arg, size_t part) { copy_part(arg, part); }

/* memcpy, split over the workers and the calling thread when large. */
static void copy_parallel(void *dst, const void *src, size_t len) {
  copy_job c;
  size_t parts = plan_copy(&c, dst, src, len);
  if (parts == 1) {
    memcpy(dst, src, len);
    return;
  }
  clpin__task t = {.run = copy_task_run, .arg = &c, .nparts = parts};
  clpin__workers_run(&t);
}

/* ---- small helpers -------------------------------------------------------- */

static cl_int enqueue_dma(const xfer *x, size_t pos, size_t len, void *host, cl_uint nw,
                          const cl_event *wl, cl_event *ev) {
  if (x->dir == H2D)
    return clEnqueueWriteBuffer(x->q, x->mem, CL_FALSE, x->offset + pos, len, host, nw, wl, ev);
  return clEnqueueReadBuffer(x->q, x->mem, CL_FALSE, x->offset + pos, len, host, nw, wl, ev);
}

/* Wait until ev has ended (completed or failed). When the wait itself
 * fails, poll the status instead; false when even that cannot tell, and the
 * command may still be using its memory. */
static bool settle(cl_event ev) {
  if (clWaitForEvents(1, &ev) == CL_SUCCESS)
    return true;
  for (;;) {
    cl_int status;
    if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) !=
        CL_SUCCESS)
      return false;
    if (status <= CL_COMPLETE)
      return true;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

/* Give a block back once ev has ended. If the pool refuses the event, wait
 * here; if the event's state cannot be known, keep the block out of the
 * pool for good (freed with the pool) rather than risk handing it out under
 * a running DMA. */
static void release_after(clpin_block *b, cl_event ev) {
  if (clpin_release(b, ev) == CL_SUCCESS)
    return;
  if (settle(ev))
    clpin_release(b, NULL);
  else
    clpin__log("staging: a DMA's state is unknown; its block stays out of the pool");
}

static void release_blocks(clpin_block **blk, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (blk[i])
      clpin_release(blk[i], NULL);
}

/* Whether an event of the caller's wait list has already failed. */
static bool wait_list_failed(const xfer *x) {
  for (cl_uint i = 0; i < x->num_wait; i++) {
    cl_int status = CL_COMPLETE;
    if (clGetEventInfo(x->wait_list[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                       NULL) == CL_SUCCESS &&
        status < 0)
      return true;
  }
  return false;
}

/* Whether an event of the caller's wait list has not completed yet. */
static bool wait_list_pending(const xfer *x) {
  for (cl_uint i = 0; i < x->num_wait; i++) {
    cl_int status = CL_COMPLETE;
    if (clGetEventInfo(x->wait_list[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                       NULL) == CL_SUCCESS &&
        status > CL_COMPLETE)
      return true;
  }
  return false;
}

/* Start a non-blocking transfer's commands now, unless the caller's wait
 * list holds a user event not yet set: some implementations (Oclgrind) run
 * the queue to completion inside clFlush and would wait there for an event
 * the caller can only set after we return. Waiting on the returned event
 * flushes the queue anyway. */
static void flush_unless_gated(const xfer *x) {
  for (cl_uint i = 0; i < x->num_wait; i++) {
    cl_command_type type = 0;
    cl_int status = CL_COMPLETE;
    if (clGetEventInfo(x->wait_list[i], CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL) !=
            CL_SUCCESS ||
        type != CL_COMMAND_USER)
      continue;
    clGetEventInfo(x->wait_list[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                   NULL);
    if (status > CL_COMPLETE)
      return;
  }
  clFlush(x->q);
}

/* ---- plain transfers (pinned-direct, unpinned, fallback) ------------------ */

static cl_int plain(const xfer *x, clpin__counter counter, const char *why) {
  cl_bool blocking = (x->flags & CLPIN_NON_BLOCKING) ? CL_FALSE : CL_TRUE;
  cl_int err =
      x->dir == H2D
          ? clEnqueueWriteBuffer(x->q, x->mem, blocking, x->offset, x->nbytes, x->host,
                                 x->num_wait, x->wait_list, x->event)
          : clEnqueueReadBuffer(x->q, x->mem, blocking, x->offset, x->nbytes, x->host,
                                x->num_wait, x->wait_list, x->event);
  if (err != CL_SUCCESS)
    return err;
  clpin__count(x->pool, counter, x->nbytes);
  clpin__log("%s %zu bytes: %s", dir_name(x->dir), x->nbytes, why);
  return CL_SUCCESS;
}

/* ---- pipelines driven by the calling thread -------------------------------- */

/* The host copy into or out of one slot, running on the workers while the
 * calling thread enqueues and waits for DMAs: copies of several chunks are
 * in flight at once, so no worker idles at a per-chunk barrier. */
typedef struct {
  clpin__task task;
  copy_job copy;
  bool busy;
} slot_copy;

static void slot_copy_start(slot_copy *c, void *dst, const void *src, size_t len) {
  c->task.run = copy_task_run;
  c->task.done = NULL;
  c->task.arg = &c->copy;
  c->task.nparts = plan_copy(&c->copy, dst, src, len);
  c->busy = true;
  clpin__workers_submit(&c->task);
}

static void slot_copy_wait(slot_copy *c) {
  if (c->busy)
    clpin__workers_wait(&c->task);
  c->busy = false;
}

/* Wait for a slot's DMA; its event is released only once it ended, so
 * after a failed wait finish_sync() still knows what may be running. */
static cl_int wait_and_release(cl_event *ev) {
  cl_int err = clWaitForEvents(1, ev);
  if (err == CL_SUCCESS) {
    clReleaseEvent(*ev);
    *ev = NULL;
  }
  return err;
}

/* End of a caller-driven pipeline, also after an error: waits for every
 * copy and DMA and gives the blocks back, idle, or pending a DMA whose end
 * could not be seen (a failed wait). The last DMA's event (complete) goes
 * to the caller if asked for. */
static cl_int finish_sync(const xfer *x, clpin_block **blk, cl_event *ev, slot_copy *cp,
                          cl_int err) {
  size_t last = (x->nchunks - 1) % x->nslots;
  for (size_t s = 0; s < x->nslots; s++)
    slot_copy_wait(&cp[s]);
  for (size_t s = 0; s < x->nslots; s++) {
    cl_int e = ev[s] ? clWaitForEvents(1, &ev[s]) : CL_SUCCESS;
    if (e != CL_SUCCESS && err == CL_SUCCESS)
      err = e;
    /* A failed wait: the DMA failed, or the wait did; settle() tells. */
    if (e == CL_SUCCESS || settle(ev[s]))
      clpin_release(blk[s], NULL);
    else
      release_after(blk[s], ev[s]);
    blk[s] = NULL;
  }
  for (size_t s = 0; s < x->nslots; s++) {
    if (!ev[s])
      continue;
    if (s == last && x->event && err == CL_SUCCESS)
      *x->event = ev[s];
    else
      clReleaseEvent(ev[s]);
    ev[s] = NULL;
  }
  return err;
}

static size_t chunk_len(const xfer *x, size_t i) {
  return min_size(x->chunk, x->nbytes - i * x->chunk);
}

/* Copies of chunks 0..S-1 start at once; then per chunk i: wait for its
 * copy, enqueue its DMA, and refill the slot of chunk i-1 (chunk i-1+S) as
 * soon as that slot's DMA is done, while DMA i runs. */
static cl_int write_sync(const xfer *x, clpin_block **blk) {
  cl_event ev[NSLOTS] = {0};
  slot_copy cp[NSLOTS];
  memset(cp, 0, sizeof cp);
  size_t S = x->nslots, n = x->nchunks;
  cl_int err = CL_SUCCESS;
  for (size_t i = 0; i < S; i++)
    slot_copy_start(&cp[i], clpin_block_host(blk[i]), x->host + i * x->chunk, chunk_len(x, i));
  for (size_t i = 0; i < n && err == CL_SUCCESS; i++) {
    size_t s = i % S;
    slot_copy_wait(&cp[s]);
    err = enqueue_dma(x, i * x->chunk, chunk_len(x, i), clpin_block_host(blk[s]), x->num_wait,
                      x->wait_list, &ev[s]);
    if (err != CL_SUCCESS)
      break;
    clFlush(x->q); /* start this DMA now */
    size_t p = (i + S - 1) % S, j = i - 1 + S;
    if (i == 0 || j >= n)
      continue;
    err = wait_and_release(&ev[p]);
    if (err == CL_SUCCESS)
      slot_copy_start(&cp[p], clpin_block_host(blk[p]), x->host + j * x->chunk, chunk_len(x, j));
  }
  return finish_sync(x, blk, ev, cp, err);
}

/* DMAs of chunks 0..S-1 start at once; then per chunk i: wait for its DMA,
 * start its copy-out, and once the copy-out of chunk i-1 is done refill
 * that slot with the DMA of chunk i-1+S. */
static cl_int read_sync(const xfer *x, clpin_block **blk) {
  cl_event ev[NSLOTS] = {0};
  slot_copy cp[NSLOTS];
  memset(cp, 0, sizeof cp);
  size_t S = x->nslots, n = x->nchunks;
  cl_int err = CL_SUCCESS;
  for (size_t i = 0; i < S && err == CL_SUCCESS; i++)
    err = enqueue_dma(x, i * x->chunk, chunk_len(x, i), clpin_block_host(blk[i]), x->num_wait,
                      x->wait_list, &ev[i]);
  clFlush(x->q);
  for (size_t i = 0; i < n && err == CL_SUCCESS; i++) {
    size_t s = i % S;
    /* The last chunk's event stays for the caller. */
    err = i + 1 == n ? clWaitForEvents(1, &ev[s]) : wait_and_release(&ev[s]);
    if (err != CL_SUCCESS)
      break;
    slot_copy_start(&cp[s], x->host + i * x->chunk, clpin_block_host(blk[s]), chunk_len(x, i));
    size_t p = (i + S - 1) % S, j = i - 1 + S;
    if (i == 0 || j >= n)
      continue;
    slot_copy_wait(&cp[p]);
    err = enqueue_dma(x, j * x->chunk, chunk_len(x, j), clpin_block_host(blk[p]), x->num_wait,
                      x->wait_list, &ev[p]);
    clFlush(x->q);
  }
  return finish_sync(x, blk, ev, cp, err);
}

/* ---- asynchronous transfers, behind events still pending ------------------- */

/* The caller's wait list holds events that have not completed, and the call
 * must not wait for them. On NVIDIA every user event a command waits for,
 * and every completion callback, costs about a millisecond, so gating each
 * chunk's DMA on one (an earlier design) ran 64 MiB at 2-6 GB/s. Instead the
 * whole transfer is deferred, with one callback and one user event:
 *
 *   q:        ... W = marker(wait list)      M = marker(fin) -> caller's event
 *   workers:  when W ends: the caller-driven pipeline on the pool's own queue,
 *             then fin := complete
 *
 * W, behind the caller's events (and, on an in-order q, behind everything
 * enqueued before), starts the transfer; M makes the caller's event, clFinish
 * (q) and later commands on an in-order q wait for it. The DMAs go to the
 * pool's internal queue: on q they would sit behind M, which waits for them. */
typedef struct job job;
struct job {
  xfer x; /* the transfer, retargeted to the pool's queue */
  clpin_block *blk[NSLOTS];
  /* start = W; marker = M, held until fin is set: POCL frees a failed
   * marker the caller released although fin still lists it as dependent,
   * and setting fin then touches freed memory. */
  cl_event start, fin, marker;
  atomic_int status;   /* W's failure, if any */
  atomic_bool started; /* claimed by start_driver or the reaper */
  job *next;           /* in `deferred` until started */
  clpin__task driver;
};

/* Jobs whose start marker has not called back yet. POCL (3.1) never calls
 * the callbacks of an event that ends with an error, so a job behind a
 * failed event would hold its blocks forever: reap_failed() starts those. */
static pthread_mutex_t deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static job *deferred;
static atomic_size_t ndeferred;

/* Call with deferred_lock held. */
static void unlink_deferred(job *j) {
  for (job **pp = &deferred; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      atomic_fetch_sub(&ndeferred, 1);
      return;
    }
}

static void job_free(job *j) {
  if (j->marker)
    clReleaseEvent(j->marker);
  if (j->start)
    clReleaseEvent(j->start);
  if (j->fin)
    clReleaseEvent(j->fin);
  free(j);
}

static void driver_run(void *arg, size_t part) {
  (void)part;
  job *j = arg;
  cl_int err = atomic_load(&j->status);
  if (err == CL_SUCCESS)
    err = j->x.dir == H2D ? write_sync(&j->x, j->blk) : read_sync(&j->x, j->blk);
  else
    release_blocks(j->blk, j->x.nslots); /* nothing was enqueued */
  /* The blocks are back (or held by the pool behind a DMA) before fin:
   * a caller that sees its event complete also sees the pool idle. */
  clSetUserEventStatus(j->fin, err == CL_SUCCESS ? CL_COMPLETE
                               : err < 0         ? err
                                                 : CL_OUT_OF_RESOURCES);
}

static void driver_done(void *arg) { job_free(arg); }

/* W ended: hand the pipeline to a worker. Runs on a driver thread, or inline
 * in clSetEventCallback when W already ended. */
static void CL_CALLBACK start_driver(cl_event ev, cl_int status, void *data) {
  (void)ev;
  job *j = data;
  pthread_mutex_lock(&deferred_lock);
  bool mine = !atomic_exchange(&j->started, true);
  if (mine)
    unlink_deferred(j);
  pthread_mutex_unlock(&deferred_lock);
  if (!mine)
    return; /* the reaper started it */
  if (status < 0)
    atomic_store(&j->status, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  clpin__workers_submit(&j->driver);
}

/* Start every deferred job whose start marker failed without calling back.
 * Cheap when none waits. */
static void reap_failed(void) {
  if (!atomic_load_explicit(&ndeferred, memory_order_relaxed))
    return;
  job *failed = NULL;
  pthread_mutex_lock(&deferred_lock);
  /* clGetEventInfo runs no callback, so it is safe under the lock; a job in
   * the list is alive until it is claimed. */
  for (job **pp = &deferred; *pp;) {
    job *j = *pp;
    cl_int st = CL_COMPLETE;
    if (clGetEventInfo(j->start, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) ==
            CL_SUCCESS &&
        st < 0 && !atomic_exchange(&j->started, true)) {
      *pp = j->next;
      atomic_fetch_sub(&ndeferred, 1);
      j->next = failed;
      failed = j;
    } else {
      pp = &j->next;
    }
  }
  pthread_mutex_unlock(&deferred_lock);
  while (failed) {
    job *j = failed;
    failed = j->next;
    clpin__log("staging: a deferred transfer's wait list failed without a callback; ending it");
    atomic_store(&j->status, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
    clpin__workers_submit(&j->driver);
  }
}

static cl_int async_pipeline(const xfer *x, clpin_block **blk) {
  cl_command_queue own = clpin__pool_queue(x->pool);
  cl_device_id qdev = NULL, odev = NULL;
  cl_int err = clGetCommandQueueInfo(x->q, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(own, CL_QUEUE_DEVICE, sizeof odev, &odev, NULL);
  if (err != CL_SUCCESS)
    return err;
  if (qdev != odev)
    return CLPIN_ERR_NO_DEVICE; /* staged() falls back to a plain transfer */
  job *j = calloc(1, sizeof *j);
  if (!j)
    return CL_OUT_OF_HOST_MEMORY;
  j->x = *x;
  j->x.q = own;
  j->x.num_wait = 0;
  j->x.wait_list = NULL;
  j->x.event = NULL;
  memcpy(j->blk, blk, x->nslots * sizeof *blk);
  atomic_store(&j->status, CL_SUCCESS);
  j->driver = (clpin__task){.run = driver_run, .done = driver_done, .arg = j, .nparts = 1};
  cl_event result = NULL;
  j->fin = clCreateUserEvent(clpin__pool_context(x->pool), &err);
  if (err != CL_SUCCESS)
    goto fail;
  err = clEnqueueMarkerWithWaitList(x->q, x->num_wait, x->wait_list, &j->start);
  if (err != CL_SUCCESS)
    goto fail;
  err = clEnqueueMarkerWithWaitList(x->q, 1, &j->fin, &result);
  if (err != CL_SUCCESS)
    goto fail;
  j->marker = result;
  if (x->event) {
    clRetainEvent(result);
    *x->event = result;
  }
  atomic_store(&j->started, false);
  pthread_mutex_lock(&deferred_lock);
  j->next = deferred;
  deferred = j;
  atomic_fetch_add(&ndeferred, 1);
  pthread_mutex_unlock(&deferred_lock);
  /* The last touch of j: from here on it may run and free itself. */
  cl_event start = j->start;
  if ((err = clSetEventCallback(start, CL_COMPLETE, start_driver, j)) != CL_SUCCESS)
    start_driver(start, err, j);
  /* After the callback: a flush may run the commands (and so the callback)
   * right here. */
  flush_unless_gated(x);
  return CL_SUCCESS;
fail:
  /* Fail fin so a marker already waiting for it ends; the start marker
   * needs nothing. Nothing touched the blocks: the caller gives them back. */
  if (j->fin)
    clSetUserEventStatus(j->fin, err);
  job_free(j);
  return err;
}

/* A non-blocking write of one chunk: copy now, then DMA from the block. */
static cl_int write_small_async(const xfer *x, clpin_block *blk) {
  cl_event ev = NULL;
  void *slot = clpin_block_host(blk);
  copy_parallel(slot, x->host, x->nbytes);
  cl_int err = enqueue_dma(x, 0, x->nbytes, slot, x->num_wait, x->wait_list, &ev);
  if (err != CL_SUCCESS)
    return err;
  flush_unless_gated(x);
  release_after(blk, ev);
  if (x->event)
    *x->event = ev;
  else
    clReleaseEvent(ev);
  return CL_SUCCESS;
}

/* ---- staged path ---------------------------------------------------------- */

static cl_int staged(xfer *x) {
  clpin_block *blk[NSLOTS] = {0};
  size_t chunk = clpin__opt(CLPIN_OPT_CHUNK), max = clpin__pool_max_alloc(x->pool);
  if (max && chunk > max)
    chunk = max;
  x->chunk = chunk;
  x->nchunks = (x->nbytes - 1) / chunk + 1;
  x->nslots = min_size(x->nchunks, NSLOTS);
  size_t block_size = x->nchunks == 1 ? x->nbytes : chunk;
  for (size_t s = 0; s < x->nslots; s++) {
    cl_int err = clpin_acquire(x->pool, block_size, &blk[s]);
    if (err == CL_SUCCESS)
      continue;
    release_blocks(blk, s);
    if (!clpin__is_oom(err))
      return err;
    clpin__count(x->pool, CLPIN__FALLBACKS, 1);
    clpin__log("%s %zu bytes: no pinned memory (%s), falling back", dir_name(x->dir),
               x->nbytes, clpin_strerror(err));
    return plain(x, CLPIN__BYTES_UNPINNED, "fallback: plain transfer");
  }
  bool nb = x->flags & CLPIN_NON_BLOCKING;
  bool pipelined = x->nchunks > 1;
  /* Callbacks and user events cost latency (NVIDIA: ~1 ms per chunk), so a
   * non-blocking transfer that nothing holds back runs the caller-driven
   * pipeline too and returns once its DMAs are done; only one that must
   * wait for events still pending goes asynchronous. */
  bool async = nb && (x->dir == H2D && !pipelined ? true : wait_list_pending(x));
  cl_int err;
  if (!async)
    err = x->dir == H2D ? write_sync(x, blk) : read_sync(x, blk);
  else if (x->dir == H2D && !pipelined)
    err = write_small_async(x, blk[0]);
  else
    err = async_pipeline(x, blk);
  if (err == CLPIN_ERR_NO_DEVICE) { /* the pool's queue is on another device */
    release_blocks(blk, x->nslots);
    return plain(x, CLPIN__BYTES_UNPINNED, "plain (queue not on the pool's device)");
  }
  if (err != CL_SUCCESS && async)
    release_blocks(blk, x->nslots); /* nothing of ours is running any more */
  if (err != CL_SUCCESS)
    return err;
  clpin__count(x->pool, pipelined ? CLPIN__BYTES_PIPELINED : CLPIN__BYTES_STAGED, x->nbytes);
  clpin__log("%s %zu bytes: %s%s (%zu chunk%s of %zu, %zu slot%s)", dir_name(x->dir), x->nbytes,
             pipelined ? "pipelined" : "staged", async ? ", asynchronous" : "", x->nchunks,
             x->nchunks == 1 ? "" : "s", x->chunk, x->nslots, x->nslots == 1 ? "" : "s");
  return CL_SUCCESS;
}

/* ---- entry ---------------------------------------------------------------- */

static cl_int completed_event(const xfer *x) {
  if (!x->event)
    return CL_SUCCESS;
  cl_int err;
  cl_event ev = clCreateUserEvent(clpin__pool_context(x->pool), &err);
  if (err != CL_SUCCESS)
    return err;
  err = clSetUserEventStatus(ev, CL_COMPLETE);
  if (err != CL_SUCCESS) {
    clReleaseEvent(ev);
    return err;
  }
  *x->event = ev;
  return CL_SUCCESS;
}

static cl_int transfer(xfer *x) {
  CLPIN__CHECK(!x->q || !x->mem, CLPIN_ERR_INVALID_ARGUMENT);
  CLPIN__CHECK(!x->host && x->nbytes > 0, CLPIN_ERR_INVALID_ARGUMENT);
  CLPIN__CHECK(x->flags & ~(CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING), CLPIN_ERR_INVALID_ARGUMENT);
  CLPIN__CHECK((x->num_wait == 0) != (x->wait_list == NULL), CLPIN_ERR_INVALID_ARGUMENT);
  CLPIN__CHECK(x->offset > SIZE_MAX - x->nbytes, CLPIN_ERR_OUT_OF_RANGE);
  size_t size = 0;
  cl_int err = clGetMemObjectInfo(x->mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (err != CL_SUCCESS)
    return err;
  CLPIN__CHECK(x->offset + x->nbytes > size, CLPIN_ERR_OUT_OF_RANGE);
  err = clpin_pool_get(x->q, &x->pool);
  if (err != CL_SUCCESS)
    return err;
  reap_failed();
  if (x->nbytes == 0)
    return completed_event(x);
  /* As clEnqueueWriteBuffer may for blocking calls, and for every call here:
   * POCL never ends a command behind a failed event. */
  CLPIN__CHECK(wait_list_failed(x), CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);

  size_t block_off;
  if (clpin_pool_find(x->pool, x->host, x->nbytes, &block_off))
    return plain(x, CLPIN__BYTES_PINNED_DIRECT, "already pinned: straight to DMA");
  if (!(x->flags & CLPIN_PIN_MEMORY))
    return plain(x, CLPIN__BYTES_UNPINNED, "plain (no CLPIN_PIN_MEMORY)");

  cl_device_id dev;
  cl_command_queue_properties props;
  err = clGetCommandQueueInfo(x->q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(x->q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  if (err != CL_SUCCESS)
    return err;
  if (clpin__pool_device_unified(x->pool, dev) && clpin__opt(CLPIN_OPT_PINNED_H2D) == 0)
    return plain(x, CLPIN__BYTES_UNPINNED,
                 "direct (host-unified device, CLPIN_PINNED_H2D=0)");
  x->in_order = !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
  return staged(x);
}

cl_int clpin_write(cl_command_queue q, cl_mem dst, size_t offset, const void *src, size_t nbytes,
                   unsigned flags, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  xfer x = {.q = q, .mem = dst, .offset = offset, .host = (unsigned char *)(uintptr_t)src,
            .nbytes = nbytes, .flags = flags, .num_wait = num_wait, .wait_list = wait_list,
            .event = event, .dir = H2D};
  return transfer(&x);
}

cl_int clpin_read(cl_command_queue q, cl_mem src, size_t offset, void *dst, size_t nbytes,
                  unsigned flags, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  xfer x = {.q = q, .mem = src, .offset = offset, .host = dst, .nbytes = nbytes, .flags = flags,
            .num_wait = num_wait, .wait_list = wait_list, .event = event, .dir = D2H};
  return transfer(&x);
}
