/* SPDX-License-Identifier: Apache-2.0 */
/* Host-unified devices: the features built on zero copy (zc.c) and the
 * handoffs (handoff.c): clpin_host_buffer, a buffer over pool, host_alloc or
 * registered memory for kernels to use in place, and clpin_host_lend /
 * clpin_host_reclaim, which hand such memory's mapping to the device and
 * back. */
#include "events.h"
#include "handoff.h"
#include "registry.h"
#include "register.h"
#include "zc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>

/* ---- clpin_host_buffer ------------------------------------------------------ */

/* The target holding [ptr, ptr + n): a live block, else a registration. */
static bool find_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t) {
  return clpin__block_target(pool, ptr, n, t) || clpin__register_target(pool, ptr, n, t);
}

static void release_target(clpin__handoff_target *t) {
  if (t->reg)
    clpin__register_unclaim(t->reg);
}

cl_int clpin_host_buffer(clpin_pool *pool, const void *ptr, size_t nbytes, cl_mem *mem,
                         size_t *offset) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!pool, CLPIN_ERR_INVALID_ARGUMENT, "pool is NULL");
  CLPIN__CHECK_WHY(!ptr, CLPIN_ERR_INVALID_ARGUMENT, "ptr is NULL");
  CLPIN__CHECK_WHY(!mem, CLPIN_ERR_INVALID_ARGUMENT, "mem (the out-pointer) is NULL");
  CLPIN__CHECK_WHY(!offset, CLPIN_ERR_INVALID_ARGUMENT, "offset (the out-pointer) is NULL");
  CLPIN__CHECK_WHY(nbytes == 0, CLPIN_ERR_INVALID_SIZE,
                   "nbytes is 0: a range holds at least one byte");
  CLPIN__CHECK_FMT((uintptr_t)ptr > UINTPTR_MAX - nbytes, CLPIN_ERR_OVERFLOW,
                   "ptr %p + nbytes %zu lies past the end of the address space", ptr, nbytes);
  cl_int err = clpin__pool_enter_for(__func__, "pool", &pool); /* from here on the struct */
  CLPIN__PASS(err);
  clpin__zc_device zd;
  err = clpin__zc_probe(clpin__pool_queue(pool), &zd);
  if (err != CL_SUCCESS)
    clpin__fail(__func__, err, "querying the pool's device (clGetDeviceInfo) failed");
  if (err == CL_SUCCESS && !zd.unified) {
    clpin__fail(__func__, CLPIN_ERR_NOT_UNIFIED,
                "the pool's device is not host-unified: no in-place use; use "
                "clpin_write/clpin_read there");
    err = CLPIN_ERR_NOT_UNIFIED;
  }
  cl_mem found = NULL;
  size_t off = 0;
  clpin__handoff_target t;
  if (err == CL_SUCCESS) {
    if (find_target(pool, ptr, nbytes, &t)) {
      found = t.buffer;
      off = (size_t)((uintptr_t)ptr - (uintptr_t)t.host);
      err = clRetainMemObject(found);
      release_target(&t);
      if (err != CL_SUCCESS)
        clpin__fail(__func__, err, "clRetainMemObject on the block's buffer failed");
    } else {
      err = CLPIN_ERR_FOREIGN_POINTER;
      clpin__failf(__func__, err,
                   "no live pool block, clpin_host_alloc memory or registration of this pool "
                   "holds the whole range [%p, +%zu bytes)",
                   ptr, nbytes);
    }
  }
  clpin__pool_leave(pool);
  if (err != CL_SUCCESS)
    return err;
  *mem = found;
  *offset = off;
  return CL_SUCCESS;
}

/* Room for one more entry in a growing array (the turn is held). */
static bool grow(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap)
    return true;
  size_t c = *cap ? *cap * 2 : 4;
  void *g = realloc(*arr, c * elem);
  if (!g)
    return false;
  *arr = g;
  *cap = c;
  return true;
}

/* Index of the out range [beg, beg + len), or nout when it is not out. */
static size_t out_index(const clpin__handoff *h, uintptr_t beg, size_t len) {
  size_t n = atomic_load(&h->nout);
  for (size_t i = 0; i < n; i++)
    if (h->out[i].beg == beg && h->out[i].len == len)
      return i;
  return n;
}

/* What both calls check and find: the pool (entered), the target. */
typedef struct {
  clpin_pool *pool;
  clpin__handoff_target t;
} handoff_call;

static cl_int handoff_enter(const char *fn, cl_command_queue q, const void *ptr, size_t nbytes,
                            cl_uint num_wait, const cl_event *wait_list, handoff_call *c) {
  CLPIN__CHECK_IN(fn, clpin__forked(), CLPIN_ERR_FORKED, CLPIN__FORKED_WHY);
  CLPIN__CHECK_IN(fn, !q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  CLPIN__CHECK_IN(fn, !ptr, CLPIN_ERR_INVALID_ARGUMENT, "ptr is NULL");
  CLPIN__CHECK_IN(fn, nbytes == 0, CLPIN_ERR_INVALID_SIZE,
                  "nbytes is 0: a range holds at least one byte");
  CLPIN__CHECK_IN(fn, (uintptr_t)ptr > UINTPTR_MAX - nbytes, CLPIN_ERR_OVERFLOW,
                  "ptr %p + nbytes %zu lies past the end of the address space", ptr, nbytes);
  cl_int err = clpin__check_wait_list(fn, num_wait, wait_list);
  if (err != CL_SUCCESS)
    return err;
  clpin__zc_device zd;
  err = clpin__zc_probe(q, &zd);
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err,
                  "querying the queue's device (clGetCommandQueueInfo, clGetDeviceInfo) failed");
  CLPIN__CHECK_IN(fn, !zd.unified, CLPIN_ERR_NOT_UNIFIED,
                  "the queue's device is not host-unified: use clpin_write/clpin_read there");
  err = clpin_pool_get(q, &c->pool);
  CLPIN__PASS(err); /* explained by clpin_pool_get */
  err = clpin__pool_enter_for(fn, "the queue's pool", &c->pool);
  CLPIN__PASS(err);
  if (!find_target(c->pool, ptr, nbytes, &c->t)) {
    clpin__pool_leave(c->pool);
    CLPIN__CHECK_IN(fn, true, CLPIN_ERR_FOREIGN_POINTER,
                    "no live pool block, clpin_host_alloc memory or registration (of the "
                    "queue's context) holds the whole range [%p, +%zu bytes)",
                    ptr, nbytes);
  }
  return CL_SUCCESS;
}

/* End a call that holds the target's turn: the turn given back, a debug
 * line (what, for fn), the target and the pool left, a failure reported
 * with why. Returns err. */
static cl_int handoff_end(handoff_call *c, const char *fn, const char *what, size_t nbytes,
                          const void *ptr, cl_int err, const char *why) {
  clpin__handoff *h = c->t.h;
  clpin__handoff_turn_end(h);
  clpin__log("%s: %zu B at %p (%zu range(s) of its buffer %s): %s", fn, nbytes, ptr,
             atomic_load(&h->nout), what, clpin_strerror(err));
  release_target(&c->t);
  clpin__pool_leave(c->pool);
  if (err != CL_SUCCESS)
    clpin__fail(fn, err, why);
  return err;
}

/* The wait list plus extra events, in one array (freed by the caller). */
static cl_event *joined(cl_uint n, const cl_event *wl, size_t nextra, const cl_event *extra) {
  cl_event *all = malloc((n + nextra) * sizeof *all);
  if (all) {
    if (n)
      memcpy(all, wl, n * sizeof *all);
    if (nextra)
      memcpy(all + n, extra, nextra * sizeof *all);
  }
  return all;
}

/* Give ev to the caller (event not NULL) or drop it. */
static void hand_event(cl_event ev, cl_event *event) {
  if (event)
    *event = ev;
  else if (ev)
    clReleaseEvent(ev);
}

cl_int clpin_host_lend(cl_command_queue q, const void *ptr, size_t nbytes, cl_uint num_wait,
                       const cl_event *wait_list, cl_event *event) {
  handoff_call c;
  cl_int err = handoff_enter(__func__, q, ptr, nbytes, num_wait, wait_list, &c);
  if (err != CL_SUCCESS)
    return err;
  clpin__handoff *h = c.t.h;
  clpin__handoff_turn_take(h);
  size_t nout = atomic_load(&h->nout);
  cl_event ev = NULL;
  bool stays_out = false;
  if (!grow((void **)&h->out, &h->capout, nout, sizeof *h->out)) {
    err = CL_OUT_OF_HOST_MEMORY;
  } else if (nout == 0) {
    /* The first range: the whole mapping goes (OpenCL: no command may use a
     * buffer mapped for writing). Its event orders every later range. */
    err = clEnqueueUnmapMemObject(q, c.t.buffer, c.t.host, num_wait, wait_list, &ev);
    /* One reference for the handoff, a second for the caller if asked. */
    if (err == CL_SUCCESS && event && (err = clRetainEvent(ev)) != CL_SUCCESS) {
      /* No reference to give: undo the unmap by mapping again. Should
       * that fail too, the memory is unmapped: the range stays out
       * (clpin_host_reclaim brings it back), and the code says why. */
      cl_int e2;
      void *p = clEnqueueMapBuffer(q, c.t.buffer, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, c.t.size,
                                   1, &ev, NULL, &e2);
      if (e2 == CL_SUCCESS && p == c.t.host) {
        clReleaseEvent(ev);
      } else {
        clpin__log("host_lend: undoing the unmap failed (%s): the range stays out",
                   clpin_strerror(e2));
        if (e2 == CL_SUCCESS)
          clEnqueueUnmapMemObject(q, c.t.buffer, p, 0, NULL, NULL);
        h->unmapped = ev;
        stays_out = true;
      }
    } else if (err == CL_SUCCESS) {
      h->unmapped = ev;
      if (!event)
        ev = NULL; /* the one reference is the handoff's */
    }
  } else {
    /* Already with the device: only order the caller's queue after the unmap. */
    cl_event *all = joined(num_wait, wait_list, 1, &h->unmapped);
    err = all ? clEnqueueMarkerWithWaitList(q, num_wait + 1, all, &ev) : CL_OUT_OF_HOST_MEMORY;
    free(all);
  }
  if (err == CL_SUCCESS || stays_out) {
    h->out[nout].beg = (uintptr_t)ptr;
    h->out[nout].len = nbytes;
    atomic_store(&h->nout, nout + 1);
    clpin__handoffs_busy_add(1);
  }
  if (err == CL_SUCCESS) {
    clpin__count(c.pool, CLPIN__BYTES_ZERO_COPY, nbytes);
    hand_event(ev, event);
  }
  return handoff_end(&c, __func__, "out", nbytes, ptr, err,
                     "the driver refused the unmap or the marker");
}

/* The last range comes back: map the whole buffer after the wait list and
 * after every range given back before it. The mapping must be where the
 * caller's pointer is. */
static cl_int map_back(cl_command_queue q, clpin__handoff *h, const clpin__handoff_target *t,
                       cl_bool blocking, cl_uint num_wait, const cl_event *wait_list,
                       cl_event *ev) {
  cl_event *all = joined(num_wait, wait_list, h->nback, h->back);
  if (!all)
    return CL_OUT_OF_HOST_MEMORY;
  cl_int err;
  cl_uint n = num_wait + (cl_uint)h->nback;
  void *p = clEnqueueMapBuffer(q, t->buffer, blocking, CL_MAP_READ | CL_MAP_WRITE, 0, t->size, n,
                               n ? all : NULL, ev, &err);
  free(all);
  if (err == CL_SUCCESS && !p)
    err = CL_MAP_FAILURE;
  if (err != CL_SUCCESS)
    return err;
  if (p != t->host) {
    /* Hand it back to the device: the memory stays there, nothing is lost
     * (its buffer still holds it), and the range stays out. */
    cl_event u;
    cl_int e2 = clEnqueueUnmapMemObject(q, t->buffer, p, 1, ev, &u);
    clpin__log("host_reclaim: the driver mapped %p at %p (unmapped again: %s)", t->host, p,
               clpin_strerror(e2));
    clReleaseEvent(*ev);
    if (e2 == CL_SUCCESS) {
      clReleaseEvent(h->unmapped);
      h->unmapped = u;
    }
    return CLPIN_ERR_MAP_MOVED;
  }
  return CL_SUCCESS;
}

cl_int clpin_host_reclaim(cl_command_queue q, const void *ptr, size_t nbytes, unsigned flags,
                          cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  cl_int err = CLPIN__CHECK_FLAGS(__func__, "flags", flags, RECLAIM);
  if (err != CL_SUCCESS)
    return err;
  handoff_call c;
  err = handoff_enter(__func__, q, ptr, nbytes, num_wait, wait_list, &c);
  if (err != CL_SUCCESS)
    return err;
  clpin__handoff *h = c.t.h;
  cl_bool blocking = flags & CLPIN_NON_BLOCKING ? CL_FALSE : CL_TRUE;
  clpin__handoff_turn_take(h);
  size_t nout = atomic_load(&h->nout);
  size_t at = out_index(h, (uintptr_t)ptr, nbytes);
  cl_event ev = NULL;
  if (at == nout) {
    err = CLPIN_ERR_NOT_ON_DEVICE;
  } else if (nout > 1) {
    /* Others stay out: the buffer stays unmapped. The turn (after the
     * caller's wait list, and on an in-order queue after its kernels:
     * clpin__enqueue_turn) is what the last range's map will wait for. */
    if (!grow((void **)&h->back, &h->capback, h->nback, sizeof *h->back))
      err = CL_OUT_OF_HOST_MEMORY;
    else
      err = clpin__enqueue_turn(q, num_wait, wait_list, &ev);
    /* Blocking: waited for before anything changes, so a failed wait list
     * leaves the range out. */
    if (err == CL_SUCCESS && blocking)
      err = clWaitForEvents(1, &ev);
    if (err == CL_SUCCESS && (err = clRetainEvent(ev)) == CL_SUCCESS)
      h->back[h->nback++] = ev;
    else if (ev)
      clReleaseEvent(ev);
  } else {
    err = map_back(q, h, &c.t, blocking, num_wait, wait_list, &ev);
    if (err == CL_SUCCESS) {
      for (size_t i = 0; i < h->nback; i++)
        clReleaseEvent(h->back[i]);
      h->nback = 0;
      clReleaseEvent(h->unmapped);
      h->unmapped = NULL;
    }
  }
  if (err == CL_SUCCESS) {
    h->out[at] = h->out[nout - 1];
    atomic_store(&h->nout, nout - 1);
    clpin__handoffs_busy_add(-1);
    hand_event(ev, event);
  }
  return handoff_end(&c, __func__, "still out", nbytes, ptr, err,
                     err == CLPIN_ERR_NOT_ON_DEVICE ? "ptr and nbytes name no range handed over"
                     : err == CLPIN_ERR_MAP_MOVED
                         ? "the driver mapped the memory back at another address: it stays "
                           "with the device"
                         : "the driver refused the marker or the map");
}
