/* SPDX-License-Identifier: Apache-2.0 */
/* The intercepted transfers: vetting and semantics, in one place.
 *
 * A clEnqueueWriteBuffer / clEnqueueReadBuffer goes through clpin
 * (clpin_write / clpin_read with CLPIN_PIN_MEMORY), and a
 * clEnqueue{Write,Read}BufferRect / clEnqueue{Write,Read}Image through
 * clpin_{write,read}_{rect,image} (the region's bytes as its size, the host
 * bytes it spans as its memory), only when every argument
 * is one the layer fully understands and the driver would accept; anything
 * else goes to the next stage untouched, so an invalid call gets the
 * driver's own error code and an unusual one the driver's own behaviour.
 *
 * Semantics kept:
 *   - blocking: clpin's blocking transfer returns when the host memory may
 *     be reused (write) or holds the data (read), like the driver's;
 *   - non-blocking on an in-order queue: the transfer must start after
 *     every command enqueued before it, and the call must not wait for them
 *     (one may wait for a user event the application sets later). A marker
 *     with the application's wait list stands for "everything before": clpin
 *     gets it as its only wait-list entry, and while it is pending clpin
 *     defers the transfer behind it instead of waiting;
 *   - non-blocking on an out-of-order queue: only the wait list orders the
 *     command, so clpin gets it as it is;
 *   - the event: clpin's, a command of the application's queue and context
 *     (the last DMA, CL_COMMAND_WRITE_BUFFER / CL_COMMAND_READ_BUFFER; a
 *     transfer deferred behind pending events reports CL_COMMAND_MARKER).
 *     It completes when the whole transfer has. docs/LAYER.md has the
 *     details, profiling included. */
#include "route.h"

#include "objects.h"

#include "clpin.h"
#include "internal.h" /* clpin__opt_default, clpin__is_clpin_error, clpin__now_ns */
#include "pool.h"     /* clpin__pool_device_unified */
#include "rect.h"
#include "staging.h" /* clpin__path_last */

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NX clpin__layer_next

/* Default cap on idle pinned memory in the layer's pools (CLPIN_MAX_CACHED
 * overrides): a long-running program must not pin without bound. */
#define DEFAULT_MAX_CACHED ((size_t)256 << 20)

typedef enum { H2D, D2H } direction;

static size_t layer_min; /* CLPIN_LAYER_MIN, set at load */
/* Per direction (H2D, D2H): the smallest transfer routed, CLPIN_LAYER_MIN or
 * clpin's own staging minimum if larger (CLPIN_STAGE_MIN, for writes also
 * CLPIN_STAGE_MIN_H2D): below that clpin would make the driver's plain call
 * anyway, after the layer's checks, which only cost time. */
static size_t route_min[2];
static bool debug;

/* ---- statistics (CLPIN_LAYER_STATS=1) ------------------------------------- */

/* Counted by what happened: staged by clpin; handed to clpin, which made
 * the plain call itself (an allocation failure, another device's queue);
 * left to the driver by the layer, because clpin would not stage it here
 * (a host-unified device), because it is small, or because it is unusual. */
typedef enum {
  PATH_CLPIN,
  PATH_CLPIN_PLAIN,
  PATH_UNIFIED,
  PATH_SMALL,
  PATH_UNUSUAL,
  PATH_COUNT
} path;
static const char *const path_names[PATH_COUNT] = {
    "through clpin", "to clpin, sent plain", "to the driver (host-unified)",
    "to the driver (small)", "to the driver (unusual)"};

static _Atomic uint64_t st_bytes[2][PATH_COUNT], st_calls[2][PATH_COUNT];
static _Atomic uint64_t st_blocking_bytes[2], st_blocking_ns[2];

/* Measured here only: no estimate of what the driver would have taken, for
 * no reference rate holds on every device. */
static void print_stats(void) {
  static const char *const dir[2] = {"write", "read"};
  for (int d = 0; d < 2; d++) {
    for (int p = 0; p < PATH_COUNT; p++)
      fprintf(stderr, "clpin-layer: stats: %-5s %-29s %10" PRIu64 " calls %14" PRIu64 " bytes\n",
              dir[d], path_names[p], atomic_load(&st_calls[d][p]), atomic_load(&st_bytes[d][p]));
    uint64_t b = atomic_load(&st_blocking_bytes[d]), ns = atomic_load(&st_blocking_ns[d]);
    if (!b || !ns)
      continue;
    fprintf(stderr,
            "clpin-layer: stats: %-5s blocking through clpin: %" PRIu64
            " bytes in %.3f s (%.2f GB/s, measured)\n",
            dir[d], b, (double)ns / 1e9, (double)b / (double)ns);
  }
}

/* ---- options ---------------------------------------------------------------- */

/* CLPIN_LAYER_STATS, checked as clpin checks its options: 0 or 1, else a
 * warning in the library's words and the default (0). */
static bool stats_wanted(void) {
  const char *v = getenv("CLPIN_LAYER_STATS");
  if (!v || !*v || !strcmp(v, "0"))
    return false;
  if (!strcmp(v, "1"))
    return true;
  fprintf(stderr,
          "clpin: ignoring CLPIN_LAYER_STATS=\"%s\": not a valid value; valid: 0 or 1; "
          "using the default 0\n",
          v);
  return false;
}

void clpin__layer_route_init(void) {
  /* The layer's own copy of clpin: its options are not the application's.
   * Set before the first option is read, so the options line says it. */
  clpin__opt_default(CLPIN_OPT_MAX_CACHED, DEFAULT_MAX_CACHED);
  /* CLPIN_LAYER_MIN is one of clpin's options: parsed, and a bad value
   * (0 included) reported with its valid form, by the library's table. */
  layer_min = clpin_get_option(CLPIN_OPT_LAYER_MIN);
  size_t stage = clpin_get_option(CLPIN_OPT_STAGE_MIN),
         stage_h2d = clpin_get_option(CLPIN_OPT_STAGE_MIN_H2D);
  route_min[D2H] = layer_min > stage ? layer_min : stage;
  route_min[H2D] = route_min[D2H] > stage_h2d ? route_min[D2H] : stage_h2d;
  debug = clpin_get_option(CLPIN_OPT_DEBUG) != 0;
  if (stats_wanted())
    atexit(print_stats);
  if (debug)
    fprintf(stderr,
            "clpin-layer: loaded; writes from %zu bytes and reads from %zu go through clpin "
            "(CLPIN_LAYER_MIN %zu, or clpin's staging minimum where larger: CLPIN_STAGE_MIN %zu, "
            "for writes CLPIN_STAGE_MIN_H2D %zu); on a host-unified device only with "
            "CLPIN_PINNED_H2D=1\n",
            route_min[H2D], route_min[D2H], layer_min, stage, stage_h2d);
}

/* Why a transfer below route_min stays with the driver: the threshold that
 * is actually in the way. */
static const char *small_reason(direction d, size_t size) {
  if (size < layer_min)
    return "below CLPIN_LAYER_MIN";
  if (size < clpin_get_option(CLPIN_OPT_STAGE_MIN))
    return "below CLPIN_STAGE_MIN: clpin would not stage it";
  (void)d;
  return "below CLPIN_STAGE_MIN_H2D: clpin would not stage a write this small";
}

/* ---- vetting ---------------------------------------------------------------- */

typedef struct {
  direction dir;
  cl_command_queue q;
  cl_mem mem;
  cl_bool blocking;
  size_t offset, size;
  void *host;
  cl_uint num_wait;
  const cl_event *wait;
  cl_event *event;
  /* found while vetting */
  cl_context ctx;
  bool in_order;
  /* Rect and image calls (size: the region's bytes; offset unused). */
  enum { BUFFER, RECT, IMAGE } kind;
  const size_t *origin, *host_origin, *region;
  size_t pitch[4]; /* rect: buffer row, slice, host row, slice; image: row, slice */
  clpin__rect_geometry geo;
} call;

/* NULL when the call may go through clpin; else why not (for CLPIN_DEBUG).
 * Every query here is one the driver would make for the call anyway; a
 * failing query means an invalid object, which the driver must report. */
#define REFUSE_IF(cond, why)                                                                       \
  do {                                                                                             \
    if (cond)                                                                                      \
      return (why);                                                                                \
  } while (0)

static const char *vet(call *c) {
  REFUSE_IF(c->size < route_min[c->dir], small_reason(c->dir, c->size));
  REFUSE_IF(!c->q || !c->mem || !c->host, "a NULL queue, buffer or pointer");
  REFUSE_IF((c->num_wait == 0) != (c->wait == NULL), "malformed wait list");
  cl_command_queue_properties props = 0;
  REFUSE_IF(NX.clGetCommandQueueInfo(c->q, CL_QUEUE_CONTEXT, sizeof c->ctx, &c->ctx, NULL) ||
                NX.clGetCommandQueueInfo(c->q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL),
            "not a valid queue");
  REFUSE_IF(props & ~(cl_command_queue_properties)(CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE |
                                                   CL_QUEUE_PROFILING_ENABLE),
            "queue properties the layer does not know");
  c->in_order = !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);

  cl_context mctx = NULL;
  cl_mem_object_type type = 0;
  cl_mem_flags flags = 0;
  cl_mem parent = NULL;
  size_t msize = 0;
  cl_uint maps = 0;
  REFUSE_IF(NX.clGetMemObjectInfo(c->mem, CL_MEM_CONTEXT, sizeof mctx, &mctx, NULL) ||
                NX.clGetMemObjectInfo(c->mem, CL_MEM_TYPE, sizeof type, &type, NULL) ||
                NX.clGetMemObjectInfo(c->mem, CL_MEM_FLAGS, sizeof flags, &flags, NULL) ||
                NX.clGetMemObjectInfo(c->mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent,
                                      NULL) ||
                NX.clGetMemObjectInfo(c->mem, CL_MEM_SIZE, sizeof msize, &msize, NULL) ||
                NX.clGetMemObjectInfo(c->mem, CL_MEM_MAP_COUNT, sizeof maps, &maps, NULL),
            "not a valid buffer");
  REFUSE_IF(mctx != c->ctx, "buffer and queue in different contexts");
  REFUSE_IF(c->kind != IMAGE && type != CL_MEM_OBJECT_BUFFER, "not a buffer");
  REFUSE_IF(c->kind == IMAGE && type == CL_MEM_OBJECT_BUFFER, "not an image");
  REFUSE_IF(parent, c->kind == IMAGE ? "an image over a buffer" : "a sub-buffer");
  REFUSE_IF(flags & CL_MEM_USE_HOST_PTR, "a USE_HOST_PTR buffer");
  REFUSE_IF(flags & (CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS),
            "a buffer with host-access flags");
  if (c->kind == BUFFER)
    REFUSE_IF(c->offset > msize || c->size > msize - c->offset, "out of the buffer's range");
  else
    REFUSE_IF(clpin__rect_vet(c->kind == IMAGE, c->mem, c->origin, c->host_origin, c->region,
                              c->pitch, &c->geo) != CL_SUCCESS,
              "origins, region or pitches the driver must judge");
  REFUSE_IF(c->kind != BUFFER && c->geo.plain,
            "a 1D image array, or a call NVIDIA judges otherwise (clpin makes the plain call)");
  REFUSE_IF(maps, "the buffer is mapped");

  for (cl_uint i = 0; i < c->num_wait; i++) {
    cl_context ectx = NULL;
    cl_int st = CL_COMPLETE;
    REFUSE_IF(
        !c->wait[i] || NX.clGetEventInfo(c->wait[i], CL_EVENT_CONTEXT, sizeof ectx, &ectx, NULL) ||
            NX.clGetEventInfo(c->wait[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL),
        "an invalid event in the wait list");
    REFUSE_IF(ectx != c->ctx, "a wait-list event of another context");
    /* The driver decides what a failed dependency means for this call. */
    REFUSE_IF(st < 0, "a failed event in the wait list");
  }
  REFUSE_IF(c->kind == BUFFER
                ? clpin__layer_host_claimed(c->host, c->size)
                : clpin__layer_host_claimed((char *)c->host + c->geo.host_lo, c->geo.span),
            "host memory mapped, SVM or behind a USE_HOST_PTR buffer");
  return NULL;
}

/* ---- routing ----------------------------------------------------------------- */

static cl_int pass(const call *c) {
  const size_t *p = c->pitch;
  if (c->kind == RECT)
    return c->dir == H2D
               ? NX.clEnqueueWriteBufferRect(c->q, c->mem, c->blocking, c->origin, c->host_origin,
                                             c->region, p[0], p[1], p[2], p[3], c->host,
                                             c->num_wait, c->wait, c->event)
               : NX.clEnqueueReadBufferRect(c->q, c->mem, c->blocking, c->origin, c->host_origin,
                                            c->region, p[0], p[1], p[2], p[3], c->host, c->num_wait,
                                            c->wait, c->event);
  if (c->kind == IMAGE)
    return c->dir == H2D
               ? NX.clEnqueueWriteImage(c->q, c->mem, c->blocking, c->origin, c->region, p[0], p[1],
                                        c->host, c->num_wait, c->wait, c->event)
               : NX.clEnqueueReadImage(c->q, c->mem, c->blocking, c->origin, c->region, p[0], p[1],
                                       c->host, c->num_wait, c->wait, c->event);
  if (c->dir == H2D)
    return NX.clEnqueueWriteBuffer(c->q, c->mem, c->blocking, c->offset, c->size, c->host,
                                   c->num_wait, c->wait, c->event);
  return NX.clEnqueueReadBuffer(c->q, c->mem, c->blocking, c->offset, c->size, c->host, c->num_wait,
                                c->wait, c->event);
}

static const char *dir_name(direction d) { return d == H2D ? "write" : "read"; }

static void note(const call *c, path p, const char *why) {
  atomic_fetch_add(&st_calls[c->dir][p], 1);
  atomic_fetch_add(&st_bytes[c->dir][p], c->size);
  if (!debug)
    return;
  char line[512];
  snprintf(line, sizeof line, "clpin-layer: %s %zu bytes (%s): %s%s%s", dir_name(c->dir), c->size,
           c->blocking ? "blocking" : "non-blocking", path_names[p], why ? ": " : "",
           why ? why : "");
  if (clpin__log_new(line)) /* at CLPIN_DEBUG=1, once per distinct line */
    fprintf(stderr, "%s\n", line);
}

/* The clpin call that does c's transfer. */
static cl_int clpin_call(const call *c, unsigned flags, cl_uint nw, const cl_event *wl) {
  const size_t *p = c->pitch;
  if (c->kind == RECT)
    return c->dir == H2D
               ? clpin_write_rect(c->q, c->mem, c->origin, c->host_origin, c->region, p[0], p[1],
                                  p[2], p[3], c->host, flags, nw, wl, c->event)
               : clpin_read_rect(c->q, c->mem, c->origin, c->host_origin, c->region, p[0], p[1],
                                 p[2], p[3], c->host, flags, nw, wl, c->event);
  if (c->kind == IMAGE)
    return c->dir == H2D ? clpin_write_image(c->q, c->mem, c->origin, c->region, p[0], p[1],
                                             c->host, flags, nw, wl, c->event)
                         : clpin_read_image(c->q, c->mem, c->origin, c->region, p[0], p[1], c->host,
                                            flags, nw, wl, c->event);
  return c->dir == H2D
             ? clpin_write(c->q, c->mem, c->offset, c->host, c->size, flags, nw, wl, c->event)
             : clpin_read(c->q, c->mem, c->offset, c->host, c->size, flags, nw, wl, c->event);
}

/* clpin's work. Errors of the transfer itself (the driver's, from the DMAs
 * clpin enqueued) come back as they are; a library code, which the
 * application cannot know, becomes CL_OUT_OF_RESOURCES. */
static cl_int through_clpin(call *c) {
  clpin_pool *pool;
  if (clpin_pool_get(c->q, &pool) != CL_SUCCESS) {
    note(c, PATH_UNUSUAL, "clpin has no pool for this context");
    return pass(c);
  }
  /* clpin would make the driver's plain call itself: the layer makes it,
   * and says so once, with clpin's reason. */
  cl_device_id dev = NULL;
  if (clpin_get_option(CLPIN_OPT_PINNED) != 1 &&
      NX.clGetCommandQueueInfo(c->q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL) == CL_SUCCESS &&
      clpin__pool_device_unified(pool, dev)) {
    note(c, PATH_UNIFIED, "host-unified device: clpin stages there only with CLPIN_PINNED_H2D=1");
    return pass(c);
  }
  cl_event front = NULL;
  cl_uint nw = c->num_wait;
  const cl_event *wl = c->wait;
  unsigned flags = CLPIN_PIN_MEMORY;
  if (!c->blocking) {
    flags |= CLPIN_NON_BLOCKING;
    if (c->in_order) {
      /* With no wait list a barrier, which on an in-order queue means the
       * same as a marker: NVIDIA's marker with an empty list waits for
       * every queue of the context (src/events.h, clpin__enqueue_turn). */
      cl_int ferr = c->num_wait ? NX.clEnqueueMarkerWithWaitList(c->q, c->num_wait, c->wait, &front)
                                : NX.clEnqueueBarrierWithWaitList(c->q, 0, NULL, &front);
      if (ferr != CL_SUCCESS) {
        note(c, PATH_UNUSUAL, "the queue refused a marker");
        return pass(c);
      }
      nw = 1;
      wl = &front;
    }
  }
  uint64_t t0 = c->blocking ? clpin__now_ns() : 0;
  cl_int err = clpin_call(c, flags, nw, wl);
  if (front)
    clpin__layer_hold_marker(front, c->ctx);
  if (err == CL_SUCCESS && c->blocking) {
    atomic_fetch_add(&st_blocking_ns[c->dir], clpin__now_ns() - t0);
    atomic_fetch_add(&st_blocking_bytes[c->dir], c->size);
  }
  if (clpin__is_clpin_error(err)) /* no code an OpenCL program knows */
    err = CL_OUT_OF_RESOURCES;
  char failed[48];
  if (err != CL_SUCCESS)
    snprintf(failed, sizeof failed, "the transfer failed with %d", (int)err);
  /* What clpin did (its own CLPIN_DEBUG line says it too, with details). */
  const char *took;
  bool staged = clpin__path_staged(clpin__path_last(&took));
  if (err == CL_SUCCESS && !staged)
    note(c, PATH_CLPIN_PLAIN, took);
  else
    note(c, PATH_CLPIN, err != CL_SUCCESS ? failed : NULL);
  return err;
}

static cl_int route(call *c) {
  if (c->size < route_min[c->dir]) { /* the common small case: no query at all */
    note(c, PATH_SMALL, small_reason(c->dir, c->size));
    return pass(c);
  }
  clpin__layer_sweep_markers(NULL);
  const char *why = vet(c);
  if (!why && !clpin__layer_ctx_enter(c->ctx))
    why = "a context the application did not create through this layer, or released";
  if (why) {
    note(c, PATH_UNUSUAL, why);
    return pass(c);
  }
  cl_int err = through_clpin(c);
  clpin__layer_ctx_leave(c->ctx);
  return err;
}

cl_int CL_API_CALL clpin__layer_write(cl_command_queue q, cl_mem mem, cl_bool blocking,
                                      size_t offset, size_t size, const void *ptr, cl_uint num_wait,
                                      const cl_event *wait, cl_event *event) {
  call c = {.dir = H2D,
            .q = q,
            .mem = mem,
            .blocking = blocking,
            .offset = offset,
            .size = size,
            .host = (void *)(uintptr_t)ptr,
            .num_wait = num_wait,
            .wait = wait,
            .event = event};
  return route(&c);
}

cl_int CL_API_CALL clpin__layer_read(cl_command_queue q, cl_mem mem, cl_bool blocking,
                                     size_t offset, size_t size, void *ptr, cl_uint num_wait,
                                     const cl_event *wait, cl_event *event) {
  call c = {.dir = D2H,
            .q = q,
            .mem = mem,
            .blocking = blocking,
            .offset = offset,
            .size = size,
            .host = ptr,
            .num_wait = num_wait,
            .wait = wait,
            .event = event};
  return route(&c);
}

/* ---- rect and image calls --------------------------------------------------- */

/* The region's bytes, for the size threshold; 0 (passed to the driver as
 * small) when it cannot be known without judging the call. */
static size_t region_bytes(const size_t *region, size_t elem) {
  size_t n = elem;
  if (!region)
    return 0;
  for (int i = 0; i < 3; i++)
    if (__builtin_mul_overflow(n, region[i], &n))
      return 0;
  return n;
}

static cl_int route_rect(direction dir, cl_command_queue q, cl_mem mem, cl_bool blocking,
                         const size_t *bo, const size_t *ho, const size_t *region, size_t brp,
                         size_t bsp, size_t hrp, size_t hsp, const void *ptr, cl_uint num_wait,
                         const cl_event *wait, cl_event *event) {
  call c = {.dir = dir,
            .q = q,
            .mem = mem,
            .blocking = blocking,
            .size = region_bytes(region, 1),
            .host = (void *)(uintptr_t)ptr,
            .num_wait = num_wait,
            .wait = wait,
            .event = event,
            .kind = RECT,
            .origin = bo,
            .host_origin = ho,
            .region = region,
            .pitch = {brp, bsp, hrp, hsp}};
  return route(&c);
}

static cl_int route_image(direction dir, cl_command_queue q, cl_mem image, cl_bool blocking,
                          const size_t *origin, const size_t *region, size_t rp, size_t sp,
                          const void *ptr, cl_uint num_wait, const cl_event *wait,
                          cl_event *event) {
  /* The threshold needs the pixel size: one query, only for a region that
   * could be large enough (at 16 bytes a pixel, the most there is). */
  size_t elem = 0;
  if (region_bytes(region, 16) >= route_min[dir] &&
      NX.clGetImageInfo(image, CL_IMAGE_ELEMENT_SIZE, sizeof elem, &elem, NULL) != CL_SUCCESS)
    elem = 0;
  call c = {.dir = dir,
            .q = q,
            .mem = image,
            .blocking = blocking,
            .size = region_bytes(region, elem),
            .host = (void *)(uintptr_t)ptr,
            .num_wait = num_wait,
            .wait = wait,
            .event = event,
            .kind = IMAGE,
            .origin = origin,
            .region = region,
            .pitch = {rp, sp, 0, 0}};
  return route(&c);
}

cl_int CL_API_CALL clpin__layer_write_rect(cl_command_queue q, cl_mem mem, cl_bool blocking,
                                           const size_t *bo, const size_t *ho, const size_t *region,
                                           size_t brp, size_t bsp, size_t hrp, size_t hsp,
                                           const void *ptr, cl_uint num_wait, const cl_event *wait,
                                           cl_event *event) {
  return route_rect(H2D, q, mem, blocking, bo, ho, region, brp, bsp, hrp, hsp, ptr, num_wait, wait,
                    event);
}

cl_int CL_API_CALL clpin__layer_read_rect(cl_command_queue q, cl_mem mem, cl_bool blocking,
                                          const size_t *bo, const size_t *ho, const size_t *region,
                                          size_t brp, size_t bsp, size_t hrp, size_t hsp, void *ptr,
                                          cl_uint num_wait, const cl_event *wait, cl_event *event) {
  return route_rect(D2H, q, mem, blocking, bo, ho, region, brp, bsp, hrp, hsp, ptr, num_wait, wait,
                    event);
}

cl_int CL_API_CALL clpin__layer_write_image(cl_command_queue q, cl_mem image, cl_bool blocking,
                                            const size_t *origin, const size_t *region, size_t rp,
                                            size_t sp, const void *ptr, cl_uint num_wait,
                                            const cl_event *wait, cl_event *event) {
  return route_image(H2D, q, image, blocking, origin, region, rp, sp, ptr, num_wait, wait, event);
}

cl_int CL_API_CALL clpin__layer_read_image(cl_command_queue q, cl_mem image, cl_bool blocking,
                                           const size_t *origin, const size_t *region, size_t rp,
                                           size_t sp, void *ptr, cl_uint num_wait,
                                           const cl_event *wait, cl_event *event) {
  return route_image(D2H, q, image, blocking, origin, region, rp, sp, ptr, num_wait, wait, event);
}
