/* SPDX-License-Identifier: Apache-2.0 */
/* Staging transfers: the pipeline behind clpin_write and clpin_read.
 *
 * Path choice (docs/STAGING.md has the long version):
 *   1. host range inside a live pool block      -> DMA straight from it
 *   2. no CLPIN_PIN_MEMORY                      -> plain transfer
 *   3. host-unified device, CLPIN_PINNED_H2D not 1 -> plain transfer
 *   4. smaller than CLPIN_STAGE_MIN (a write: or
 *      than CLPIN_STAGE_MIN_H2D)                -> plain transfer (staging
 *      a small transfer costs more than it saves: "never slower")
 *   5. otherwise staged through pool blocks: one block up to CLPIN_CHUNK,
 *      above that a pipeline of chunks through 4 (write) or up to 8 (read)
 *      blocks; if the pool cannot allocate, a plain transfer (counted as a
 *      fallback).
 *
 * A blocking staged transfer is driven by the calling thread: the copies run
 * on the copy threads, several chunks at once, while this thread enqueues a
 * chunk's DMA as soon as its copy is done and refills a slot as soon as its
 * DMA is. A non-blocking one goes to the engine (engine.c), which runs the
 * same pipeline on a copy thread and returns at once. The path choice and the
 * entry points are transfer.c's; this file is the pipeline they call. */
#include "staging.h"
#include "events.h"
#include "copythreads.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Staging blocks per pipelined transfer: one being filled or drained by the
 * host, the rest queued for DMA. A read keeps more DMAs queued: its refill
 * of a slot waits for that slot's copy-out, whose time swings with the
 * host's memory, and with three DMAs queued the DMA engine ran dry while
 * it waited (profiled on the H100: 64 MiB image reads 33 GB/s with 4
 * slots, 45 with 8; 256 MiB 41 and 51). Writes gained nothing from more
 * (docs/benchmarks/HISTORY.md,
 * "eight read slots"). Slots past WRITE_SLOTS are taken only
 * where the pool gives them: a read short of memory runs with fewer. */
#define WRITE_SLOTS 4
#define READ_SLOTS 8
#define MAX_SLOTS READ_SLOTS
/* A copy is split among threads only in shares of at least this much:
 * below it, waking a thread costs more than it saves. */
#define MIN_PART ((size_t)256 << 10)
#define PART_ALIGN ((size_t)4096)
/* A transfer of one chunk or less is still cut into SPLIT_PIECES equal
 * pieces from this size on, so its copy and its DMA overlap instead of a
 * whole DMA then a whole copy: reads of 2-8 MiB on the H100 went from
 * 2.3-2.8x to 2.5-4.4x plain (docs/benchmarks/HISTORY.md,
 * "engine, registration, layer"). */
#define SPLIT_PIECES 4
#define SPLIT_MIN (SPLIT_PIECES * MIN_PART)
/* The pipeline's first chunks are smaller (chunk/8, /4, /2) so the first
 * DMA starts early instead of after a whole chunk's copy, and in a long
 * pipeline so are its last ones (chunk/2, /4, /8), so the work left after
 * the last copy (a write's last DMA) or the last DMA (a read's last
 * copy-out) is a small chunk's, not a whole one's. */
#define RAMP 3

static const char *dir_name(clpin__dir d) { return d == CLPIN__H2D ? "write" : "read"; }

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* ---- parallel memcpy ------------------------------------------------------ */

typedef struct {
  unsigned char *dst;
  const unsigned char *src;
  size_t len, part;
  /* A rect or image transfer: the rows are gathered or scattered
   * (clpin__shape_copy); packed bytes from packed_off on, into or out of
   * the block at packed. */
  const clpin__xfer *shaped;
  size_t packed_off;
  unsigned char *packed;
  /* A file transfer: the block at dst (H2D) or src (D2H) holds transfer
   * bytes from file_off on, read from or written to the file; failures go
   * to fst. */
  const clpin__xfer *file;
  size_t file_off;
  clpin__file_status *fst;
} copy_job;

static void copy_part(copy_job *c, size_t p) {
  size_t o = p * c->part, len = min_size(c->part, c->len - o);
  if (c->shaped)
    clpin__shape_copy(c->shaped, c->packed_off + o, len, c->packed + o);
  else if (c->file && c->file->dir == CLPIN__H2D)
    clpin__file_part(&c->file->file, false, c->file_off + o, c->dst + o, len, c->fst);
  else if (c->file)
    clpin__file_part(&c->file->file, true, c->file_off + o, (unsigned char *)c->src + o, len,
                     c->fst);
  else
    memcpy(c->dst + o, c->src + o, len);
}

/* Splits len into at most `threads` parts (none under MIN_PART). */
static size_t plan_copy(copy_job *c, void *dst, const void *src, size_t len, size_t threads) {
  c->dst = dst;
  c->src = src;
  c->len = len;
  c->shaped = NULL;
  c->file = NULL;
  size_t parts = min_size(len / MIN_PART, threads);
  if (parts <= 1) {
    c->part = len ? len : 1;
    return 1;
  }
  size_t part = (len + parts - 1) / parts;
  c->part = (part + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN;
  return (len + c->part - 1) / c->part;
}

static void copy_task_run(void *arg, size_t part) { copy_part(arg, part); }

/* The host copy into or out of one slot, running on the copy threads while the
 * driving thread enqueues and waits for DMAs: copies of several chunks are
 * in flight at once, so no copy thread idles at a per-chunk barrier. */
typedef struct {
  clpin__task task;
  copy_job copy;
  bool busy;
} slot_copy;

/* Hand c's copy (planned into c->copy: nparts parts) to the copy threads,
 * on the CPUs cpus (or anywhere), in the transfer's lane. */
static void slot_copy_submit(const void *cpus, clpin__lane *lane, slot_copy *c, size_t nparts) {
  c->task.cpus = cpus;
  c->task.lane = lane;
  c->task.run = copy_task_run;
  c->task.done = NULL;
  c->task.arg = &c->copy;
  c->task.nparts = nparts;
  c->busy = true;
  clpin__copythreads_submit(&c->task);
}

static void slot_copy_start(const void *cpus, clpin__lane *lane, slot_copy *c, void *dst,
                            const void *src, size_t len) {
  /* At most the copy share (copythreads.h): the budget is the process's, and
   * other transfers take their parts in turn. */
  slot_copy_submit(cpus, lane, c, plan_copy(&c->copy, dst, src, len, clpin__copythreads_share()));
}

/* A slot's copy for a rect or image transfer: packed bytes [off, off+len)
 * between the caller's rows and the block at packed. */
static void slot_copy_shaped(const void *cpus, clpin__lane *lane, slot_copy *c,
                             const clpin__xfer *x, unsigned char *packed, size_t off, size_t len) {
  size_t nparts = plan_copy(&c->copy, packed, packed, len, clpin__copythreads_share());
  c->copy.shaped = x;
  c->copy.packed_off = off;
  c->copy.packed = packed;
  slot_copy_submit(cpus, lane, c, nparts);
}

/* A slot's copy for a file transfer: transfer bytes [off, off+len) read
 * from the file into the block at blk (H2D) or written to it from there. */
static void slot_copy_file(const void *cpus, clpin__lane *lane, slot_copy *c, const clpin__xfer *x,
                           unsigned char *blk, size_t off, size_t len, clpin__file_status *fst,
                           size_t threads) {
  size_t nparts = plan_copy(&c->copy, blk, blk, len, threads);
  c->copy.file = x;
  c->copy.file_off = off;
  c->copy.fst = fst;
  slot_copy_submit(cpus, lane, c, nparts);
}

static void slot_copy_wait(slot_copy *c) {
  if (c->busy)
    clpin__copythreads_wait(&c->task);
  c->busy = false;
}

/* ---- the chunk plan --------------------------------------------------------- */

typedef struct {
  const clpin__xfer *x;
  const void *cpus;  /* the device's node's CPUs (a cpu_set_t), or NULL */
  clpin__lane *lane; /* its copies' turn among every transfer's (copythreads.h) */
  size_t chunk, nchunks, nslots;
  unsigned ramp; /* chunks ramping up: RAMP for a pipeline, 0 for one chunk */
  size_t tail;   /* where the chunks ramping down start; nbytes if none do */
  size_t nbody;  /* chunks before them (all chunks if none ramp down) */
  clpin_block *blk[MAX_SLOTS];
  clpin__file_status *fst; /* a file transfer's failures */
} plan;

/* Offset of chunk i: chunk/8, chunk/4, chunk/2, whole chunks (the last of
 * them maybe partial), then chunk/2, chunk/4, chunk/8 if ramping down. */
static size_t chunk_off(const plan *p, size_t i) {
  size_t first = p->chunk >> p->ramp;
  if (i < p->ramp)
    return first * (((size_t)1 << i) - 1);
  if (i < p->nbody)
    return first * (((size_t)1 << p->ramp) - 1) + (i - p->ramp) * p->chunk;
  /* The k-th chunk of the ramp down is first << (ramp - 1 - k) long. */
  size_t k = i - p->nbody;
  return p->tail + first * (((size_t)1 << p->ramp) - ((size_t)1 << (p->ramp - k)));
}

static size_t chunk_len(const plan *p, size_t i) {
  if (i >= p->nbody)
    return (p->chunk >> p->ramp) << (p->ramp - 1 - (i - p->nbody));
  size_t off = chunk_off(p, i), len = i < p->ramp ? (p->chunk >> p->ramp) << i : p->chunk;
  return min_size(len, p->tail - off);
}

/* A rect or image transfer's chunks are whole rows (its device-side calls
 * cover whole rows): the chunk is a multiple of row_bytes << ramp, which
 * makes every chunk offset (multiples of chunk >> ramp) a row boundary.
 * Returns the largest ramp that allows for chunk; 0 with chunk one row
 * when a row is larger than a chunk. */
static unsigned shape_chunk(size_t unit, size_t *chunk) {
  for (unsigned r = RAMP; r > 0; r--) {
    size_t step = unit << r;
    if (step >> r == unit && *chunk >= step) {
      *chunk = *chunk / step * step;
      return r;
    }
  }
  *chunk = *chunk >= unit ? *chunk / unit * unit : unit;
  return 0;
}

static void make_plan(plan *p, const clpin__xfer *x) {
  memset(p, 0, sizeof *p);
  p->x = x;
  p->cpus = clpin__pool_device_cpus(x->pool, x->device);
  size_t chunk = clpin__opt(CLPIN_OPT_CHUNK), max = clpin__pool_max_alloc(x->pool);
  if (max && chunk > max)
    chunk = max;
  size_t unit = x->shape.kind ? x->shape.row_bytes : PART_ALIGN;
  unsigned max_ramp = x->shape.kind ? shape_chunk(unit, &chunk) : RAMP;
  p->chunk = chunk;
  p->tail = x->nbytes;
  if (x->nbytes <= chunk && x->nbytes >= SPLIT_MIN) {
    size_t piece = (x->nbytes + SPLIT_PIECES - 1) / SPLIT_PIECES;
    p->chunk = (piece + unit - 1) / unit * unit;
    p->nchunks = p->nbody = (x->nbytes + p->chunk - 1) / p->chunk;
  } else if (x->nbytes <= chunk) {
    p->nchunks = p->nbody = 1;
    p->chunk = x->nbytes;
  } else {
    /* Ramp chunks stay whole pages: a small CLPIN_CHUNK ramps less. */
    while (p->ramp < max_ramp && (chunk >> (p->ramp + 1)) >= PART_ALIGN)
      p->ramp++;
    /* Ramp down too where the body keeps at least two whole chunks. */
    size_t ramp_sum = (chunk >> p->ramp) * (((size_t)1 << p->ramp) - 1);
    bool down = ramp_sum <= x->nbytes / 2 && x->nbytes / 2 - ramp_sum >= chunk;
    if (down)
      p->tail = x->nbytes - ramp_sum;
    size_t n = 0;
    p->nbody = SIZE_MAX; /* chunk_off below counts body chunks only */
    while (chunk_off(p, n) < p->tail)
      n++;
    p->nbody = n;
    p->nchunks = n + (down ? p->ramp : 0);
  }
  p->nslots = min_size(p->nchunks, x->dir == CLPIN__H2D ? WRITE_SLOTS : READ_SLOTS);
}

/* ---- helpers ---------------------------------------------------------------- */

static cl_int enqueue_dma(const plan *p, size_t i, void *host, cl_uint nw, const cl_event *wl,
                          cl_event *ev) {
  const clpin__xfer *x = p->x;
  if (x->shape.kind) {
    size_t rb = x->shape.row_bytes;
    return clpin__shape_dma(x, chunk_off(p, i) / rb, chunk_len(p, i) / rb, host, nw, wl, ev);
  }
  size_t pos = x->offset + chunk_off(p, i), len = chunk_len(p, i);
  if (x->dir == CLPIN__H2D)
    return clEnqueueWriteBuffer(x->q, x->mem, CL_FALSE, pos, len, host, nw, wl, ev);
  return clEnqueueReadBuffer(x->q, x->mem, CL_FALSE, pos, len, host, nw, wl, ev);
}

/* Start the host copy of chunk i into (write) or out of (read) the block
 * at blk. */
static void copy_chunk(const plan *p, slot_copy *c, unsigned char *blk, size_t i) {
  const clpin__xfer *x = p->x;
  size_t off = chunk_off(p, i), len = chunk_len(p, i);
  if (x->shape.kind)
    slot_copy_shaped(p->cpus, p->lane, c, x, blk, off, len);
  else if (x->file.on)
    slot_copy_file(p->cpus, p->lane, c, x, blk, off, len, p->fst, clpin__copythreads_share());
  else if (x->dir == CLPIN__H2D)
    slot_copy_start(p->cpus, p->lane, c, blk, x->host + off, len);
  else
    slot_copy_start(p->cpus, p->lane, c, x->host + off, blk, len);
}

/* Whether a part of a file transfer failed (its reads or writes stop the
 * pipeline as a failed DMA does). */
static bool file_failed(const plan *p) { return p->fst && atomic_load(&p->fst->err_no) != 0; }

static void release_blocks(clpin_block **blk, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (blk[i])
      clpin__release(blk[i], NULL);
}

/* Give a block back once its DMA's event has ended. If the pool refuses
 * the event (released meanwhile, say), wait here; if the event's state
 * cannot be known, keep the block out of the pool for good (freed with the
 * pool) rather than risk handing it out under a running DMA. */
static void release_after(clpin_block *b, cl_event ev) {
  if (clpin__release(b, ev) == CL_SUCCESS)
    return;
  if (clpin__event_settle(ev))
    clpin__release(b, NULL);
  else
    clpin__log("staging: a DMA's state is unknown; its block stays out of the pool");
}

/* Wait for a slot's DMA; its event is released only once it ended, so
 * after a failed wait finish() still knows what may be running. */
static cl_int wait_and_release(cl_event *ev) {
  cl_int err = clpin__event_wait(*ev);
  if (err == CL_SUCCESS) {
    clReleaseEvent(*ev);
    *ev = NULL;
  }
  return err;
}

/* End of a pipeline, also after an error: waits for every copy and DMA and
 * gives the blocks back, idle, or pending a DMA whose end could not be
 * seen. The last DMA's event (complete) goes to the caller if asked for. */
static cl_int finish(plan *p, cl_event *ev, slot_copy *cp, cl_int err) {
  size_t last = (p->nchunks - 1) % p->nslots;
  for (size_t s = 0; s < p->nslots; s++)
    slot_copy_wait(&cp[s]);
  for (size_t s = 0; s < p->nslots; s++) {
    cl_int e = ev[s] ? clpin__event_wait(ev[s]) : CL_SUCCESS;
    if (e != CL_SUCCESS && err == CL_SUCCESS)
      err = e;
    if (e == CL_SUCCESS || clpin__event_settle(ev[s]))
      clpin__release(p->blk[s], NULL);
    else
      release_after(p->blk[s], ev[s]);
    p->blk[s] = NULL;
  }
  for (size_t s = 0; s < p->nslots; s++) {
    if (!ev[s])
      continue;
    if (s == last && p->x->event && err == CL_SUCCESS && !file_failed(p))
      *p->x->event = ev[s];
    else
      clReleaseEvent(ev[s]);
    ev[s] = NULL;
  }
  return err;
}

/* ---- the pipelines ------------------------------------------------------------ */

/* Copies of chunks 0..S-1 start at once; then per chunk i: wait for its
 * copy, enqueue its DMA, and refill the slot of chunk i-1 (chunk i-1+S) as
 * soon as that slot's DMA is done, while DMA i runs. */
static cl_int write_pipeline(plan *p) {
  const clpin__xfer *x = p->x;
  cl_event ev[MAX_SLOTS] = {0};
  slot_copy cp[MAX_SLOTS];
  memset(cp, 0, sizeof cp);
  size_t S = p->nslots, n = p->nchunks;
  cl_int err = CL_SUCCESS;
  for (size_t i = 0; i < S; i++)
    copy_chunk(p, &cp[i], clpin_block_host(p->blk[i]), i);
  for (size_t i = 0; i < n && err == CL_SUCCESS; i++) {
    size_t s = i % S;
    slot_copy_wait(&cp[s]);
    if (file_failed(p))
      break; /* nothing more is uploaded; clpin__staged reports it */
    err = enqueue_dma(p, i, clpin_block_host(p->blk[s]), x->num_wait, x->wait_list, &ev[s]);
    if (err != CL_SUCCESS)
      break;
    clFlush(x->q); /* start this DMA now */
    size_t prev = (i + S - 1) % S, j = i - 1 + S;
    if (i == 0 || j >= n)
      continue;
    err = wait_and_release(&ev[prev]);
    if (err == CL_SUCCESS)
      copy_chunk(p, &cp[prev], clpin_block_host(p->blk[prev]), j);
  }
  return finish(p, ev, cp, err);
}

/* DMAs of chunks 0..S-1 start at once; then per chunk i: wait for its DMA,
 * start its copy-out, and once the copy-out of chunk i-1 is done refill
 * that slot with the DMA of chunk i-1+S. */
static cl_int read_pipeline(plan *p) {
  const clpin__xfer *x = p->x;
  cl_event ev[MAX_SLOTS] = {0};
  slot_copy cp[MAX_SLOTS];
  memset(cp, 0, sizeof cp);
  size_t S = p->nslots, n = p->nchunks;
  cl_int err = CL_SUCCESS;
  for (size_t i = 0; i < S && err == CL_SUCCESS; i++)
    err = enqueue_dma(p, i, clpin_block_host(p->blk[i]), x->num_wait, x->wait_list, &ev[i]);
  clFlush(x->q);
  for (size_t i = 0; i < n && err == CL_SUCCESS; i++) {
    size_t s = i % S;
    /* The last chunk's event stays for the caller. */
    err = i + 1 == n ? clpin__event_wait(ev[s]) : wait_and_release(&ev[s]);
    if (err != CL_SUCCESS)
      break;
    copy_chunk(p, &cp[s], clpin_block_host(p->blk[s]), i);
    size_t prev = (i + S - 1) % S, j = i - 1 + S;
    if (i == 0 || j >= n)
      continue;
    slot_copy_wait(&cp[prev]);
    if (file_failed(p))
      break;
    err = enqueue_dma(p, j, clpin_block_host(p->blk[prev]), x->num_wait, x->wait_list, &ev[prev]);
    clFlush(x->q);
  }
  return finish(p, ev, cp, err);
}

static _Thread_local clpin__path path_taken;
static _Thread_local const char *path_why;

void clpin__path_set(clpin__path path, const char *why) {
  path_taken = path;
  path_why = why;
}

clpin__path clpin__path_last(const char **why) {
  if (why)
    *why = path_why;
  return path_taken;
}

cl_int clpin__plain(const clpin__xfer *x, clpin__counter counter, const char *why) {
  clpin__path_set(counter == CLPIN__BYTES_PINNED_DIRECT ? CLPIN__PATH_DIRECT : CLPIN__PATH_PLAIN,
                  why);
  bool nb = x->flags & CLPIN_NON_BLOCKING;
  /* From pinned memory (a pool block, a registration) a blocking call is
   * enqueued non-blocking and waited for by event: the driver serialises
   * blocking calls across threads, which halved duplex rates. Otherwise it
   * stays the driver's own blocking call: from pageable memory NVIDIA's
   * blocking path is the faster one (64 MiB reads: 10.9 against 8.3 GB/s),
   * and so is any small call (a 4 KiB read: 10 against 17 us). */
  bool driver_blocks =
      !nb && (counter != CLPIN__BYTES_PINNED_DIRECT || x->nbytes < clpin__opt(CLPIN_OPT_STAGE_MIN));
  cl_bool blocking = driver_blocks ? CL_TRUE : CL_FALSE;
  cl_event ev = NULL;
  cl_event *evp = nb || driver_blocks ? x->event : &ev;
  cl_int err = x->shape.kind ? clpin__shape_plain(x, x->q, blocking, x->num_wait, x->wait_list, evp)
               : x->dir == CLPIN__H2D
                   ? clEnqueueWriteBuffer(x->q, x->mem, blocking, x->offset, x->nbytes, x->host,
                                          x->num_wait, x->wait_list, evp)
                   : clEnqueueReadBuffer(x->q, x->mem, blocking, x->offset, x->nbytes, x->host,
                                         x->num_wait, x->wait_list, evp);
  if (err != CL_SUCCESS)
    return err;
  if (nb) {
    clFlush(x->q);
  } else if (!driver_blocks) {
    /* The memory is the caller's again only once the command has ended. */
    err = clpin__event_wait(ev);
    if (err != CL_SUCCESS)
      clpin__event_settle(ev);
    if (err == CL_SUCCESS && x->event)
      *x->event = ev;
    else
      clReleaseEvent(ev);
    if (err != CL_SUCCESS)
      return err;
  }
  clpin__count(x->pool, counter, x->nbytes);
  clpin__log("%s %zu bytes: %s", dir_name(x->dir), x->nbytes, why);
  return CL_SUCCESS;
}

cl_int clpin__staged(const clpin__xfer *x) {
  plan p;
  make_plan(&p, x);
  clpin__lane lane = {.cap = clpin__copythreads_share()};
  p.lane = &lane;
  clpin__file_status fst;
  if (x->file.on) {
    clpin__file_status_init(&fst);
    p.fst = &fst;
  }
  size_t block_size = p.nchunks == 1 ? x->nbytes : p.chunk;
  for (size_t s = 0; s < p.nslots; s++) {
    cl_int err = clpin__acquire_for(x->pool, x->device, block_size, &p.blk[s]);
    if (err == CL_SUCCESS)
      continue;
    if (s >= WRITE_SLOTS) { /* a read's extra slots: run with those it has */
      clpin__log("%s %zu bytes: %zu of %zu staging slots (%s)", dir_name(x->dir), x->nbytes, s,
                 p.nslots, clpin_strerror(err));
      p.nslots = s;
      break;
    }
    release_blocks(p.blk, s);
    if (!clpin__is_oom(err) || x->file.on) /* a file has no memory for a plain transfer */
      return err;
    clpin__count(x->pool, CLPIN__FALLBACKS, 1);
    clpin__log("%s %zu bytes: no pinned memory (%s), falling back", dir_name(x->dir), x->nbytes,
               clpin_strerror(err));
    return clpin__plain(x, CLPIN__BYTES_UNPINNED, "fallback: plain transfer");
  }
  cl_int err = x->dir == CLPIN__H2D ? write_pipeline(&p) : read_pipeline(&p);
  if (err == CL_SUCCESS && file_failed(&p)) {
    clpin__file_fail(x->dir == CLPIN__H2D ? "clpin_file_to_buffer" : "clpin_buffer_to_file",
                     &x->file, x->dir == CLPIN__D2H, &fst, x->nbytes);
    return CLPIN_ERR_IO;
  }
  if (err != CL_SUCCESS)
    return err;
  if (x->file.on)
    clpin__count(x->pool, x->dir == CLPIN__H2D ? CLPIN__BYTES_FILE_READ : CLPIN__BYTES_FILE_WRITTEN,
                 x->nbytes);
  bool pipelined = p.nchunks > 1;
  clpin__path_set(pipelined ? CLPIN__PATH_PIPELINED : CLPIN__PATH_STAGED,
                  pipelined ? "pipelined" : "staged");
  clpin__count(x->pool, pipelined ? CLPIN__BYTES_PIPELINED : CLPIN__BYTES_STAGED, x->nbytes);
  clpin__pool_count_device(x->pool, x->q, x->dir, x->nbytes);
  clpin__log("%s %zu bytes: %s (%zu chunk%s of up to %zu, %zu slot%s; DMA on queue %p of device "
             "%p, node %d)",
             dir_name(x->dir), x->nbytes, pipelined ? "pipelined" : "staged", p.nchunks,
             p.nchunks == 1 ? "" : "s", p.chunk, p.nslots, p.nslots == 1 ? "" : "s", (void *)x->q,
             (void *)x->device, clpin__pool_device_node(x->pool, x->device));
  return CL_SUCCESS;
}

cl_int clpin__file_copy(const clpin__xfer *x, unsigned char *mem) {
  clpin__file_status fst;
  clpin__file_status_init(&fst);
  clpin__lane lane = {.cap = clpin__copythreads_share()};
  slot_copy c;
  memset(&c, 0, sizeof c);
  /* One part more than the copy share: the calling thread, which would
   * only wait, reads (writes) one itself in slot_copy_wait. */
  slot_copy_file(clpin__pool_device_cpus(x->pool, x->device), &lane, &c, x, mem, 0, x->nbytes, &fst,
                 clpin__copythreads_share() + 1);
  slot_copy_wait(&c);
  if (atomic_load(&fst.err_no) != 0) {
    clpin__file_fail(x->dir == CLPIN__H2D ? "clpin_file_to_buffer" : "clpin_buffer_to_file",
                     &x->file, x->dir == CLPIN__D2H, &fst, x->nbytes);
    return CLPIN_ERR_IO;
  }
  clpin__count(x->pool, x->dir == CLPIN__H2D ? CLPIN__BYTES_FILE_READ : CLPIN__BYTES_FILE_WRITTEN,
               x->nbytes);
  return CL_SUCCESS;
}
