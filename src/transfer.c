/* SPDX-License-Identifier: Apache-2.0 */
/* Transfers: clpin_write and clpin_read, and the path choice every buffer,
 * rect and image transfer goes through (staging.c's header lists the
 * paths): memory in a pool block or a registration straight to DMA, small
 * transfers and host-unified devices plain, the rest staged, blocking on
 * the calling thread (staging.c) or non-blocking on the engine (engine.c). */
#include "transfer.h"
#include "engine.h"
#include "events.h"
#include "register.h"

#include <stdint.h>
#include <string.h>

/* ---- registered memory ---------------------------------------------------- */

/* If x's host range lies wholly inside a live registration of x->pool, run
 * x as a plain transfer straight from/to it (counted as bytes_pinned_direct),
 * keep its event in the registration so that clpin_host_unregister waits for
 * it, set *err and return true. False (nothing done) for memory that is not
 * registered. */
static bool registered(const clpin__xfer *x, cl_int *err) {
  const void *lo;
  size_t len;
  clpin__xfer_span(x, &lo, &len);
  clpin__reg *r = clpin__register_claim(x->pool, lo, len);
  if (!r)
    return false;
  if (clpin__register_out(r)) {
    /* Unmapped for the device: the host must not touch the memory now. */
    clpin__fail("clpin_write/clpin_read", CLPIN_ERR_ON_DEVICE,
                "the host range is handed to the device (clpin_host_lend): clpin_host_reclaim "
                "first");
    *err = CLPIN_ERR_ON_DEVICE;
    clpin__register_unclaim(r);
    return true;
  }
  /* A non-blocking transfer always gets an event: the registration keeps
   * it for unregister to wait on. A blocking one has ended when plain
   * returns. */
  bool nb = x->flags & CLPIN_NON_BLOCKING;
  clpin__xfer y = *x;
  cl_event ev = NULL;
  if (nb)
    y.event = &ev;
  *err = clpin__plain(&y, CLPIN__BYTES_PINNED_DIRECT, "registered: straight to DMA");
  if (nb && *err == CL_SUCCESS) {
    if (x->event && clRetainEvent(ev) != CL_SUCCESS) {
      /* No second reference for the registration: let the transfer end
       * here, and give the caller the one there is. */
      clpin__event_settle(ev);
      *x->event = ev;
    } else {
      if (x->event)
        *x->event = ev;
      clpin__register_record(x->pool, r, ev);
    }
  }
  clpin__register_unclaim(r);
  return true;
}

/* ---- entry ---------------------------------------------------------------- */

/* Whether an event of the caller's wait list has already failed. */
bool clpin__wait_list_failed(const clpin__xfer *x) {
  for (cl_uint i = 0; i < x->num_wait; i++)
    if (clpin__event_status(x->wait_list[i]) < 0)
      return true;
  return false;
}

/* A blocking write reads the caller's memory when the command would run:
 * after its wait list and, on an in-order queue, after every command
 * enqueued before it (a non-blocking read into the same memory, say). A
 * turn (clpin__enqueue_turn) stands for all of that; the copies start once
 * it has ended. */
cl_int clpin__wait_for_turn(const clpin__xfer *x) {
  cl_event turn;
  cl_int err = clpin__enqueue_turn(x->q, x->num_wait, x->wait_list, &turn);
  if (err != CL_SUCCESS)
    return err;
  err = clpin__event_wait(turn);
  if (err < 0 && clpin__event_status(turn) < 0)
    err = CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST; /* the marker's wait list failed */
  clReleaseEvent(turn);
  return err;
}

/* What the driver would refuse at once, checked before staging: a deferred
 * transfer must fail now, not later in its event. (A plain transfer is the
 * driver's own call, which checks all this itself.) */
cl_int clpin__check_access(const clpin__xfer *x) {
  cl_mem_flags mflags = 0;
  cl_context mctx = NULL;
  cl_int err = clGetMemObjectInfo(x->mem, CL_MEM_FLAGS, sizeof mflags, &mflags, NULL);
  if (err == CL_SUCCESS)
    err = clGetMemObjectInfo(x->mem, CL_MEM_CONTEXT, sizeof mctx, &mctx, NULL);
  CLPIN__CHECK_IN("clpin_write/clpin_read", err != CL_SUCCESS, err,
                  "clGetMemObjectInfo on the buffer failed");
  CLPIN__CHECK_IN("clpin_write/clpin_read", mctx != clpin__pool_context(x->pool),
                  CL_INVALID_CONTEXT, "the buffer belongs to another context than the queue");
  cl_mem_flags forbidden = CL_MEM_HOST_NO_ACCESS |
                           (x->dir == CLPIN__H2D ? CL_MEM_HOST_READ_ONLY : CL_MEM_HOST_WRITE_ONLY);
  CLPIN__CHECK_IN("clpin_write/clpin_read", mflags & forbidden, CL_INVALID_OPERATION,
                  "the buffer was created with %s: the host may not %s it",
                  (mflags & CL_MEM_HOST_NO_ACCESS) ? "CL_MEM_HOST_NO_ACCESS"
                  : x->dir == CLPIN__H2D           ? "CL_MEM_HOST_READ_ONLY"
                                                   : "CL_MEM_HOST_WRITE_ONLY",
                  x->dir == CLPIN__H2D ? "write" : "read");
  return CL_SUCCESS;
}

/* A small blocking read through one pool block: NVIDIA's driver reads into
 * pinned memory in about half the time it takes to read into pageable
 * memory (64 KiB: 12.1-12.6 against 21.9-29.0 us; 16 bytes: 9.3-9.4
 * against 10.5-10.6), more than the copy out of the block costs, while a
 * write from pinned memory is slower than from pageable below 64 KiB
 * (docs/benchmarks/HISTORY.md,
 * "eight read slots"). Up to SMALL_READ_MAX; from
 * CLPIN_STAGE_MIN on reads are pipelined. The device side is the caller's
 * call as given, its host side packed in the block; the rows are then
 * scattered into the caller's memory on this thread. */
#define SMALL_READ_MAX ((size_t)256 << 10)

static cl_int small_read(const clpin__xfer *x) {
  clpin_block *blk;
  cl_int err = clpin__acquire_for(x->pool, x->device, x->nbytes, &blk);
  if (err != CL_SUCCESS) {
    if (!clpin__is_oom(err))
      return err;
    clpin__count(x->pool, CLPIN__FALLBACKS, 1);
    return clpin__plain(x, CLPIN__BYTES_UNPINNED, "fallback: plain transfer");
  }
  unsigned char *b = clpin_block_host(blk);
  err = x->shape.kind ? clpin__shape_packed(x, CL_TRUE, b, x->num_wait, x->wait_list, x->event)
                      : clEnqueueReadBuffer(x->q, x->mem, CL_TRUE, x->offset, x->nbytes, b,
                                            x->num_wait, x->wait_list, x->event);
  if (err == CL_SUCCESS) {
    if (x->shape.kind)
      clpin__shape_copy(x, 0, x->nbytes, b);
    else
      memcpy(x->host, b, x->nbytes);
  }
  /* A blocking call has ended, failed or not: nothing reads the block. */
  clpin__release(blk, NULL);
  if (err != CL_SUCCESS)
    return err;
  const char *why = "staged (a small read through one pool block)";
  clpin__path_set(CLPIN__PATH_STAGED, why);
  clpin__count(x->pool, CLPIN__BYTES_STAGED, x->nbytes);
  clpin__pool_count_device(x->pool, x->q, x->dir, x->nbytes);
  clpin__log("read %zu bytes: %s", x->nbytes, why);
  return CL_SUCCESS;
}

static cl_int route(clpin__xfer *x) {
  if (x->nbytes == 0)
    return x->event ? clpin__completed_event(clpin__pool_context(x->pool), x->event) : CL_SUCCESS;
  /* As clEnqueueWriteBuffer may for blocking calls, and for every call here:
   * POCL never ends a command behind a failed event. */
  CLPIN__CHECK_IN("clpin_write/clpin_read", clpin__wait_list_failed(x),
                  CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
                  "an event in the wait list failed: the transfer did not run");
  const void *span_lo;
  size_t span_len;
  clpin__xfer_span(x, &span_lo, &span_len);
  /* The pool is entered: look the block up without entering it again. */
  clpin_block *in = clpin__pool_lookup(x->pool, span_lo, span_len);
  if (in) {
    /* Unmapped for the device: its host pointer is no memory of the host's. */
    CLPIN__CHECK_IN("clpin_write/clpin_read", clpin__block_out(in), CLPIN_ERR_ON_DEVICE,
                    "the host range is handed to the device (clpin_host_lend): "
                    "clpin_host_reclaim first");
    return clpin__plain(x, CLPIN__BYTES_PINNED_DIRECT, "already pinned: straight to DMA");
  }
  cl_int reg_err;
  if (registered(x, &reg_err))
    return reg_err;
  if (!(x->flags & CLPIN_PIN_MEMORY))
    return clpin__plain(x, CLPIN__BYTES_UNPINNED, "plain (no CLPIN_PIN_MEMORY)");
  /* Small first: a small write needs no query of the queue (it is the
   * driver's call, and every query is a visible share of it). Writes have
   * a threshold of their own: they pay later. A small blocking read goes
   * through one pool block (small_read). */
  bool small = x->nbytes < clpin__opt(CLPIN_OPT_STAGE_MIN) ||
               (x->dir == CLPIN__H2D && x->nbytes < clpin__opt(CLPIN_OPT_STAGE_MIN_H2D));
  bool small_read_fits =
      x->dir == CLPIN__D2H && !(x->flags & CLPIN_NON_BLOCKING) && x->nbytes <= SMALL_READ_MAX;
  if (small && !small_read_fits)
    return clpin__plain(x, CLPIN__BYTES_UNPINNED, "plain (small: staging would not pay)");
  cl_device_id dev;
  cl_int err = clGetCommandQueueInfo(x->q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err != CL_SUCCESS)
    return err;
  x->device = dev;
  if (clpin__pool_device_unified(x->pool, dev) && clpin__opt(CLPIN_OPT_PINNED) != 1)
    return clpin__plain(x, CLPIN__BYTES_UNPINNED, "plain (host-unified device)");
  if (small)
    return small_read(x);
  err = clpin__check_access(x);
  if (err != CL_SUCCESS)
    return err;
  /* Every device of the context has its own DMA queues and blocks: the
   * transfer runs for the caller's queue's device. */
  return clpin__staged_transfer(x);
}

cl_int clpin__staged_transfer(clpin__xfer *x) {
  if (x->flags & CLPIN_NON_BLOCKING) {
    clpin__path_set(CLPIN__PATH_ENGINE, "staged (non-blocking)");
    cl_int err = clpin__engine_submit(x);
    if (x->file.on) /* the file's descriptors are the engine's now, also on failure */
      x->file = (clpin__file){.on = true, .fd = -1, .dfd = -1};
    return err;
  }
  if (x->dir == CLPIN__H2D) {
    cl_int err = clpin__wait_for_turn(x);
    if (err != CL_SUCCESS)
      return err;
    x->num_wait = 0;
    x->wait_list = NULL;
  }
  return clpin__staged(x);
}

static cl_int transfer(clpin__xfer *x) {
  CLPIN__CHECK_IN("clpin_write/clpin_read", clpin__forked(), CLPIN_ERR_FORKED,
                  CLPIN__FORKED_WHY); /* before any OpenCL call */
  /* Arguments clEnqueueWriteBuffer vets get its codes (docs/API.md, "Errors"). */
  CLPIN__CHECK_IN("clpin_write/clpin_read", !x->q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  CLPIN__CHECK_IN("clpin_write/clpin_read", !x->mem, CL_INVALID_MEM_OBJECT, "the buffer is NULL");
  CLPIN__CHECK_IN("clpin_write/clpin_read", !x->host && x->nbytes > 0, CL_INVALID_VALUE,
                  "the host pointer is NULL and nbytes is %zu", x->nbytes);
  cl_int err = CLPIN__CHECK_FLAGS("clpin_write/clpin_read", "flags", x->flags, TRANSFER);
  if (err != CL_SUCCESS)
    return err;
  err = clpin__check_wait_list("clpin_write/clpin_read", x->num_wait, x->wait_list);
  if (err != CL_SUCCESS)
    return err;
  CLPIN__CHECK_IN("clpin_write/clpin_read", x->offset > SIZE_MAX - x->nbytes, CL_INVALID_VALUE,
                  "offset %zu + nbytes %zu overflows size_t", x->offset, x->nbytes);
  size_t size = 0;
  err = clGetMemObjectInfo(x->mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  CLPIN__CHECK_IN("clpin_write/clpin_read", err != CL_SUCCESS, err,
                  "clGetMemObjectInfo on the buffer failed");
  CLPIN__CHECK_IN("clpin_write/clpin_read", x->offset + x->nbytes > size, CL_INVALID_VALUE,
                  "offset %zu + nbytes %zu lies past the end of the %zu-byte buffer", x->offset,
                  x->nbytes, size);
  return clpin__transfer_shaped(x);
}

cl_int clpin_write(cl_command_queue q, cl_mem dst, size_t offset, const void *src, size_t nbytes,
                   unsigned flags, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  clpin__xfer x = {.q = q,
                   .mem = dst,
                   .offset = offset,
                   .host = (unsigned char *)(uintptr_t)src,
                   .nbytes = nbytes,
                   .flags = flags,
                   .num_wait = num_wait,
                   .wait_list = wait_list,
                   .event = event,
                   .dir = CLPIN__H2D};
  return transfer(&x);
}

cl_int clpin_read(cl_command_queue q, cl_mem src, size_t offset, void *dst, size_t nbytes,
                  unsigned flags, cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  clpin__xfer x = {.q = q,
                   .mem = src,
                   .offset = offset,
                   .host = dst,
                   .nbytes = nbytes,
                   .flags = flags,
                   .num_wait = num_wait,
                   .wait_list = wait_list,
                   .event = event,
                   .dir = CLPIN__D2H};
  return transfer(&x);
}

cl_int clpin__transfer_shaped(clpin__xfer *x) {
  cl_int err = clpin_pool_get(x->q, &x->pool);
  if (err != CL_SUCCESS)
    return err;
  /* The pool stays alive while this call uses it (internal.h, lifecycle). */
  err = clpin__pool_enter_for("clpin_write/clpin_read", "the queue's pool",
                              &x->pool); /* from here on x->pool is the struct */
  CLPIN__PASS(err);
  err = route(x);
  clpin__pool_leave(x->pool);
  return err;
}
